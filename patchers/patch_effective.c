/* Floor: patchers. Which runtimes execute a planned patch (ctxpatch/model/runtimes.h), the
 * artifact's "effective_in" list, and the refusal of an artifact whose rule would live only in
 * ctxpatch metadata that its format's runtimes ignore (docs/patching.md, "Runtimes"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/patchers/patch.h"

cp_artifact_format cp_patch_format(const cp_patch_params *p) {
  return p->onnx ? CP_ARTIFACT_ONNX : p->to_gguf ? CP_ARTIFACT_GGUF : CP_ARTIFACT_SAFETENSORS;
}

unsigned cp_patch_carriers(const cp_bake_plan *plan, cp_artifact_format f) {
  if (f == CP_ARTIFACT_ONNX || plan->fidelity == CP_FIDELITY_GRAPH) return CP_CARRY_BIT(CP_CARRY_GRAPH);
  unsigned c = 0;
  if (!cp_rule_is_identity(&plan->baked)) c |= CP_CARRY_BIT(CP_CARRY_WEIGHTS);
  if (plan->rope_factor > 0) c |= CP_CARRY_BIT(CP_CARRY_ROPE_LINEAR);
  if (!cp_rule_is_identity(&plan->residual)) c |= CP_CARRY_BIT(CP_CARRY_METADATA);
  return c;
}

int cp_patch_effective_in(const char **names, int max, const cp_bake_plan *plan, cp_artifact_format f,
                          cp_family family) {
  const cp_runtime *rts[8];
  int n = cp_runtimes_executing(rts, 8, f, family, cp_patch_carriers(plan, f));
  if (n == 0 && max > 0) {
    names[0] = CP_PATCH_CTXPATCH_ONLY;
    return 1;
  }
  for (int i = 0; i < n && i < max; i++) names[i] = rts[i]->name;
  return n < max ? n : max;
}

/* The methods whose parts this model's checkpoint carries in weights or a standard key. */
static const char *travelling_methods(const cp_model *m, const cp_bake_plan *plan) {
  switch (m->pos) {
    case CP_POS_ROPE: return "temperature or rope-pi";
    case CP_POS_ALIBI:
      return plan->stored_slopes ? "temperature or alibi-pi --factor (the stored slopes are divided)"
                                 : "none on this model: its ALiBi slopes come from the head count";
    default: return "temperature";
  }
}

int cp_patch_effective_check(const cp_bake_plan *plan, const cp_patch *patch, cp_artifact_format f, const cp_model *m,
                             const char *out) {
  const cp_runtime *rts[8];
  if (f == CP_ARTIFACT_ONNX || cp_rule_is_identity(&plan->residual)) return 0;
  /* No runtime of the format loads this family (ctxpatch_fire): nothing would silently run the
   * original, and the artifact says it is effective in ctxpatch only. */
  if (cp_runtimes_executing(rts, 8, f, m->family, 0) == 0) return 0;
  char parts[160], runtimes[200];
  cp_rule_part_names(parts, sizeof parts, &plan->residual);
  cp_runtimes_text(runtimes, sizeof runtimes, f, m->family);
  return cp_error_set(CP_EPATCH_FIDELITY,
                      "%s: %s's %s would live only in %s, which %s ignore%s (it would run the original model): "
                      "use --to onnx (the graph carries every rule), a method that travels (%s), or --for ctxpatch "
                      "to write it for ctxpatch on purpose",
                      out, cp_patch_method_name(patch->method), parts, cp_artifact_metadata_place(f), runtimes,
                      strstr(runtimes, " and ") ? "" : "s", travelling_methods(m, plan));
}

int cp_patch_effective_precheck(cp_bake_plan *plan, const cp_model *m, const cp_checkpoint *ck,
                                const cp_patch_options *o, cp_artifact_format f, const char *out) {
  cp_patch *patch = calloc(1, sizeof *patch); /* holds a cp_rule: tens of KiB */
  int rc = 0;
  memset(plan, 0, sizeof *plan);
  cp_rule_init(&plan->residual);
  if (!patch) return cp_nomem("%s", out);
  cp_rule_init(&patch->rule);
  patch->method = o->method;
  /* The plan depends on which parts the rule has, not on their values: a calibrated temperature
   * is stood in for by tau 0.5 (a schedule by two points), so nothing is calibrated yet. Per-layer
   * taus whose plan differs (T5, a shared FIRE MLP) are caught by the check after calibration. */
  if (o->method == CP_PATCH_TEMPERATURE && !o->rule && !(o->tau > 0) && o->schedule) {
    cp_rule *r = &patch->rule;
    int64_t L = o->train_len ? o->train_len : m->train_len;
    r->n_schedule = 2, r->schedule_width = 1;
    r->schedule_len[0] = L > 0 ? L : 1, r->schedule_len[1] = (L > 0 ? L : 1) + 1;
    r->schedule_tau[0] = 1, r->schedule_tau[1] = 0.5;
  } else if (o->method == CP_PATCH_TEMPERATURE && !o->rule && !(o->tau > 0)) {
    patch->rule.n_temperature = 1, patch->rule.temperature[0] = 0.5;
  } else if (cp_patch_from_options(patch, NULL, m, NULL, o)) {
    goto refused_later;
  }
  if (o->scope)
    patch->rule.temperature_scope = !strcmp(o->scope, "encoder") ? CP_TEMP_SCOPE_ENCODER
                                    : !strcmp(o->scope, "self")  ? CP_TEMP_SCOPE_SELF
                                                                 : CP_TEMP_SCOPE_ALL;
  if (cp_bake_plan_make(plan, m, ck, patch)) goto refused_later;
  rc = cp_patch_effective_check(plan, patch, f, m, out);
  free(patch);
  return rc;
refused_later: /* the real pass refuses it with its own reason */
  cp_error_clear();
  free(patch);
  return 0;
}
