/* ONNX writer placement of initializers (formats/onnx_write.c): the defaults are onnx's own
 * external-data threshold (1024 bytes) and a 1 GiB inline budget; a tensor under the threshold
 * that would take the inline bytes past inline_max goes to external data too, so no count of
 * small tensors can push the model proto past protobuf's 2 GiB limit (a 1B-class Llama did at a
 * 1 MiB threshold). Checked with a small inline_max; python3-onnx (Debian, an independent
 * reader) loads the files, follows the external data and gives back every value, and says which
 * initializers are external. Skips (77) without python3-onnx.
 * Also (without python): a float32 weight given as F16 or BF16 (cp_onnx_tensor_begin_from, how
 * `convert --to onnx` streams a model kept in its checkpoint's dtype) is stored with exactly the
 * bytes it has when widened to float32 first (the path it replaced), for every 16-bit pattern,
 * NaN payloads included, in each weight dtype. And a transposed weight (cp_og_weight_t_as, written
 * by export/onnx/onnx_transpose.c straight into the writer's staging buffer with AVX2, else
 * through a block) holds the same bytes as the test's own element-by-element transpose given
 * untransposed: every 16-bit pattern, shapes with row and column tails, a staging buffer's end
 * (8 MiB) inside an output row, both paths. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/io.h"
#include "ctxpatch/export/onnx_builder.h"
#include "ctxpatch/formats/onnx.h"
#include "export/onnx/onnx_transpose.h"
#include "test.h"

/* name, element count: 800 B inline, 800 B past the budget (external), 400 B still within it
 * (inline), 1200 B over the threshold (external). */
static const struct {
  const char *name;
  int64_t n;
} T[] = {{"a", 200}, {"b", 200}, {"c", 100}, {"d", 300}};

/* The data file of one weight of all 65536 patterns of `src`, given as src elements (`from`)
 * or widened to float32; stored as `wdt`. Returns its bytes (malloc'd) and length. */
static unsigned char *store_all(size_t *len, const char *dir, cp_dtype src, cp_dtype wdt, bool from) {
  cp_onnx_params p;
  cp_onnx_params_init(&p);
  p.weight_dtype = wdt;
  char *path = cp_path_join(dir, "w.onnx"), *data = NULL;
  static uint16_t h[65536];
  static float f[65536];
  for (int k = 0; k < 65536; k++) {
    h[k] = (uint16_t)k;
    f[k] = src == CP_F16 ? cp_f16_to_f32(h[k]) : cp_bf16_to_f32(h[k]);
  }
  int64_t n = 65536;
  cp_onnx_writer *w = NULL;
  int rc = cp_onnx_writer_open(&w, path, &p);
  if (rc == 0)
    rc = from ? cp_onnx_tensor_begin_from(w, "w", CP_F32, src, 1, &n, true)
              : cp_onnx_tensor_begin(w, "w", CP_F32, 1, &n, true);
  for (int k = 0; rc == 0 && k < 65536; k += 4096) /* in pieces, as the builder streams */
    rc = from ? cp_onnx_tensor_write(w, h + k, 4096) : cp_onnx_tensor_write(w, f + k, 4096);
  if (rc == 0) rc = cp_onnx_tensor_end(w);
  if (rc == 0) rc = cp_onnx_writer_commit(w, NULL, NULL);
  else cp_onnx_writer_abort(w);
  CHECK_RC(0, rc);
  unsigned char *bytes = NULL;
  *len = 0;
  if (rc == 0 && (data = cp_path_join(dir, "w.onnx.data")) != NULL)
    CHECK_RC(0, cp_read_file((char **)&bytes, len, data, (size_t)1 << 20));
  free(path);
  free(data);
  return bytes;
}

static void check_from_16bit(const char *dir) {
  const cp_dtype srcs[] = {CP_F16, CP_BF16}, wdts[] = {CP_F32, CP_F16, CP_BF16};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) {
      size_t na = 0, nb = 0;
      unsigned char *a = store_all(&na, dir, srcs[i], wdts[j], true), *b = store_all(&nb, dir, srcs[i], wdts[j], false);
      CHECK_MSG(a && b && na == nb && na == 65536 * cp_dtype_size(wdts[j]) && memcmp(a, b, na) == 0,
                "%s given as such and as float32, stored as %s: the bytes differ", cp_dtype_name(srcs[i]),
                cp_dtype_name(wdts[j]));
      free(a);
      free(b);
    }
}

/* The data file of a lead tensor of `lead` bytes then the weight [cols, rows] = transpose of
 * m [rows, cols] (elements of src, stored as wdt): by the builder (`builder`) or given transposed
 * by the test. Returns its bytes (malloc'd) and length. */
static unsigned char *store_transposed(size_t *len, const char *dir, const uint16_t *m, int rows, int cols,
                                       cp_dtype src, cp_dtype wdt, int64_t lead, bool builder) {
  cp_onnx_params p;
  cp_onnx_params_init(&p);
  p.weight_dtype = wdt;
  p.external_threshold = 1;
  char *path = cp_path_join(dir, "t.onnx"), *data = cp_path_join(dir, "t.onnx.data");
  uint16_t *t = malloc((size_t)rows * (size_t)cols * sizeof *t);
  float *zeros = calloc((size_t)lead / 4, sizeof *zeros);
  int64_t nz = lead / 4, dims[2] = {cols, rows};
  cp_onnx_writer *w = NULL;
  cp_og *g = NULL;
  int rc = path && data && t && zeros ? cp_onnx_writer_open(&w, path, &p) : -1;
  if (rc == 0) rc = cp_onnx_add_tensor(w, "lead", CP_F32, 1, &nz, zeros, false);
  if (rc == 0 && builder) {
    if ((rc = cp_og_create(&g, w)) == 0 && !cp_og_weight_t_as(g, "w", m, src, rows, cols, true)) rc = cp_og_status(g);
  } else if (rc == 0) {
    for (int r = 0; r < rows; r++)
      for (int c = 0; c < cols; c++) t[(size_t)c * (size_t)rows + (size_t)r] = m[(size_t)r * (size_t)cols + (size_t)c];
    if ((rc = cp_onnx_tensor_begin_from(w, "w", CP_F32, src, 2, dims, true)) == 0 &&
        (rc = cp_onnx_tensor_write(w, t, (uint64_t)rows * (uint64_t)cols)) == 0)
      rc = cp_onnx_tensor_end(w);
  }
  cp_og_free(g);
  if (rc == 0) rc = cp_onnx_writer_commit(w, NULL, NULL);
  else if (w) cp_onnx_writer_abort(w);
  CHECK_RC(0, rc);
  unsigned char *bytes = NULL;
  *len = 0;
  if (rc == 0) CHECK_RC(0, cp_read_file((char **)&bytes, len, data, (size_t)64 << 20));
  free(path);
  free(data);
  free(t);
  free(zeros);
  return bytes;
}

static void check_transposed(const char *dir) {
  /* rows x cols: tails of rows (% 32) and columns (% 16); one whole-tile shape (streamed stores) */
  static const int shapes[][2] = {{100, 700}, {64, 1056}, {33, 17}, {7, 5}};
  static const cp_dtype pairs[][2] = {{CP_F16, CP_F16}, {CP_BF16, CP_BF16}, {CP_F16, CP_F32}, {CP_BF16, CP_F16}};
  /* the weight starts 3 pages before the staging buffer's end: 61.44 output rows of 100 */
  const int64_t leads[] = {0, ((int64_t)8 << 20) - 3 * 4096};
  for (int avx2 = 0; avx2 < 2; avx2++) {
    cp_og_transpose_allow_avx2(avx2 == 1);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      int rows = shapes[s][0], cols = shapes[s][1];
      uint16_t *m = malloc((size_t)rows * (size_t)cols * sizeof *m);
      for (size_t k = 0; m && k < (size_t)rows * (size_t)cols; k++) m[k] = (uint16_t)(k * 40503u + 7u); /* all 65536 */
      for (size_t q = 0; m && q < sizeof pairs / sizeof pairs[0]; q++)
        for (size_t l = 0; l < 2; l++) {
          if (l == 1 && (s > 1 || q > 1)) continue; /* the buffer's end: the direct path's shapes */
          size_t na = 0, nb = 0;
          unsigned char *a = store_transposed(&na, dir, m, rows, cols, pairs[q][0], pairs[q][1], leads[l], true);
          unsigned char *b = store_transposed(&nb, dir, m, rows, cols, pairs[q][0], pairs[q][1], leads[l], false);
          CHECK_MSG(a && b && na == nb && memcmp(a, b, na) == 0,
                    "%dx%d %s stored as %s after %lld bytes (avx2 %d): the transposed bytes differ", rows, cols,
                    cp_dtype_name(pairs[q][0]), cp_dtype_name(pairs[q][1]), (long long)leads[l], avx2);
          free(a);
          free(b);
        }
      free(m);
    }
  }
  cp_og_transpose_allow_avx2(true);
}

int main(void) {
  const char *py = test_env("CTXPATCH_PYTHON");
  char dir[] = "/tmp/ctxpatch_onnx_inline_XXXXXX", cmd[4096];
  char dir16[] = "/tmp/ctxpatch_onnx_from16_XXXXXX";
  CHECK(mkdtemp(dir16) != NULL);
  check_from_16bit(dir16);
  check_transposed(dir16);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir16);
  CHECK(system(cmd) == 0);
  snprintf(cmd, sizeof cmd, "'%s' -c 'import onnx' 2>/dev/null", py);
  if (system(cmd) != 0) {
    if (test_finish() != 0) return 1;
    test_skip("python3 has no onnx module (Debian python3-onnx)");
  }
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
