/* Recovery of a plain-op (default domain) Llama by its pattern, whatever the initializers are
 * called: torch.onnx's export of Hugging Face's LlamaForCausalLM (tests/onnx/make_torch_llama.py).
 * From the token embedding Gather the residual stream is followed layer by layer: RMSNorm spelled
 * Pow 2 / ReduceMean / Add eps / Sqrt / Div(1, .) / Mul x / Mul gamma, three weight MatMuls of its
 * output told apart by where they go (q and k into the scores MatMul, v into the probabilities'
 * MatMul), the head counts from the Reshape constants, rotate-half RoPE with theta fitted to the
 * inv_freq constant its Cos / Sin come from, GQA's repeat_kv, the 1/sqrt(d_head) scale, a Trilu
 * causal mask, the o MatMul and residual Add, the second RMSNorm, the SiLU-gated MLP; then the
 * final norm and the head. docs/onnx.md "Recovering third-party graphs". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import/onnx/onnx_walk.h"
#include "ctxpatch/base/error.h"

typedef cp_rec_walk walk;

static const char *lab(walk *k, const cp_onnx_node *n) { return cp_ow_label(&k->w, n, k->lab); }
static int bad(walk *k, const cp_onnx_node *n, const char *why) { return cp_ow_bad(&k->w, n, why); }
static bool takes(const cp_onnx_node *n, const char *v) {
  return !strcmp(cp_ow_in(n, 0), v) || !strcmp(cp_ow_in(n, 1), v);
}
static const char *other(const cp_onnx_node *n, const char *v) {
  return !strcmp(cp_ow_in(n, 0), v) ? cp_ow_in(n, 1) : cp_ow_in(n, 0);
}

/* The consumer of `v` with op `op` (default domain) whose other input is a one-element constant,
 * its value in *s; NULL if none. */
static const cp_onnx_node *by_scalar(walk *k, const char *v, const char *op, double *s) {
  const cp_onnx_node *c[16];
  size_t n = cp_ow_consumers(&k->w, v, c, 16);
  for (size_t i = 0; i < n && i < 16; i++)
    if (cp_ow_is(c[i], op) && c[i]->n_inputs == 2 && takes(c[i], v) && !cp_ow_scalar(&k->w, other(c[i], v), s))
      return c[i];
  return NULL;
}

/* A float tensor `name` holds: an initializer (through Cast / Identity) or a Constant's value. */
static const cp_onnx_tensor *const_tensor(walk *k, const char *name) {
  const cp_onnx_tensor *t = cp_ow_const(&k->w, name);
  const cp_onnx_node *p = t ? NULL : cp_ow_producer(&k->w, name);
  if (p && cp_ow_is(p, "Constant"))
    for (size_t a = 0; a < p->n_attrs; a++)
      if (!strcmp(p->attrs[a].name, "value") && p->attrs[a].t) t = p->attrs[a].t;
  return t && t->has_dtype && cp_dtype_is_float(t->dtype) ? t : NULL;
}

/* ---------------------------------------------------------------- RMSNorm */

/* The RMSNorm of stream value x: *y its output, *at its first node. 1 when x feeds none. */
static int rms_norm(walk *k, const char *x, cp_rec_norm *nm, const char **y, const cp_onnx_node **at) {
  double two = 0, eps = 0, one = 0;
  const cp_onnx_node *pw = by_scalar(k, x, "Pow", &two), *m, *ad, *sq, *dv, *mu, *g;
  if (!pw) return 1;
  *at = pw;
  if (two != 2 || strcmp(cp_ow_in(pw, 0), x)) return bad(k, pw, "not Pow(x, 2) (RMSNorm)");
  const cp_onnx_attribute *ax = NULL;
  if (!(m = cp_ow_consumer(&k->w, cp_ow_out(pw, 0), "ReduceMean", 0)) || !(ax = cp_onnx_node_attr(m, "axes")) ||
      ax->n != 1 || ax->ints[0] != -1)
    return bad(k, pw, "not followed by ReduceMean over the last axis (axes [-1]) (RMSNorm)");
  if (!(ad = by_scalar(k, cp_ow_out(m, 0), "Add", &eps)) || !(sq = cp_ow_consumer(&k->w, cp_ow_out(ad, 0), "Sqrt", 0)))
    return bad(k, m, "not followed by Add(epsilon) and Sqrt (RMSNorm)");
  /* x * (1 / sqrt(.)) as torch writes rsqrt, or x / sqrt(.) */
  if ((dv = cp_ow_consumer(&k->w, cp_ow_out(sq, 0), "Div", 1)) && !cp_ow_scalar(&k->w, cp_ow_in(dv, 0), &one) &&
      one == 1) {
    if (!(mu = cp_ow_consumer(&k->w, cp_ow_out(dv, 0), "Mul", -1)) || !takes(mu, x))
      return bad(k, dv, "1/sqrt(mean(x^2) + eps) does not multiply x (RMSNorm)");
  } else if (!(mu = cp_ow_consumer(&k->w, cp_ow_out(sq, 0), "Div", 1)) || strcmp(cp_ow_in(mu, 0), x)) {
    return bad(k, sq, "not followed by x / sqrt(.) or x * (1 / sqrt(.)) (RMSNorm)");
  }
  const cp_onnx_node *c[4];
  if (cp_ow_consumers(&k->w, cp_ow_out(mu, 0), c, 4) != 1 || !cp_ow_is((g = c[0]), "Mul") ||
      !(nm->w = cp_ow_const(&k->w, other(g, cp_ow_out(mu, 0)))) || nm->w->ndim != 1)
    return bad(k, mu, "not followed by Mul with a 1-D scale initializer (RMSNorm)");
  nm->b = NULL;
  *y = cp_ow_out(g, 0);
  const cp_onnx_node *ex[] = {pw, m, ad, sq, dv, mu, g};
  for (size_t i = 0; i < sizeof ex / sizeof *ex; i++) cp_ow_explain(&k->w, ex[i]);
  if (!(eps > 0 && eps < 1)) return bad(k, ad, "its epsilon is not in (0, 1)");
  if (k->r.eps == 0) {
    k->r.eps = eps;
    return cp_oi_prov(k->im, "rms_norm_eps", "the Add constant of the first RMSNorm (node '%s')", lab(k, ad));
  }
  return fabs(eps - k->r.eps) > 1e-6 * k->r.eps ? bad(k, ad, "its epsilon differs from the first RMSNorm's") : 0;
}

/* ---------------------------------------------------------------- heads and RoPE */

static bool linear(const cp_ow *w, const cp_onnx_node *n, void *ctx) {
  (void)ctx;
  return cp_ow_is(n, "MatMul") && cp_ow_weight(w, n, 1, 2);
}

static bool attn_matmul(const cp_ow *w, const cp_onnx_node *n, void *ctx) {
  (void)ctx;
  return cp_ow_is(n, "MatMul") && !cp_ow_weight(w, n, 1, 2);
}

static bool is_softmax(const cp_ow *w, const cp_onnx_node *n, void *ctx) {
  (void)w, (void)ctx;
  return cp_ow_is(n, "Softmax");
}

static bool is_trilu(const cp_ow *w, const cp_onnx_node *n, void *ctx) {
  (void)w, (void)ctx;
  return cp_ow_is(n, "Trilu");
}

/* Searches pass neither weight MatMuls nor Shape (a shape computation leads to earlier layers). */
static bool no_pass(const cp_ow *w, const cp_onnx_node *n, void *ctx) {
  (void)ctx;
  return linear(w, n, NULL) || cp_ow_is(n, "Shape");
}

/* The weight MatMul input `slot` of n comes from (backward, not passing weights or Shape). */
static const cp_onnx_node *proj_into(walk *k, const cp_onnx_node *n, size_t slot) {
  const cp_onnx_node *p = cp_ow_producer(&k->w, cp_ow_in(n, slot));
  if (!p || linear(&k->w, p, NULL)) return p;
  return cp_ow_backward(&k->w, p, linear, no_pass, NULL);
}

/* The Reshape of projection output v into [batch, seq, heads, d_head] and the Transpose to
 * [batch, heads, seq, d_head] after it: *heads, *dh from the shape constants, *t the Transpose's
 * output. */
static int split_heads(walk *k, const cp_onnx_node *proj, int64_t *heads, int64_t *dh, const char **t) {
  const cp_onnx_node *rs = cp_ow_consumer(&k->w, cp_ow_out(proj, 0), "Reshape", 0), *cc, *tr;
  int64_t d[4];
  double s2, s3;
  const cp_onnx_tensor *shape = rs ? cp_ow_const(&k->w, cp_ow_in(rs, 1)) : NULL;
  if (shape && shape->numel == 4 && !cp_onnx_tensor_i64(d, shape) && d[2] < 1000000 && d[3] < 1000000) {
    *heads = d[2], *dh = d[3]; /* bounded: heads x d_head below is compared with a width */
  } else if (rs && (cc = cp_ow_producer(&k->w, cp_ow_in(rs, 1))) && cp_ow_is(cc, "Concat") && cc->n_inputs == 4 &&
             !cp_ow_scalar(&k->w, cp_ow_in(cc, 2), &s2) && !cp_ow_scalar(&k->w, cp_ow_in(cc, 3), &s3) && s2 >= 1 &&
             s2 < 1e6 && s3 >= 1 && s3 < 1e6) {
    *heads = (int64_t)s2, *dh = (int64_t)s3;
  } else {
    return bad(k, proj, "its output is not reshaped into [batch, seq, heads, d_head] by constant head sizes");
  }
  const cp_onnx_attribute *perm = NULL;
  if (*heads < 1 || *dh < 1 || !(tr = cp_ow_consumer(&k->w, cp_ow_out(rs, 0), "Transpose", 0)) ||
      !(perm = cp_onnx_node_attr(tr, "perm")) || perm->n != 4 || perm->ints[0] != 0 || perm->ints[1] != 2 ||
      perm->ints[2] != 1 || perm->ints[3] != 3)
    return bad(k, rs, "not a split into heads followed by Transpose perm [0, 2, 1, 3]");
  *t = cp_ow_out(tr, 0);
  cp_ow_explain(&k->w, rs);
  cp_ow_explain(&k->w, tr);
  return 0;
}

/* Whether `v` is the half of d_head: a constant dh / 2, or Div(Gather(Shape(.), -1 or 3), 2) as
 * torch writes x.shape[-1] // 2, through Cast / Unsqueeze. */
static bool half_point(walk *k, const char *v, int64_t dh) {
  for (int step = 0; step < 8; step++) {
    double s;
    if (!cp_ow_scalar(&k->w, v, &s)) return s == (double)(dh / 2);
    const cp_onnx_node *p = cp_ow_producer(&k->w, v), *g, *sh;
    if (!p) return false;
    if (cp_ow_is(p, "Cast") || cp_ow_is(p, "Unsqueeze") || cp_ow_is(p, "Identity")) {
      v = cp_ow_in(p, 0);
      continue;
    }
    return cp_ow_is(p, "Div") && !cp_ow_scalar(&k->w, cp_ow_in(p, 1), &s) && s == 2 &&
           (g = cp_ow_producer(&k->w, cp_ow_in(p, 0))) && cp_ow_is(g, "Gather") &&
           !cp_ow_scalar(&k->w, cp_ow_in(g, 1), &s) && (s == -1 || s == 3) &&
           (sh = cp_ow_producer(&k->w, cp_ow_in(g, 0))) && cp_ow_is(sh, "Shape");
  }
  return false;
}

/* Fits theta to inv_freq t (h = d_head / 2 entries: theta^(-2j / d_head)), checks every entry. */
static int fit_theta(walk *k, const cp_onnx_node *at, const cp_onnx_tensor *t, const char *name, int64_t dh) {
  int64_t h = dh / 2;
  float *f = NULL;
  int rc = cp_oi_read_f32(&f, k->im, t);
  if (rc) return rc;
  double s = 0, worst = 0;
  for (int64_t j = 1; j < h; j++) s += -log(f[j]) * (double)dh / (2.0 * (double)j); /* ln theta, each entry */
  double theta = h > 1 ? exp(s / (double)(h - 1)) : NAN;
  for (int64_t j = 0; j < h && isfinite(theta); j++)
    worst = fmax(worst, fabs(f[j] / pow(theta, -2.0 * (double)j / (double)dh) - 1));
  free(f);
  if (!(theta > 1) || !isfinite(theta) || worst > 1e-5)
    return bad(k, at, "its angles do not come from theta^(-2j/d_head) frequencies (scaled or other RoPE)");
  if (k->r.rope_theta == 0) {
    k->r.rope_theta = theta;
    return cp_oi_prov(k->im, "rope_theta",
                      "fitted to inv_freq constant '%s' [%lld entries] of node '%s': max "
                      "relative error %.3g",
                      name, (long long)h, lab(k, at), worst);
  }
  return fabs(theta / k->r.rope_theta - 1) > 1e-6 ? bad(k, at, "a rope theta other than the first layer's") : 0;
}

static bool is_cos_or_sin(const cp_ow *w, const cp_onnx_node *n, void *ctx) {
  (void)w;
  return cp_ow_is(n, ctx);
}

typedef struct {
  walk *k;
  int64_t h;
  const cp_onnx_tensor *inv;
  const char *name; /* the value holding it */
} freq_ctx;

/* Notes a float constant input of h entries (the inv_freq) of a node on the angle's path. */
static bool freq_seen(const cp_ow *w, const cp_onnx_node *n, void *ctx) {
  freq_ctx *f = ctx;
  if (cp_ow_is(n, "MatMul") && !cp_ow_weight(w, n, 1, 2)) cp_ow_explain(w, n); /* positions x inv_freq */
  for (size_t i = 0; i < n->n_inputs && !f->inv; i++) {
    const cp_onnx_tensor *t = const_tensor(f->k, n->inputs[i]);
    if (t && (int64_t)t->numel == f->h) f->inv = t, f->name = n->inputs[i];
  }
  return cp_ow_is(n, "Shape");
}

/* cos or sin value `v` (op "Cos" / "Sin") back to its node; the angle's inv_freq constant fitted. */
static int rope_source(walk *k, const char *v, const char *op, int64_t dh, const cp_onnx_node *at, const char **angle) {
  const cp_onnx_node *p = cp_ow_producer(&k->w, v);
  const cp_onnx_node *c = p && cp_ow_is(p, op) ? p
                          : p                  ? cp_ow_backward(&k->w, p, is_cos_or_sin, no_pass, (void *)op)
                                               : NULL;
  if (!c) return bad(k, at, "its rotation factor comes from no Cos / Sin node (a cos/sin cache is not supported)");
  const cp_onnx_node *cc = cp_ow_producer(&k->w, cp_ow_in(c, 0));
  const cp_onnx_attribute *ax = cc && cp_ow_is(cc, "Concat") ? cp_onnx_node_attr(cc, "axis") : NULL;
  if (!ax || cc->n_inputs != 2 || strcmp(cp_ow_in(cc, 0), cp_ow_in(cc, 1)) || ax->i != -1)
    return bad(k, c, "its angles are not Concat(f, f) on the last axis (rotate-half RoPE duplicates the halves)");
  *angle = cp_ow_in(c, 0);
  cp_ow_explain(&k->w, c);
  cp_ow_explain(&k->w, cc);
  freq_ctx f = {.k = k, .h = dh / 2};
  cp_ow_backward(&k->w, cc, freq_seen, NULL, &f);
  if (!f.inv) return bad(k, cc, "no inv_freq constant of d_head / 2 entries behind its angles");
  if (f.inv->name[0] && cp_ow_init_of(&k->w, f.inv->name)) cp_oi_use(k->im, f.inv);
  return fit_theta(k, cc, f.inv, f.name, dh);
}

/* Rotate-half RoPE on the heads `t` [batch, heads, seq, dh]: t * cos + Concat(-t2, t1) * sin.
 * *r its output. */
static int rope(walk *k, const char *t, int64_t dh, const cp_onnx_node *at, const char **r) {
  const cp_onnx_node *c[16], *neg = NULL, *lo = NULL, *cc = NULL, *m1 = NULL, *m2, *ad;
  size_t n = cp_ow_consumers(&k->w, t, c, 16);
  for (size_t i = 0; i < n && i < 16; i++) {
    const cp_onnx_node *ng = cp_ow_is(c[i], "Slice") ? cp_ow_consumer(&k->w, cp_ow_out(c[i], 0), "Neg", 0) : NULL;
    if (ng)
      neg = c[i];
    else if (cp_ow_is(c[i], "Slice"))
      lo = c[i];
    else if (cp_ow_is(c[i], "Mul"))
      m1 = c[i];
  }
  if (!neg || !lo || !m1) return bad(k, at, "its heads are not rotated as t * cos + rotate_half(t) * sin (RoPE)");
  const cp_onnx_node *ng = cp_ow_consumer(&k->w, cp_ow_out(neg, 0), "Neg", 0);
  const cp_onnx_attribute *ax =
      (cc = cp_ow_consumer(&k->w, cp_ow_out(ng, 0), "Concat", 0)) ? cp_onnx_node_attr(cc, "axis") : NULL;
  double a1 = 0, a2 = 0;
  if (!ax || ax->i != -1 || cc->n_inputs != 2 || strcmp(cp_ow_in(cc, 1), cp_ow_out(lo, 0)) ||
      cp_ow_scalar(&k->w, cp_ow_in(neg, 3), &a1) || cp_ow_scalar(&k->w, cp_ow_in(lo, 3), &a2) ||
      (a1 != -1 && a1 != 3) || (a2 != -1 && a2 != 3))
    return bad(k, ng,
               "not Concat(-t[..., h:], t[..., :h]) on the last axis (rotate-half; interleaved is not supported)");
  double z = 1;
  if (!half_point(k, cp_ow_in(neg, 1), dh) || !half_point(k, cp_ow_in(lo, 2), dh) ||
      cp_ow_scalar(&k->w, cp_ow_in(lo, 1), &z) || z != 0)
    return bad(k, neg, "the rotated halves are not split at d_head / 2 (partial rotary is not supported)");
  if (!(m2 = cp_ow_consumer(&k->w, cp_ow_out(cc, 0), "Mul", -1)) ||
      !(ad = cp_ow_consumer(&k->w, cp_ow_out(m2, 0), "Add", -1)) || !takes(ad, cp_ow_out(m1, 0)))
    return bad(k, cc, "rotate_half(t) * sin is not added to t * cos (RoPE)");
  const char *ac, *as;
  int rc = rope_source(k, other(m1, t), "Cos", dh, m1, &ac);
  if (!rc) rc = rope_source(k, other(m2, cp_ow_out(cc, 0)), "Sin", dh, m2, &as);
  if (rc) return rc;
  if (strcmp(ac, as)) return bad(k, m2, "its Sin and its Cos take different angles");
  *r = cp_ow_out(ad, 0);
  const cp_onnx_node *ex[] = {neg, lo, ng, cc, m1, m2, ad};
  for (size_t i = 0; i < sizeof ex / sizeof *ex; i++) cp_ow_explain(&k->w, ex[i]);
  return 0;
}

/* repeat_kv: Unsqueeze at axis 2, Expand, Reshape back to heads (query head h reads kv head
 * h / (H / Hkv), as the engine does); Unsqueeze at axis 1 would tile them instead. */
static int repeat_kv(walk *k, const char *kv, const cp_onnx_node *at) {
  const cp_onnx_node *u = cp_ow_consumer(&k->w, kv, "Unsqueeze", 0), *e;
  const cp_onnx_tensor *axes = u ? cp_ow_const(&k->w, cp_ow_in(u, 1)) : NULL;
  double a = -1;
  if (u && !axes) cp_ow_scalar(&k->w, cp_ow_in(u, 1), &a);
  int64_t ai = -1;
  if (axes && axes->numel == 1 && !cp_onnx_tensor_i64(&ai, axes)) a = (double)ai;
  if (!u || a != 2 || !(e = cp_ow_consumer(&k->w, cp_ow_out(u, 0), "Expand", 0)) ||
      !cp_ow_consumer(&k->w, cp_ow_out(e, 0), "Reshape", 0))
    return bad(k, at,
               "fewer kv heads than heads, but not repeated as repeat_kv does (Unsqueeze axis 2, Expand, Reshape)");
  cp_ow_explain(&k->w, u);
  cp_ow_explain(&k->w, e);
  cp_ow_explain(&k->w, cp_ow_consumer(&k->w, cp_ow_out(e, 0), "Reshape", 0));
  return 0;
}

/* ---------------------------------------------------------------- layers */

typedef struct {
  const cp_onnx_node *q, *k, *v, *sm, *pv, *softmax;
  const char *qh, *kh, *vh; /* heads after the Transpose */
  int64_t H, Hkv, dh;
} attn;

/* Which of the three projections is q, k and v: q and k feed the scores MatMul (inputs 0, 1),
 * v the probabilities' MatMul (input 1). */
static int roles(walk *k, const cp_onnx_node *p[3], attn *a, const cp_onnx_node *at) {
  const cp_onnx_node *s = NULL;
  for (int i = 0; i < 3 && !s; i++) s = cp_ow_forward(&k->w, cp_ow_out(p[i], 0), is_softmax, no_pass, NULL);
  if (!s) return bad(k, at, "its three projections reach no Softmax");
  a->softmax = s;
  if (!(a->sm = cp_ow_backward(&k->w, s, attn_matmul, no_pass, NULL)) ||
      !(a->pv = cp_ow_forward(&k->w, cp_ow_out(s, 0), attn_matmul, no_pass, NULL)))
    return bad(k, s, "not between a scores MatMul and a MatMul with the values");
  a->q = proj_into(k, a->sm, 0), a->k = proj_into(k, a->sm, 1), a->v = proj_into(k, a->pv, 1);
  bool ok = a->q && a->k && a->v && a->q != a->k && a->k != a->v && a->q != a->v;
  for (int r = 0; r < 3 && ok; r++) {
    const cp_onnx_node *x = r == 0 ? a->q : r == 1 ? a->k : a->v;
    ok = x == p[0] || x == p[1] || x == p[2];
  }
  return ok ? 0 : bad(k, s, "its scores and values do not come from the norm's three projections (q, k, v)");
}

static int attention(walk *k, const cp_onnx_node *p[3], cp_rec_layer *l, const char *x, const char **x2,
                     const cp_onnx_node *at) {
  attn a = {0};
  int64_t dh_k, dh_v, Hv;
  int rc = roles(k, p, &a, at);
  if (!rc) rc = split_heads(k, a.q, &a.H, &a.dh, &a.qh);
  if (!rc) rc = split_heads(k, a.k, &a.Hkv, &dh_k, &a.kh);
  if (!rc) rc = split_heads(k, a.v, &Hv, &dh_v, &a.vh);
  if (rc) return rc;
  l->q.w = cp_ow_weight(&k->w, a.q, 1, 2), l->k.w = cp_ow_weight(&k->w, a.k, 1, 2);
  l->v.w = cp_ow_weight(&k->w, a.v, 1, 2);
  if (dh_k != a.dh || dh_v != a.dh || Hv != a.Hkv || a.H % a.Hkv || a.dh % 2 || l->q.w->shape[1] != a.H * a.dh ||
      l->k.w->shape[1] != a.Hkv * a.dh || l->v.w->shape[1] != a.Hkv * a.dh)
    return bad(k, a.softmax, "the heads of q, k and v do not fit their widths (d_head even, kv heads dividing heads)");
  const char *qr, *kr;
  if ((rc = rope(k, a.qh, a.dh, a.q, &qr)) || (rc = rope(k, a.kh, a.dh, a.k, &kr))) return rc;
  if (a.H != a.Hkv && ((rc = repeat_kv(k, kr, a.k)) || (rc = repeat_kv(k, a.vh, a.v)))) return rc;
  double s = 0;
  const cp_onnx_node *sc = by_scalar(k, cp_ow_out(a.sm, 0), "Div", &s);
  double scale = sc ? 1 / s : 0;
  if (!sc && (sc = by_scalar(k, cp_ow_out(a.sm, 0), "Mul", &s))) scale = s;
  if (!sc || fabs(scale * sqrt((double)a.dh) - 1) > 1e-5)
    return bad(k, sc ? sc : a.sm, "the scores are not scaled by 1/sqrt(d_head) right after their MatMul");
  if (!cp_ow_backward(&k->w, a.softmax, is_trilu, no_pass, NULL))
    return bad(k, a.softmax, "no causal mask (Trilu) before it");
  const cp_onnx_node *ex[] = {a.sm, sc, a.softmax, a.pv};
  for (size_t i = 0; i < sizeof ex / sizeof *ex; i++) cp_ow_explain(&k->w, ex[i]);
  cp_ow_mask_chain(&k->w, cp_ow_out(sc, 0), a.softmax, is_trilu, no_pass, NULL);
  if (k->r.n_layers == 1) {
    k->r.n_heads = a.H, k->r.n_kv_heads = a.Hkv, k->r.d_head = a.dh;
    if ((rc = cp_oi_prov(k->im, "num_attention_heads", "the head count of the Reshape of q '%s'", lab(k, a.q))) ||
        (rc = cp_oi_prov(k->im, "num_key_value_heads", "the head count of the Reshape of k '%s'", lab(k, a.k))) ||
        (rc = cp_oi_prov(k->im, "head_dim", "the last size of the Reshape of q '%s'", lab(k, a.q))))
      return rc;
  } else if (a.H != k->r.n_heads || a.Hkv != k->r.n_kv_heads || a.dh != k->r.d_head) {
    return bad(k, a.softmax, "head counts differ from the first layer's");
  }
  const cp_onnx_node *o = cp_ow_forward(&k->w, cp_ow_out(a.pv, 0), linear, NULL, NULL), *ad;
  if (!o || !(l->o.w = cp_ow_weight(&k->w, o, 1, 2))) return bad(k, a.pv, "no o_proj MatMul after the attention");
  if (!(ad = cp_ow_consumer(&k->w, cp_ow_out(o, 0), "Add", -1)) || !takes(ad, x)) {
    return cp_ow_bad_on(&k->w, o, "its output is not added back to the residual stream", cp_ow_out(o, 0), x);
  }
  cp_ow_explain(&k->w, o);
  cp_ow_explain(&k->w, ad);
  *x2 = cp_ow_out(ad, 0);
  return 0;
}

/* The weight MatMuls taking y as input 0, up to 4 in p; how many. */
static size_t projections(walk *k, const char *y, const cp_onnx_node *p[4]) {
  const cp_onnx_node *c[16];
  size_t n = cp_ow_consumers(&k->w, y, c, 16), m = 0;
  for (size_t i = 0; i < n && i < 16; i++)
    if (linear(&k->w, c[i], NULL) && !strcmp(cp_ow_in(c[i], 0), y)) {
      if (m < 4) p[m] = c[i];
      m++;
    }
  return m;
}

static int layers(walk *k, const char *x) {
  for (;;) {
    cp_rec_norm nm = {0};
    const char *y = NULL, *x2 = NULL, *o = NULL;
    const cp_onnx_node *at = NULL, *p[4];
    int rc = rms_norm(k, x, &nm, &y, &at);
    if (rc == 1 && k->r.n_layers == 0) /* neither family's start */
      return cp_error_set(CP_EONNX_RECOVER,
                          "%s: token embedding output '%s' is not added to a learned position "
                          "embedding (Gather; GPT-2) and feeds no RMSNorm (Pow 2 / ReduceMean / Add eps / Sqrt; "
                          "Llama)",
                          k->im->path, x);
    char s[320];
    if (rc == 1)
      return cp_error_set(CP_EONNX_RECOVER,
                          "%s: value '%s' of the residual stream feeds no RMSNorm (Pow 2 / "
                          "ReduceMean / Add eps / Sqrt)%s",
                          k->im->path, x, cp_ow_stray(&k->w, x, NULL, s));
    if (rc) return rc;
    size_t n = projections(k, y, p);
    if (n == 1) { /* the head */
      k->r.final_norm = nm;
      k->r.head.w = cp_ow_weight(&k->w, p[0], 1, 2);
      cp_ow_explain(&k->w, p[0]);
      k->logits = cp_ow_out(p[0], 0);
      if (!cp_ow_is_output(&k->w, cp_ow_out(p[0], 0)) &&
          !cp_ow_forward(&k->w, cp_ow_out(p[0], 0), cp_ow_makes_output, NULL, NULL))
        return bad(k, p[0], "the head's output reaches no graph output");
      return cp_oi_prov(k->im, "lm_head", "MatMul '%s' of the final RMSNorm with '%s'", lab(k, p[0]),
                        k->r.head.w->name);
    }
    if (n != 3) return bad(k, at, "its RMSNorm feeds neither three projections (q, k, v) nor one (the head)");
    cp_rec_layer *l = cp_rec_push(&k->r, k->im->path);
    if (!l) return cp_error_code(); /* cp_rec_push set it */
    l->attn_norm = nm;
    for (int i = 0; i < 3; i++) cp_ow_explain(&k->w, p[i]);
    if ((rc = attention(k, p, l, x, &x2, at))) return rc;
    rc = rms_norm(k, x2, &l->ffn_norm, &y, &at);
    if (rc == 1)
      return cp_ow_bad_on(&k->w, cp_ow_producer(&k->w, x2), "the attention's residual feeds no RMSNorm", x2, NULL);
    if (!rc) rc = cp_rec_swiglu(k->im, &k->w, &k->r, y, at, l, &o);
    if (rc) return rc;
    const cp_onnx_node *ad = cp_ow_consumer(&k->w, o, "Add", -1);
    if (!ad || !takes(ad, x2)) {
      return cp_ow_bad_on(&k->w, cp_ow_producer(&k->w, o), "the MLP is not added back to the residual stream", o,
                          x2);
    }
    cp_ow_explain(&k->w, ad);
    x = cp_ow_out(ad, 0);
  }
}

int cp_onnx_recover_pattern_llama(cp_onnx_import *im, const cp_onnx_node *tok) {
  walk k = {.im = im};
  int rc = cp_ow_init(&k.w, im->path, im->om->graph);
  if (rc) goto done;
  k.w.unexplained = &im->unexplained;
  k.r.family = CP_FAMILY_LLAMA;
  k.r.embed = cp_ow_weight(&k.w, tok, 0, 2);
  k.r.vocab = k.r.embed->shape[0], k.r.d_model = k.r.embed->shape[1];
  cp_ow_explain(&k.w, tok);
  cp_ow_explain_ids(&k.w, cp_ow_in(tok, 1));
  if ((rc =
           cp_oi_prov(im, "vocab_size", "rows of token embedding '%s' (Gather '%s')", k.r.embed->name, lab(&k, tok))) ||
      (rc = cp_oi_prov(im, "hidden_size", "columns of token embedding '%s'", k.r.embed->name)) ||
      (rc = layers(&k, cp_ow_out(tok, 0))))
    goto done;
  if (k.r.n_layers == 0) {
    rc = cp_error_set(CP_EONNX_RECOVER, "%s: no attention layer found after the embedding", im->path);
    goto done;
  }
  /* RoPE from inv_freq works at any position: the graph holds no training length */
  k.r.train_len = 2048;
  if ((rc = cp_oi_prov(im, "num_hidden_layers", "%d attention blocks along the residual stream", k.r.n_layers)) ||
      (rc = cp_oi_prov(im, "max_position_embeddings",
                       "not in the graph (RoPE from inv_freq, any position): "
                       "LlamaConfig's default 2048")) ||
      (rc = cp_oi_prov(im, "positions", "RoPE spelled in plain ops: rotate-half, Cos/Sin of positions x inv_freq")))
    goto done;
  if ((rc = cp_ow_account(&k.w, k.logits, "plain-op Llama pattern"))) goto done;
  rc = cp_rec_emit(im, &k.r, "pattern");
done:
  free(k.r.layers);
  cp_ow_free(&k.w);
  return rc;
}
