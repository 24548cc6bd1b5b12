/* Recovery of graphs fused with onnxruntime's contrib ops (com.microsoft), by the ops' attributes
 * and inputs: the ORT transformers optimizer's GPT-2 (EmbedLayerNormalization, Attention with a
 * packed [D, 3D] qkv weight, SkipLayerNormalization, FastGelu) and onnxruntime-genai's model
 * builder Llama (SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization, q/k/v MatMuls,
 * RotaryEmbedding with cos/sin caches, MultiHeadAttention or GroupQueryAttention, SiLU-gated MLP).
 * The walk follows the residual stream from the embedding: each norm's output feeds one block
 * (attention, MLP or the head) and the block's output meets the stream again in the next fused
 * Skip*LayerNormalization. docs/onnx.md "Recovering third-party graphs". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import/onnx/onnx_walk.h"
#include "ctxpatch/base/error.h"

#define MS "com.microsoft"

typedef struct {
  cp_onnx_import *im;
  cp_ow w;
  cp_rec r;
  const char *y, *x;         /* the current norm's output and the residual stream */
  const cp_onnx_node *norm;  /* the node that made y */
  cp_rec_norm pending;       /* the norm that made y */
  const cp_onnx_tensor *cos; /* RoPE cache seen first */
  bool eps_set;
  const char *logits; /* the head's output, or the final norm's when the graph has no head */
  char lab[96];
} walk;

static bool is(const cp_onnx_node *n, const char *domain, const char *op) {
  return !strcmp(n->op_type, op) && !strcmp(n->domain, domain);
}

static const char *lab(walk *k, const cp_onnx_node *n) { return cp_ow_label(&k->w, n, k->lab); }

static int64_t attr_i(const cp_onnx_node *n, const char *name, int64_t dflt) {
  const cp_onnx_attribute *a = cp_onnx_node_attr(n, name);
  return a ? a->i : dflt;
}

static double attr_f(const cp_onnx_node *n, const char *name, double dflt) {
  const cp_onnx_attribute *a = cp_onnx_node_attr(n, name);
  return a ? a->f : dflt;
}

static const char *in(const cp_onnx_node *n, size_t k) { return k < n->n_inputs ? n->inputs[k] : ""; }
static const char *out(const cp_onnx_node *n, size_t k) { return k < n->n_outputs ? n->outputs[k] : ""; }

static int bad(walk *k, const cp_onnx_node *n, const char *why) {
  return cp_error_set(CP_EONNX_RECOVER, "%s: node '%s' (%s): %s", k->im->path, lab(k, n), n->op_type, why);
}

/* The norm's epsilon: one for the whole model. */
static int take_eps(walk *k, const cp_onnx_node *n, double dflt) {
  double e = attr_f(n, "epsilon", dflt);
  if (!k->eps_set) {
    k->r.eps = e;
    k->eps_set = true;
    return cp_oi_prov(k->im, "norm_eps", "epsilon attribute of node '%s' (%s)", lab(k, n), n->op_type);
  }
  if (fabs(e - k->r.eps) > 1e-6 * k->r.eps) return bad(k, n, "its epsilon differs from the first norm's");
  return 0;
}

/* The MatMul consumer of `v` with a 2-D weight, or NULL. */
static const cp_onnx_node *matmul_of(walk *k, const char *v, cp_rec_lin *lin);

/* The same after at most 8 single-consumer layout nodes (explained): a block's output projection. */
static const cp_onnx_node *proj_after(walk *k, const char *v, cp_rec_lin *lin) {
  for (int step = 0; step < 8; step++) {
    const cp_onnx_node *m = matmul_of(k, v, lin), *c[2];
    if (m) return m;
    if (cp_ow_consumers(&k->w, v, c, 2) != 1 || !cp_ow_layout(&k->w, c[0]) || c[0]->n_outputs != 1) return NULL;
    cp_ow_explain(&k->w, c[0]);
    v = c[0]->outputs[0];
  }
  return NULL;
}

static const cp_onnx_node *matmul_of(walk *k, const char *v, cp_rec_lin *lin) {
  const cp_onnx_node *c[16];
  size_t n = cp_ow_consumers(&k->w, v, c, 16);
  for (size_t i = 0; i < n && i < 16; i++)
    if (is(c[i], "", "MatMul") && !strcmp(in(c[i], 0), v) && (lin->w = cp_ow_weight(&k->w, c[i], 1, 2))) {
      lin->out_in = false;
      return c[i];
    }
  return NULL;
}

/* The Skip*LayerNormalization that adds block output `o` to the stream: y, x move on; `bias`
 * gets its bias input. */
static int next_norm(walk *k, const cp_onnx_node *block, const char *o, cp_rec_lin *bias) {
  cp_rec_norm *nm = &k->pending;
  const cp_onnx_node *c[16];
  size_t n = cp_ow_consumers(&k->w, o, c, 16);
  for (size_t i = 0; i < n && i < 16; i++) {
    bool skip = is(c[i], MS, "SkipLayerNormalization"), simple = is(c[i], MS, "SkipSimplifiedLayerNormalization");
    if (!skip && !simple) continue;
    const cp_onnx_node *s = c[i];
    const char *other = !strcmp(in(s, 0), o) ? in(s, 1) : in(s, 0);
    if (strcmp(other, k->x))
      return cp_ow_bad_on(&k->w, s, "adds a block's output to something other than the residual stream", k->x, other);
    nm->w = cp_ow_weight(&k->w, s, 2, 1);
    nm->b = skip ? cp_ow_weight(&k->w, s, 3, 1) : NULL;
    const char *b = in(s, skip ? 4 : 3);
    if (b[0] && !(bias->b = cp_ow_weight(&k->w, s, skip ? 4 : 3, 1))) return bad(k, s, "its bias is not an initializer");
    if (!nm->w) return bad(k, s, "its gamma is not a 1-D float initializer");
    int rc = take_eps(k, s, 1e-12);
    if (rc) return rc;
    cp_ow_explain(&k->w, s);
    k->norm = s;
    k->y = out(s, 0);
    k->x = out(s, 3);
    return 0;
  }
  char s[320];
  cp_ow_stray(&k->w, o, k->x, s);
  return cp_error_set(CP_EONNX_RECOVER, "%s: node '%s' (%s): its output '%s' meets no SkipLayerNormalization or "
                      "SkipSimplifiedLayerNormalization with the residual stream%s", k->im->path, lab(k, block),
                      block->op_type, o, s);
}

/* ---------------------------------------------------------------- RoPE */

/* theta from the cos/sin caches [P, h] (h = rotary dims / 2): the angle of position p in column
 * j is p theta^(-2j / 2h). Column 1's frequency is unwrapped over positions 1, 2, 4, ... (each
 * step predicts the next angle within pi), then every entry is checked against the theta found. */
static int rope_theta(walk *k, const cp_onnx_node *rot, const cp_onnx_tensor *cs /* [P, h] */,
                      const cp_onnx_tensor *sn /* [P, h] */) {
  int64_t P = cs->shape[0], h = cs->shape[1];
  if (sn->ndim != 2 || sn->shape[0] != P || sn->shape[1] != h || h < 2 || P < 2)
    return bad(k, rot, "cos and sin caches are not both [positions, d_head / 2] with 2+ of each");
  float *c = NULL, *s = NULL;
  int rc = cp_oi_read_f32(&c, k->im, cs);
  if (!rc) rc = cp_oi_read_f32(&s, k->im, sn);
  if (rc) goto done;
  double f = atan2(s[1 * h + 1], c[1 * h + 1]); /* position 1: angle = frequency, < pi */
  for (int64_t p = 2; p < P && p <= ((int64_t)1 << 40); p *= 2) {
    double a = atan2(s[p * h + 1], c[p * h + 1]), pred = f * (double)p;
    a += 2 * M_PI * round((pred - a) / (2 * M_PI));
    f = a / (double)p;
  }
  double theta = f > 0 && f < 1 ? pow(f, -(double)h) : NAN, worst = 0; /* f = theta^(-2/(2h)) */
  if (!(theta > 1) || !isfinite(theta)) {
    rc = bad(k, rot, "its cos/sin caches do not follow theta^(-2j/d) frequencies");
    goto done;
  }
  for (int64_t p = 0; p < P; p++)
    for (int64_t j = 0; j < h; j++) {
      double ang = (double)p * pow(theta, -(double)j / (double)h);
      worst = fmax(worst, fmax(fabs(cos(ang) - c[p * h + j]), fabs(sin(ang) - s[p * h + j])));
    }
  /* fp16 caches round to 2^-11 near 1; float32 angles of positions near P add about P 2^-24 */
  double tol = 2e-3 + (double)P * 1.2e-7;
  if (worst > tol) {
    char why[160];
    snprintf(why, sizeof why, "its cos/sin caches differ from theta %.6g's by %.3g (> %.3g): scaled or other RoPE",
             theta, worst, tol);
    rc = bad(k, rot, why);
    goto done;
  }
  k->r.rope_theta = theta;
  k->r.train_len = P;
  k->cos = cs;
  cp_oi_use(k->im, cs);
  cp_oi_use(k->im, sn);
  rc = cp_oi_prov(k->im, "rope_theta", "fitted to cos/sin caches '%s', '%s' [%lld, %lld] of node '%s': max |cache - "
                  "recomputed| %.3g", cs->name, sn->name, (long long)P, (long long)h, lab(k, rot), worst);
  if (!rc) rc = cp_oi_prov(k->im, "max_position_embeddings", "rows of cos cache '%s'", cs->name);
done:
  free(c);
  free(s);
  return rc;
}

/* A RotaryEmbedding's caches (shared by every layer, fitted once). */
static int rope_node(walk *k, const cp_onnx_node *rot, int64_t d_head) {
  if (attr_i(rot, "interleaved", 0)) return bad(k, rot, "interleaved rotation (GPT-J style) is not supported");
  int64_t rd = attr_i(rot, "rotary_embedding_dim", 0);
  if (rd && rd != d_head) return bad(k, rot, "partial rotary dims are not supported");
  const cp_onnx_tensor *cs = cp_ow_weight(&k->w, rot, 2, 2), *sn = cp_ow_weight(&k->w, rot, 3, 2);
  if (!cs || !sn) return bad(k, rot, "cos/sin caches are not 2-D float initializers");
  if (d_head % 2 || cs->shape[1] != d_head / 2) return bad(k, rot, "cos cache width is not d_head / 2");
  if (k->cos) return cs == k->cos ? 0 : bad(k, rot, "a cos cache other than the first layer's");
  return rope_theta(k, rot, cs, sn);
}

/* ---------------------------------------------------------------- attention */

/* q or k input `v` of the attention: a RotaryEmbedding of a MatMul, or the MatMul itself. */
static const cp_onnx_node *proj_of(walk *k, const char *v, const cp_onnx_node **rot, cp_rec_lin *lin) {
  const cp_onnx_node *p = cp_ow_producer(&k->w, v);
  *rot = NULL;
  if (p && is(p, MS, "RotaryEmbedding")) *rot = p, p = cp_ow_producer(&k->w, in(p, 0));
  if (!p || !is(p, "", "MatMul") || strcmp(in(p, 0), k->y) || !(lin->w = cp_ow_weight(&k->w, p, 1, 2))) return NULL;
  cp_ow_explain(&k->w, p);
  cp_ow_explain(&k->w, *rot);
  return p;
}

static bool causal_piece(const cp_ow *w, const cp_onnx_node *n, void *ctx) {
  (void)w, (void)ctx;
  return !strcmp(n->op_type, "Less") || !strcmp(n->op_type, "Greater") || !strcmp(n->op_type, "LessOrEqual") ||
         !strcmp(n->op_type, "GreaterOrEqual") || !strcmp(n->op_type, "Trilu");
}

/* MultiHeadAttention / GroupQueryAttention with q, k, v MatMuls of y (Llama). */
static int llama_attention(walk *k, const cp_onnx_node *a, cp_rec_layer *l, const char **o) {
  bool gqa = is(a, MS, "GroupQueryAttention");
  const cp_onnx_node *rq = NULL, *rk = NULL, *rv = NULL;
  if (!in(a, 1)[0] || !in(a, 2)[0]) return bad(k, a, "packed q/k/v in one input is not supported");
  if (!proj_of(k, in(a, 0), &rq, &l->q) || !proj_of(k, in(a, 1), &rk, &l->k) || !proj_of(k, in(a, 2), &rv, &l->v))
    return bad(k, a, "its query, key and value are not MatMuls (with RotaryEmbedding) of the norm's output");
  if (rv) return bad(k, a, "a rotated value");
  int64_t H = attr_i(a, "num_heads", 0), Hkv = gqa ? attr_i(a, "kv_num_heads", 0) : H;
  int64_t qout = l->q.w->shape[1];
  if (H <= 0 || Hkv <= 0 || qout % H || H % Hkv) return bad(k, a, "num_heads / kv_num_heads do not divide the widths");
  int64_t dh = qout / H;
  double scale = attr_f(a, "scale", 0);
  if (scale != 0 && fabs(scale * sqrt((double)dh) - 1) > 1e-6) return bad(k, a, "scale is not 1/sqrt(d_head)");
  if (!gqa && in(a, 3)[0]) return bad(k, a, "a qkv bias input is not supported");
  if (!gqa && attr_i(a, "unidirectional", 0) == 0) { /* causal only through attention_bias: check it is made so */
    const cp_onnx_node *b = in(a, 5)[0] ? cp_ow_producer(&k->w, in(a, 5)) : NULL;
    if (!b || (!causal_piece(&k->w, b, NULL) && !cp_ow_backward(&k->w, b, causal_piece, NULL, NULL)))
      return bad(k, a, "no causal mask: neither unidirectional nor an attention_bias built with Less/Trilu");
  }
  if (gqa) {
    if (attr_i(a, "do_rotary", 0)) {
      if (rq || rk) return bad(k, a, "rotary both inside and before the attention");
      if (attr_i(a, "rotary_interleaved", 0)) return bad(k, a, "interleaved rotation is not supported");
      const cp_onnx_tensor *cs = cp_ow_weight(&k->w, a, 7, 2), *sn = cp_ow_weight(&k->w, a, 8, 2);
      if (!cs || !sn || dh % 2 || cs->shape[1] != dh / 2)
        return bad(k, a, "cos/sin caches are not [P, d_head / 2] initializers");
      int rc = k->cos ? (cs == k->cos ? 0 : bad(k, a, "a cos cache other than the first layer's"))
                      : rope_theta(k, a, cs, sn);
      if (rc) return rc;
    } else if (!rq || !rk) {
      return bad(k, a, "no RotaryEmbedding on query and key (positions would be lost)");
    }
  }
  if (rq && rk) {
    int rc = rope_node(k, rq, dh);
    if (!rc) rc = rope_node(k, rk, dh);
    if (rc) return rc;
  } else if (!gqa || !attr_i(a, "do_rotary", 0)) {
    return bad(k, a, "no RotaryEmbedding on query and key (positions would be lost)");
  }
  if (k->r.n_layers == 1) {
    k->r.n_heads = H, k->r.n_kv_heads = Hkv, k->r.d_head = dh;
    int rc = cp_oi_prov(k->im, "num_attention_heads", "num_heads attribute of node '%s'", lab(k, a));
    if (!rc) rc = cp_oi_prov(k->im, "num_key_value_heads", gqa ? "kv_num_heads attribute of node '%s'"
                                                               : "num_heads of node '%s' (MultiHeadAttention)", lab(k, a));
    if (!rc) rc = cp_oi_prov(k->im, "head_dim", "q weight '%s' columns / num_heads", l->q.w->name);
    if (rc) return rc;
  } else if (H != k->r.n_heads || Hkv != k->r.n_kv_heads || dh != k->r.d_head) {
    return bad(k, a, "head counts differ from the first layer's");
  }
  const cp_onnx_node *om = proj_after(k, out(a, 0), &l->o);
  if (!om) return cp_ow_bad_on(&k->w, a, "its output feeds no MatMul with a weight (o_proj)", out(a, 0), NULL);
  cp_ow_explain(&k->w, a);
  cp_ow_explain(&k->w, om);
  *o = out(om, 0);
  return 0;
}

/* com.microsoft Attention (GPT-2): packed [D, 3D] weight, [3D] bias, num_heads, unidirectional. */
static int gpt2_attention(walk *k, const cp_onnx_node *a, cp_rec_layer *l, const char **o) {
  if (!(l->qkv.w = cp_ow_weight(&k->w, a, 1, 2))) return bad(k, a, "its weight is not a 2-D float initializer");
  l->qkv.b = in(a, 2)[0] ? cp_ow_weight(&k->w, a, 2, 1) : NULL;
  if (in(a, 2)[0] && !l->qkv.b) return bad(k, a, "its bias is not a 1-D float initializer");
  if (attr_i(a, "unidirectional", 0) != 1) return bad(k, a, "not unidirectional (a decoder needs causal attention)");
  if (cp_onnx_node_attr(a, "qkv_hidden_sizes")) return bad(k, a, "qkv_hidden_sizes is not supported");
  if (attr_i(a, "do_rotary", 0)) return bad(k, a, "do_rotary is not supported for GPT-2");
  if (in(a, 5)[0]) return bad(k, a, "an attention bias input (relative position bias) is not supported");
  int64_t H = attr_i(a, "num_heads", 0), D = l->qkv.w->shape[0];
  if (H <= 0 || D % H) return bad(k, a, "num_heads does not divide the hidden size");
  double scale = attr_f(a, "scale", 0);
  if (scale != 0 && fabs(scale * sqrt((double)(D / H)) - 1) > 1e-6) return bad(k, a, "scale is not 1/sqrt(d_head)");
  if (k->r.n_layers == 1) {
    k->r.n_heads = k->r.n_kv_heads = H, k->r.d_head = D / H;
    int rc = cp_oi_prov(k->im, "n_head", "num_heads attribute of node '%s' (Attention)", lab(k, a));
    if (rc) return rc;
  } else if (H != k->r.n_heads) {
    return bad(k, a, "num_heads differs from the first layer's");
  }
  const cp_onnx_node *om = proj_after(k, out(a, 0), &l->o);
  if (!om) return cp_ow_bad_on(&k->w, a, "its output feeds no MatMul with a weight (c_proj)", out(a, 0), NULL);
  cp_ow_explain(&k->w, a);
  cp_ow_explain(&k->w, om);
  *o = out(om, 0);
  return 0;
}

/* ---------------------------------------------------------------- MLP */

static int gpt2_mlp(walk *k, const cp_onnx_node *fc, cp_rec_layer *l, const char **o) {
  const cp_onnx_node *c[4];
  size_t n = cp_ow_consumers(&k->w, out(fc, 0), c, 4);
  if (n != 1) return bad(k, fc, "its output does not feed one activation");
  const cp_onnx_node *act = c[0];
  const char *name = is(act, MS, "FastGelu") ? "gelu_new" : is(act, MS, "BiasGelu") || is(act, MS, "Gelu") ? "gelu"
                                                                                                        : NULL;
  if (!name) return bad(k, act, "not FastGelu, BiasGelu or Gelu after the MLP's first MatMul");
  if (in(act, 1)[0] && !(l->up.b = cp_ow_weight(&k->w, act, 1, 1))) return bad(k, act, "its bias is not an initializer");
  if (k->r.n_layers == 1) {
    k->r.act = name;
    int rc = cp_oi_prov(k->im, "activation_function", "%s node '%s'", act->op_type, lab(k, act));
    if (rc) return rc;
  } else if (strcmp(name, k->r.act)) {
    return bad(k, act, "an activation other than the first layer's");
  }
  const cp_onnx_node *dn = matmul_of(k, out(act, 0), &l->down);
  if (!dn) return bad(k, act, "its output feeds no MatMul with a weight (mlp.c_proj)");
  cp_ow_explain(&k->w, fc);
  cp_ow_explain(&k->w, act);
  cp_ow_explain(&k->w, dn);
  *o = out(dn, 0);
  return 0;
}

/* ---------------------------------------------------------------- the walk */

/* The head: a MatMul of y with a [D, V] weight whose output is a graph output; or y is one. */
static int head(walk *k, bool *done) {
  cp_rec_lin h = {0};
  const cp_onnx_node *m = matmul_of(k, k->y, &h);
  *done = false;
  if (cp_ow_is_output(&k->w, k->y) && !m) return *done = true, k->logits = k->y, 0;
  /* the head: y's one weight MatMul, no attention after y, [D, V], its output reaching a graph output */
  const cp_onnx_node *c[16];
  size_t n = cp_ow_consumers(&k->w, k->y, c, 16), mms = 0;
  bool attn = false;
  for (size_t i = 0; i < n && i < 16; i++) {
    if (is(c[i], "", "MatMul") && cp_ow_weight(&k->w, c[i], 1, 2)) mms++;
    attn |= !strcmp(c[i]->domain, MS) && strstr(c[i]->op_type, "Attention");
  }
  if (m && h.w->shape[1] == k->r.vocab && mms == 1 && !attn &&
      (cp_ow_is_output(&k->w, out(m, 0)) || cp_ow_forward(&k->w, out(m, 0), cp_ow_makes_output, NULL, NULL))) {
    k->r.head = h;
    *done = true;
    k->logits = out(m, 0);
    cp_ow_explain(&k->w, m);
    return cp_oi_prov(k->im, "lm_head", "MatMul '%s' of the final norm with '%s' gives graph output '%s'", lab(k, m),
                      h.w->name, out(m, 0));
  }
  return 0;
}

static int layers(walk *k) {
  cp_rec *r = &k->r;
  for (;;) {
    bool done;
    int rc = head(k, &done);
    if (done) r->final_norm = k->pending;
    if (rc || done) return rc;
    if (!k->x[0]) return bad(k, k->norm, "its residual sum output is absent, yet a block follows");
    cp_rec_layer *l = cp_rec_push(r, k->im->path);
    if (!l) return cp_error_code(); /* cp_rec_push set it */
    l->attn_norm = k->pending;
    const cp_onnx_node *c[16], *att = NULL;
    size_t n = cp_ow_consumers(&k->w, k->y, c, 16);
    for (size_t i = 0; i < n && i < 16 && !att; i++)
      if (is(c[i], MS, "Attention")) att = c[i];
    const cp_onnx_node *first = NULL;
    const char *o = NULL;
    cp_rec_lin qlin = {0};
    if (!att && (first = matmul_of(k, k->y, &qlin))) {
      const cp_onnx_node *p = cp_ow_consumer(&k->w, out(first, 0), "RotaryEmbedding", 0);
      const char *v = p ? out(p, 0) : out(first, 0);
      att = cp_ow_consumer(&k->w, v, "MultiHeadAttention", -1);
      if (!att) att = cp_ow_consumer(&k->w, v, "GroupQueryAttention", -1);
    }
    if (!att) return bad(k, k->norm, "its output feeds no Attention, MultiHeadAttention or GroupQueryAttention");
    rc = r->family == CP_FAMILY_GPT2 ? gpt2_attention(k, att, l, &o) : llama_attention(k, att, l, &o);
    if (!rc) rc = next_norm(k, att, o, &l->o);
    if (rc) return rc;
    l->ffn_norm = k->pending;
    cp_rec_lin fc = {0};
    const cp_onnx_node *m = matmul_of(k, k->y, &fc);
    if (!m) return bad(k, k->norm, "its output feeds no MatMul with a weight (the MLP)");
    if (r->family == CP_FAMILY_GPT2) {
      l->up = fc;
      rc = gpt2_mlp(k, m, l, &o);
      if (!rc && r->n_layers == 1) {
        r->d_ff = fc.w->shape[1];
        rc = cp_oi_prov(k->im, "n_inner", "columns of c_fc weight '%s'", fc.w->name);
      }
    } else {
      rc = cp_rec_swiglu(k->im, &k->w, r, k->y, m, l, &o);
    }
    if (!rc) rc = next_norm(k, m, o, &l->down);
    if (rc) return rc;
  }
}

/* The first norm after the embedding: EmbedLayerNormalization (GPT-2: word + position embedding
 * then LayerNorm) or a token Gather followed by (Simplified)LayerNormalization (Llama). */
static int start(walk *k, bool *found) {
  const cp_onnx_graph *g = k->w.g;
  *found = false;
  for (size_t i = 0; i < g->n_nodes; i++) {
    const cp_onnx_node *n = &g->nodes[g->order[i]];
    if (is(n, MS, "EmbedLayerNormalization")) {
      *found = true;
      k->r.family = CP_FAMILY_GPT2;
      k->r.embed = cp_ow_weight(&k->w, n, 2, 2);
      k->r.pos_embed = cp_ow_weight(&k->w, n, 3, 2);
      if (!k->r.embed || !k->r.pos_embed) return bad(k, n, "word or position embedding is not a 2-D initializer");
      if (in(n, 1)[0] || in(n, 4)[0]) return bad(k, n, "segment embeddings (BERT) are not a decoder's");
      if (!out(n, 2)[0]) return bad(k, n, "no embedding_sum output: the residual stream is lost");
      k->pending.w = cp_ow_weight(&k->w, n, 5, 1);
      k->pending.b = cp_ow_weight(&k->w, n, 6, 1);
      if (!k->pending.w) return bad(k, n, "its gamma is not a 1-D float initializer");
      k->norm = n, k->y = out(n, 0), k->x = out(n, 2);
      cp_ow_explain(&k->w, n);
      cp_ow_explain_ids(&k->w, in(n, 0));
      int rc = take_eps(k, n, 1e-12);
      if (!rc) rc = cp_oi_prov(k->im, "n_positions", "rows of position embedding '%s' (%s '%s')",
                               k->r.pos_embed->name, n->op_type, lab(k, n));
      if (!rc) k->r.train_len = k->r.pos_embed->shape[0];
      return rc;
    }
    if (is(n, "", "Gather") && n->n_inputs == 2) {
      const cp_onnx_tensor *e = cp_ow_weight(&k->w, n, 0, 2);
      const cp_onnx_node *ln = NULL;
      if (!e) continue;
      const cp_onnx_node *c[8];
      size_t nc = cp_ow_consumers(&k->w, out(n, 0), c, 8);
      for (size_t j = 0; j < nc && j < 8 && !ln; j++)
        if (is(c[j], "", "SimplifiedLayerNormalization") || is(c[j], MS, "SimplifiedLayerNormalization")) ln = c[j];
      if (!ln) continue;
      *found = true;
      k->r.family = CP_FAMILY_LLAMA;
      k->r.embed = e;
      k->pending.w = cp_ow_weight(&k->w, ln, 1, 1);
      if (!k->pending.w) return bad(k, ln, "its gamma is not a 1-D float initializer");
      k->norm = ln, k->y = out(ln, 0), k->x = out(n, 0);
      cp_ow_explain(&k->w, n);
      cp_ow_explain(&k->w, ln);
      cp_ow_explain_ids(&k->w, in(n, 1));
      return take_eps(k, ln, 1e-5);
    }
  }
  return 0;
}

/* Whether g has one of the contrib attention ops this file reads. */
static bool has_contrib_attention(const cp_onnx_graph *g) {
  for (size_t i = 0; i < g->n_nodes; i++) {
    const cp_onnx_node *n = &g->nodes[i];
    if (is(n, MS, "Attention") || is(n, MS, "MultiHeadAttention") || is(n, MS, "GroupQueryAttention")) return true;
  }
  return false;
}

int cp_onnx_recover_contrib(cp_onnx_import *im) {
  const cp_onnx_graph *g = im->om->graph;
  if (!has_contrib_attention(g)) return 1;
  walk k = {.im = im};
  bool found;
  int rc = cp_ow_init(&k.w, im->path, g);
  k.w.unexplained = &im->unexplained;
  if (!rc) rc = start(&k, &found);
  if (!rc && !found)
    rc = cp_error_set(CP_EONNX_RECOVER, "%s: contrib attention ops but no EmbedLayerNormalization and no token "
                      "Gather followed by SimplifiedLayerNormalization: not a decoder this recovery knows (the "
                      "ORT-optimized GPT-2 and onnxruntime-genai's Llama are)", im->path);
  if (rc) goto done;
  k.r.vocab = k.r.embed->shape[0];
  k.r.d_model = k.r.embed->shape[1];
  if ((rc = cp_oi_prov(im, "vocab_size", "rows of token embedding '%s'", k.r.embed->name)) ||
      (rc = cp_oi_prov(im, "d_model", "columns of token embedding '%s'", k.r.embed->name)))
    goto done;
  if ((rc = layers(&k))) goto done;
  if (k.r.n_layers == 0) {
    rc = cp_error_set(CP_EONNX_RECOVER, "%s: no attention layer found after the embedding", im->path);
    goto done;
  }
  rc = cp_oi_prov(im, "n_layers", "%d attention blocks along the residual stream", k.r.n_layers);
  if (!rc) rc = cp_oi_prov(im, "positions", k.r.family == CP_FAMILY_GPT2 ? "learned: position embedding of "
                                                                          "EmbedLayerNormalization"
                                                                        : "RoPE: RotaryEmbedding, rotate-half");
  if (!rc) rc = cp_ow_account(&k.w, k.logits, "contrib-op");
  if (!rc) rc = cp_rec_emit(im, &k.r, "contrib");
done:
  free(k.r.layers);
  cp_ow_free(&k.w);
  return rc;
}
