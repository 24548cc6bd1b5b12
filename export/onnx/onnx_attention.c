/* Scores to probabilities in ONNX graphs (export/onnx/onnx_attention.h): the scale, the model's
 * positional term (RoPE is in q and k; ALiBi, FIRE and the exporter's own term are added here)
 * and every rule of the plan as opset-17 nodes, computing the logits the engines compute
 * (engine/attn_call.c for the tables, engine/attention_cpu.c row_logits and topk_row). */
#include "export/onnx/onnx_attention.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/model/families.h"
#include "ctxpatch/model/onnx_names.h"

bool cp_onnx_attn_needs_raw_keys(const cp_model *m, const cp_attn_plan *plan) {
  return m->pos == CP_POS_ROPE && plan->kind != CP_ATTN_CROSS && (plan->ceiling != INT64_MAX || plan->top_k);
}

int cp_onnx_attn_check_plan(const cp_model *m, const cp_attn_plan *p, const char *what) {
  /* The engine scores far RoPE pairs with R(D) q against k (decision 6) in causal calls only. */
  if (m->pos == CP_POS_ROPE && !p->causal && p->kind != CP_ATTN_CROSS && p->ceiling != INT64_MAX)
    return cp_error_set(CP_EONNX_EXPORT, "%s: layer %d: rule key 'distance_ceiling' on a bidirectional RoPE "
                        "attention has no graph form (nor an engine kernel)", what, p->layer);
  return 0;
}

/* ---------------------------------------------------------------- small pieces */

static const int64_t PERM_LAST2[4] = {0, 1, 3, 2}; /* [B, H, T, dh] -> [B, H, dh, T] */

static const char *f64(cp_og *g, double v) { return cp_og_f64s(g, &v, 1); }

/* The memo entry of (tag, obj) for this call's positions (positional) or for any call. */
static const char *memo_find(const cp_onnx_attn_ctx *c, const char *tag, const void *obj, bool positional) {
  const cp_onnx_attn_memo *mm = c->memo;
  const void *q = positional ? c->qpos : NULL, *k = positional ? c->kpos : NULL;
  for (int a = 0; a < mm->n; a++)
    if (mm->e[a].obj == obj && mm->e[a].qpos == q && mm->e[a].kpos == k && !strcmp(mm->e[a].tag, tag))
      return mm->e[a].val;
  return NULL;
}

static const char *memo_keep(cp_onnx_attn_ctx *c, const char *tag, const void *obj, bool positional,
                             const char *val) {
  cp_onnx_attn_memo *mm = c->memo;
  if (val && mm->n < CP_ONNX_MEMO_MAX)
    mm->e[mm->n++] = (cp_onnx_memo_entry){tag, obj, positional ? c->qpos : NULL, positional ? c->kpos : NULL, val};
  return val;
}

/* [B, 1, S, T] int64 qpos - kpos, unclamped (visibility tests). */
static const char *raw_distance(cp_onnx_attn_ctx *c) {
  const char *d = memo_find(c, "dist.raw", NULL, true);
  return d ? d : memo_keep(c, "dist.raw", NULL, true, cp_og_op2(c->g, "Sub", c->qpos, c->kpos));
}

const char *cp_onnx_attn_distance(cp_onnx_attn_ctx *c) {
  const int64_t D = c->plan->ceiling;
  if (D == INT64_MAX) return raw_distance(c);
  const char *d = memo_find(c, "dist.clamped", NULL, true);
  if (d) return d;
  d = cp_og_op2(c->g, "Max", raw_distance(c), cp_og_i64(c->g, -D));
  return memo_keep(c, "dist.clamped", NULL, true, cp_og_op2(c->g, "Min", d, cp_og_i64(c->g, D)));
}

/* float d' [B, 1, S, T]. */
static const char *distance_f(cp_onnx_attn_ctx *c) {
  const char *d = memo_find(c, "dist.f", NULL, true);
  return d ? d : memo_keep(c, "dist.f", NULL, true, cp_og_cast(c->g, cp_onnx_attn_distance(c), CP_OG_FLOAT));
}

/* ---------------------------------------------------------------- RoPE */

void cp_onnx_rope_tables(cp_og *g, const cp_model *m, int layer, const char *pos, bool relative, const char **cos,
                         const char **sin) {
  const int rot = m->rope_dims, half = rot / 2;
  double inv[1024], div;
  cp_rope_table scratch; /* unused: cp_onnx_export_rule refuses tables by call length */
  const cp_rope_table *tab = cp_model_rope_at(m, layer, 0, &scratch, &div);
  *cos = *sin = NULL;
  if (rot > 1024) {
    cp_og_fail(g, cp_error_set(CP_EONNX_EXPORT, "onnx export: rope_dims %d is over 1024", rot));
    return;
  }
  for (int a = 0; a < half; a++) inv[a] = inv[a + half] = tab->inv[a] / div;
  const char *ang = cp_og_op2(g, "Mul", cp_og_cast(g, pos, CP_OG_DOUBLE), cp_og_f64s(g, inv, rot)); /* [..., rot] */
  const char *c = cp_og_op1(g, "Cos", ang), *s = cp_og_op1(g, "Sin", ang);
  if (tab->mscale != 1.0) { /* yarn's attention factor, as the engine's rope_rotate (squared: relative) */
    const double f = relative ? tab->mscale * tab->mscale : tab->mscale;
    const char *ms = cp_og_f64s(g, &f, 1);
    c = cp_og_op2(g, "Mul", c, ms);
    s = cp_og_op2(g, "Mul", s, ms);
  }
  *cos = cp_og_cast(g, c, CP_OG_FLOAT);
  *sin = cp_og_cast(g, s, CP_OG_FLOAT);
}

/* x[..., lo:hi] on the last axis (axis 3 of [B, h, n, dh]). */
static const char *slice_last(cp_og *g, const char *x, int64_t lo, int64_t hi) {
  int64_t ax = 3;
  const char *in[] = {x, cp_og_i64s(g, &lo, 1), cp_og_i64s(g, &hi, 1), cp_og_i64s(g, &ax, 1)};
  return cp_og_node(g, "Slice", in, 4, NULL, 0);
}

const char *cp_onnx_rope(cp_og *g, const cp_model *m, const char *x, const char *cos, const char *sin) {
  const int rot = m->rope_dims, half = rot / 2;
  const char *xr = rot == m->d_head ? x : slice_last(g, x, 0, rot);
  const char *x1 = slice_last(g, xr, 0, half), *x2 = slice_last(g, xr, half, rot);
  const char *rh = cp_og_concat(g, cp_og_op1(g, "Neg", x2), x1, 3);
  const char *y = cp_og_op2(g, "Add", cp_og_op2(g, "Mul", xr, cos), cp_og_op2(g, "Mul", rh, sin));
  return rot == m->d_head ? y : cp_og_concat(g, y, slice_last(g, x, rot, m->d_head), 3);
}

/* c (R(pos) q_raw) . k_raw [B, H, S, T]: q rotated to one fixed position against the unrotated
 * keys (engine: q_far / q_topk with k_raw). */
static const char *rope_fixed_scores(cp_onnx_attn_ctx *c, int64_t pos) {
  cp_og *g = c->g;
  const char *cs, *sn;
  cp_onnx_rope_tables(g, c->m, c->layer, cp_og_i64s(g, &pos, 1), true, &cs, &sn);
  const char *qf = cp_onnx_rope(g, c->m, c->q_raw, cs, sn);
  return cp_og_op2(g, "Mul", cp_og_op2(g, "MatMul", qf, cp_og_transpose(g, c->k_raw, PERM_LAST2, 4)), cp_og_f32(g, cp_model_attn_scale(c->m, c->layer)));
}

/* ---------------------------------------------------------------- ALiBi */

const char *cp_onnx_alibi_divisor(const cp_onnx_emit *e, const cp_attn_plan *p, const char *n_keys, const char *qpos) {
  assert(p->alibi_mode == CP_ALIBI_DYNAMIC || p->alibi_mode == CP_ALIBI_PROGRESSIVE);
  /* the length: T keys (dynamic) or i + 1 for each row (progressive) */
  const char *len;
  if (p->alibi_mode == CP_ALIBI_DYNAMIC) {
    len = e->cast(e->user, n_keys, CP_OG_DOUBLE);
  } else {
    const char *in[] = {e->cast(e->user, qpos, CP_OG_DOUBLE), e->f64(e->user, 1.0)};
    len = e->op(e->user, "Add", in, 2);
  }
  const char *div[] = {len, e->f64(e->user, (double)p->train_len)};
  const char *max[] = {e->op(e->user, "Div", div, 2), e->f64(e->user, 1.0)};
  return e->op(e->user, "Max", max, 2);
}

/* cp_onnx_emit over the exporter's builder. */
static const char *og_op(void *g, const char *op, const char *const *in, int n) { return cp_og_node(g, op, in, n, NULL, 0); }
static const char *og_cast(void *g, const char *x, int to) { return cp_og_cast(g, x, to); }
static const char *og_f64(void *g, double v) { return f64(g, v); }

/* Scaled slopes m_h / F as float, [H, 1, 1] (static), or per pass (dynamic: F = max(1,
 * T / train_len)), or [B, H, S, 1] per row (progressive: F_i = max(1, (i + 1) / train_len)),
 * computed in double as cp_plan_alibi_divisor and the engine's slope table. */
static const char *alibi_slopes(cp_onnx_attn_ctx *c) {
  const cp_attn_plan *p = c->plan;
  cp_og *g = c->g;
  const char *v = memo_find(c, "alibi.slopes", NULL, true);
  if (v) return v;
  const int H = c->m->n_heads;
  double *s = malloc((size_t)H * sizeof *s);
  if (!s) return cp_og_fail(g, cp_nomem("onnx attention")), NULL;
  const bool fixed = p->alibi_mode != CP_ALIBI_DYNAMIC && p->alibi_mode != CP_ALIBI_PROGRESSIVE;
  for (int h = 0; h < H; h++) s[h] = c->m->alibi_slopes[h] / (fixed ? cp_plan_alibi_divisor(p, 0, 0) : 1.0);
  int64_t shape[3] = {H, 1, 1};
  v = cp_og_op2(g, "Reshape", cp_og_f64s(g, s, H), cp_og_i64s(g, shape, 3));
  free(s);
  if (!fixed) {
    cp_onnx_emit e = {g, og_op, og_cast, og_f64};
    v = cp_og_op2(g, "Div", v, cp_onnx_alibi_divisor(&e, p, c->n_keys, c->qpos));
  }
  return memo_keep(c, "alibi.slopes", NULL, true, cp_og_cast(g, v, CP_OG_FLOAT));
}

/* -(m_h / F) * dist (engine: sc q.k - sl * d'). */
static const char *alibi_bias(cp_onnx_attn_ctx *c, const char *dist_f) {
  return cp_og_op1(c->g, "Neg", cp_og_op2(c->g, "Mul", alibi_slopes(c), dist_f));
}

/* ---------------------------------------------------------------- FIRE */

/* The tensors of this layer's MLP, stored once per MLP under the checkpoint's names
 * (docs/fire-layout.md): w[0..1] the first layer, w[2..3] the W x W middle layer (two hidden
 * layers; else NULL), w[4..5] the output layer. Matrices are stored transposed for MatMul. */
static void fire_weights(cp_onnx_attn_ctx *c, const char *w[6]) {
  static const char *const tag[6] = {"fire.w1", "fire.b1", "fire.wm", "fire.bm", "fire.w2", "fire.b2"};
  const cp_fire_mlp *f = c->fire;
  const bool two = f->layers == 2;
  const char *suffix[6] = {"." CP_FIRE_IN ".weight", "." CP_FIRE_IN ".bias", "." CP_FIRE_MID ".weight",
                           "." CP_FIRE_MID ".bias", cp_fire_out_part(f->layers, false),
                           cp_fire_out_part(f->layers, true)};
  int64_t W = f->width, H = c->m->n_heads;
  for (int a = 0; a < 6; a++) {
    w[a] = NULL;
    if ((a == 2 || a == 3) && !two) continue;
    if ((w[a] = memo_find(c, tag[a], f, false))) continue;
    char name[CP_TENSOR_NAME_MAX];
    cp_onnx_name(name, c->m->family, CP_ROLE_FIRE, CP_STACK_DECODER,
                 c->m->cfg->fire_shared ? CP_ONNX_NO_LAYER : c->layer, suffix[a]);
    const char *v = a == 0   ? cp_og_weight(c->g, name, f->w1, 1, &W, false)
                    : a == 1 ? cp_og_weight(c->g, name, f->b1, 1, &W, false)
                    : a == 2 ? cp_og_weight_t(c->g, name, f->wm, (int)W, (int)W, false) /* [W, W] transposed */
                    : a == 3 ? cp_og_weight(c->g, name, f->bm, 1, &W, false)
                    : a == 4 ? cp_og_weight_t(c->g, name, f->w2, (int)H, (int)W, false) /* [W, H] */
                             : cp_og_weight(c->g, name, f->b2, 1, &H, false);
    w[a] = memo_keep(c, tag[a], f, false, v);
  }
}

/* b_h = W2 relu(W1 x + b1) + b2, or W2 relu(Wm relu(W1 x + b1) + bm) + b2, of x [B, 1, S, n]
 * (docs/fire-layout.md): [B, H, S, n]. */
static const char *fire_mlp(cp_onnx_attn_ctx *c, const char *x) {
  cp_og *g = c->g;
  const char *w[6];
  fire_weights(c, w);
  int64_t ax4 = 4;
  const char *x5 = cp_og_unsqueeze(g, x, &ax4, 1); /* [B, 1, S, n, 1] */
  const char *hid = cp_og_op1(g, "Relu", cp_og_op2(g, "Add", cp_og_op2(g, "Mul", x5, w[0]), w[1]));
  if (w[2]) hid = cp_og_op1(g, "Relu", cp_og_op2(g, "Add", cp_og_op2(g, "MatMul", hid, w[2]), w[3])); /* [.., W] */
  const char *out = cp_og_op2(g, "Add", cp_og_op2(g, "MatMul", hid, w[4]), w[5]); /* [B, 1, S, n, H] */
  static const int64_t perm[5] = {0, 4, 2, 3, 1};
  return cp_og_op2(g, "Squeeze", cp_og_transpose(g, out, perm, 5), cp_og_i64s(g, &ax4, 1));
}

/* FIRE input x = psi(d) / psi(max(L, i)), psi(v) = log(c v + 1), L the rule's fire_threshold or
 * the model's (cp_fire_input; d clamped at 0 above the diagonal, whose keys are masked). A zero
 * normaliser gives 0 as cp_fire_input does (the numerator is then 0 too: d <= i). */
static const char *fire_input(cp_onnx_attn_ctx *c, const char *dist_f) {
  cp_og *g = c->g;
  const cp_fire_mlp *f = c->fire;
  const double L = c->plan->fire_threshold > 0 ? c->plan->fire_threshold : f->L;
  const char *cc = cp_og_f32(g, (float)f->c), *one = cp_og_f32(g, 1.0f);
  const char *d = cp_og_op2(g, "Max", dist_f, cp_og_f32(g, 0.0f));
  const char *num = cp_og_op1(g, "Log", cp_og_op2(g, "Add", cp_og_op2(g, "Mul", d, cc), one));
  const char *den = memo_find(c, "fire.den", f, true);
  if (!den) {
    const char *at = cp_og_op2(g, "Max", cp_og_cast(g, c->qpos, CP_OG_FLOAT), cp_og_f32(g, (float)L));
    den = cp_og_op1(g, "Log", cp_og_op2(g, "Add", cp_og_op2(g, "Mul", at, cc), one));
    den = memo_keep(c, "fire.den", f, true, cp_og_op2(g, "Max", den, cp_og_f32(g, FLT_MIN)));
  }
  return cp_og_op2(g, "Div", num, den);
}

/* ---------------------------------------------------------------- positional term */

/* The call's positional term at int64 distance `dist` (float dist_f): [B, H, S, T] for d', or
 * [B, H, S, 1] for the top-k distance; NULL when there is none (RoPE, cross-attention). */
static const char *positional(cp_onnx_attn_ctx *c, const char *dist, const char *dist_f) {
  if (c->kind == CP_ATTN_CROSS) return NULL;
  if (c->pos_bias) return c->pos_bias(c->pos_user, c, dist);
  if (c->m->pos == CP_POS_ALIBI) return alibi_bias(c, dist_f);
  if (c->m->pos == CP_POS_FIRE) return fire_mlp(c, fire_input(c, dist_f));
  return NULL;
}

/* The term at d' for the logits, the same for every layer that shares its inputs. */
static const char *positional_full(cp_onnx_attn_ctx *c) {
  const void *obj = c->pos_bias ? c->pos_user : (const void *)c->fire;
  const char *b = memo_find(c, "pos.full", obj, true);
  if (b || c->kind == CP_ATTN_CROSS) return b;
  const char *dist = cp_onnx_attn_distance(c);
  const char *dist_f = c->pos_bias ? NULL : distance_f(c);
  return memo_keep(c, "pos.full", obj, true, positional(c, dist, dist_f));
}

/* ---------------------------------------------------------------- temperature */

/* The schedule's clamped log-length segments [..., n-1] in double:
 * clamp(log T - log L_k, 0, log L_{k+1} - log L_k), T = qpos + 1 (causal rows) or the key count
 * (cp_plan_tau_length), T < 1 counted as 1 as cp_plan_tau_at does. */
static const char *schedule_segments(cp_onnx_attn_ctx *c) {
  const cp_tau_schedule *s = &c->plan->sched;
  cp_og *g = c->g;
  const char *tag = c->plan->causal ? "sched.rows" : "sched.keys";
  const char *v = memo_find(c, tag, NULL, true);
  if (v) return v;
  const int n = s->n - 1;
  double lo[CP_RULE_MAX_SCHEDULE_POINTS], w[CP_RULE_MAX_SCHEDULE_POINTS];
  for (int k = 0; k < n; k++) lo[k] = s->log_len[k], w[k] = s->log_len[k + 1] - s->log_len[k];
  const char *T = c->plan->causal ? cp_og_op2(g, "Add", cp_og_cast(g, c->qpos, CP_OG_DOUBLE), f64(g, 1.0))
                                  : cp_og_cast(g, c->n_keys, CP_OG_DOUBLE);
  const char *lt = cp_og_op1(g, "Log", cp_og_op2(g, "Max", T, f64(g, 1.0)));
  int64_t ax = -1;
  const char *x = cp_og_op2(g, "Sub", cp_og_unsqueeze(g, lt, &ax, 1), cp_og_f64s(g, lo, n));
  x = cp_og_op2(g, "Min", cp_og_op2(g, "Max", x, f64(g, 0.0)), cp_og_f64s(g, w, n));
  return memo_keep(c, tag, NULL, true, x);
}

/* 1 / tau of the call's rows as a float multiplier: a constant (one tau or this layer's), the
 * schedule's (float)(1 / tau(T)) per row ([B, 1, S, 1] causal; a scalar-like [1] for
 * bidirectional and cross rows), or NULL for tau = 1 (engine: cp_plan_row_inv_tau). */
static const char *inv_tau(cp_onnx_attn_ctx *c) {
  const cp_tau_schedule *s = &c->plan->sched;
  cp_og *g = c->g;
  if (s->n == 0) return c->plan->inv_tau == 1.0f ? NULL : cp_og_f32(g, c->plan->inv_tau);
  if (s->n == 1) return cp_og_f32(g, (float)(1.0 / s->t1));
  const char *seg = cp_og_op2(g, "Mul", schedule_segments(c), cp_og_f64s(g, s->slope, s->n - 1));
  int64_t ax = -1;
  cp_onnx_attr kd = cp_og_attr_i("keepdims", 0);
  const char *in[] = {seg, cp_og_i64s(g, &ax, 1)};
  const char *tau = cp_og_op2(g, "Add", cp_og_node(g, "ReduceSum", in, 2, &kd, 1), f64(g, s->t1));
  return cp_og_cast(g, cp_og_op2(g, "Div", f64(g, 1.0), tau), CP_OG_FLOAT);
}

static const char *times(cp_og *g, const char *x, const char *by) { return by ? cp_og_op2(g, "Mul", x, by) : x; }

/* Gemma 2's soft-cap of the logits after their temperature, cap tanh(x / cap) (decision 17; engine:
 * softcap_span), on self-attention only; x itself where the model has none. */
static const char *capped(cp_onnx_attn_ctx *c, const char *x) {
  float cap = c->kind == CP_ATTN_CROSS ? 0.0f : c->m->attn_softcap;
  if (cap <= 0) return x;
  cp_og *g = c->g;
  return cp_og_op2(g, "Mul", cp_og_op1(g, "Tanh", cp_og_op2(g, "Div", x, cp_og_f32(g, cap))), cp_og_f32(g, cap));
}

/* ---------------------------------------------------------------- visibility */

/* [B, 1, S, T] bool: the caller's visibility, within the layer's sliding window i - j < window
 * when it has one, and with the Lambda mask j < n_global or i - j < n_local (cp_plan_visible).
 * The model has one window, so "sliding or not" is all the memo tags need to tell apart. */
static const char *in_window(cp_onnx_attn_ctx *c, const char *v) {
  cp_og *g = c->g;
  return c->plan->window > 0
             ? cp_og_op2(g, "And", v, cp_og_op2(g, "Less", raw_distance(c), cp_og_i64(g, c->plan->window)))
             : v;
}

static const char *visible(cp_onnx_attn_ctx *c) {
  const cp_attn_plan *p = c->plan;
  if (!p->lambda && p->window <= 0) return c->visible;
  const char *tag = p->lambda ? (p->window > 0 ? "lambda.visible.w" : "lambda.visible") : "visible.w";
  const char *v = memo_find(c, tag, c->visible, true);
  if (v) return v;
  cp_og *g = c->g;
  v = c->visible;
  if (p->lambda) {
    const char *glob = cp_og_op2(g, "Less", c->kpos, cp_og_i64(g, p->n_global));
    const char *loc = cp_og_op2(g, "Less", raw_distance(c), cp_og_i64(g, p->n_local));
    v = cp_og_op2(g, "And", v, cp_og_op2(g, "Or", glob, loc));
  }
  return memo_keep(c, tag, c->visible, true, in_window(c, v));
}

/* Top-k candidates [B, 1, S, T] bool: keys the Lambda mask alone hides (cp_plan_lambda_hidden,
 * within the caller's visibility: attention_mask zeros are never candidates) in the rows that
 * get top-k (cp_plan_topk_row): "all" every row; "decode" the last row of the pass, which is the
 * last prompt row in a one-shot pass and the new row of each cached decode step, as the engine's
 * last_prompt_row gives them (engine_run.c: forward n - 1, generate n - 1 with rows n + step - 1). */
static const char *topk_candidates(cp_onnx_attn_ctx *c) {
  const cp_attn_plan *p = c->plan;
  const char *tag = p->top_k_rows == CP_TOPK_ROWS_ALL ? (p->window > 0 ? "topk.all.w" : "topk.all")
                    : p->window > 0                  ? "topk.decode.w"
                                                     : "topk.decode";
  const char *v = memo_find(c, tag, c->visible, true);
  if (v) return v;
  cp_og *g = c->g;
  const char *glob = cp_og_op2(g, "GreaterOrEqual", c->kpos, cp_og_i64(g, p->n_global));
  const char *far = cp_og_op2(g, "GreaterOrEqual", raw_distance(c), cp_og_i64(g, p->n_local));
  v = in_window(c, cp_og_op2(g, "And", c->visible, cp_og_op2(g, "And", glob, far)));
  if (p->top_k_rows == CP_TOPK_ROWS_DECODE) {
    /* row s of the pass is the last one: s == S - 1, S from qpos [B, 1, S, 1] */
    const char *S = cp_og_op2(g, "Gather", cp_og_op1(g, "Shape", c->qpos), cp_og_i64(g, 2));
    const char *rows = cp_og_op3(g, "Range", cp_og_i64(g, 0), S, cp_og_i64(g, 1));
    int64_t shape[4] = {1, 1, -1, 1};
    const char *last = cp_og_op2(g, "Equal", rows, cp_og_op2(g, "Sub", S, cp_og_i64(g, 1)));
    v = cp_og_op2(g, "And", v, cp_og_op2(g, "Reshape", last, cp_og_i64s(g, shape, 4)));
  }
  return memo_keep(c, tag, c->visible, true, v);
}

/* The k candidates per (head, row) with the largest logits at the top-k distance, scattered
 * into a [B, H, S, T] tensor of those logits (times 1/tau) that holds `fill` elsewhere: TopK with
 * K = min(k, T) over the candidates (others at `fill`, so a row with fewer candidates picks fill
 * values, which stay masked). Ties: TopK puts the lower index first, the engine's heap keeps
 * the smaller j (attention_cpu.c worse()), so both keep the same keys. */
static const char *topk_logits(cp_onnx_attn_ctx *c, const char *qk, const char *it, const char *fill) {
  const cp_attn_plan *p = c->plan;
  cp_og *g = c->g;
  const char *s;
  if (c->m->pos == CP_POS_ROPE) {
    s = rope_fixed_scores(c, p->top_k_distance); /* engine: q_topk against k_raw, no bias */
  } else {
    /* every candidate sits at the top-k distance (engine: topk_bias) */
    const char *b = c->m->pos == CP_POS_LEARNED ? NULL /* no positional term in attention */
                    : c->pos_bias ? positional(c, cp_og_i64(g, p->top_k_distance), NULL)
                                  : positional(c, NULL, cp_og_f32(g, (float)p->top_k_distance));
    s = b ? cp_og_op2(g, "Add", qk, b) : qk;
  }
  s = cp_og_op3(g, "Where", topk_candidates(c), capped(c, times(g, s, it)), fill); /* [B, H, S, T] */
  int64_t ax0 = 0;
  const char *K = cp_og_unsqueeze(g, cp_og_op2(g, "Min", cp_og_i64(g, p->k), c->n_keys), &ax0, 1);
  const char *in[] = {s, K}, *out[2];
  cp_onnx_attr at[3] = {cp_og_attr_i("axis", -1), cp_og_attr_i("largest", 1), cp_og_attr_i("sorted", 1)};
  cp_og_node_n(g, "TopK", in, 2, out, 2, at, 3); /* values, indices [B, H, S, K] */
  const char *base = cp_og_op2(g, "Expand", fill, cp_og_op1(g, "Shape", s));
  const char *sc_in[] = {base, out[1], out[0]};
  cp_onnx_attr ax = cp_og_attr_i("axis", -1);
  return cp_og_node(g, "ScatterElements", sc_in, 3, &ax, 1);
}

/* ---------------------------------------------------------------- the softmax */

const char *cp_onnx_attention_probs(cp_onnx_attn_ctx *c) {
  cp_og *g = c->g;
  const cp_attn_plan *p = c->plan;
  int rc = cp_onnx_attn_check_plan(c->m, p, "onnx export");
  if (rc) return cp_og_fail(g, rc), NULL;
  const char *qk = cp_og_op2(g, "Mul", cp_og_op2(g, "MatMul", c->q, cp_og_transpose(g, c->k, PERM_LAST2, 4)),
                             cp_og_f32(g, cp_model_attn_scale(c->m, c->layer))); /* c q.k [B, H, S, T] */
  const char *s = qk;
  if (c->m->pos == CP_POS_ROPE && c->kind != CP_ATTN_CROSS && p->ceiling != INT64_MAX) {
    /* pairs the ceiling changes (d > D): c (R(D) q_raw) . k_raw (engine: row_logits `far`) */
    const char *far = cp_og_op2(g, "Greater", raw_distance(c), cp_og_i64(g, p->ceiling));
    s = cp_og_op3(g, "Where", far, rope_fixed_scores(c, p->ceiling), s);
  }
  const char *bias = positional_full(c);
  if (bias) s = cp_og_op2(g, "Add", s, bias);
  const char *it = inv_tau(c);
  s = capped(c, times(g, s, it));
  /* Masked keys are replaced (Where), not offset, by the lowest float rather than -inf: a row
   * with every key masked (a padding row) then softmaxes to uniform weights instead of NaN, and
   * any row with a visible key gives its masked keys exp(lowest - max) = 0 exactly. */
  const char *fill = cp_og_f32(g, -FLT_MAX);
  s = cp_og_op3(g, "Where", visible(c), s, p->top_k ? topk_logits(c, qk, it, fill) : fill);
  cp_onnx_attr ax = cp_og_attr_i("axis", -1);
  return cp_og_node(g, "Softmax", &s, 1, &ax, 1);
}
