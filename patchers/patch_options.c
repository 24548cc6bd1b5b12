/* Floor: patchers. From the options of `ctxpatch patch` to a cp_patch: which options belong to
 * which method, their defaults from the model, and the calibration a temperature may need. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/patchers/calibrate.h"
#include "patchers/calibrate_json.h"
#include "ctxpatch/patchers/patch.h"
#include "patchers/patch_stage.h"

void cp_patch_options_init(cp_patch_options *o) {
  memset(o, 0, sizeof *o);
  o->calibrate = "pmax";
  o->n_global = 10;
}

cp_patch_method cp_patch_rule_method(const cp_rule *r) {
  bool temp = r->n_temperature > 0 || r->n_schedule > 0, alibi = r->alibi_mode != CP_ALIBI_NONE;
  bool fire = r->fire_threshold > 0, lminf = r->has_lambda || r->distance_ceiling > 0 || r->has_top_k;
  if (temp + alibi + fire + lminf != 1) return CP_PATCH_RULE;
  return temp ? CP_PATCH_TEMPERATURE : alibi ? CP_PATCH_ALIBI_PI : fire ? CP_PATCH_FIRE_THRESHOLD : CP_PATCH_LM_INFINITE;
}

/* --rule FILE: the file is the whole rule, so no method option may add to it, and a --method
 * given beside it must be the rule's own. */
static int check_rule_options(const cp_patch_options *o) {
  if (!o->rule) {
    if (o->method == CP_PATCH_RULE) return cp_error_set(CP_EARG, "--method rule needs --rule FILE");
    return 0;
  }
  if (o->tau > 0 || o->per_layer || o->scope || o->schedule || o->factor > 0 || o->dynamic || o->progressive ||
      o->have_n_global || o->n_local || o->ceiling || o->top_k || o->threshold > 0 || o->calibration_samples)
    return cp_error_set(CP_EARG, "--rule FILE is the whole rule: it takes no method options (--tau, --factor, "
                                 "--n-local, --calibration-samples, ...)");
  cp_patch_method rm = cp_patch_rule_method(o->rule);
  if (o->method_given && o->method != rm)
    return cp_error_set(CP_EARG, "--method %s, but the --rule file's method is %s (leave --method out)",
                        cp_patch_method_name(o->method), cp_patch_method_name(rm));
  return 0;
}

int cp_patch_options_check(const cp_patch_options *o) {
  cp_patch_method m = o->method;
  int rc = check_rule_options(o);
  if (rc) return rc;
  /* Options that belong to another method are refused rather than ignored. */
  if ((o->tau > 0 || o->per_layer || o->scope || o->schedule) && m != CP_PATCH_TEMPERATURE)
    return cp_error_set(CP_EARG, "--tau, --per-layer, --scope and --schedule belong to --method temperature");
  if ((o->dynamic || o->progressive) && m != CP_PATCH_ALIBI_PI)
    return cp_error_set(CP_EARG, "--dynamic and --progressive belong to --method alibi-pi");
  if (o->factor > 0 && m != CP_PATCH_ALIBI_PI && m != CP_PATCH_ROPE_PI)
    return cp_error_set(CP_EARG, "--factor belongs to --method alibi-pi or rope-pi");
  if ((o->have_n_global || o->n_local || o->ceiling || o->top_k) && m != CP_PATCH_LM_INFINITE)
    return cp_error_set(CP_EARG, "--n-global, --n-local, --ceiling and --top-k belong to --method lm-infinite");
  if (o->threshold > 0 && m != CP_PATCH_FIRE_THRESHOLD)
    return cp_error_set(CP_EARG, "--threshold belongs to --method fire-threshold");
  if (o->calibration_samples && (m != CP_PATCH_TEMPERATURE || o->tau > 0))
    return cp_error_set(CP_EARG, "--calibration-samples applies to a calibrated --method temperature");
  return 0;
}

int cp_patch_options_resolve(cp_patch_options *o, const cp_model *m) {
  cp_patch_method meth = o->method;
  if (o->rule) return 0; /* the file is the whole rule (cp_patch_options_check) */
  if (o->tau > 0 && o->per_layer)
    return cp_error_set(CP_EARG, "--per-layer applies to calibration, not to a given --tau");
  if (o->tau > 0 && o->schedule)
    return cp_error_set(CP_EARG, "--schedule is calibrated: it takes no --tau (write a rule for a given schedule)");
  if (o->scope && strcmp(o->scope, "encoder") && strcmp(o->scope, "self") && strcmp(o->scope, "all"))
    return cp_error_set(CP_EARG, "--scope expects encoder, self or all, got '%s'", o->scope);
  if (meth == CP_PATCH_ALIBI_PI && (o->factor > 0) + o->dynamic + o->progressive != 1)
    return cp_error_set(CP_EARG, "alibi-pi needs exactly one of --factor F, --dynamic, --progressive");
  if (meth == CP_PATCH_ALIBI_PI && o->factor > 0 && o->factor < 1)
    return cp_error_set(CP_EARG, "--factor must be >= 1 for alibi-pi");
  if (meth == CP_PATCH_ROPE_PI && !(o->factor > 0)) return cp_error_set(CP_EARG, "rope-pi needs --factor F");
  if (meth == CP_PATCH_FIRE_THRESHOLD && !(o->threshold > 0))
    return cp_error_set(CP_EARG, "fire-threshold needs --threshold L");
  int64_t L_tr = o->train_len ? o->train_len : m->train_len;
  if (!o->target_len && L_tr > 0) o->target_len = 2 * L_tr;
  if (o->method == CP_PATCH_TEMPERATURE && !(o->tau > 0) && !o->target_len)
    return cp_error_set(CP_EARG, "calibration needs --target-len (the model has no training length)");
  if (o->method == CP_PATCH_LM_INFINITE && !o->n_local && !(o->n_local = L_tr))
    return cp_error_set(CP_EARG, "lm-infinite needs --n-local (the model has no training length)");
  return 0;
}

#define CP_CALIB_PLAN_LENGTHS 64 /* counted in chunks: no allocation */

/* --schedule: the calibration at the schedule lengths past the training length (target_len when
 * none is) and its schedule rule; *table is filled on success (caller frees). */
static int schedule_rule(cp_rule *rule, cp_calib_table *table, const cp_model *m, cp_cal_method cm,
                         const cp_patch_options *o, const cp_calib_params *cpp) {
  int64_t L_tr = o->train_len ? o->train_len : m->train_len;
  int64_t *lengths = NULL;
  int n = 0, rc = 0;
  if (o->n_schedule_lengths > 0) {
    lengths = malloc((size_t)o->n_schedule_lengths * sizeof *lengths);
    CP_CHECK_ALLOC(lengths, "patch: schedule lengths");
  }
  for (int i = 0; i < o->n_schedule_lengths; i++)
    if (o->schedule_lengths[i] > L_tr) lengths[n++] = o->schedule_lengths[i];
  if ((rc = cp_calibrate(table, m, &cm, 1, n ? lengths : &o->target_len, n ? n : 1, cpp))) goto done;
  if ((rc = cp_calib_schedule_rule(rule, table, cm, true))) cp_calib_table_free(table);
done:
  free(lengths);
  return rc;
}

uint64_t cp_patch_calibration_work(const cp_model *m, cp_cal_method cm, const cp_patch_options *o) {
  cp_calib_params cpp;
  cp_calib_params_init(&cpp);
  cpp.train_len = o->train_len;
  cpp.per_layer = o->per_layer;
  if (o->calibration_samples > 0) cpp.samples = o->calibration_samples;
  int64_t L_tr = o->train_len ? o->train_len : m->train_len, longer[CP_CALIB_PLAN_LENGTHS];
  int n = 0; /* as schedule_rule: the schedule lengths past L_tr, else target_len */
  uint64_t work = 0;
  for (int i = 0; o->schedule && i < o->n_schedule_lengths; i++)
    if (o->schedule_lengths[i] > L_tr) {
      longer[n++] = o->schedule_lengths[i];
      if (n == CP_CALIB_PLAN_LENGTHS)
        work = cp_work_add(work, cp_calib_plan_work(m, &cm, 1, longer, n, &cpp)), n = 0;
    }
  if (n || !work) work = cp_work_add(work, cp_calib_plan_work(m, &cm, 1, n ? longer : &o->target_len, n ? n : 1, &cpp));
  return work;
}

/* Temperature: the given tau, one calibrated at target_len, or a calibrated schedule; then the
 * scope. */
static int temperature_rule(cp_rule *rule, char **calibration_json, const cp_model *m, const cp_tokenizer *tok,
                            const cp_patch_options *o) {
  int rc = 0;
  if (o->tau > 0) {
    rule->n_temperature = 1;
    rule->temperature[0] = o->tau;
  } else {
    cp_cal_method cm;
    cp_calib_table table;
    cp_calib_params cpp;
    if ((rc = cp_cal_method_from_name(&cm, o->calibrate))) return rc;
    cp_calib_params_init(&cpp);
    cpp.train_len = o->train_len;
    cpp.per_layer = o->per_layer;
    cpp.tokenizer = tok;
    cpp.seed = o->seed;
    cpp.threads = o->threads;
    cpp.device = o->device;
    if (o->calibration_samples > 0) cpp.samples = o->calibration_samples;
    cpp.work_budget = o->work_budget;
    if (o->schedule) rc = schedule_rule(rule, &table, m, cm, o, &cpp);
    else rc = cp_calibrate_rule(rule, &table, m, cm, o->target_len, &cpp);
    if (rc) return rc;
    if (calibration_json) {
      cJSON *j = cp_calib_table_to_json(&table);
      *calibration_json = j ? cJSON_PrintUnformatted(j) : NULL;
      cJSON_Delete(j);
      if (!*calibration_json) rc = cp_nomem("calibration table");
    }
    cp_calib_table_free(&table);
    if (rc) return rc;
  }
  if (o->scope)
    rule->temperature_scope = !strcmp(o->scope, "encoder") ? CP_TEMP_SCOPE_ENCODER
                              : !strcmp(o->scope, "self")  ? CP_TEMP_SCOPE_SELF
                                                           : CP_TEMP_SCOPE_ALL;
  return 0;
}

int cp_patch_from_options(cp_patch *out, char **calibration_json, const cp_model *m, const cp_tokenizer *tok,
                          const cp_patch_options *o) {
  memset(out, 0, sizeof *out);
  cp_rule_init(&out->rule);
  out->method = o->method;
  if (calibration_json) *calibration_json = NULL;
  cp_rule *r = &out->rule;
  if (o->rule) {
    *r = *o->rule;
    return 0;
  }
  switch (o->method) {
    case CP_PATCH_TEMPERATURE: return temperature_rule(r, calibration_json, m, tok, o);
    case CP_PATCH_ALIBI_PI:
      r->alibi_mode = o->dynamic ? CP_ALIBI_DYNAMIC : o->progressive ? CP_ALIBI_PROGRESSIVE : CP_ALIBI_STATIC;
      r->alibi_factor = o->factor > 0 ? o->factor : 1;
      if (o->train_len) r->train_len = o->train_len;
      return 0;
    case CP_PATCH_LM_INFINITE:
      r->has_lambda = true;
      r->n_global = o->n_global;
      r->n_local = o->n_local ? o->n_local : m->train_len;
      /* learned absolute positions (GPT-2) have no distance to clamp: the rule refuses a ceiling */
      r->distance_ceiling = o->ceiling ? o->ceiling : m->pos == CP_POS_LEARNED ? 0 : r->n_local;
      if (o->top_k) {
        r->has_top_k = true;
        r->top_k = o->top_k;
      }
      return 0;
    case CP_PATCH_ROPE_PI: out->rope_factor = o->factor; return 0;
    case CP_PATCH_FIRE_THRESHOLD: r->fire_threshold = o->threshold; return 0;
    case CP_PATCH_RULE: /* refused without o->rule by cp_patch_options_check */
    case CP_PATCH_METHOD_COUNT: break;
  }
  return cp_error_set(CP_EARG, "patch: unknown method");
}
