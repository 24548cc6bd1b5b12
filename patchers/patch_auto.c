/* Floor: patchers. `ctxpatch patch --method auto` (ctxpatch/patchers/patch_auto.h): the fixed
 * candidate grid, each certified on the same verify set-up, the criterion, the "auto" block. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/rule_json.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/clock.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/num.h"
#include "ctxpatch/patchers/calibrate.h"
#include "ctxpatch/patchers/patch_auto.h"
#include "patchers/patch_stage.h"

static const char *const status_names[] = {"pass",    "fail",      "does not fit", "refused", "skipped: budget",
                                           "skipped: runtime", "no effect", "inconclusive"};

const char *cp_auto_status_name(cp_auto_status s) {
  return (unsigned)s < sizeof status_names / sizeof *status_names ? status_names[s] : "?";
}

void cp_auto_outcome_free(cp_auto_outcome *o) {
  if (!o) return;
  cp_patch_outcome_free(&o->outcome);
  free(o->target_lengths);
  free(o->auto_json);
  memset(o, 0, sizeof *o);
  o->best = -1;
}

/* Candidate i of the grid (patch_auto.h) as `patch` options on top of `base`, and its label. */
static void candidate_options(cp_patch_options *o, cp_auto_candidate *c, int i, const cp_patch_options *base,
                              int64_t L, int64_t T) {
  static const cp_patch_method methods[CP_AUTO_MAX_CANDIDATES] = {
      CP_PATCH_TEMPERATURE,    CP_PATCH_TEMPERATURE,    CP_PATCH_ALIBI_PI, CP_PATCH_ALIBI_PI, CP_PATCH_ALIBI_PI,
      CP_PATCH_LM_INFINITE,    CP_PATCH_LM_INFINITE,    CP_PATCH_FIRE_THRESHOLD, CP_PATCH_FIRE_THRESHOLD,
      CP_PATCH_ROPE_PI};
  char cal[64] = "";
  *o = *base;
  o->method = c->method = methods[i];
  if (base->calibration_samples) snprintf(cal, sizeof cal, " --calibration-samples %d", base->calibration_samples);
  double ratio = (double)T / (double)L;
  const char *name = cp_patch_method_name(c->method);
  switch (i) {
    case 0: snprintf(c->options, sizeof c->options, "--method %s --calibrate %s%s", name, o->calibrate, cal); break;
    case 1:
      o->schedule = true;
      snprintf(c->options, sizeof c->options, "--method %s --schedule --calibrate %s%s", name, o->calibrate, cal);
      break;
    case 2:
    case 9:
      o->factor = ratio;
      snprintf(c->options, sizeof c->options, "--method %s --factor %.17g", name, ratio);
      break;
    case 3: o->dynamic = true; snprintf(c->options, sizeof c->options, "--method %s --dynamic", name); break;
    case 4: o->progressive = true; snprintf(c->options, sizeof c->options, "--method %s --progressive", name); break;
    case 5:
    case 6:
      o->n_local = i == 5 ? (L / 2 > 0 ? L / 2 : 1) : L;
      snprintf(c->options, sizeof c->options, "--method %s --n-local %lld", name, (long long)o->n_local);
      break;
    default:
      o->threshold = (double)(i == 7 ? L : T);
      snprintf(c->options, sizeof c->options, "--method %s --threshold %lld", name, (long long)(i == 7 ? L : T));
      break;
  }
  if (c->method != CP_PATCH_TEMPERATURE) o->calibration_samples = 0; /* a calibration option */
}

/* The criterion's numbers of a certified candidate: mean patched accuracy over the retrieval
 * probes x target lengths, and mean ppl NLL at the target lengths (NaN when absent). Both
 * rounded as stored in the "auto" block, so the block alone reproduces the choice. */
static void score(double *accuracy, double *nll_out, const cp_verify_result *r, int64_t L) {
  double acc = 0, nll = 0;
  int n_acc = 0, n_nll = 0;
  for (int l = 0; l < r->n_lengths; l++) {
    if (r->lengths[l] <= L) continue;
    for (int p = 0; p < r->n_probes; p++, n_acc++) acc += cp_verify_accuracy_at(r, CP_SIDE_PATCHED, p, l);
    if (r->has_ppl) nll += r->ppl_mean[CP_SIDE_PATCHED][l], n_nll++;
  }
  *accuracy = n_acc ? cp_num_round(acc / n_acc, CP_NUM_JSON_DIGITS) : NAN;
  *nll_out = n_nll ? cp_num_round(nll / n_nll, CP_NUM_JSON_DIGITS) : NAN;
}

/* Whether figures (a_acc, a_nll) beat (b_acc, b_nll) by the criterion: ties are no win. */
static bool beats(double a_acc, double a_nll, double b_acc, double b_nll) {
  if (!isnan(a_acc) && !isnan(b_acc) && a_acc != b_acc) return a_acc > b_acc;
  if (!isnan(a_nll) && !isnan(b_nll) && a_nll != b_nll) return a_nll < b_nll;
  return false;
}

/* Whether passing candidate a beats the best so far b (b earlier in the order: ties keep b). */
static bool better(const cp_auto_candidate *a, const cp_auto_candidate *b) {
  return beats(a->accuracy, a->nll, b->accuracy, b->nll);
}

/* Errors that refuse one candidate on this model (its reason goes into the table) rather than
 * the whole run. */
static bool candidate_refusal(int rc) {
  return rc == CP_EARG || rc == CP_EPATCH_FAMILY || rc == CP_EPATCH_FIDELITY || rc == CP_ERULE_MODEL ||
         rc == CP_ERULE_VALUE || rc == CP_EUNSUPPORTED;
}

/* Builds and stages one candidate; *pd holds its folder when it passes. Screening fields of `oc`
 * are the caller's. */
static int run_candidate(cp_auto_candidate *c, cp_patch_pending **pd, cp_patch_outcome *oc, const cp_patch_options *co,
                         const cp_model *m, const cp_tokenizer *tok, const char *in, const char *out_dir,
                         const cp_patch_params *p) {
  cp_patch_options o = *co;
  char *calib_text = NULL;
  cJSON *calib = NULL;
  cp_patch *patch = &c->patch;
  int rc = cp_patch_options_check(&o);
  if (rc == 0) rc = cp_patch_options_resolve(&o, m);
  if (rc == 0 && o.method == CP_PATCH_TEMPERATURE && p->on_calibrate)
    p->on_calibrate(p->on_tmp_ctx, o.calibrate, o.schedule ? 0 : o.target_len);
  if (rc == 0) rc = cp_patch_from_options(patch, &calib_text, m, tok, &o);
  if (rc == 0 && calib_text && !(calib = cJSON_Parse(calib_text))) rc = cp_nomem("%s", in);
  if (rc == 0) rc = cp_patch_stage(pd, oc, in, out_dir, m, patch, calib, p);
  cJSON_Delete(calib);
  free(calib_text);
  if (rc == 0) {
    c->ran = true;
    c->fidelity = oc->plan.fidelity;
    c->verdict = oc->verdict;
    c->status = oc->verdict == CP_VERDICT_PASS           ? CP_AUTO_PASS
                : oc->verdict == CP_VERDICT_NO_EFFECT    ? CP_AUTO_NO_EFFECT
                : oc->verdict == CP_VERDICT_INCONCLUSIVE ? CP_AUTO_INCONCLUSIVE
                                                         : CP_AUTO_FAIL;
    if (!oc->pass && oc->n_reasons > 0) snprintf(c->reason, sizeof c->reason, "%s", oc->reasons[0]);
  } else if (candidate_refusal(rc)) {
    c->status = CP_AUTO_REFUSED;
    snprintf(c->reason, sizeof c->reason, "%s", cp_error_message());
    rc = 0;
  }
  return rc;
}

static void add_num_or_null(cJSON *o, const char *key, double v) {
  if (isnan(v)) cJSON_AddNullToObject(o, key);
  else cJSON_AddNumberToObject(o, key, v);
}

/* The "auto" block (docs/certificate.md): no timings, so the artifact stays reproducible. */
static cJSON *auto_block(const cp_auto_outcome *a) {
  cJSON *b = cJSON_CreateObject(), *tl = cJSON_AddArrayToObject(b, "target_lengths");
  cJSON_AddStringToObject(b, "criterion", CP_AUTO_CRITERION);
  for (int i = 0; i < a->n_target_lengths; i++) cJSON_AddItemToArray(tl, cJSON_CreateNumber((double)a->target_lengths[i]));
  cJSON_AddNumberToObject(b, "budget_seconds", a->budget);
  if (a->best >= 0) cJSON_AddNumberToObject(b, "winner", a->best);
  else cJSON_AddNullToObject(b, "winner");
  /* The original's row: what "helps" is measured against. */
  cJSON *orig = cJSON_AddObjectToObject(b, "original");
  add_num_or_null(orig, "mean_accuracy", a->original_scored ? a->original_accuracy : NAN);
  add_num_or_null(orig, "ppl_nll", a->original_scored ? a->original_nll : NAN);
  cJSON_AddStringToObject(b, "helps", CP_AUTO_HELPS);
  cJSON_AddBoolToObject(b, "ship_original", a->ship_original);
  cJSON *cs = cJSON_AddArrayToObject(b, "candidates");
  for (int i = 0; i < a->n_candidates; i++) {
    const cp_auto_candidate *c = &a->candidates[i];
    cJSON *e = cJSON_CreateObject();
    cJSON_AddItemToArray(cs, e);
    cJSON_AddStringToObject(e, "method", cp_patch_method_name(c->method));
    cJSON_AddStringToObject(e, "options", c->options);
    cJSON_AddStringToObject(e, "status", cp_auto_status_name(c->status));
    if (c->reason[0]) cJSON_AddStringToObject(e, "reason", c->reason);
    else cJSON_AddNullToObject(e, "reason");
    if (c->ran) {
      cJSON *r = cp_rule_to_json(&c->patch.rule);
      cJSON_AddItemToObject(e, "rule", r ? r : cJSON_CreateObject());
      if (c->patch.rope_factor > 0) cJSON_AddNumberToObject(e, "rope_factor", c->patch.rope_factor);
      cJSON_AddStringToObject(e, "fidelity", cp_fidelity_name(c->fidelity));
      cJSON_AddStringToObject(e, "verdict", cp_verdict_name(c->verdict));
    } else {
      cJSON_AddNullToObject(e, "rule");
      cJSON_AddNullToObject(e, "fidelity");
      cJSON_AddNullToObject(e, "verdict");
    }
    add_num_or_null(e, "mean_accuracy", c->ran ? c->accuracy : NAN);
    add_num_or_null(e, "ppl_nll", c->ran ? c->nll : NAN);
    cJSON_AddBoolToObject(e, "helps", c->helps);
  }
  if (a->n_runtime_rows == 0) return b;
  cJSON *rs = cJSON_AddArrayToObject(b, "runtime_options");
  for (int i = 0; i < a->n_runtime_rows; i++) {
    const cp_auto_runtime_row *r = &a->runtime_rows[i];
    cJSON *e = cJSON_CreateObject();
    cJSON_AddItemToArray(rs, e);
    cJSON_AddStringToObject(e, "name", r->name);
    cJSON_AddStringToObject(e, "flags", r->flags);
    if (r->ran) cJSON_AddStringToObject(e, "verdict", cp_verdict_name(r->verdict));
    else cJSON_AddNullToObject(e, "verdict");
    if (r->reason[0]) cJSON_AddStringToObject(e, "reason", r->reason);
    else cJSON_AddNullToObject(e, "reason");
    add_num_or_null(e, "mean_accuracy", r->ran ? r->accuracy : NAN);
    add_num_or_null(e, "ppl_nll", r->ran ? r->nll : NAN);
    cJSON_AddBoolToObject(e, "helps", r->helps);
    cJSON_AddBoolToObject(e, "as_good", r->as_good);
  }
  return b;
}

/* Options auto chooses itself are refused beside it (their values would be ignored otherwise). */
static int auto_check(const cp_patch_options *o, const cp_patch_params *p, double budget) {
  if (o->tau > 0 || o->per_layer || o->scope || o->schedule || o->factor > 0 || o->dynamic || o->progressive ||
      o->have_n_global || o->n_local || o->ceiling || o->top_k || o->threshold > 0 || o->rule)
    return cp_error_set(CP_EARG, "--method auto chooses the method options itself: it takes no --tau, --per-layer, "
                                 "--scope, --schedule, --factor, --dynamic, --progressive, --n-global, --n-local, "
                                 "--ceiling, --top-k, --threshold or --rule");
  if (!p->verify) return cp_error_set(CP_EARG, "--method auto certifies every candidate: it takes no --no-verify");
  if (p->onnx) return cp_error_set(CP_EARG, "--method auto writes safetensors or gguf, not --to onnx");
  if (!(budget >= 0 && budget <= CP_AUTO_MAX_BUDGET))
    return cp_error_set(CP_EARG, "--budget must be in [0, %g] seconds", CP_AUTO_MAX_BUDGET);
  return 0;
}

/* The target lengths: the verified lengths past the training length L. */
static int target_lengths(cp_auto_outcome *out, const cp_verify_params *vp, int64_t L) {
  CP_CHECK_ALLOC(out->target_lengths = malloc((size_t)(vp->n_lengths > 0 ? vp->n_lengths : 1) * sizeof(int64_t)),
                 "auto: lengths");
  for (int i = 0; i < vp->n_lengths; i++)
    if (vp->lengths[i] > L) out->target_lengths[out->n_target_lengths++] = vp->lengths[i];
  if (out->n_target_lengths == 0)
    return cp_error_set(CP_EARG, "--method auto needs a verified length past the training length %lld (--lengths)",
                        (long long)L);
  return 0;
}

/* Keeps the screening (default probe set) of `screen` in a fresh candidate outcome. */
static void copy_screening(cp_patch_outcome *oc, const cp_patch_outcome *screen) {
  memset(oc, 0, sizeof *oc);
  oc->n_screened = screen->n_screened;
  memcpy(oc->screened, screen->screened, sizeof oc->screened);
  memcpy(oc->screened_accuracy, screen->screened_accuracy, sizeof oc->screened_accuracy);
  memcpy(oc->screened_used, screen->screened_used, sizeof oc->screened_used);
  oc->screen_length = screen->screen_length;
  oc->screen_prompts = screen->screen_prompts;
}

/* Opens (and removes) a temporary folder of OUT: an existing OUT without replace is refused
 * before any candidate runs. */
static int check_output(const char *out_dir, bool replace) {
  cp_atomic_dir *ad = NULL;
  int rc = cp_atomic_dir_open(&ad, out_dir, replace);
  cp_atomic_dir_abort(ad);
  return rc;
}

typedef struct {
  cp_model *model;
  cp_checkpoint *ck; /* the checkpoint of IN, for the stand-in plans of runtime_skip */
  cp_tokenizer *tok;
  cp_patch_verify_setup vs;
  cp_verify_result *original_run; /* the baseline side of every candidate (cp_verify_params.baseline_from) */
  cp_patch_params p;
  int64_t L, T;
  /* Work (attention pairs, verify.h): planned so far (the screening, the original's run and the
   * candidates started), one certification side on the screened probes, and the rate of the
   * original's run (pairs per second), which turns a candidate's work into an estimate of its time. */
  uint64_t spent, side;
  double rate;
} auto_ctx;

/* The work candidate c plans: its calibration (temperature), then its certification side. */
static uint64_t candidate_work(const cp_patch_options *co, const auto_ctx *x) {
  cp_patch_options o = *co;
  cp_cal_method cm;
  uint64_t cal = 0;
  if (cp_patch_options_check(&o) == 0 && cp_patch_options_resolve(&o, x->model) == 0 &&
      o.method == CP_PATCH_TEMPERATURE && cp_cal_method_from_name(&cm, o.calibrate) == 0)
    cal = cp_patch_calibration_work(x->model, cm, &o);
  cp_error_clear(); /* a refusal is the real run's to report */
  return cp_work_add(cal, x->side);
}

/* Whether candidate c (planned `work`) is skipped for the budgets, before it starts; the reason
 * goes into c. The work budget binds every candidate; the time budget, estimated from the
 * original's run, every one after the first that runs. */
static bool budget_skip(cp_auto_candidate *c, uint64_t work, const auto_ctx *x, uint64_t work_budget, double elapsed,
                        double budget, bool ran_any) {
  uint64_t b = cp_work_budget(work_budget), left = b > x->spent ? b - x->spent : 0;
  if (work > left) {
    snprintf(c->reason, sizeof c->reason, "planned work %llu attention pairs, over the %llu left of the work budget "
             "(--work-budget)", (unsigned long long)work, (unsigned long long)left);
    return true;
  }
  double estimate = (double)work / x->rate;
  if (ran_any && !(elapsed + estimate <= budget)) {
    /* no figures: the reason goes into the certificate, which holds no timings */
    snprintf(c->reason, sizeof c->reason, "its work at the original's rate would run past --budget");
    return true;
  }
  return false;
}

/* Whether candidate c (options co) would be inert in the target format's runtimes: its rule, or
 * part of it, only in ctxpatch metadata (cp_patch_effective_precheck, before any calibration); the
 * reason goes into c. */
static bool runtime_skip(cp_auto_candidate *c, const cp_patch_options *co, const auto_ctx *x, const char *out,
                         const cp_patch_params *p) {
  cp_patch_options o = *co;
  cp_artifact_format f = cp_patch_format(p);
  if (cp_patch_options_check(&o) || cp_patch_options_resolve(&o, x->model)) {
    cp_error_clear(); /* the real run reports it */
    return false;
  }
  cp_bake_plan *plan = malloc(sizeof *plan); /* two cp_rules: tens of KiB, not on the stack */
  bool skip = plan && cp_patch_effective_precheck(plan, x->model, x->ck, &o, f, out) != 0;
  cp_error_clear(); /* out of memory here: the real run meets it */
  if (skip) {
    char parts[160], runtimes[200];
    cp_rule_part_names(parts, sizeof parts, &plan->residual);
    cp_runtimes_text(runtimes, sizeof runtimes, f, x->model->family);
    snprintf(c->reason, sizeof c->reason, "%.90s would be ctxpatch metadata only, which %.120s ignore%s (--for "
             "ctxpatch includes it)", parts, runtimes, strstr(runtimes, " and ") ? "" : "s");
  }
  free(plan);
  return skip;
}

/* Opens the model and tokenizer, resolves the target, screens the probes once (into out->outcome). */
static int auto_open(auto_ctx *x, cp_auto_outcome *out, bool *bad, const char *in, cp_patch_options *base,
                     const cp_patch_params *params) {
  int rc = 0;
  if ((rc = cp_model_open_stored(&x->model, in)) || (rc = cp_patch_refuse_artifact(x->model, in))) return rc;
  if (base->train_len && (rc = cp_model_set_train_len(x->model, base->train_len, CP_TRAIN_LEN_OPTION))) {
    *bad = true;
    return rc;
  }
  if (!params->for_ctxpatch && (rc = cp_checkpoint_open(&x->ck, in))) return rc;
  x->L = x->model->train_len;
  if (x->L <= 0)
    return cp_error_set(CP_EARG, "%s: --method auto needs the model's training length (config.json has none)", in);
  if (!base->target_len) base->target_len = 2 * x->L; /* as cp_patch_options_resolve */
  x->T = base->target_len;
  *bad = true;
  if (x->T <= x->L)
    return cp_error_set(CP_EARG, "--method auto needs a target length past the training length %lld, got %lld",
                        (long long)x->L, (long long)x->T);
  *bad = false;
  if ((rc = cp_patch_tokenizer_open(&x->tok, in, true, params))) return rc;
  /* The screening, the original's run and one candidate's certification must fit the work
   * budget before any of them runs; each candidate is then checked against what is left. */
  cp_patch_work w;
  cp_patch_plan_work(&w, x->model, base, params);
  x->spent = cp_work_add(w.screening, w.side);
  if ((rc = cp_work_check(cp_work_add(x->spent, w.side), base->work_budget, "patch --method auto"))) return rc;
  if ((rc = cp_patch_verify_prepare(&x->vs, &out->outcome, bad, x->model, x->tok, base, params))) return rc;
  if ((rc = target_lengths(out, &x->vs.vp, x->L))) {
    *bad = true;
    return rc;
  }
  /* The original on the candidates' probe grid, once: each certification takes its baseline
   * side from this run instead of running the original again. */
  cp_verify_params op = x->vs.vp;
  op.baseline = false;
  op.baseline_model = NULL;
  op.baseline_from = NULL;
  op.looks = 0; /* every prompt: each candidate's sequential run takes the answers it reaches */
  if ((rc = cp_verify_run(&x->original_run, x->model, x->tok, NULL, &op))) return rc;
  score(&out->original_accuracy, &out->original_nll, x->original_run, x->L);
  out->original_scored = true;
  x->side = cp_verify_plan_work(&op, x->model);
  x->rate = x->original_run->seconds > 0 ? (double)x->side / x->original_run->seconds : INFINITY;
  x->vs.vp.baseline_from = x->original_run;
  x->p = *params;
  x->p.verify = &x->vs.vp;
  x->p.thresholds = &x->vs.th;
  x->p.tok = x->tok;
  return 0;
}

/* ---- llama.cpp's own options (cp_auto_runtime_row) ---- */

/* Row r's verdict and figures from a run whose patched side is the runtime option. */
static int judge_row(cp_auto_runtime_row *r, const cp_verify_result *res, const auto_ctx *x,
                     const cp_auto_outcome *out) {
  char **reasons = NULL;
  int n = 0, rc = cp_verify_judge(&r->verdict, &reasons, &n, res, &x->vs.th);
  if (rc == 0) {
    r->ran = true;
    score(&r->accuracy, &r->nll, res, x->L);
    if (r->verdict != CP_VERDICT_PASS && n > 0) snprintf(r->reason, sizeof r->reason, "%s", reasons[0]);
    r->helps = r->verdict == CP_VERDICT_PASS && beats(r->accuracy, r->nll, out->original_accuracy, out->original_nll);
  }
  for (int i = 0; i < n; i++) free(reasons[i]);
  free(reasons);
  return rc;
}

/* llama.cpp's context shift (cp_engine_shift) with a context of the training length, the original
 * model run by the engine on the candidates' probes; its baseline side is the original's run. */
static int shift_row(cp_auto_runtime_row *r, auto_ctx *x, const cp_auto_outcome *out, uint64_t work_budget) {
  const int64_t L = x->L, batch = L / 4 < CP_AUTO_SHIFT_BATCH ? (L / 4 > 0 ? L / 4 : 1) : CP_AUTO_SHIFT_BATCH;
  snprintf(r->name, sizeof r->name, "llama.cpp context shift --keep %d (runtime option, no file change)",
           CP_AUTO_SHIFT_KEEP - 1);
  snprintf(r->flags, sizeof r->flags, "-c %lld --keep %d", (long long)L, CP_AUTO_SHIFT_KEEP - 1);
  cp_verify_params vp = x->vs.vp;
  vp.baseline = true; /* its side: x->original_run (baseline_from) */
  vp.baseline_model = NULL;
  vp.shift = (cp_engine_shift){L, CP_AUTO_SHIFT_KEEP, batch};
  vp.stats = false; /* statistics are the unshifted engine's; the criterion does not use them */
  uint64_t work = cp_verify_plan_work(&vp, x->model), b = cp_work_budget(work_budget);
  uint64_t left = b > x->spent ? b - x->spent : 0;
  if (work > left) { /* like the original's run, one side that --budget does not skip */
    snprintf(r->reason, sizeof r->reason, "skipped: planned work %llu attention pairs, over the %llu left of the "
             "work budget (--work-budget)", (unsigned long long)work, (unsigned long long)left);
    return 0;
  }
  x->spent = cp_work_add(x->spent, work);
  cp_verify_result *res = NULL;
  int rc = cp_verify_run(&res, x->model, x->tok, NULL, &vp);
  if (rc == CP_EUNSUPPORTED || rc == CP_EARG) { /* not emulated for this model: the reason says why */
    snprintf(r->reason, sizeof r->reason, "%s", cp_error_message());
    cp_error_clear();
    return 0;
  }
  if (rc == 0) rc = judge_row(r, res, x, out);
  cp_verify_result_free(res);
  return rc;
}

/* llama.cpp's --rope-scaling linear --rope-scale T/L: the arithmetic of the rope-pi candidate
 * (positions divided by the factor, as the engine runs it), so its figures are that candidate's. */
static void rope_flag_row(cp_auto_runtime_row *r, const cp_auto_outcome *out, int64_t L, int64_t T) {
  const double f = (double)T / (double)L;
  const cp_auto_candidate *c = &out->candidates[CP_AUTO_MAX_CANDIDATES - 1];
  snprintf(r->name, sizeof r->name, "llama.cpp --rope-scaling linear --rope-scale %.6g (runtime option, no file "
           "change)", f);
  snprintf(r->flags, sizeof r->flags, "--rope-scaling linear --rope-scale %.17g", f);
  if (c->method != CP_PATCH_ROPE_PI || !c->ran) {
    snprintf(r->reason, sizeof r->reason, "candidate %d (%.60s) was %s", CP_AUTO_MAX_CANDIDATES, c->options,
             cp_auto_status_name(c->status));
    return;
  }
  r->ran = true;
  r->verdict = c->verdict;
  r->accuracy = c->accuracy, r->nll = c->nll, r->helps = c->helps;
  snprintf(r->reason, sizeof r->reason, "the figures of candidate %d (%.60s): the same arithmetic%s%.200s",
           CP_AUTO_MAX_CANDIDATES, c->options, c->reason[0] ? "; " : "", c->reason);
}

/* With --to gguf on a RoPE model: the runtime rows, and which of them no passing candidate beats. */
static int runtime_rows(cp_auto_outcome *out, auto_ctx *x, const cp_patch_params *p, uint64_t work_budget) {
  if (cp_patch_format(p) != CP_ARTIFACT_GGUF || x->model->pos != CP_POS_ROPE) return 0;
  out->n_runtime_rows = CP_AUTO_MAX_RUNTIME_ROWS;
  for (int i = 0; i < CP_AUTO_MAX_RUNTIME_ROWS; i++) out->runtime_rows[i].accuracy = out->runtime_rows[i].nll = NAN;
  int rc = shift_row(&out->runtime_rows[CP_AUTO_ROW_SHIFT], x, out, work_budget);
  if (rc) return rc;
  rope_flag_row(&out->runtime_rows[CP_AUTO_ROW_ROPE_FLAG], out, x->L, x->T);
  for (int i = 0; i < CP_AUTO_MAX_RUNTIME_ROWS; i++) {
    cp_auto_runtime_row *r = &out->runtime_rows[i];
    r->as_good = r->helps; /* a row that does not help: the original alone does as well */
    for (int k = 0; k < out->n_candidates && r->as_good; k++) {
      const cp_auto_candidate *c = &out->candidates[k];
      if (c->status == CP_AUTO_PASS && beats(c->accuracy, c->nll, r->accuracy, r->nll)) r->as_good = false;
    }
  }
  return 0;
}

int cp_patch_auto_run(cp_auto_outcome *out, const char *in, const char *out_dir, const cp_patch_options *opts,
                      const cp_patch_params *params, double budget,
                      void (*on_candidate)(void *ctx, int index, const cp_auto_candidate *c)) {
  memset(out, 0, sizeof *out);
  out->best = -1;
  out->budget = budget;
  cp_patch_options base = *opts;
  auto_ctx x;
  memset(&x, 0, sizeof x);
  cp_patch_pending *best_pd = NULL, *pd = NULL;
  cp_patch_outcome oc;
  memset(&oc, 0, sizeof oc);
  bool bad = false, ran_any = false;
  double t0 = cp_monotonic_seconds();
  int rc = auto_check(&base, params, budget);
  if (rc) {
    out->outcome.bad_options = true;
    return rc;
  }
  if ((rc = check_output(out_dir, params->replace)) || (rc = auto_open(&x, out, &bad, in, &base, params))) goto done;
  for (int i = 0; i < CP_AUTO_MAX_CANDIDATES; i++) {
    cp_auto_candidate *c = &out->candidates[out->n_candidates++];
    cp_patch_options co;
    uint64_t work = 0;
    candidate_options(&co, c, i, &base, x.L, x.T);
    c->accuracy = c->nll = NAN;
    double t = cp_monotonic_seconds();
    if (cp_patch_method_fits(x.model, c->method) ||
        (c->method == CP_PATCH_ROPE_PI && cp_patch_rope_pi_fits(x.model, in))) {
      c->status = CP_AUTO_NOT_FIT;
      snprintf(c->reason, sizeof c->reason, "%s", cp_error_message());
    } else if (x.ck && runtime_skip(c, &co, &x, in, &x.p)) {
      c->status = CP_AUTO_SKIPPED_RUNTIME;
    } else if (budget_skip(c, work = candidate_work(&co, &x), &x, base.work_budget, t - t0, budget, ran_any)) {
      c->status = CP_AUTO_SKIPPED_BUDGET; /* the first candidate that fits the work budget always runs */
    } else {
      ran_any = true;
      x.spent = cp_work_add(x.spent, work);
      copy_screening(&oc, &out->outcome);
      if ((rc = run_candidate(c, &pd, &oc, &co, x.model, x.tok, in, out_dir, &x.p))) goto done;
      if (c->ran) score(&c->accuracy, &c->nll, oc.result, x.L);
      c->helps = c->status == CP_AUTO_PASS &&
                 beats(c->accuracy, c->nll, out->original_accuracy, out->original_nll);
      if (pd && (out->best < 0 || better(c, &out->candidates[out->best]))) {
        cp_patch_pending_free(best_pd); /* the previous best's folder goes */
        best_pd = pd;
        pd = NULL;
        out->best = i;
        cp_patch_outcome_free(&out->outcome);
        out->outcome = oc;
        memset(&oc, 0, sizeof oc);
      }
      cp_patch_pending_free(pd);
      pd = NULL;
      cp_patch_outcome_free(&oc);
    }
    c->seconds = cp_monotonic_seconds() - t;
    if (on_candidate) on_candidate(params->on_tmp_ctx, i, c);
  }
  if ((rc = runtime_rows(out, &x, &x.p, base.work_budget))) goto done;
  out->ship_original = out->best >= 0 && !out->candidates[out->best].helps;
  cJSON *block = auto_block(out);
  CP_CHECK_ALLOC_GOTO(block, in);
  out->auto_json = cJSON_PrintUnformatted(block);
  if (!out->auto_json || out->best < 0) {
    cJSON_Delete(block);
    CP_CHECK_ALLOC_GOTO(out->auto_json, in);
    goto done;
  }
  rc = cp_patch_finish(best_pd, &out->outcome, "auto", block);
  best_pd = NULL;
done:
  if (bad) out->outcome.bad_options = true;
  cp_patch_pending_free(best_pd);
  cp_patch_pending_free(pd);
  cp_patch_outcome_free(&oc);
  cp_verify_result_free(x.original_run);
  cp_tokenizer_free(x.tok);
  cp_checkpoint_free(x.ck);
  cp_model_free(x.model);
  return rc;
}
