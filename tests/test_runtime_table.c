/* The runtime table (ctxpatch/model/runtimes.h) and what patch decides from it
 * (patchers/patch_runtime.c): for each format, which runtimes execute a plan, its effective_in
 * list, and the refusal of a rule part left to ctxpatch metadata that the runtimes ignore. */
#include <string.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/model/runtimes.h"
#include "ctxpatch/patchers/patch.h"
#include "test.h"

static cp_model g_model;
static cp_bake_plan g_plan;
static cp_patch g_patch;

static void set_model(cp_family f, cp_pos_scheme pos) {
  memset(&g_model, 0, sizeof g_model);
  g_model.family = f;
  g_model.pos = pos;
}

static void plan_lambda(void) { /* lm-infinite: all of it in the ctxpatch block */
  memset(&g_plan, 0, sizeof g_plan);
  cp_rule_init(&g_plan.baked);
  cp_rule_init(&g_plan.residual);
  g_plan.fidelity = CP_FIDELITY_METADATA;
  g_plan.residual.has_lambda = true;
  g_plan.residual.n_global = 10;
  g_plan.residual.n_local = 256;
  g_plan.residual.distance_ceiling = 256;
  memset(&g_patch, 0, sizeof g_patch);
  g_patch.method = CP_PATCH_LM_INFINITE;
  g_patch.rule = g_plan.residual;
}

static void plan_baked_tau(void) {
  memset(&g_plan, 0, sizeof g_plan);
  cp_rule_init(&g_plan.baked);
  cp_rule_init(&g_plan.residual);
  g_plan.fidelity = CP_FIDELITY_EXACT_WEIGHTS;
  g_plan.baked.n_temperature = 1;
  g_plan.baked.temperature[0] = 0.8;
  memset(&g_patch, 0, sizeof g_patch);
  g_patch.method = CP_PATCH_TEMPERATURE;
  g_patch.rule = g_plan.baked;
}

/* effective_in of the current plan in format f as "a,b,c". */
static const char *effective(cp_artifact_format f) {
  static char buf[256];
  const char *names[CP_PATCH_MAX_RUNTIMES];
  int n = cp_patch_effective_in(names, CP_PATCH_MAX_RUNTIMES, &g_plan, f, g_model.family);
  buf[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (i) strcat(buf, ",");
    strcat(buf, names[i]);
  }
  return buf;
}

static void table_rows(void) {
  size_t n = 0;
  const cp_runtime *t = cp_runtime_table(&n);
  int per_format[CP_ARTIFACT_COUNT] = {0};
  for (size_t i = 0; i < n; i++) {
    per_format[t[i].format]++;
    /* every runtime executes baked weights; none reads ctxpatch's own metadata */
    CHECK(t[i].carriers & CP_CARRY_BIT(CP_CARRY_WEIGHTS));
    CHECK(!(t[i].carriers & CP_CARRY_BIT(CP_CARRY_METADATA)));
    CHECK(t[i].reads && *t[i].reads);
  }
  CHECK(per_format[CP_ARTIFACT_SAFETENSORS] == 3 && per_format[CP_ARTIFACT_GGUF] == 1 &&
        per_format[CP_ARTIFACT_ONNX] == 2);
  char text[256];
  cp_runtimes_text(text, sizeof text, CP_ARTIFACT_SAFETENSORS, CP_FAMILY_LLAMA);
  CHECK_MSG(!strcmp(text, "transformers, vLLM and TGI"), "%s", text);
  cp_runtimes_text(text, sizeof text, CP_ARTIFACT_GGUF, CP_FAMILY_LLAMA);
  CHECK_MSG(!strcmp(text, "llama.cpp (and Ollama, llama-cpp-python, LM Studio)"), "%s", text);
  cp_runtimes_text(text, sizeof text, CP_ARTIFACT_ONNX, CP_FAMILY_T5);
  CHECK_MSG(!strcmp(text, "onnxruntime and transformers.js"), "%s", text);
}

/* Each format's row: an inert rule part is refused naming the part, the place and the runtimes,
 * with the ways out; ONNX carries it as graph nodes. */
static void inert_rule_per_format(void) {
  set_model(CP_FAMILY_LLAMA, CP_POS_ROPE);
  plan_lambda();
  CHECK_RC(CP_EPATCH_FIDELITY, cp_patch_effective_check(&g_plan, &g_patch, CP_ARTIFACT_SAFETENSORS, &g_model, "OUT"));
  const char *m = cp_error_message();
  CHECK_MSG(strstr(m, "OUT: lm-infinite's lambda_mask") && strstr(m, "config.json \"ctxpatch\".rule") &&
                strstr(m, "transformers, vLLM and TGI ignore ") && strstr(m, "--to onnx") &&
                strstr(m, "temperature or rope-pi") && strstr(m, "--for ctxpatch") && !strchr(m, '\n'),
            "%s", m);
  CHECK_MSG(!strcmp(effective(CP_ARTIFACT_SAFETENSORS), "ctxpatch"), "%s", effective(CP_ARTIFACT_SAFETENSORS));
  CHECK_RC(CP_EPATCH_FIDELITY, cp_patch_effective_check(&g_plan, &g_patch, CP_ARTIFACT_GGUF, &g_model, "OUT.gguf"));
  m = cp_error_message();
  CHECK_MSG(strstr(m, "the GGUF key ctxpatch.rule") && strstr(m, "llama.cpp (and Ollama") && strstr(m, "--to onnx"),
            "%s", m);
  CHECK(!strcmp(effective(CP_ARTIFACT_GGUF), "ctxpatch"));
  CHECK_RC(0, cp_patch_effective_check(&g_plan, &g_patch, CP_ARTIFACT_ONNX, &g_model, "OUT"));
  CHECK_MSG(!strcmp(effective(CP_ARTIFACT_ONNX), "onnxruntime,transformers.js"), "%s", effective(CP_ARTIFACT_ONNX));
  /* ALiBi without stored slopes: no method travels; the message says so */
  set_model(CP_FAMILY_BLOOM, CP_POS_ALIBI);
  CHECK_RC(CP_EPATCH_FIDELITY, cp_patch_effective_check(&g_plan, &g_patch, CP_ARTIFACT_SAFETENSORS, &g_model, "OUT"));
  CHECK_MSG(strstr(cp_error_message(), "none on this model"), "%s", cp_error_message());
}

/* What travels: a baked temperature everywhere the family loads, rope-pi as the standard keys. */
static void travelling_plans(void) {
  set_model(CP_FAMILY_LLAMA, CP_POS_ROPE);
  plan_baked_tau();
  CHECK_RC(0, cp_patch_effective_check(&g_plan, &g_patch, CP_ARTIFACT_SAFETENSORS, &g_model, "OUT"));
  CHECK(!strcmp(effective(CP_ARTIFACT_SAFETENSORS), "transformers,vLLM,TGI"));
  CHECK(!strcmp(effective(CP_ARTIFACT_GGUF), "llama.cpp"));
  memset(&g_plan, 0, sizeof g_plan);
  cp_rule_init(&g_plan.baked);
  cp_rule_init(&g_plan.residual);
  g_plan.fidelity = CP_FIDELITY_NATIVE_CONFIG;
  g_plan.rope_factor = 2;
  CHECK(cp_patch_carriers(&g_plan, CP_ARTIFACT_SAFETENSORS) == CP_CARRY_BIT(CP_CARRY_ROPE_LINEAR));
  CHECK(!strcmp(effective(CP_ARTIFACT_SAFETENSORS), "transformers,vLLM,TGI"));
  CHECK(!strcmp(effective(CP_ARTIFACT_GGUF), "llama.cpp"));
  /* vLLM loads no T5 */
  set_model(CP_FAMILY_T5, CP_POS_T5_BUCKETS);
  plan_baked_tau();
  CHECK_MSG(!strcmp(effective(CP_ARTIFACT_SAFETENSORS), "transformers,TGI"), "%s", effective(CP_ARTIFACT_SAFETENSORS));
  /* ctxpatch_fire loads in no third-party runtime: effective in ctxpatch whatever it carries, and
   * nothing to refuse (no runtime would silently run the original) */
  set_model(CP_FAMILY_FIRE, CP_POS_FIRE);
  CHECK(!strcmp(effective(CP_ARTIFACT_SAFETENSORS), "ctxpatch"));
  plan_lambda();
  CHECK_RC(0, cp_patch_effective_check(&g_plan, &g_patch, CP_ARTIFACT_SAFETENSORS, &g_model, "OUT"));
  CHECK(!strcmp(effective(CP_ARTIFACT_ONNX), "onnxruntime,transformers.js"));
}

static void part_names(void) {
  char buf[160];
  cp_rule r;
  cp_rule_init(&r);
  cp_rule_part_names(buf, sizeof buf, &r);
  CHECK(buf[0] == '\0');
  r.alibi_mode = CP_ALIBI_DYNAMIC;
  r.alibi_factor = 1;
  r.train_len = 512;
  cp_rule_part_names(buf, sizeof buf, &r);
  CHECK_MSG(!strcmp(buf, "alibi_scale"), "%s", buf);
  plan_lambda();
  cp_rule_part_names(buf, sizeof buf, &g_plan.residual);
  CHECK_MSG(!strcmp(buf, "lambda_mask, distance_ceiling"), "%s", buf);
  cp_rule_part_names(buf, 8, &g_plan.residual); /* cut, still terminated */
  CHECK(strlen(buf) < 8);
}

int main(void) {
  table_rows();
  inert_rule_per_format();
  travelling_plans();
  part_names();
  return test_finish();
}
