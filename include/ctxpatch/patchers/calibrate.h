/* Floor: patchers. Temperature calibration: the T5 seed's Algorithm 1 (attention alignment), its closed forms
 * (Propositions 1 and 2) and the length-only baseline, for any model family.
 * Normative text: ../shared/spec/attention-rules.md, "Calibration"; docs/calibration.md.
 *
 * Methods (tau multiplies nothing: the engine divides the logits in scope by tau):
 *   pmax     the mean P_max over the softmaxes in scope at the long length, under tau, matches
 *            the same mean at train_len with tau = 1 (grid search, optional bisection).
 *   entropy  the same with the mean entropy.
 *   log      tau = log(L_tr) / log(L_ex).
 *   prop1    Prop. 1: A tau^2 - B tau + C = 0, larger root, with
 *            A = log L_ex + log P_tr, B = log L_tr + log P_tr + sigma_tr^2 / 2, C = sigma_ex^2 / 2,
 *            P_tr the mean P_max of layer 0 at train_len (tau = 1), sigma the layer-0 logit
 *            standard deviation (docs/calibration.md says exactly which one).
 *   prop2    Prop. 2: tau = sigma_ex / sqrt(sigma_tr^2 + 2 log(L_ex / L_tr)).
 *
 * "In scope" is the rule's default temperature scope: T5 encoder self-attention (Algorithm 1),
 * decoder-only models every self-attention layer. The statistics are the engine's (as
 * cp_attention_profile's) under the rule {"temperature": tau}; one engine serves a whole call.
 */
#ifndef CTXPATCH_CALIBRATE_H
#define CTXPATCH_CALIBRATE_H

#include <stdbool.h>
#include <stdint.h>

#include "ctxpatch/import/model.h"
#include "ctxpatch/model/rule.h"
#include "ctxpatch/engine/engine.h"
#include "ctxpatch/tokenizers/tokenizer.h"

typedef enum {
  CP_CAL_PMAX,
  CP_CAL_ENTROPY,
  CP_CAL_LOG,
  CP_CAL_PROP1,
  CP_CAL_PROP2,
  CP_CAL_METHOD_COUNT
} cp_cal_method;

/* "pmax", "entropy", "log", "prop1", "prop2". */
const char *cp_cal_method_name(cp_cal_method m);
/* Parses one of the names above; CP_EARG with a message naming `name` otherwise. */
int cp_cal_method_from_name(cp_cal_method *out, const char *name);

typedef enum {
  CP_CAL_INPUTS_AUTO,   /* probe prompts when a tokenizer is given, else random ids */
  CP_CAL_INPUTS_RANDOM, /* uniform random ids (cp_random_ids) */
  CP_CAL_INPUTS_PROBE,  /* passkey prompts (cp_probe_make); needs a tokenizer */
} cp_cal_inputs;

typedef struct {
  int64_t train_len;       /* L_tr; 0: the model's (cp_rule_model.train_len), error if unknown */
  bool per_layer;          /* pmax/entropy: one tau per layer in scope (see docs/calibration.md) */
  double grid_hi;          /* default 1.0 */
  double grid_lo;          /* default 0.5 */
  double grid_step;        /* default 0.05 (> 0) */
  bool refine;             /* bisect between the bracketing grid points (default false) */
  double refine_tol;       /* bisection stops when the bracket is narrower (default 1e-4) */
  int samples;             /* sequences per length (default 4) */
  cp_cal_inputs inputs;    /* default AUTO */
  const cp_tokenizer *tokenizer; /* borrowed; NULL: random ids */
  uint64_t seed;           /* inputs (default 0) */
  int threads;             /* engine threads; 0 = every CPU */
  cp_device device;        /* where the engine runs (default CP_DEVICE_CPU) */
  /* Called after each forward pass (may be NULL). */
  void (*progress)(void *ctx, const char *what);
  void *progress_ctx;
  /* The most work the call may plan, in attention pairs (cp_work_pass in verify.h); 0: the
   * default budget. A plan over it is refused before any forward pass (CP_EVERIFY_WORK). */
  uint64_t work_budget;
} cp_calib_params;

void cp_calib_params_init(cp_calib_params *p);

/* Checks a params struct (grid with hi >= lo > 0, step > 0, samples >= 1, tolerance > 0):
 * CP_EARG with a one-line message otherwise. */
int cp_calib_params_check(const cp_calib_params *p);

typedef struct {
  cp_cal_method method;
  int64_t length;          /* L_ex */
  double tau;              /* the single tau; NaN when the method has no answer (prop1 without
                              a positive real root) and for per-layer entries (see layer_tau) */
  int n_layer_tau;         /* per-layer calibration: layers in scope; else 0 */
  double *layer_tau;       /* [n_layer_tau], owned; NULL when n_layer_tau == 0 */
  /* pmax / entropy: the measured means (NaN for the other methods) */
  double target;           /* mean at train_len, tau = 1 */
  double at_one;           /* mean at this length, tau = 1 */
  double achieved;         /* mean at this length under the found tau (or per-layer taus) */
  bool clipped;            /* the target is not bracketed by the grid: tau is a grid end */
  double other_root;       /* prop1: the quadratic's smaller root (NaN when none is positive) */
  const char *note;        /* static string explaining a NaN tau or a clip; NULL otherwise */
} cp_calib_entry;

typedef struct {
  int64_t train_len;
  int n_lengths, n_methods;
  int64_t *lengths;        /* [n_lengths], owned */
  cp_cal_method *methods;  /* [n_methods], owned */
  cp_calib_entry *entries; /* [n_methods * n_lengths], method-major, owned */
  bool per_layer, refine;
  double grid_hi, grid_lo, grid_step;
  int samples;
  cp_cal_inputs inputs;    /* what was used: RANDOM or PROBE */
  const char *scope;       /* "encoder_self" (T5) or "self" (decoder-only) */
  int n_layers;            /* layers in scope */
  /* layer-0 statistics for the closed forms (NaN when no closed form was asked) */
  double pmax_tr0;         /* layer-0 mean P_max at train_len, tau = 1 */
  double sigma_tr;         /* layer-0 logit std at train_len */
  double *sigma_ex;        /* [n_lengths], owned; NULL when no closed form was asked */
  int64_t forwards;        /* forward passes run */
  double seconds;
} cp_calib_table;

/* The work cp_calibrate plans, at most: its forward passes (samples at the training length and,
 * per length, every grid point, every bisection step the tolerance allows, every layer in scope
 * with per_layer), each counted with cp_work_pass. 0 when the request is refused anyway. */
uint64_t cp_calib_plan_work(const cp_model *model, const cp_cal_method *methods, int n_methods,
                            const int64_t *lengths, int n_lengths, const cp_calib_params *params);

/* Runs the calibration of every method at every length (each length > train_len).
 * out is filled; free with cp_calib_table_free. */
int cp_calibrate(cp_calib_table *out, const cp_model *model, const cp_cal_method *methods, int n_methods,
                 const int64_t *lengths, int n_lengths, const cp_calib_params *params);
void cp_calib_table_free(cp_calib_table *t);

/* The entry for (method, length) or NULL. Borrowed from the table. */
const cp_calib_entry *cp_calib_table_get(const cp_calib_table *t, cp_cal_method method, int64_t length);

/* Convenience for `ctxpatch patch --method temperature` without a given tau: one method at one
 * target length. Fills *rule (cp_rule_init, then one temperature or the per-layer list, default
 * scope) and, unless NULL, *table (caller frees). A NaN tau is CP_EARG with the entry's note. */
int cp_calibrate_rule(cp_rule *rule, cp_calib_table *table, const cp_model *model, cp_cal_method method,
                      int64_t target_len, const cp_calib_params *params);

/* A temperature_schedule rule (default scope) from one method's taus in table `t`: a point per
 * table length in increasing order, each the single tau or the per-layer list, and, when
 * train_point, the point [t->train_len, 1] (every layer 1) in front, so that inputs up to the
 * training length keep tau 1 (docs/calibration.md). A NaN tau, a method not in the table or a
 * length given twice is CP_EARG. */
int cp_calib_schedule_rule(cp_rule *rule, const cp_calib_table *t, cp_cal_method method, bool train_point);

/* The JSON form of a table is cp_calib_table_to_json in patchers/calibrate_json.h (private, so
 * that this header carries no cJSON type). */

/* Closed forms on given statistics (pure functions; NaN without a positive real root). */
double cp_calib_prop1(double pmax_tr, double sigma_tr, double sigma_ex, int64_t l_tr, int64_t l_ex);
/* Both roots of Prop. 1's quadratic, larger first (NaN where not a positive real root). */
void cp_calib_prop1_roots(double *larger, double *smaller, double pmax_tr, double sigma_tr, double sigma_ex,
                          int64_t l_tr, int64_t l_ex);
double cp_calib_prop2(double sigma_tr, double sigma_ex, int64_t l_tr, int64_t l_ex);
double cp_calib_log(int64_t l_tr, int64_t l_ex);

#endif
