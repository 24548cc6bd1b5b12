/* Temperature calibration (include/ctxpatch/patchers/calibrate.h, docs/calibration.md): Algorithm 1 of
 * the T5 seed by grid search and bisection on the mean P_max / entropy of the softmaxes in
 * scope, per model or per layer, plus the closed forms and the log baseline. */
#include "ctxpatch/patchers/calibrate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/engine/engine.h"
#include "ctxpatch/engine/profile.h"
#include "ctxpatch/verify/verify.h"

static const char *const method_names[CP_CAL_METHOD_COUNT] = {"pmax", "entropy", "log", "prop1", "prop2"};

const char *cp_cal_method_name(cp_cal_method m) {
  return (unsigned)m < CP_CAL_METHOD_COUNT ? method_names[m] : "?";
}

int cp_cal_method_from_name(cp_cal_method *out, const char *name) {
  for (int m = 0; m < CP_CAL_METHOD_COUNT; m++)
    if (!strcmp(name, method_names[m])) {
      *out = (cp_cal_method)m;
      return 0;
    }
  return cp_error_set(CP_EARG, "calibrate: unknown method '%s' (expected pmax, entropy, log, prop1 or prop2)",
                      name);
}

void cp_calib_params_init(cp_calib_params *p) {
  memset(p, 0, sizeof *p);
  p->grid_hi = 1.0;
  p->grid_lo = 0.5;
  p->grid_step = 0.05;
  p->refine_tol = 1e-4;
  p->samples = 4;
  p->inputs = CP_CAL_INPUTS_AUTO;
}

int cp_calib_params_check(const cp_calib_params *p) {
  if (!(p->grid_lo > 0) || !(p->grid_hi >= p->grid_lo) || !isfinite(p->grid_hi))
    return cp_error_set(CP_EARG, "calibrate: grid %g:%g needs HI >= LO > 0", p->grid_hi, p->grid_lo);
  if (!(p->grid_step > 0) || !isfinite(p->grid_step))
    return cp_error_set(CP_EARG, "calibrate: grid step %g is not positive", p->grid_step);
  if ((p->grid_hi - p->grid_lo) / p->grid_step > 10000)
    return cp_error_set(CP_EARG, "calibrate: grid %g:%g:%g has more than 10000 points", p->grid_hi, p->grid_lo,
                        p->grid_step);
  if (p->samples < 1 || p->samples > 1000)
    return cp_error_set(CP_EARG, "calibrate: samples %d is not in [1, 1000]", p->samples);
  if (!(p->refine_tol > 0))
    return cp_error_set(CP_EARG, "calibrate: refine tolerance %g is not positive", p->refine_tol);
  if (p->train_len < 0) return cp_error_set(CP_EARG, "calibrate: train length %lld is negative", (long long)p->train_len);
  if (p->inputs == CP_CAL_INPUTS_PROBE && !p->tokenizer)
    return cp_error_set(CP_EARG, "calibrate: probe inputs need a tokenizer (the model folder has none)");
  return 0;
}

/* ---------------------------------------------------------------- closed forms */

double cp_calib_log(int64_t l_tr, int64_t l_ex) {
  if (l_tr <= 1 || l_ex <= 1) return NAN;
  return log((double)l_tr) / log((double)l_ex);
}

/* Appendix A.2: aligning P_ex(tau) = (P_tr L_tr e^{s_tr^2/2})^{1/tau} / (L_ex e^{s_ex^2/(2 tau^2)})
 * with P_tr, taking logs and multiplying by tau^2, gives A tau^2 - B tau + C = 0 with the
 * coefficients below; the paper picks the larger root. */
void cp_calib_prop1_roots(double *larger, double *smaller, double pmax_tr, double sigma_tr, double sigma_ex,
                          int64_t l_tr, int64_t l_ex) {
  *larger = *smaller = NAN;
  if (!(pmax_tr > 0) || !isfinite(sigma_tr) || !isfinite(sigma_ex) || l_tr <= 0 || l_ex <= 0) return;
  double A = log((double)l_ex) + log(pmax_tr);
  double B = log((double)l_tr) + log(pmax_tr) + sigma_tr * sigma_tr / 2;
  double C = sigma_ex * sigma_ex / 2;
  double r1, r2;
  if (A == 0) {
    r1 = B != 0 ? C / B : NAN;
    r2 = NAN;
  } else {
    double D = B * B - 4 * A * C;
    if (D < 0) return;
    r1 = (B + sqrt(D)) / (2 * A), r2 = (B - sqrt(D)) / (2 * A);
    if (r2 > r1) {
      double x = r1;
      r1 = r2, r2 = x;
    }
  }
  if (r1 > 0 && isfinite(r1)) *larger = r1;
  if (r2 > 0 && isfinite(r2)) *smaller = r2;
}

double cp_calib_prop1(double pmax_tr, double sigma_tr, double sigma_ex, int64_t l_tr, int64_t l_ex) {
  double larger, smaller;
  cp_calib_prop1_roots(&larger, &smaller, pmax_tr, sigma_tr, sigma_ex, l_tr, l_ex);
  return larger;
}

/* Appendix A.3: H(tau) ~ log L - sigma^2 / (2 tau^2); H_ex(tau) = H_tr(1). */
double cp_calib_prop2(double sigma_tr, double sigma_ex, int64_t l_tr, int64_t l_ex) {
  if (!isfinite(sigma_tr) || !isfinite(sigma_ex) || l_tr <= 0 || l_ex <= 0) return NAN;
  double d = sigma_tr * sigma_tr + 2 * log((double)l_ex / (double)l_tr);
  if (!(d > 0)) return NAN;
  double tau = sigma_ex / sqrt(d);
  return tau > 0 ? tau : NAN;
}

/* ---------------------------------------------------------------- measurement */

/* One calibration run: one engine (and so one thread pool) for every forward pass; only its
 * rule changes between the measurements (cp_engine_set_rule). */
typedef struct {
  const cp_model *model;
  const cp_calib_params *p;
  cp_engine *engine; /* owned; statistics on, logit statistics when a closed form is asked */
  int64_t *ids;      /* [longest length] one sample's input, owned */
  cp_attn_kind kind; /* the kind in scope */
  int n_layers;      /* layers in scope */
  bool probe;        /* probe prompts rather than random ids */
  int64_t forwards;
  double *grid;      /* [n_grid] tau from grid_hi down to grid_lo, owned */
  int n_grid;
  double *taus;      /* [n_layers] per-layer search state, owned */
} ctx_t;

/* Input ids of sample s at length len: random ids, or a passkey prompt (key at depth
 * (s + 1/2) / samples) made a little longer than len and cut to len by dropping filler tokens
 * after the task line (the first min(32, len/4) tokens), so the question stays at the end. */
static int make_ids(int64_t *ids, const ctx_t *c, int64_t len, int s) {
  uint64_t seed = c->p->seed * 1000003u + (uint64_t)s * 7919u + (uint64_t)len;
  if (!c->probe) {
    cp_random_ids(ids, len, c->model->vocab, seed);
    return 0;
  }
  cp_probe_sample ps;
  memset(&ps, 0, sizeof ps);
  double depth = (s + 0.5) / c->p->samples;
  /* cp_probe_make fills n_tokens - 8 up to a filler sentence (a few tokens short): ask for more. */
  int rc = cp_probe_make(&ps, c->p->tokenizer, CP_PROBE_PASSKEY, len + 8 + 48, depth, seed);
  if (rc) return rc;
  int64_t n = (int64_t)ps.n_ids;
  if (n <= 0) {
    cp_probe_sample_free(&ps);
    return cp_error_set(CP_EARG, "calibrate: empty probe prompt at length %lld", (long long)len);
  }
  if (n >= len) {
    int64_t head = len / 4 < 32 ? len / 4 : 32;
    memcpy(ids, ps.ids, (size_t)head * sizeof *ids);
    memcpy(ids + head, ps.ids + (n - len) + head, (size_t)(len - head) * sizeof *ids);
  } else { /* only when the tokenizer is very coarse */
    for (int64_t i = 0; i < len; i++) ids[i] = ps.ids[i % n];
  }
  cp_probe_sample_free(&ps);
  return cp_model_check_ids(c->model, ids, len, "calibrate probe prompt");
}

/* Mean statistics in scope over the samples at one length under one rule: all[stat] over
 * every module and head in scope, layer[stat][l] per layer (stat 0 pmax, 1 entropy). */
typedef struct {
  double all[2];
  double layer[2][CP_RULE_MAX_LAYERS]; /* [n_layers] used */
} meas_t;

/* One forward pass of sample s at `len` under the engine's current rule. */
static int forward_sample(ctx_t *c, int64_t len, int s) {
  int rc = make_ids(c->ids, c, len, s);
  if (rc) return rc;
  if ((rc = cp_engine_forward(c->engine, NULL, c->ids, len, NULL, 0))) return rc;
  c->forwards++;
  return 0;
}

static int measure(meas_t *out, ctx_t *c, const cp_rule *rule, int64_t len) {
  memset(out, 0, sizeof *out);
  const int L = c->n_layers, K = c->p->samples;
  int rc = cp_engine_set_rule(c->engine, rule);
  if (rc) return rc;
  for (int s = 0; s < K; s++) {
    if ((rc = forward_sample(c, len, s))) return rc;
    cp_engine_stats st;
    cp_engine_get_stats(&st, c->engine);
    for (int w = 0; w < 2; w++) {
      out->all[w] += cp_engine_stats_mean(&st, c->kind, w) / K;
      for (int m = 0; m < st.n_modules; m++) {
        if (st.kind[m] != c->kind || st.layer[m] >= L) continue;
        const float *v = (w ? st.entropy : st.pmax) + (size_t)m * st.n_heads;
        double sum = 0;
        for (int h = 0; h < st.n_heads; h++) sum += v[h];
        out->layer[w][st.layer[m]] += sum / st.n_heads / K;
      }
    }
    if (c->p->progress) {
      char what[96];
      snprintf(what, sizeof what, "length %lld sample %d/%d", (long long)len, s + 1, K);
      c->p->progress(c->p->progress_ctx, what);
    }
  }
  return 0;
}

/* Layer-0 logit std and P_max at `len`, tau = 1, averaged over the samples. */
static int measure_layer0(double *sigma, double *pmax, ctx_t *c, int64_t len) {
  const int K = c->p->samples;
  *sigma = *pmax = 0;
  int rc = cp_engine_set_rule(c->engine, NULL);
  if (rc) return rc;
  for (int s = 0; s < K; s++) {
    if ((rc = forward_sample(c, len, s))) return rc;
    cp_engine_stats st;
    cp_engine_get_stats(&st, c->engine);
    int m0 = -1;
    for (int m = 0; m < st.n_modules; m++)
      if (st.kind[m] == c->kind && st.layer[m] == 0) m0 = m;
    if (m0 < 0 || !st.logit_std)
      return cp_error_set(CP_EUNSUPPORTED, "calibrate: the engine gave no layer-0 logit statistics");
    double ss = 0, sp = 0;
    for (int h = 0; h < st.n_heads; h++)
      ss += st.logit_std[(size_t)m0 * st.n_heads + h], sp += st.pmax[(size_t)m0 * st.n_heads + h];
    *sigma += ss / st.n_heads / K;
    *pmax += sp / st.n_heads / K;
  }
  return 0;
}

/* ---------------------------------------------------------------- alignment */

static void rule_single(cp_rule *r, double tau) {
  cp_rule_init(r);
  r->n_temperature = 1;
  r->temperature[0] = tau;
}

static void rule_layers(cp_rule *r, const double *tau, int n) {
  cp_rule_init(r);
  r->n_temperature = n;
  for (int l = 0; l < n; l++) r->temperature[l] = tau[l];
}

/* One statistic as a function of one tau: f(tau) evaluates the model with tau placed where
 * the search needs it (the single tau, or layer `layer` with the others fixed). */
typedef struct {
  ctx_t *c;
  int64_t len;
  int stat;        /* 0 pmax, 1 entropy */
  int layer;       /* -1: single tau, overall mean; else per-layer search of this layer */
  double *taus;    /* [n_layers] per-layer: current taus (layer `layer` is overwritten) */
} fn_t;

static int eval_fn(double *val, fn_t *f, double tau) {
  cp_rule r;
  if (f->layer < 0) {
    rule_single(&r, tau);
  } else {
    f->taus[f->layer] = tau;
    rule_layers(&r, f->taus, f->c->n_layers);
  }
  meas_t m;
  int rc = measure(&m, f->c, &r, f->len);
  if (rc) return rc;
  *val = f->layer < 0 ? m.all[f->stat] : m.layer[f->stat][f->layer];
  return 0;
}

/* Grid search (closest mean) then, with refine, bisection between the two grid points whose
 * means bracket the target. The mean is monotone in tau, so at most one pair brackets it.
 * grid_val (may be NULL) holds precomputed values at the grid points. */
static int align(double *tau_out, double *achieved, bool *clipped, fn_t *f, double target, const double *grid_val) {
  const cp_calib_params *p = f->c->p;
  const double *grid = f->c->grid;
  const int n_grid = f->c->n_grid;
  double *val = malloc((size_t)n_grid * sizeof *val);
  CP_CHECK_ALLOC(val, "calibrate: grid values");
  int rc = 0, best = 0;
  for (int g = 0; g < n_grid; g++) {
    if (grid_val) val[g] = grid_val[g];
    else if ((rc = eval_fn(&val[g], f, grid[g]))) goto done;
    if (fabs(val[g] - target) < fabs(val[best] - target)) best = g;
  }
  int br = -1; /* grid[br] and grid[br + 1] bracket the target */
  for (int g = 0; g + 1 < n_grid; g++)
    if ((val[g] - target) * (val[g + 1] - target) <= 0) {
      br = g;
      break;
    }
  *clipped = br < 0 && val[best] != target;
  *tau_out = grid[best];
  *achieved = val[best];
  if (p->refine && br >= 0) {
    double hi = grid[br], lo = grid[br + 1], fhi = val[br] - target, flo = val[br + 1] - target;
    while (hi - lo > p->refine_tol && fhi != 0 && flo != 0) {
      double mid = 0.5 * (hi + lo), v;
      if ((rc = eval_fn(&v, f, mid))) goto done;
      if ((v - target) * fhi > 0) hi = mid, fhi = v - target;
      else lo = mid, flo = v - target;
    }
    if (fabs(fhi) <= fabs(flo)) *tau_out = hi, *achieved = fhi + target;
    else *tau_out = lo, *achieved = flo + target;
  }
done:
  free(val);
  return rc;
}

/* ---------------------------------------------------------------- driver */

void cp_calib_table_free(cp_calib_table *t) {
  if (!t) return;
  if (t->entries)
    for (int i = 0; i < t->n_methods * t->n_lengths; i++) free(t->entries[i].layer_tau);
  free(t->entries);
  free(t->lengths);
  free(t->methods);
  free(t->sigma_ex);
  memset(t, 0, sizeof *t);
}

const cp_calib_entry *cp_calib_table_get(const cp_calib_table *t, cp_cal_method method, int64_t length) {
  for (int i = 0; i < t->n_methods * t->n_lengths; i++)
    if (t->entries[i].method == method && t->entries[i].length == length) return &t->entries[i];
  return NULL;
}

static int make_grid(double **out, int *n_out, const cp_calib_params *p) {
  int n = (int)floor((p->grid_hi - p->grid_lo) / p->grid_step + 1e-9) + 1;
  double *g = malloc((size_t)n * sizeof *g);
  CP_CHECK_ALLOC(g, "calibrate: grid");
  /* Rounded to 1e-12 so 1 - 10 * 0.05 prints as 0.5. */
  for (int i = 0; i < n; i++) g[i] = round((p->grid_hi - i * p->grid_step) * 1e12) / 1e12;
  *out = g;
  *n_out = n;
  return 0;
}

/* What one cp_calibrate call asks, checked: the training length, the scope, and which of the
 * two kinds of method (alignment, closed form) are wanted. */
typedef struct {
  int64_t ltr;
  cp_rule_model rm;
  bool want_align, want_closed;
} request_t;

static int check_request(request_t *rq, const cp_model *model, const cp_cal_method *methods, int n_methods,
                         const int64_t *lengths, int n_lengths, const cp_calib_params *params) {
  memset(rq, 0, sizeof *rq);
  int rc = cp_calib_params_check(params);
  if (rc) return rc;
  if (n_methods < 1 || n_lengths < 1) return cp_error_set(CP_EARG, "calibrate: no method or no length given");
  /* Calibrating an artifact whose metadata rule already applies would measure that rule at
   * tau = 1 and refuse every other tau in the engine: calibrate the original instead. */
  if (model->has_metadata_rule)
    return cp_error_set(CP_ERULE_MODEL, "calibrate: the model is a patched artifact (config.json 'ctxpatch.rule'); "
                                        "calibrate the original checkpoint");
  cp_model_rule_model(&rq->rm, model);
  rq->ltr = params->train_len > 0 ? params->train_len : rq->rm.train_len;
  if (rq->ltr <= 1)
    return cp_error_set(CP_EARG, "calibrate: the model's config gives no training length; pass one (--train-len)");
  for (int i = 0; i < n_lengths; i++)
    if (lengths[i] <= rq->ltr)
      return cp_error_set(CP_EARG, "calibrate: length %lld is not longer than the training length %lld",
                          (long long)lengths[i], (long long)rq->ltr);
  int n_layers = rq->rm.is_encoder_decoder ? rq->rm.n_layers_encoder : rq->rm.n_layers_decoder;
  if (n_layers < 1 || n_layers > CP_RULE_MAX_LAYERS)
    return cp_error_set(CP_EUNSUPPORTED, "calibrate: %d layers in scope", n_layers);
  for (int k = 0; k < n_methods; k++) {
    if ((unsigned)methods[k] >= CP_CAL_METHOD_COUNT) return cp_error_set(CP_EARG, "calibrate: bad method %d", methods[k]);
    rq->want_align |= methods[k] == CP_CAL_PMAX || methods[k] == CP_CAL_ENTROPY;
    rq->want_closed |= methods[k] == CP_CAL_PROP1 || methods[k] == CP_CAL_PROP2;
  }
  return 0;
}

/* The run's engine, input buffer (for the longest length) and grid. */
static int ctx_open(ctx_t *c, const request_t *rq, const cp_model *model, const int64_t *lengths, int n_lengths,
                    const cp_calib_params *params) {
  memset(c, 0, sizeof *c);
  c->model = model;
  c->p = params;
  c->kind = rq->rm.is_encoder_decoder ? CP_ATTN_ENCODER_SELF : CP_ATTN_DECODER_SELF;
  c->n_layers = rq->rm.is_encoder_decoder ? rq->rm.n_layers_encoder : rq->rm.n_layers_decoder;
  c->probe = params->inputs == CP_CAL_INPUTS_PROBE || (params->inputs == CP_CAL_INPUTS_AUTO && params->tokenizer);
  int64_t longest = rq->ltr;
  for (int i = 0; i < n_lengths; i++)
    if (lengths[i] > longest) longest = lengths[i];
  size_t ids_bytes;
  if (!cp_size_mul(&ids_bytes, (size_t)longest, sizeof *c->ids))
    return cp_error_set(CP_EOVERFLOW, "calibrate: length %lld is too large", (long long)longest);
  CP_CHECK_ALLOC(c->ids = malloc(ids_bytes), "calibrate: input ids");
  CP_CHECK_ALLOC(c->taus = malloc((size_t)c->n_layers * sizeof *c->taus), "calibrate: per-layer taus");
  int rc = make_grid(&c->grid, &c->n_grid, params);
  if (rc) return rc;
  cp_engine_params ep;
  cp_engine_params_init(&ep);
  ep.threads = params->threads;
  ep.device = params->device;
  ep.stats = true;
  ep.logit_stats = rq->want_closed;
  return cp_engine_create(&c->engine, model, NULL, &ep);
}

static void ctx_close(ctx_t *c) {
  cp_engine_free(c->engine);
  free(c->ids);
  free(c->grid);
  free(c->taus);
  memset(c, 0, sizeof *c);
}

/* The table's arrays and settings, every entry's numbers NaN until computed. */
static int table_init(cp_calib_table *out, const ctx_t *c, const request_t *rq, const cp_cal_method *methods,
                      int n_methods, const int64_t *lengths, int n_lengths) {
  const cp_calib_params *params = c->p;
  out->train_len = rq->ltr;
  out->n_lengths = n_lengths;
  out->n_methods = n_methods;
  CP_CHECK_ALLOC(out->lengths = malloc((size_t)n_lengths * sizeof *out->lengths), "calibrate: table");
  CP_CHECK_ALLOC(out->methods = malloc((size_t)n_methods * sizeof *out->methods), "calibrate: table");
  CP_CHECK_ALLOC(out->entries = calloc((size_t)n_methods * (size_t)n_lengths, sizeof *out->entries),
                 "calibrate: table");
  if (rq->want_closed)
    CP_CHECK_ALLOC(out->sigma_ex = malloc((size_t)n_lengths * sizeof *out->sigma_ex), "calibrate: table");
  memcpy(out->lengths, lengths, (size_t)n_lengths * sizeof *lengths);
  memcpy(out->methods, methods, (size_t)n_methods * sizeof *methods);
  out->per_layer = params->per_layer;
  out->refine = params->refine;
  out->grid_hi = params->grid_hi;
  out->grid_lo = params->grid_lo;
  out->grid_step = params->grid_step;
  out->samples = params->samples;
  out->inputs = c->probe ? CP_CAL_INPUTS_PROBE : CP_CAL_INPUTS_RANDOM;
  out->scope = rq->rm.is_encoder_decoder ? "encoder_self" : "self";
  out->n_layers = c->n_layers;
  out->pmax_tr0 = out->sigma_tr = NAN;
  for (int i = 0; i < n_methods * n_lengths; i++) {
    cp_calib_entry *en = &out->entries[i];
    en->method = methods[i / n_lengths];
    en->length = lengths[i % n_lengths];
    en->tau = en->target = en->at_one = en->achieved = en->other_root = NAN;
  }
  return 0;
}

/* Layer-0 statistics for the closed forms: at train_len and at every length. */
static int measure_closed(cp_calib_table *out, ctx_t *c) {
  int rc = measure_layer0(&out->sigma_tr, &out->pmax_tr0, c, out->train_len);
  for (int i = 0; rc == 0 && i < out->n_lengths; i++) {
    double pm;
    rc = measure_layer0(&out->sigma_ex[i], &pm, c, out->lengths[i]);
  }
  return rc;
}

/* log, prop1 or prop2 at length index i, from the measured layer-0 statistics. */
static void closed_entry(cp_calib_entry *en, const cp_calib_table *t, int i) {
  const int64_t ltr = t->train_len, lex = t->lengths[i];
  switch (en->method) {
  case CP_CAL_LOG:
    en->tau = cp_calib_log(ltr, lex);
    break;
  case CP_CAL_PROP1:
    cp_calib_prop1_roots(&en->tau, &en->other_root, t->pmax_tr0, t->sigma_tr, t->sigma_ex[i], ltr, lex);
    if (isnan(en->tau)) en->note = "Prop. 1's quadratic has no positive real root";
    else if (en->tau > 1 && !isnan(en->other_root))
      en->note = "Prop. 1's larger root (the paper's choice) is above 1; see other_root";
    break;
  case CP_CAL_PROP2:
    en->tau = cp_calib_prop2(t->sigma_tr, t->sigma_ex[i], ltr, lex);
    if (isnan(en->tau)) en->note = "Prop. 2 is undefined (sigma_tr^2 + 2 log(L_ex/L_tr) <= 0)";
    break;
  default:
    break;
  }
}

/* Single-tau means at every grid point at one length: gv[stat][g]. */
static int measure_grid(double *gv[2], ctx_t *c, int64_t lex) {
  for (int g = 0; g < c->n_grid; g++) {
    cp_rule r;
    rule_single(&r, c->grid[g]);
    meas_t m;
    int rc = measure(&m, c, &r, lex);
    if (rc) return rc;
    gv[0][g] = m.all[0];
    gv[1][g] = m.all[1];
  }
  return 0;
}

/* Per-layer alignment of statistic `stat` at lex to the per-layer targets tr->layer[stat]. */
static int align_layers(cp_calib_entry *en, ctx_t *c, int stat, int64_t lex, const meas_t *tr) {
  CP_CHECK_ALLOC(en->layer_tau = malloc((size_t)c->n_layers * sizeof *en->layer_tau), "calibrate: per-layer taus");
  en->n_layer_tau = c->n_layers;
  /* Bottom-up: layer l's softmaxes depend on layers < l (its input) and on tau_l, never
   * on the layers above, so each layer is aligned with the ones below fixed. */
  for (int l = 0; l < c->n_layers; l++) c->taus[l] = 1.0;
  for (int l = 0; l < c->n_layers; l++) {
    fn_t f = {c, lex, stat, l, c->taus};
    double tau_l = 1.0, ach = 0.0;
    bool clip = false;
    int rc = align(&tau_l, &ach, &clip, &f, tr->layer[stat][l], NULL);
    if (rc) return rc;
    c->taus[l] = tau_l;
    en->layer_tau[l] = tau_l;
    en->clipped |= clip;
  }
  cp_rule r;
  rule_layers(&r, c->taus, c->n_layers);
  meas_t m;
  int rc = measure(&m, c, &r, lex);
  if (rc) return rc;
  en->achieved = m.all[stat];
  return 0;
}

/* The alignment state at one length: the targets at train_len and the single-tau grid values,
 * measured once per length and shared by pmax and entropy. */
typedef struct {
  const meas_t *tr;  /* means at train_len, tau = 1 */
  double *gv[2];     /* [n_grid] each, owned */
  bool grid_done;    /* gv holds this length's values */
} align_state;

/* pmax or entropy (en->method) at length lex. */
static int align_entry(cp_calib_entry *en, ctx_t *c, align_state *as, int64_t lex) {
  int stat = en->method == CP_CAL_ENTROPY, rc = 0;
  en->target = as->tr->all[stat];
  if (c->p->per_layer) {
    rc = align_layers(en, c, stat, lex, as->tr);
  } else {
    if (!as->grid_done) {
      if ((rc = measure_grid(as->gv, c, lex))) return rc;
      as->grid_done = true;
    }
    fn_t f = {c, lex, stat, -1, NULL};
    rc = align(&en->tau, &en->achieved, &en->clipped, &f, en->target, as->gv[stat]);
  }
  if (rc == 0 && en->clipped) en->note = "the target is outside the grid's range: tau is the grid end closest to it";
  return rc;
}

/* at_one of the pmax and entropy entries at length index i: the mean with tau = 1 (the grid's
 * first point when it is 1 and the grid was measured). */
static int measure_at_one(cp_calib_table *out, ctx_t *c, const align_state *as, int i) {
  double one[2];
  if (as->grid_done && c->grid[0] == 1.0) {
    one[0] = as->gv[0][0], one[1] = as->gv[1][0];
  } else {
    meas_t m;
    int rc = measure(&m, c, NULL, out->lengths[i]);
    if (rc) return rc;
    one[0] = m.all[0], one[1] = m.all[1];
  }
  for (int k = 0; k < out->n_methods; k++)
    if (out->methods[k] == CP_CAL_PMAX || out->methods[k] == CP_CAL_ENTROPY)
      out->entries[k * out->n_lengths + i].at_one = one[out->methods[k] == CP_CAL_ENTROPY];
  return 0;
}

/* Every method at length index i. */
static int calibrate_length(cp_calib_table *out, ctx_t *c, align_state *as, bool want_align, int i) {
  as->grid_done = false;
  for (int k = 0; k < out->n_methods; k++) {
    cp_calib_entry *en = &out->entries[k * out->n_lengths + i];
    if (en->method == CP_CAL_PMAX || en->method == CP_CAL_ENTROPY) {
      int rc = align_entry(en, c, as, out->lengths[i]);
      if (rc) return rc;
    } else {
      closed_entry(en, out, i);
    }
  }
  return want_align ? measure_at_one(out, c, as, i) : 0;
}

uint64_t cp_calib_plan_work(const cp_model *model, const cp_cal_method *methods, int n_methods,
                            const int64_t *lengths, int n_lengths, const cp_calib_params *params) {
  request_t rq;
  int rc = check_request(&rq, model, methods, n_methods, lengths, n_lengths, params);
  if (rc) {
    cp_error_clear(); /* cp_calibrate reports it */
    return 0;
  }
  const cp_calib_params *p = params;
  uint64_t n_grid = (uint64_t)floor((p->grid_hi - p->grid_lo) / p->grid_step + 1e-9) + 1, bisect = 0;
  /* a bracket one grid step wide halves until narrower than the tolerance */
  for (double w = p->grid_step; p->refine && w > p->refine_tol && bisect < 64; w /= 2) bisect++;
  uint64_t n_align = 0, layers = (uint64_t)(rq.rm.is_encoder_decoder ? rq.rm.n_layers_encoder : rq.rm.n_layers_decoder);
  for (int k = 0; k < n_methods; k++) n_align += methods[k] == CP_CAL_PMAX || methods[k] == CP_CAL_ENTROPY;
  /* measures per length: the closed forms' layer-0 pass; the grid once, the bisections of each
   * method (per layer: grid and bisections per layer, then one pass), the tau = 1 pass */
  uint64_t per_len = rq.want_closed ? 1 : 0, at_train = (rq.want_closed ? 1 : 0) + (rq.want_align ? 1 : 0);
  if (rq.want_align && p->per_layer)
    per_len = cp_work_add(per_len, cp_work_add(cp_work_mul(n_align, cp_work_add(cp_work_mul(layers, n_grid + bisect), 1)), 1));
  else if (rq.want_align) per_len = cp_work_add(per_len, cp_work_add(n_grid + 1, cp_work_mul(n_align, bisect)));
  bool both = model->family == CP_FAMILY_T5;
  uint64_t work = cp_work_mul(at_train, cp_work_pass(rq.ltr, both));
  for (int i = 0; i < n_lengths; i++) work = cp_work_add(work, cp_work_mul(per_len, cp_work_pass(lengths[i], both)));
  return cp_work_mul(work, (uint64_t)p->samples);
}

int cp_calibrate(cp_calib_table *out, const cp_model *model, const cp_cal_method *methods, int n_methods,
                 const int64_t *lengths, int n_lengths, const cp_calib_params *params) {
  memset(out, 0, sizeof *out);
  cp_calib_params defaults;
  if (!params) {
    cp_calib_params_init(&defaults);
    params = &defaults;
  }
  request_t rq;
  int rc = check_request(&rq, model, methods, n_methods, lengths, n_lengths, params);
  if (rc) return rc;
  uint64_t work = cp_calib_plan_work(model, methods, n_methods, lengths, n_lengths, params);
  if ((rc = cp_work_check(work, params->work_budget, "calibrate")) < 0) return rc;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ctx_t c;
  meas_t tr;
  align_state as = {.tr = &tr};
  if ((rc = ctx_open(&c, &rq, model, lengths, n_lengths, params))) goto done;
  if ((rc = table_init(out, &c, &rq, methods, n_methods, lengths, n_lengths))) goto done;
  if (rq.want_closed && (rc = measure_closed(out, &c))) goto done;
  if (rq.want_align) {
    CP_CHECK_ALLOC_GOTO(as.gv[0] = malloc((size_t)c.n_grid * sizeof(double)), "calibrate: grid values");
    CP_CHECK_ALLOC_GOTO(as.gv[1] = malloc((size_t)c.n_grid * sizeof(double)), "calibrate: grid values");
    if ((rc = measure(&tr, &c, NULL, rq.ltr))) goto done;
  }
  for (int i = 0; rc == 0 && i < n_lengths; i++) rc = calibrate_length(out, &c, &as, rq.want_align, i);
done:
  clock_gettime(CLOCK_MONOTONIC, &t1);
  out->forwards = c.forwards;
  out->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  free(as.gv[0]);
  free(as.gv[1]);
  ctx_close(&c);
  if (rc) cp_calib_table_free(out);
  return rc;
}

int cp_calibrate_rule(cp_rule *rule, cp_calib_table *table, const cp_model *model, cp_cal_method method,
                      int64_t target_len, const cp_calib_params *params) {
  cp_calib_table t;
  int rc = cp_calibrate(&t, model, &method, 1, &target_len, 1, params);
  if (rc) return rc;
  const cp_calib_entry *en = &t.entries[0];
  cp_rule_init(rule);
  if (en->n_layer_tau > 0) {
    rule_layers(rule, en->layer_tau, en->n_layer_tau);
  } else if (isnan(en->tau)) {
    rc = cp_error_set(CP_EARG, "calibrate: method %s gives no temperature at length %lld: %s",
                      cp_cal_method_name(method), (long long)target_len, en->note ? en->note : "no answer");
  } else {
    rule_single(rule, en->tau);
  }
  if (rc == 0 && table) *table = t;
  else cp_calib_table_free(&t);
  return rc;
}
