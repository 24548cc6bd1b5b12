/* Scores to probabilities in ONNX graphs (converters/onnx_attention.h): the scale, the model's
 * positional term (RoPE is already in q and k; ALiBi and FIRE biases are added here), the mask
 * and the softmax. The identity rule only, for now: cp_onnx_attn_check_plan refuses the others
 * by key, and their subgraphs belong here, decided through the plan like the engines. */
#include "converters/onnx_attention.h"
#include "converters/onnx_t5.h"

#include <float.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"

bool cp_onnx_attn_needs_raw_keys(const cp_model *m, const cp_attn_plan *plan) {
  return m->pos == CP_POS_ROPE && plan->kind != CP_ATTN_CROSS && (plan->ceiling != INT64_MAX || plan->top_k);
}

int cp_onnx_attn_check_plan(const cp_attn_plan *p, const char *what) {
  const char *key = NULL;
  if (p->inv_tau != 1.0f) key = "temperature";
  else if (p->lambda) key = "lambda_mask";
  else if (p->ceiling != INT64_MAX) key = "distance_ceiling";
  else if (p->top_k) key = "top_k";
  else if (p->alibi_mode == CP_ALIBI_DYNAMIC || p->alibi_mode == CP_ALIBI_PROGRESSIVE || p->alibi_factor != 1.0)
    key = "alibi_scale";
  else if (p->fire_threshold > 0) key = "fire_threshold";
  if (!key) return 0;
  return cp_error_set(CP_EUNSUPPORTED, "%s: layer %d: rule key '%s' is not yet written as ONNX graph nodes "
                      "(only the identity rule is)", what, p->layer, key);
}

/* [B, 1, S, T] float qpos - kpos, made once per export. */
static const char *distance(cp_onnx_attn_ctx *c) {
  if (!c->memo->dist_f) {
    const char *d = cp_og_op2(c->g, "Sub", c->qpos, c->kpos);
    cp_onnx_attr to = cp_og_attr_i("to", 1 /* FLOAT */);
    c->memo->dist_f = cp_og_node(c->g, "Cast", &d, 1, &to, 1);
  }
  return c->memo->dist_f;
}

/* [B, 1, S, T] int64 kpos - qpos (T5's relative position r = j - i), made once per export. */
static const char *relative(cp_onnx_attn_ctx *c) {
  if (!c->memo->rel) c->memo->rel = cp_og_op2(c->g, "Sub", c->kpos, c->qpos);
  return c->memo->rel;
}

/* ALiBi: -slope_h * (i - j), [B, H, S, T] (engine: sc q.k - (slope / F) d with F = 1). */
static const char *alibi_bias(cp_onnx_attn_ctx *c) {
  const cp_model *m = c->m;
  if (!c->memo->alibi_slopes) {
    float *s = malloc((size_t)m->n_heads * sizeof *s);
    if (!s) return cp_og_fail(c->g, cp_error_set(CP_ENOMEM, "onnx attention: out of memory")), NULL;
    for (int h = 0; h < m->n_heads; h++) s[h] = (float)m->alibi_slopes[h];
    int64_t dims[3] = {m->n_heads, 1, 1};
    c->memo->alibi_slopes = cp_og_weight(c->g, "model.alibi_slopes", s, 3, dims, false);
    free(s);
  }
  return cp_og_op1(c->g, "Neg", cp_og_op2(c->g, "Mul", c->memo->alibi_slopes, distance(c)));
}

/* FIRE (docs/fire-layout.md): b_h = W2 relu(W1 x + b1) + b2 at x = psi(d) / psi(max(L, i)),
 * psi(v) = log(c v + 1), d clamped at 0 above the diagonal (those keys are masked anyway). */
static const char *fire_bias(cp_onnx_attn_ctx *c) {
  const cp_fire_mlp *f = c->fire;
  cp_og *g = c->g;
  if (c->memo->fire_key == f && c->memo->fire_bias) return c->memo->fire_bias;
  const char *cc = cp_og_f32(g, (float)f->c), *one = cp_og_f32(g, 1.0f);
  const char *d = cp_og_op2(g, "Max", distance(c), cp_og_f32(g, 0.0f));
  const char *num = cp_og_op1(g, "Log", cp_og_op2(g, "Add", cp_og_op2(g, "Mul", d, cc), one));
  cp_onnx_attr to = cp_og_attr_i("to", 1 /* FLOAT */);
  const char *qf = cp_og_node(g, "Cast", &c->qpos, 1, &to, 1);
  const char *at = cp_og_op2(g, "Max", qf, cp_og_f32(g, (float)f->L));
  const char *den = cp_og_op1(g, "Log", cp_og_op2(g, "Add", cp_og_op2(g, "Mul", at, cc), one));
  const char *x = cp_og_op2(g, "Div", num, den); /* [B, 1, S, T] */
  int64_t ax4 = 4, W = f->width, H = c->m->n_heads;
  char name[256];
  const char *pre = c->m->cfg->fire_shared ? "model" : c->prefix; /* as docs/fire-layout.md names them */
  snprintf(name, sizeof name, "%s.fire.mlp.0.weight", pre);
  const char *w1 = cp_og_weight(g, name, f->w1, 1, &W, false);
  snprintf(name, sizeof name, "%s.fire.mlp.0.bias", pre);
  const char *b1 = cp_og_weight(g, name, f->b1, 1, &W, false);
  snprintf(name, sizeof name, "%s.fire.mlp.2.weight", pre);
  const char *w2 = cp_og_weight_t(g, name, f->w2, (int)H, (int)W, false); /* [W, H] */
  snprintf(name, sizeof name, "%s.fire.mlp.2.bias", pre);
  const char *b2 = cp_og_weight(g, name, f->b2, 1, &H, false);
  const char *x5 = cp_og_op2(g, "Unsqueeze", x, cp_og_i64s(g, &ax4, 1)); /* [B, 1, S, T, 1] */
  const char *hid = cp_og_op1(g, "Relu", cp_og_op2(g, "Add", cp_og_op2(g, "Mul", x5, w1), b1));
  const char *out = cp_og_op2(g, "Add", cp_og_op2(g, "MatMul", hid, w2), b2); /* [B, 1, S, T, H] */
  int64_t perm[5] = {0, 4, 2, 3, 1};
  cp_onnx_attr pa = cp_og_attr_ints("perm", perm, 5);
  const char *tr = cp_og_node(g, "Transpose", &out, 1, &pa, 1);
  const char *bias = cp_og_op2(g, "Squeeze", tr, cp_og_i64s(g, &ax4, 1)); /* [B, H, S, T] */
  c->memo->fire_key = f, c->memo->fire_bias = bias;
  return bias;
}

const char *cp_onnx_attention_probs(cp_onnx_attn_ctx *c) {
  cp_og *g = c->g;
  int rc = cp_onnx_attn_check_plan(c->plan, "onnx export");
  if (rc) return cp_og_fail(g, rc), NULL;
  int64_t perm[4] = {0, 1, 3, 2};
  cp_onnx_attr pa = cp_og_attr_ints("perm", perm, 4);
  const char *kt = cp_og_node(g, "Transpose", &c->k, 1, &pa, 1);
  const char *s = cp_og_op2(g, "Mul", cp_og_op2(g, "MatMul", c->q, kt), cp_og_f32(g, c->m->attn_scale));
  if (c->kind != CP_ATTN_CROSS) {
    if (c->m->pos == CP_POS_ALIBI) s = cp_og_op2(g, "Add", s, alibi_bias(c));
    else if (c->m->pos == CP_POS_FIRE) s = cp_og_op2(g, "Add", s, fire_bias(c));
    else if (c->m->pos == CP_POS_T5_BUCKETS) s = cp_og_op2(g, "Add", s, cp_onnx_t5_bias(c, relative(c)));
  }
  /* Masked keys are replaced (Where), not offset, by the lowest float rather than -inf: a row
   * with every key masked (a padding row) then softmaxes to uniform weights instead of NaN, and
   * any row with a visible key gives its masked keys exp(lowest - max) = 0 exactly. */
  s = cp_og_op3(g, "Where", c->visible, s, cp_og_f32(g, -FLT_MAX));
  cp_onnx_attr ax = cp_og_attr_i("axis", -1);
  return cp_og_node(g, "Softmax", &s, 1, &ax, 1);
}
