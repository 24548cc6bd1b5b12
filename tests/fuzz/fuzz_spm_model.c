/* Fuzz harness: a SentencePiece .model, through ctxpatch's wire-format walk and bounds before
 * libsentencepiece sees it. */
#include "fuzz_input.h"
#include "tokenize_fixed.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tokenize_fixed(fuzz_input_file("tokenizer.model", data, size));
  return 0;
}
