/* Fuzz harness: tokenizer.json (normalizers, pre-tokenizers, models, decoders). */
#include "fuzz_input.h"
#include "tokenize_fixed.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  tokenize_fixed(fuzz_input_file("tokenizer.json", data, size));
  return 0;
}
