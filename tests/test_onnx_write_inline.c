/* ONNX writer placement of initializers (formats/onnx_write.c): the defaults are onnx's own
 * external-data threshold (1024 bytes) and a 1 GiB inline budget; a tensor under the threshold
 * that would take the inline bytes past inline_max goes to external data too, so no count of
 * small tensors can push the model proto past protobuf's 2 GiB limit (a 1B-class Llama did at a
 * 1 MiB threshold). Checked with a small inline_max; python3-onnx (Debian, an independent
 * reader) loads the files, follows the external data and gives back every value, and says which
 * initializers are external. Skips (77) without python3-onnx. */
#include <stdio.h>
#include <stdlib.h>

#include "ctxpatch/base/io.h"
#include "ctxpatch/formats/onnx.h"
#include "test.h"

/* name, element count: 800 B inline, 800 B past the budget (external), 400 B still within it
 * (inline), 1200 B over the threshold (external). */
static const struct {
  const char *name;
  int64_t n;
} T[] = {{"a", 200}, {"b", 200}, {"c", 100}, {"d", 300}};

int main(void) {
  const char *py = test_env("CTXPATCH_PYTHON");
  char dir[] = "/tmp/ctxpatch_onnx_inline_XXXXXX", cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' -c 'import onnx' 2>/dev/null", py);
  if (system(cmd) != 0) test_skip("python3 has no onnx module (Debian python3-onnx)");
  cp_onnx_params p;
  cp_onnx_params_init(&p);
  CHECK(p.external_threshold == 1024 && p.inline_max == (uint64_t)1 << 30);
  CHECK(2 * CP_ONNX_DEFAULT_INLINE_MAX <= (uint64_t)INT32_MAX + 1); /* half the limit left for the rest */
  if (!mkdtemp(dir)) test_skip("cannot make a temporary folder");
  p.inline_max = 1500;
  char *path = cp_path_join(dir, "model.onnx");
  CHECK(path != NULL);
  cp_onnx_writer *w = NULL;
  CHECK_RC(0, cp_onnx_writer_open(&w, path, &p));
  float buf[300];
  for (size_t t = 0; w && t < sizeof T / sizeof T[0]; t++) {
    for (int64_t k = 0; k < T[t].n; k++) buf[k] = (float)t + 0.25f * (float)k;
    CHECK_RC(0, cp_onnx_tensor_begin(w, T[t].name, CP_F32, 1, &T[t].n, false));
    CHECK_RC(0, cp_onnx_tensor_write(w, buf, (uint64_t)T[t].n));
    CHECK_RC(0, cp_onnx_tensor_end(w));
    cp_onnx_dim d = {T[t].n, NULL};
    CHECK_RC(0, cp_onnx_add_output(w, T[t].name, CP_F32, 1, &d));
  }
  char mh[65], dh[65];
  if (w) CHECK_RC(0, cp_onnx_writer_commit(w, mh, dh));
  CHECK(dh[0] != 0); /* a data file was written */
  snprintf(cmd, sizeof cmd,
           "'%s' - '%s' <<'PY'\n"
           "import sys, onnx, numpy as np\n"
           "from onnx import numpy_helper\n"
           "onnx.checker.check_model(sys.argv[1])\n"
           "m = onnx.load(sys.argv[1], load_external_data=False)\n"
           "ext = {t.name for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}\n"
           "assert ext == {'b', 'd'}, ext\n"
           "m = onnx.load(sys.argv[1])\n"
           "for t, i in zip(m.graph.initializer, range(4)):\n"
           "    a = numpy_helper.to_array(t)\n"
           "    assert np.array_equal(a, i + 0.25 * np.arange(a.size, dtype=np.float32)), t.name\n"
           "PY",
           py, path);
  CHECK_MSG(system(cmd) == 0, "python3-onnx check of %s", path);
  free(path);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
  return test_finish();
}
