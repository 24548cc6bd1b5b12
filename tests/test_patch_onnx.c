/* `patch IN.onnx OUT.onnx` as the library call cp_patch_onnx (include/ctxpatch/patchers/patch_onnx.h)
 * on ctxpatch's ONNX export of the rope probe (3 layers, weights in external data), written beside
 * the export's folder so that the data file must be placed beside OUT:
 *  - uncertified (no verify): one Softmax site per layer rewritten, one Mul added before each;
 *    OUT and its data file written, metadata ctxpatch.certified "false", an empty digest, no
 *    certificate entry;
 *  - refusals write nothing: a rule the rewriter does not express (fire_threshold), an existing
 *    OUT without replace, a failing certification (tau 3: 0 returned, pass false), and a
 *    temperature to calibrate without verify;
 *  - certified (passkey at 256 and 512, as tests/test_onnx_rewrite.sh): pass, OUT carries
 *    ctxpatch.certified "true", the certificate text (the outcome's JSON and its newline) and its
 *    sha256, the rule the certificate names; the result's report is that of the rewrite, and no
 *    temporary folder is left. */
#include <dirent.h>
#include <unistd.h>

#include "ctxpatch/base/io.h"
#include "ctxpatch/export/onnx_export.h"
#include "ctxpatch/formats/onnx_graph.h"
#include "ctxpatch/patchers/patch_onnx.h"
#include "test.h"

static char tmpdir[] = "/tmp/ctxpatch-test-patch-onnx-XXXXXX";

/* Entries of `dir` (hidden ones included), "." and ".." aside. */
static int n_entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  if (d) closedir(d);
  return n;
}

static bool exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

/* The value of metadata entry `key` of the graph at `path` (a copy; NULL when absent). */
static char *meta_of(const char *path, const char *key) {
  cp_onnx_model *m = NULL;
  if (cp_onnx_model_open(&m, path, NULL) != 0) return NULL;
  const char *v = cp_onnx_model_meta(m, key);
  char *copy = v ? strdup(v) : NULL;
  cp_onnx_model_free(m);
  return copy;
}

static void uncertified(const char *graph, const char *out_dir) {
  cp_rule rule;
  cp_rule_init(&rule);
  rule.n_temperature = 1, rule.temperature[0] = 0.9;
  cp_patch_params pp;
  cp_patch_params_init(&pp);
  cp_patch_onnx_params p = {&rule, NULL, &pp};
  cp_patch_onnx_result r;
  const char *out = test_path(out_dir, "nv.onnx");
  CHECK_RC(0, cp_patch_onnx(&r, graph, out, &p));
  CHECK(r.outcome.written && r.outcome.pass && !r.outcome.verified && !r.certified);
  CHECK(r.rewrite.n_softmax == 3 && r.rewrite.n_contrib == 0);
  CHECK(r.rewrite.n_nodes_added == 3 && r.rewrite.n_initializers_added == 3);
  CHECK(r.outcome.certificate_json == NULL);
  CHECK(exists(test_path(out_dir, "model.onnx.data")));
  char *c = meta_of(out, "ctxpatch.certified"), *s = meta_of(out, "ctxpatch.certificate_sha256"),
       *t = meta_of(out, "ctxpatch.certificate"), *rj = meta_of(out, "ctxpatch.rule");
  CHECK(c && !strcmp(c, "false"));
  CHECK(s && !strcmp(s, ""));
  CHECK(t == NULL);
  CHECK(rj && strstr(rj, "\"temperature\":0.9"));
  free(c), free(s), free(t), free(rj);
  cp_patch_onnx_result_free(&r);

  /* OUT exists now: refused without replace, before anything is written. */
  CHECK_RC(CP_EEXIST, cp_patch_onnx(&r, graph, out, &p));
  CHECK(!r.outcome.written);
  cp_patch_onnx_result_free(&r);

  /* A rule the rewriter does not express: refused, nothing written. */
  int before = n_entries(out_dir);
  cp_rule fire;
  cp_rule_init(&fire);
  fire.fire_threshold = 64;
  p.rule = &fire;
  int rc = cp_patch_onnx(&r, graph, test_path(out_dir, "fire.onnx"), &p);
  CHECK_MSG(rc < 0, "fire_threshold accepted");
  CHECK(!r.outcome.written && !exists(test_path(out_dir, "fire.onnx")) && n_entries(out_dir) == before);
  cp_patch_onnx_result_free(&r);

  /* No rule and no verify: nothing to write it with. */
  p.rule = NULL;
  CHECK_RC(CP_EARG, cp_patch_onnx(&r, graph, test_path(out_dir, "none.onnx"), &p));
  CHECK(n_entries(out_dir) == before);
  cp_patch_onnx_result_free(&r);
}

static void certified(const char *graph, const char *out_dir) {
  cp_probe_kind probes[] = {CP_PROBE_PASSKEY};
  int64_t lengths[] = {256, 512};
  double depths[] = {0, 0.5, 1};
  cp_verify_params vp;
  cp_verify_thresholds th;
  cp_verify_params_init(&vp);
  cp_verify_thresholds_init(&th);
  th.accept_no_gain = th.accept_underpowered = true; /* 6 prompts: this is about the graph, not the verdict */
  vp.probes = probes, vp.n_probes = 1, vp.lengths = lengths, vp.n_lengths = 2;
  vp.depths = depths, vp.n_depths = 3, vp.samples = 2, vp.threads = 1;
  cp_patch_params pp;
  cp_patch_params_init(&pp);
  pp.verify = &vp, pp.thresholds = &th;
  cp_patch_options o;
  cp_patch_options_init(&o);
  o.method = CP_PATCH_TEMPERATURE, o.method_given = true, o.target_len = 512, o.threads = 1;
  cp_rule rule;
  cp_rule_init(&rule);

  /* A failing verdict (tau 3 loses the passkey): 0, nothing written, nothing left. */
  o.tau = 3;
  rule.n_temperature = 1, rule.temperature[0] = 3;
  cp_patch_onnx_params p = {&rule, &o, &pp};
  cp_patch_onnx_result r;
  int before = n_entries(out_dir);
  CHECK_RC(0, cp_patch_onnx(&r, graph, test_path(out_dir, "fail.onnx"), &p));
  CHECK(r.outcome.verified && !r.outcome.pass && !r.outcome.written && !r.certified);
  CHECK(r.outcome.verdict == CP_VERDICT_FAIL);
  CHECK(n_entries(out_dir) == before);
  cp_patch_onnx_result_free(&r);

  /* A passing one: the certificate travels in the graph, byte for byte as the outcome holds it. */
  o.tau = 0.9;
  rule.temperature[0] = 0.9;
  const char *out = test_path(out_dir, "rw.onnx");
  CHECK_RC(0, cp_patch_onnx(&r, graph, out, &p));
  CHECK(r.outcome.verified && r.outcome.pass && r.outcome.written && r.certified);
  CHECK(r.rewrite.n_softmax == 3 && r.rewrite.n_nodes_added == 3);
  CHECK(n_entries(out_dir) == before + 2); /* the graph and its report, rw.onnx.report.html */
  CHECK(access(test_path(out_dir, "rw.onnx.report.html"), F_OK) == 0);
  char *c = meta_of(out, "ctxpatch.certified"), *s = meta_of(out, "ctxpatch.certificate_sha256"),
       *t = meta_of(out, "ctxpatch.certificate");
  CHECK(c && !strcmp(c, "true"));
  CHECK(s && !strcmp(s, r.outcome.certificate_sha256) && strlen(s) == 64);
  const char *cj = r.outcome.certificate_json;
  CHECK(t && cj && strlen(t) == strlen(cj) + 1 && !strncmp(t, cj, strlen(cj)) && t[strlen(cj)] == '\n');
  CHECK(cj && strstr(cj, "\"temperature\":\t0.9"));
  /* The digest is the sha256 of the certificate's bytes. */
  if (t) {
    char hex[65];
    const char *tp = test_path(tmpdir, "cert.json");
    FILE *f = fopen(tp, "wb");
    fputs(t, f);
    fclose(f);
    CHECK_RC(0, cp_sha256_file(hex, tp));
    CHECK(s && !strcmp(hex, s));
  }
  free(c), free(s), free(t);
  cp_patch_onnx_result_free(&r);
}

int main(void) {
  const char *srcdir = test_env("CTXPATCH_SOURCE_DIR");
  char probe[4200];
  snprintf(probe, sizeof probe, "%.4000s/examples/probe-models/rope-probe", srcdir);
  if (!exists(test_path(probe, "model.safetensors"))) test_skip("examples/probe-models/rope-probe is absent");
  if (!mkdtemp(tmpdir)) return 1;
  char exp[4200], out_dir[4200], graph[4300];
  snprintf(exp, sizeof exp, "%.100s/exp", tmpdir);
  snprintf(out_dir, sizeof out_dir, "%.100s/out", tmpdir);
  CHECK_RC(0, cp_onnx_export(NULL, probe, exp, NULL, NULL));
  snprintf(graph, sizeof graph, "%.4200s/onnx/model.onnx", exp);
  CHECK(mkdir(out_dir, 0755) == 0);
  uncertified(graph, out_dir);
  certified(graph, out_dir);
  char cmd[4400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "warning: %s left behind\n", tmpdir);
  return test_finish();
}
