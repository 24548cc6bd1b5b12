/* Fuzz harness: the bounded ONNX ModelProto reader behind `inspect` and `check` (formats/onnx_read.c:
 * protobuf unpack, initializer shapes and sizes, external-data locations and ranges). Seeds:
 * tests/fuzz/seeds/onnx (a self-contained export of the tiny llama golden, made by ctxpatch). */
#include <stdint.h>

#include "ctxpatch/formats/onnx.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_file("model.onnx", data, size);
  cp_onnx_info info;
  if (!path || cp_onnx_read_info(&info, path) != 0) return 0;
  (void)cp_onnx_info_meta(&info, "ctxpatch.rule");
  cp_onnx_info_free(&info);
  return 0;
}
