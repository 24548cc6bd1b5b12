/* The T5 relative bucket computed in an ONNX graph (export/onnx/onnx_t5.c cp_onnx_t5_bucket) run by
 * onnxruntime-node equals PyTorch's (transformers' _relative_position_bucket, the golden
 * tests/goldens/t5_buckets.json made by tests/reference/make_bucket_golden.py) for every row of
 * the golden: both directions, the golden's 8 (num_buckets, max_distance) pairs, r up to +-1e6,
 * including the rows where float64 math would give another bucket. This test writes one graph
 * (rel int64 [n] -> bucket int64 [n]) per configuration and tests/onnx/t5_bucket_check.mjs runs
 * them. Skips (77) without node or onnxruntime-node (scripts/install-test-runtimes.sh). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "export/onnx/onnx_t5.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/formats/onnx.h"
#include "test.h"

static const int CONFIGS[][2] = {{8, 20}, {8, 128}, {32, 20}, {32, 128}, {36, 50}, {48, 81}, {72, 50}, {96, 81}};

static void write_graph(const char *dir, int bidir, int nb, int md) {
  char name[64], *path;
  snprintf(name, sizeof name, "b%d_%d_%d.onnx", bidir, nb, md);
  CHECK((path = cp_path_join(dir, name)) != NULL);
  cp_onnx_writer *w = NULL;
  cp_og *g = NULL;
  cp_onnx_dim d = {0, "n"};
  CHECK_RC(0, cp_onnx_writer_open(&w, path, NULL));
  if (w) CHECK_RC(0, cp_og_create(&g, w));
  if (g) {
    const char *rel = cp_og_input(g, "rel", CP_I64, 1, &d);
    cp_og_output(g, "bucket", cp_onnx_t5_bucket(g, rel, bidir, nb, md), CP_I64, 1, &d);
    CHECK_RC(0, cp_og_status(g));
    cp_og_free(g);
    CHECK_RC(0, cp_onnx_writer_commit(w, NULL, NULL));
  } else {
    cp_onnx_writer_abort(w);
  }
  free(path);
}

int main(void) {
  const char *src = test_env("CTXPATCH_SOURCE_DIR"), *nm = getenv("CTXPATCH_NODE_MODULES");
  struct stat st;
  char dir[] = "/tmp/ctxpatch_t5_bucket_XXXXXX", cmd[8192];
  if (system("node --version >/dev/null 2>&1") != 0) test_skip("node is not installed");
  if (!nm || stat(test_path(nm, "onnxruntime-node"), &st) != 0)
    test_skip("onnxruntime-node is not installed in CTXPATCH_NODE_MODULES (run scripts/install-test-runtimes.sh)");
  if (!mkdtemp(dir)) test_skip("cannot make a temporary folder");
  for (int bidir = 0; bidir < 2; bidir++)
    for (size_t k = 0; k < sizeof CONFIGS / sizeof CONFIGS[0]; k++)
      write_graph(dir, bidir, CONFIGS[k][0], CONFIGS[k][1]);
  /* a configuration with no log-spaced buckets is refused, not written */
  cp_onnx_writer *w = NULL;
  cp_og *g = NULL;
  cp_onnx_dim d = {0, "n"};
  char *bad = cp_path_join(dir, "bad.onnx");
  CHECK_RC(0, cp_onnx_writer_open(&w, bad, NULL));
  if (w && cp_og_create(&g, w) == 0) {
    CHECK(cp_onnx_t5_bucket(g, cp_og_input(g, "rel", CP_I64, 1, &d), true, 2, 20) == NULL);
    CHECK(cp_og_status(g) == CP_EONNX_EXPORT && !strcmp(cp_err_name(cp_og_status(g)), "CP_EONNX_EXPORT"));
    CHECK(strstr(cp_error_message(), "max_distance 20 has no log-spaced buckets") != NULL);
    cp_og_free(g);
  }
  cp_onnx_writer_abort(w);
  free(bad);
  snprintf(cmd, sizeof cmd, "node '%s/tests/onnx/t5_bucket_check.mjs' '%s' '%s/tests/goldens/t5_buckets.json'",
           src, dir, src);
  CHECK_MSG(system(cmd) == 0, "%s", cmd);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
  return test_finish();
}
