/* Fuzz harness: recovering a model description from an ONNX graph (ctxpatch/import/onnx_import.h):
 * the dispatcher, the contrib-op walk (import/onnx/onnx_contrib.c), the plain-op pattern walk
 * (import/onnx/onnx_pattern.c), their bounded searches (import/onnx/onnx_walk.c) and the emitter's
 * shape checks, then the recovered config parsed and every recovered tensor touched. Seeds:
 * tests/fuzz/seeds/onnx_recover (ORT-fused GPT-2 decoders written by tests/onnx/make_onnx_cases.py's
 * contrib_gpt2) and the seeds of fuzz_onnx. */
#include <stdint.h>
#include <stdlib.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/model/hf_config.h"
#include "ctxpatch/import/onnx_import.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_file("model.onnx", data, size);
  if (!path) return 0;
  cp_onnx_import *im = NULL;
  if (cp_onnx_import_open(&im, path) == 0) {
    cp_hf_config *c = NULL;
    if (cp_onnx_import_config(&c, im) == 0) cp_hf_config_free(c);
    volatile float sink = 0;
    for (size_t i = 0; i < cp_onnx_import_count(im); i++) {
      const cp_tensor *t = cp_onnx_import_tensor(im, i);
      if (t->nbytes >= sizeof(float)) sink += ((const float *)t->data)[t->nbytes / sizeof(float) - 1];
    }
    for (size_t i = 0; i < cp_onnx_import_provenance_count(im); i++) {
      const char *src;
      (void)cp_onnx_import_provenance(im, i, &src);
    }
    (void)sink;
    cp_onnx_import_free(im);
  }
  cp_error_clear();
  return 0;
}
