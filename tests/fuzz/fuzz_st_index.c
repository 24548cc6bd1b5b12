/* Fuzz harness: the sharded safetensors index (model.safetensors.index.json). */
#include <stdint.h>

#include "ctxpatch/formats/safetensors.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_file("model.safetensors.index.json", data, size);
  cp_st_index *idx = NULL;
  if (path && cp_st_index_read(&idx, path) == 0) cp_st_index_free(idx);
  return 0;
}
