/* Fuzz harness: the PyTorch zip reader and its allowlist pickle VM; every tensor is read whole,
 * in bounded chunks (strided gathers and compressed records included). */
#include <stdint.h>

#include "ctxpatch/formats/pytorch.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_file("input.bin", data, size);
  cp_pt_file *f = NULL;
  if (!path || cp_pt_open(&f, path) != 0) return 0;
  static uint8_t buf[1 << 16];
  for (size_t i = 0; i < cp_pt_count(f); i++) {
    const cp_tensor *t = cp_pt_tensor(f, i);
    for (uint64_t off = 0; off < t->nbytes && off < (64u << 20); off += sizeof buf) {
      uint64_t left = t->nbytes - off;
      if (cp_pt_read(f, i, off, buf, left < sizeof buf ? (size_t)left : sizeof buf) != 0) break;
    }
  }
  cp_pt_free(f);
  return 0;
}
