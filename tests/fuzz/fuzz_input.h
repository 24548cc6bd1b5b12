/* Shared by the fuzz harnesses: hands the fuzzer's bytes to readers that take a path. The bytes
 * are written to a file named `name` in a private temporary folder made once per process (readers
 * pick the format by name, e.g. tokenizer.json vs tokenizer.model), rewritten for every input. */
#ifndef CTXPATCH_FUZZ_INPUT_H
#define CTXPATCH_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

/* Path of the file now holding data[0..size), or NULL when it cannot be written. */
const char *fuzz_input_file(const char *name, const uint8_t *data, size_t size);

#endif
