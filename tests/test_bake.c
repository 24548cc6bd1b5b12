/* Baking (include/ctxpatch/patchers/patch.h): for every patch, the original model run with the rule and
 * the baked artifact run with no rule give the same logits (max |diff| <= 1e-5 * max |logit|).
 * Exact-weights cases must carry the rule in the weights alone (the artifact's metadata rule is
 * the identity); metadata cases must reproduce it through the engine reading config.json's
 * ctxpatch block. Both sides use this engine; the engine itself is checked against PyTorch by
 * test_engine_goldens, so agreement here means the baked weights encode the rule. */
#include <dirent.h>
#include <stdint.h>
#include <unistd.h>

#include "ctxpatch/import/checkpoint.h"
#include "ctxpatch/engine/engine.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/patchers/patch.h"
#include "ctxpatch/model/rule.h"
#include "ctxpatch/formats/safetensors.h"
#include "test.h"

static char models[4096], tmpdir[1024];
static int case_no;

static void rm_rf(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink(test_path(dir, e->d_name));
  closedir(d);
  rmdir(dir);
}

/* Logits of a fixed 12-token input (T5: and a 4-token decoder input). */
static float *run(const cp_model *m, const cp_rule *rule, size_t *n_out) {
  int64_t ids[12], dec[4] = {0, 5, 7, 3};
  for (int i = 0; i < 12; i++) ids[i] = (i * 37 + 11) % m->vocab;
  cp_engine *e = NULL;
  cp_engine_params p;
  cp_engine_params_init(&p);
  p.threads = 1;
  float *out = NULL;
  int rc = cp_engine_create(&e, m, rule, &p);
  CHECK_RC(0, rc);
  if (rc) return NULL;
  bool t5 = m->family == CP_FAMILY_T5;
  int64_t rows = cp_engine_output_rows(e, 12, t5 ? 4 : 0);
  *n_out = (size_t)rows * (size_t)m->vocab;
  out = malloc(*n_out * sizeof *out);
  CHECK_RC(0, cp_engine_forward(e, out, ids, 12, t5 ? dec : NULL, t5 ? 4 : 0));
  cp_engine_free(e);
  return out;
}

static double max_rel(const float *a, const float *b, size_t n) {
  double md = 0, mr = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (d > md || d != d) md = d;
    if (fabs(b[i]) > mr) mr = fabs(b[i]);
  }
  return md / (mr > 0 ? mr : 1);
}

/* Patches `model` with `rule_json` (or rope factor), checks the fidelity, compares logits. */
static void bake_case(const char *model, cp_patch_method method, const char *rule_json, double rope_factor,
                      cp_fidelity want) {
  char in[4096], out[1200];
  if (model[0] == '/') snprintf(in, sizeof in, "%.4000s", model);
  else snprintf(in, sizeof in, "%.3000s/%.900s", models, model);
  snprintf(out, sizeof out, "%s/case%d", tmpdir, case_no++);
  cp_patch patch;
  memset(&patch, 0, sizeof patch);
  patch.method = method;
  patch.rope_factor = rope_factor;
  CHECK_RC(0, cp_rule_parse(&patch.rule, rule_json, strlen(rule_json), "test rule"));
  cp_model *orig = NULL, *baked = NULL;
  CHECK_RC(0, cp_model_open(&orig, in));
  if (!orig) return;
  cp_patch_params pp;
  cp_patch_params_init(&pp);
  pp.for_ctxpatch = true; /* metadata cases too: the artifact as ctxpatch's engine runs it */
  cp_patch_outcome oc;
  int rc = cp_patch_write(&oc, in, out, orig, &patch, &pp);
  CHECK_RC(0, rc);
  CHECK_MSG(oc.plan.fidelity == want, "%s %s: fidelity %s, want %s (%s)", model, rule_json,
            cp_fidelity_name(oc.plan.fidelity), cp_fidelity_name(want), oc.plan.note);
  CHECK(oc.written);
  cp_patch_outcome_free(&oc);
  if (rc == 0) CHECK_RC(0, cp_model_open(&baked, out));
  if (baked) {
    /* Exact and native-config artifacts carry no rule in metadata; metadata ones carry it all. */
    CHECK_MSG(baked->has_metadata_rule == (want == CP_FIDELITY_METADATA), "%s %s: metadata rule %d", model,
              rule_json, baked->has_metadata_rule);
    size_t n1 = 0, n2 = 0;
    float *ref = run(orig, &patch.rule, &n1), *got = run(baked, NULL, &n2);
    if (ref && got && n1 == n2) {
      if (method == CP_PATCH_ROPE_PI) {
        CHECK_MSG(fabs(baked->rope_scale - orig->rope_scale * rope_factor) < 1e-12, "%s: rope_scale %g", model,
                  baked->rope_scale);
      } else {
        double d = max_rel(got, ref, n1);
        CHECK_MSG(d <= 1e-5, "%s %s: baked vs rule max rel diff %.3g", model, rule_json, d);
        /* The patch changes something: the unpatched logits differ. */
        size_t n0 = 0;
        float *base = run(orig, NULL, &n0);
        if (base) CHECK_MSG(max_rel(base, ref, n0) > 1e-4, "%s %s: the rule changes nothing", model, rule_json);
        free(base);
      }
      if (want == CP_FIDELITY_METADATA) {
        /* A second rule on top of a metadata rule is refused; the identity is not. */
        cp_engine *e = NULL;
        CHECK_RC(CP_ERULE_MODEL, cp_engine_create(&e, baked, &patch.rule, NULL));
        cp_engine_free(e);
      }
    }
    free(ref);
    free(got);
  }
  cp_model_free(baked);
  cp_model_free(orig);
  rm_rf(out);
}

/* A BLOOM checkpoint that stores its ALiBi slopes (JAIS/BTLM style): temperature and static
 * ALiBi PI become exact-weights by scaling the stored slopes. */
static void stored_slopes_cases(void) {
  char src[4200], dir[1200];
  snprintf(src, sizeof src, "%s/bloom", models);
  snprintf(dir, sizeof dir, "%s/models/bloom_slopes", tmpdir);
  mkdir(test_path(tmpdir, "models"), 0755);
  mkdir(dir, 0755);
  cp_checkpoint *ck = NULL;
  CHECK_RC(0, cp_checkpoint_open(&ck, src));
  if (!ck) return;
  size_t n = cp_checkpoint_count(ck);
  cp_tensor *t = calloc(n + 1, sizeof *t);
  for (size_t i = 0; i < n; i++) t[i] = *cp_checkpoint_tensor(ck, i);
  cp_model *m = NULL;
  CHECK_RC(0, cp_model_open(&m, src));
  if (!m) return;
  /* Slopes that differ from the family rule, so that reading them is observable. */
  float slopes[64];
  double s[64];
  cp_alibi_slopes(s, m->n_heads, 8.0);
  for (int h = 0; h < m->n_heads; h++) slopes[h] = (float)(s[h] * 0.75);
  t[n] = (cp_tensor){.name = "transformer.relative_pe.slopes", .dtype = CP_F32, .ndim = 1,
                     .shape = {m->n_heads}, .data = slopes};
  CHECK_RC(0, cp_st_write_file(test_path(dir, "model.safetensors"), t, n + 1, NULL, 0));
  char *cfg = NULL;
  size_t len = 0;
  CHECK_RC(0, cp_read_file(&cfg, &len, test_path(src, "config.json"), 1 << 20));
  FILE *f = fopen(test_path(dir, "config.json"), "wb");
  if (f && cfg) fwrite(cfg, 1, len, f);
  if (f) fclose(f);
  free(cfg);
  free(t);
  cp_model_free(m);
  cp_checkpoint_free(ck);
  bake_case(dir, CP_PATCH_TEMPERATURE, "{\"temperature\": 0.8}", 0, CP_FIDELITY_EXACT_WEIGHTS);
  bake_case(dir, CP_PATCH_ALIBI_PI, "{\"alibi_scale\": {\"mode\": \"static\", \"factor\": 2}}", 0,
            CP_FIDELITY_EXACT_WEIGHTS);
  rm_rf(dir);
  rmdir(test_path(tmpdir, "models"));
}

int main(void) {
  const char *srcdir = test_env("CTXPATCH_SOURCE_DIR");
  snprintf(models, sizeof models, "%.4000s/tests/goldens/engine/models", srcdir);
  struct stat st;
  if (stat(models, &st) != 0) test_skip("tests/goldens/engine/models is absent");
  snprintf(tmpdir, sizeof tmpdir, "/tmp/ctxpatch_test_bake_XXXXXX");
  if (!mkdtemp(tmpdir)) {
    fprintf(stderr, "mkdtemp failed\n");
    return 1;
  }
  cp_fidelity EXACT = CP_FIDELITY_EXACT_WEIGHTS, META = CP_FIDELITY_METADATA;
  /* Temperature, exact: every family whose positional term is a weight or linear in q. */
  bake_case("t5_relu", CP_PATCH_TEMPERATURE, "{\"temperature\": 0.7}", 0, EXACT); /* encoder scope */
  bake_case("t5_relu", CP_PATCH_TEMPERATURE, "{\"temperature\": 0.8, \"temperature_scope\": \"all\"}", 0, EXACT);
  /* t5_gated (F16) and llama_rope2 (BF16): tau = 0.5 is exact in the stored dtype; other taus
   * are exact up to that dtype's rounding of the rescaled weights. */
  bake_case("t5_gated", CP_PATCH_TEMPERATURE, "{\"temperature\": 0.5, \"temperature_scope\": \"self\"}", 0, EXACT);
  bake_case("t5_relu", CP_PATCH_TEMPERATURE, "{\"temperature\": 0.6, \"temperature_scope\": \"self\"}", 0, EXACT);
  bake_case("llama", CP_PATCH_TEMPERATURE, "{\"temperature\": 0.7}", 0, EXACT);
  bake_case("llama", CP_PATCH_TEMPERATURE, "{\"temperature\": [0.9, 0.6, 0.75]}", 0, EXACT);
  bake_case("llama_rope2", CP_PATCH_TEMPERATURE, "{\"temperature\": 0.5}", 0, EXACT);
  bake_case("gpt_neox", CP_PATCH_TEMPERATURE, "{\"temperature\": 0.75}", 0, EXACT); /* fused [H,3,dh] */
  bake_case("gpt2", CP_PATCH_TEMPERATURE, "{\"temperature\": 0.75}", 0, EXACT); /* Conv1D c_attn [D, 3D] */
  bake_case("gpt2_bin", CP_PATCH_TEMPERATURE, "{\"temperature\": [0.9, 0.6, 0.75]}", 0, EXACT); /* .bin, 1/(l+1) */
  bake_case("fire", CP_PATCH_TEMPERATURE, "{\"temperature\": 0.7}", 0, EXACT);
  bake_case("fire", CP_PATCH_TEMPERATURE, "{\"temperature\": [0.9, 0.6]}", 0, EXACT);
  bake_case("fire_shared", CP_PATCH_TEMPERATURE, "{\"temperature\": 0.7}", 0, EXACT);
  bake_case("fire", CP_PATCH_FIRE_THRESHOLD, "{\"fire_threshold\": 6}", 0, EXACT);
  bake_case("fire_shared", CP_PATCH_FIRE_THRESHOLD, "{\"fire_threshold\": 5}", 0, EXACT);
  /* Metadata: the engine applies the rule from the artifact's ctxpatch block. */
  bake_case("bloom", CP_PATCH_TEMPERATURE, "{\"temperature\": 0.8}", 0, META);
  bake_case("mpt", CP_PATCH_TEMPERATURE, "{\"temperature\": 0.8}", 0, META);
  bake_case("t5_relu", CP_PATCH_TEMPERATURE, "{\"temperature\": [0.9, 0.6]}", 0, META);
  bake_case("fire_shared", CP_PATCH_TEMPERATURE, "{\"temperature\": [0.9, 0.6]}", 0, META);
  bake_case("mpt", CP_PATCH_ALIBI_PI, "{\"alibi_scale\": {\"mode\": \"static\", \"factor\": 2}}", 0, META);
  bake_case("bloom", CP_PATCH_ALIBI_PI, "{\"alibi_scale\": {\"mode\": \"progressive\"}, \"train_len\": 4}", 0, META);
  bake_case("llama", CP_PATCH_LM_INFINITE, "{\"lambda_mask\": {\"n_global\": 2, \"n_local\": 4}}", 0, META);
  /* A temperature schedule depends on the length: never baked, even where one tau would be
   * exact in the weights (llama, fire, T5), so the 12 rows keep their own tau(T). */
  bake_case("llama", CP_PATCH_TEMPERATURE, "{\"temperature_schedule\": {\"points\": [[2, 1.0], [8, 0.6]]}}", 0, META);
  bake_case("fire", CP_PATCH_TEMPERATURE,
            "{\"temperature_schedule\": {\"points\": [[2, [1.0, 0.9]], [12, [0.6, 0.7]]]}}", 0, META);
  bake_case("t5_relu", CP_PATCH_TEMPERATURE,
            "{\"temperature_schedule\": {\"points\": [[2, 1.0], [8, 0.6]]}, \"temperature_scope\": \"self\"}", 0, META);
  /* native-config: rope_scaling's linear factor, multiplied into an existing one. */
  bake_case("llama", CP_PATCH_ROPE_PI, "{}", 2.0, CP_FIDELITY_NATIVE_CONFIG);
  bake_case("llama_rope2", CP_PATCH_ROPE_PI, "{}", 1.5, CP_FIDELITY_NATIVE_CONFIG);
  /* Qwen3: tau goes into q_norm (its RMSNorm would cancel a scaled q_proj); the rest as Llama. */
  bake_case("qwen3", CP_PATCH_TEMPERATURE, "{\"temperature\": 0.7}", 0, EXACT);
  bake_case("qwen3", CP_PATCH_TEMPERATURE, "{\"temperature\": [0.9, 0.6]}", 0, EXACT);
  bake_case("qwen3", CP_PATCH_LM_INFINITE, "{\"lambda_mask\": {\"n_global\": 2, \"n_local\": 4}}", 0, META);
  bake_case("qwen3", CP_PATCH_ROPE_PI, "{}", 2.0, CP_FIDELITY_NATIVE_CONFIG);
  /* Gemma 3: tau scales q_norm's 1 + w (the stored w becomes (1 + w) / tau - 1); rope-pi multiplies
   * the full layers' linear factor 8. */
  bake_case("gemma3_41", CP_PATCH_TEMPERATURE, "{\"temperature\": [0.8, 0.6]}", 0, EXACT);
  bake_case("gemma3_41", CP_PATCH_ROPE_PI, "{}", 2.0, CP_FIDELITY_NATIVE_CONFIG);
  /* OLMo 2: tau into its whole-row q_norm (docs/attention-decisions.md 16), per layer too. */
  bake_case("olmo2", CP_PATCH_TEMPERATURE, "{\"temperature\": 0.7}", 0, EXACT);
  bake_case("olmo2", CP_PATCH_TEMPERATURE, "{\"temperature\": [0.9, 0.6]}", 0, EXACT);
  bake_case("olmo2", CP_PATCH_ROPE_PI, "{}", 2.0, CP_FIDELITY_NATIVE_CONFIG);
  stored_slopes_cases();

  /* Refusals. */
  {
    cp_model *m = NULL;
    CHECK_RC(0, cp_model_open(&m, test_path(models, "llama")));
    cp_patch p;
    memset(&p, 0, sizeof p);
    cp_rule_init(&p.rule);
    p.method = CP_PATCH_ALIBI_PI;
    p.rule.alibi_mode = CP_ALIBI_STATIC;
    p.rule.alibi_factor = 2;
    if (m) CHECK_RC(CP_EPATCH_FAMILY, cp_patch_check(m, &p));
    p.method = CP_PATCH_FIRE_THRESHOLD;
    cp_rule_init(&p.rule);
    p.rule.fire_threshold = 8;
    if (m) CHECK_RC(CP_EPATCH_FAMILY, cp_patch_check(m, &p));
    /* --require exact with a metadata-only patch: refused, nothing written. */
    p.method = CP_PATCH_LM_INFINITE;
    cp_rule_init(&p.rule);
    p.rule.has_lambda = true;
    p.rule.n_global = 2;
    p.rule.n_local = 4;
    cp_patch_params pp;
    cp_patch_params_init(&pp);
    pp.require_exact = true;
    cp_patch_outcome oc;
    const char *out = test_path(tmpdir, "refused");
    if (m) CHECK_RC(CP_EPATCH_FIDELITY, cp_patch_write(&oc, test_path(models, "llama"), out, m, &p, &pp));
    CHECK_MSG(strstr(cp_error_message(), "models/llama") != NULL, "names the input: %s", cp_error_message());
    cp_patch_outcome_free(&oc);
    CHECK(stat(out, &st) != 0);
    /* A rule that does not fit the model: refused naming the input folder, nothing written. */
    p.method = CP_PATCH_TEMPERATURE;
    cp_rule_init(&p.rule);
    p.rule.n_temperature = 1;
    p.rule.temperature[0] = 0.9;
    p.rule.temperature_per_layer = true; /* [0.9] on 3 layers */
    cp_patch_params_init(&pp);
    if (m) CHECK_RC(CP_ERULE_MODEL, cp_patch_write(&oc, test_path(models, "llama"), out, m, &p, &pp));
    CHECK_MSG(strstr(cp_error_message(), "models/llama") != NULL, "names the input: %s", cp_error_message());
    cp_patch_outcome_free(&oc);
    CHECK(stat(out, &st) != 0);
    cp_model_free(m);
  }
  { /* rope-pi on a dynamic NTK model: refused (one rope_scaling type per config), nothing written;
     * a temperature bakes into its weights as on Llama (the same logits as the rule) */
    bake_case("llama_dynamic", CP_PATCH_TEMPERATURE, "{\"temperature\": 0.8}", 0, EXACT);
    cp_model *m = NULL;
    CHECK_RC(0, cp_model_open(&m, test_path(models, "llama_dynamic")));
    cp_patch p;
    memset(&p, 0, sizeof p);
    cp_rule_init(&p.rule);
    p.method = CP_PATCH_ROPE_PI;
    p.rope_factor = 2;
    cp_patch_params pp;
    cp_patch_params_init(&pp);
    cp_patch_outcome oc;
    const char *out = test_path(tmpdir, "refused_pi");
    if (m) CHECK_RC(CP_EARG, cp_patch_write(&oc, test_path(models, "llama_dynamic"), out, m, &p, &pp));
    CHECK_MSG(strstr(cp_error_message(), "rope-pi cannot compose with 'dynamic' scaling") != NULL, "message: %s",
              cp_error_message());
    cp_patch_outcome_free(&oc);
    CHECK(stat(out, &st) != 0);
    cp_model_free(m);
  }
  { /* ALiBi PI and the FIRE threshold on the RoPE families: refused as on Llama, naming the model
     * as its config does (the reason `patch --method auto` lists for a candidate that does not
     * fit), not by the family that shares its body (qwen3, granite and mistral run as llama,
     * gemma2 and gemma3 as gemma). */
    static const char *const rope[][2] = {
        {"qwen3", "qwen3"},         {"qwen2", "qwen2"},           {"granite", "granite"},
        {"mistral_swa", "mistral"}, {"gemma2", "gemma2"},         {"gemma3", "gemma3"},
        {"olmo2", "olmo2"},         {"starcoder2", "starcoder2"}, {"phi3", "phi3"}};
    for (size_t i = 0; i < sizeof rope / sizeof rope[0]; i++) {
      cp_model *m = NULL;
      CHECK_RC(0, cp_model_open(&m, test_path(models, rope[i][0])));
      for (int k = 0; k < 2 && m; k++) {
        CHECK_RC(CP_EPATCH_FAMILY, cp_patch_method_fits(m, k ? CP_PATCH_FIRE_THRESHOLD : CP_PATCH_ALIBI_PI));
        char want[96];
        snprintf(want, sizeof want, "needs %s positions; this %s model uses RoPE", k ? "FIRE" : "ALiBi", rope[i][1]);
        CHECK_MSG(strstr(cp_error_message(), want) != NULL, "%s: %s", rope[i][0], cp_error_message());
      }
      cp_model_free(m);
    }
  }
  /* Hostile metadata blocks fail at open, naming the key. */
  {
    char dir[1200]; /* not test_path(): its buffers are recycled */
    snprintf(dir, sizeof dir, "%s/badmeta", tmpdir);
    mkdir(dir, 0755);
    char *cfg = NULL;
    size_t len = 0;
    CHECK_RC(0, cp_read_file(&cfg, &len, test_path(models, "llama/config.json"), 1 << 20));
    static const char *blocks[] = {"5", "{\"rule\": {\"temperature\": -1}}", "{\"rule\": {\"bogus\": 1}}",
                                   "{\"rule\": {\"alibi_scale\": {\"mode\": \"static\", \"factor\": 2}}}"};
    static const int want[] = {CP_ECFG_FIELD, CP_ERULE_VALUE, CP_ERULE_KEY, CP_ERULE_MODEL};
    char *brace = cfg ? strrchr(cfg, '}') : NULL;
    for (int i = 0; i < 4 && brace; i++) {
      FILE *f = fopen(test_path(dir, "config.json"), "wb");
      if (!f) break;
      fprintf(f, "%.*s, \"ctxpatch\": %s}\n", (int)(brace - cfg), cfg, blocks[i]);
      fclose(f);
      char link_src[4096];
      snprintf(link_src, sizeof link_src, "%.4000s/llama/model.safetensors", models);
      unlink(test_path(dir, "model.safetensors"));
      CHECK(symlink(link_src, test_path(dir, "model.safetensors")) == 0);
      cp_model *m = NULL;
      CHECK_RC(want[i], cp_model_open(&m, dir));
      CHECK_MSG(strstr(cp_error_message(), "ctxpatch") != NULL, "message names the key: %s", cp_error_message());
      cp_model_free(m);
    }
    free(cfg);
    unlink(test_path(dir, "model.safetensors"));
    unlink(test_path(dir, "config.json"));
    rmdir(dir);
  }
  rmdir(tmpdir);
  return test_finish();
}
