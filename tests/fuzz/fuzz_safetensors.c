/* Fuzz harness: the safetensors reader (header JSON, offsets, dtypes, metadata); every tensor
 * view is touched at its last byte, so a view past the mapping faults under ASan. */
#include <stdint.h>

#include "ctxpatch/formats/safetensors.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_file("model.safetensors", data, size);
  cp_st_file *f = NULL;
  if (!path || cp_st_open(&f, path) != 0) return 0;
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < cp_st_count(f); i++) {
    const cp_tensor *t = cp_st_tensor(f, i);
    if (t->nbytes) sink ^= ((const uint8_t *)t->data)[t->nbytes - 1];
    (void)cp_st_find(f, t->name);
  }
  for (size_t i = 0; i < cp_st_meta_count(f); i++) (void)cp_st_meta_get(f, cp_st_meta_key(f, i));
  (void)sink;
  cp_st_free(f);
  return 0;
}
