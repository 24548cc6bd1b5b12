/* Recovery of plain-op (default domain) decoder graphs by their pattern, whatever the
 * initializers are called: torch.onnx's GPT-2 (onnxruntime's gpt2_past.onnx). From the token
 * embedding Gather (indices from a graph input) and the learned position Gather added to it, the
 * residual stream is followed layer by layer: LayerNormalization (or its ReduceMean / Sub / Pow /
 * ReduceMean / Add eps / Sqrt / Div / Mul gamma / Add beta spelling), the qkv Gemm or MatMul, the
 * attention core up to the output projection (its Softmax, the scores' scale, the head count of
 * its Reshape, the causal mask), the residual Add, the second norm, the MLP with its activation,
 * the residual Add; the final norm, then the head or the graph output. docs/onnx.md
 * "Recovering third-party graphs". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import/onnx/onnx_walk.h"
#include "ctxpatch/base/error.h"

typedef cp_rec_walk walk;

static bool is(const cp_onnx_node *n, const char *op) { return !strcmp(n->op_type, op) && !n->domain[0]; }
static const char *in(const cp_onnx_node *n, size_t k) { return k < n->n_inputs ? n->inputs[k] : ""; }
static const char *out(const cp_onnx_node *n, size_t k) { return k < n->n_outputs ? n->outputs[k] : ""; }
static const char *lab(walk *k, const cp_onnx_node *n) { return cp_ow_label(&k->w, n, k->lab); }

static int bad(walk *k, const cp_onnx_node *n, const char *why) {
  return cp_error_set(CP_EONNX_RECOVER, "%s: node '%s' (%s): %s", k->im->path, lab(k, n), n->op_type, why);
}

static const cp_onnx_node *consumer2(walk *k, const char *op, const char *a, const char *b) {
  const cp_onnx_node *c[32];
  size_t n = cp_ow_consumers(&k->w, a, c, 32);
  for (size_t i = 0; i < n && i < 32; i++)
    if (is(c[i], op) && c[i]->n_inputs == 2 && ((!strcmp(in(c[i], 0), a) && (!b || !strcmp(in(c[i], 1), b))) ||
                                                (!strcmp(in(c[i], 1), a) && (!b || !strcmp(in(c[i], 0), b)))))
      return c[i];
  return NULL;
}

/* The other input of binary node n than `v`. */
static const char *other(const cp_onnx_node *n, const char *v) { return !strcmp(in(n, 0), v) ? in(n, 1) : in(n, 0); }

/* ---------------------------------------------------------------- norms */

/* The LayerNorm of stream value x: *y its output. 1 when x feeds none. */
static int layer_norm(walk *k, const char *x, cp_rec_norm *nm, const char **y, const cp_onnx_node **at) {
  const cp_onnx_node *c[32];
  size_t n = cp_ow_consumers(&k->w, x, c, 32);
  double eps = 0;
  for (size_t i = 0; i < n && i < 32; i++)
    if (is(c[i], "LayerNormalization") && !strcmp(in(c[i], 0), x)) {
      const cp_onnx_attribute *a = cp_onnx_node_attr(c[i], "axis");
      if (a && a->i != -1) return bad(k, c[i], "a LayerNormalization over other than the last axis");
      nm->w = cp_ow_weight(&k->w, c[i], 1, 1), nm->b = cp_ow_weight(&k->w, c[i], 2, 1);
      if (!nm->w) return bad(k, c[i], "its scale is not a 1-D float initializer");
      a = cp_onnx_node_attr(c[i], "epsilon");
      eps = a ? a->f : 1e-5;
      *y = out(c[i], 0), *at = c[i];
      cp_ow_explain(&k->w, c[i]);
      goto eps;
    }
  const cp_onnx_node *m1 = cp_ow_consumer(&k->w, x, "ReduceMean", 0), *sub, *pw, *m2, *ad, *sq, *dv, *mu, *ab;
  if (!m1 || m1->n_inputs != 1) return 1;
  *at = m1;
  if (!(sub = consumer2(k, "Sub", x, out(m1, 0))) || strcmp(in(sub, 0), x))
    return bad(k, m1, "not followed by Sub(x, mean) (LayerNorm)");
  const char *centred = out(sub, 0), *cv = centred;
  const cp_onnx_node *cast = cp_ow_consumer(&k->w, centred, "Cast", 0);
  if (cast) cv = out(cast, 0);
  double two = 0;
  if (!(pw = consumer2(k, "Pow", cv, NULL)) || cp_ow_scalar(&k->w, in(pw, 1), &two) || two != 2)
    return bad(k, sub, "not followed by Pow(., 2) (LayerNorm variance)");
  if (!(m2 = cp_ow_consumer(&k->w, out(pw, 0), "ReduceMean", 0)) || !(ad = consumer2(k, "Add", out(m2, 0), NULL)) ||
      cp_ow_scalar(&k->w, other(ad, out(m2, 0)), &eps))
    return bad(k, pw, "not followed by ReduceMean and Add(epsilon) (LayerNorm variance)");
  if (!(sq = cp_ow_consumer(&k->w, out(ad, 0), "Sqrt", 0)) || !(dv = consumer2(k, "Div", centred, out(sq, 0))) ||
      strcmp(in(dv, 0), centred))
    return bad(k, ad, "not followed by Sqrt and Div(x - mean, .) (LayerNorm)");
  if (!(mu = consumer2(k, "Mul", out(dv, 0), NULL)) || !(nm->w = cp_ow_const(&k->w, other(mu, out(dv, 0)))))
    return bad(k, dv, "not followed by Mul with a scale initializer (LayerNorm)");
  if (!(ab = consumer2(k, "Add", out(mu, 0), NULL)) || !(nm->b = cp_ow_const(&k->w, other(ab, out(mu, 0)))))
    return bad(k, mu, "not followed by Add with a bias initializer (LayerNorm)");
  *y = out(ab, 0);
  const cp_onnx_node *ex[] = {m1, sub, cast, pw, m2, ad, sq, dv, mu, ab};
  for (size_t i = 0; i < sizeof ex / sizeof *ex; i++) cp_ow_explain(&k->w, ex[i]);
eps:
  if (!(eps > 0 && eps < 1)) return bad(k, *at, "its epsilon is not in (0, 1)");
  if (k->r.eps == 0) {
    k->r.eps = eps;
    return cp_oi_prov(k->im, "layer_norm_epsilon", "epsilon of the first LayerNorm (node '%s')", lab(k, *at));
  }
  return fabs(eps - k->r.eps) > 1e-6 * k->r.eps ? bad(k, *at, "its epsilon differs from the first LayerNorm's") : 0;
}

/* ---------------------------------------------------------------- linear layers */

/* Gemm or MatMul with a 2-D weight initializer. */
static bool linear(const cp_ow *w, const cp_onnx_node *n, void *ctx) {
  (void)ctx;
  return (is(n, "Gemm") || is(n, "MatMul")) && cp_ow_weight(w, n, 1, 2);
}

/* n (linear) as lin; *o its output (after a bias Add for MatMul). */
static int take_lin(walk *k, const cp_onnx_node *n, cp_rec_lin *lin, const char **o) {
  lin->w = cp_ow_weight(&k->w, n, 1, 2);
  lin->out_in = false;
  *o = out(n, 0);
  cp_ow_explain(&k->w, n);
  if (is(n, "Gemm")) {
    const cp_onnx_attribute *ta = cp_onnx_node_attr(n, "transA"), *tb = cp_onnx_node_attr(n, "transB"),
                            *al = cp_onnx_node_attr(n, "alpha"), *be = cp_onnx_node_attr(n, "beta");
    if ((ta && ta->i) || (al && al->f != 1) || (be && be->f != 1)) return bad(k, n, "transA, alpha or beta not 1");
    lin->out_in = tb && tb->i;
    if (in(n, 2)[0] && !(lin->b = cp_ow_weight(&k->w, n, 2, 1))) return bad(k, n, "its C is not a 1-D initializer");
    return 0;
  }
  const cp_onnx_node *c[4];
  if (cp_ow_consumers(&k->w, *o, c, 4) == 1 && is(c[0], "Add") &&
      (lin->b = cp_ow_const(&k->w, other(c[0], *o))) && lin->b->ndim == 1)
    *o = out(c[0], 0), cp_ow_explain(&k->w, c[0]);
  else
    lin->b = NULL;
  return 0;
}

/* What the attention core between the qkv and output projections holds. */
typedef struct {
  walk *k;
  int softmax;
  double scale;         /* 0: none seen */
  int64_t heads;        /* 0: none seen */
  const cp_onnx_node *heads_at, *scale_at, *softmax_at;
  const cp_onnx_node *proj; /* attention: the first weight projection reached (not passed) */
  int projs;                /* other weight projections reached */
  bool causal;
  const char *act;      /* MLP: the activation seen */
  int acts;
} core;

/* Whether t [1, 1, P, P] holds ones on and below the diagonal, zeros above. */
static bool lower_triangular(walk *k, const cp_onnx_tensor *t) {
  /* numel in [1, 2^26] bounds every dim, so the product below cannot overflow */
  if (t->ndim != 4 || t->numel == 0 || t->numel > ((uint64_t)1 << 26) || t->shape[2] != t->shape[3] ||
      t->numel != (uint64_t)t->shape[2] * (uint64_t)t->shape[3])
    return false;
  float *v = NULL;
  if (cp_oi_read_f32(&v, k->im, t)) return cp_error_clear(), false;
  bool ok = true;
  for (int64_t i = 0; i < t->shape[2] && ok; i++)
    for (int64_t j = 0; j < t->shape[3]; j++)
      if (v[i * t->shape[3] + j] != (j <= i ? 1.0f : 0.0f)) ok = false;
  free(v);
  return ok;
}

/* Trilu, or a Slice of a lower-triangular initializer (GPT-2's `attn.bias` buffer). */
static bool mask_piece(const cp_ow *w, const cp_onnx_node *n, void *ctx) {
  core *c = ctx;
  if (is(n, "Trilu")) return true;
  const cp_onnx_tensor *t = is(n, "Slice") ? cp_ow_const(w, in(n, 0)) : NULL;
  if (!t || !lower_triangular(c->k, t)) return false;
  cp_oi_use(c->k->im, t);
  return true;
}

static bool never(const cp_ow *w, const cp_onnx_node *n, void *ctx) {
  (void)w, (void)n, (void)ctx;
  return false;
}

static bool see(const cp_ow *w, const cp_onnx_node *n, void *ctx) {
  core *c = ctx;
  double s;
  if (linear(w, n, NULL)) { /* the attention's whole core is searched, up to its projections */
    if (!c->proj) c->proj = n;
    else if (c->proj != n) c->projs++;
    return true;
  }
  if (is(n, "Shape")) return true; /* shape computations lead into other layers */
  if (is(n, "Softmax")) c->softmax++, c->softmax_at = n;
  if ((is(n, "Div") || is(n, "Mul")) && !c->scale) {
    const cp_onnx_node *p = cp_ow_producer(w, in(n, 0));
    if (p && is(p, "MatMul") && !cp_ow_weight(w, p, 1, 2) && !cp_ow_scalar(w, in(n, 1), &s) && s != 0)
      c->scale = is(n, "Div") ? 1 / s : s, c->scale_at = n;
  }
  const cp_onnx_tensor *shape = is(n, "Reshape") ? cp_ow_const(w, in(n, 1)) : NULL;
  int64_t dims[4];
  if (shape && !c->heads && shape->numel == 4 && !cp_onnx_tensor_i64(dims, shape) && dims[2] > 0 && dims[2] < 1000000)
    c->heads = dims[2], c->heads_at = n;
  if (is(n, "Reshape") && !c->heads) {
    const cp_onnx_node *cc = cp_ow_producer(w, in(n, 1));
    if (cc && is(cc, "Concat") && cc->n_inputs == 4 && !cp_ow_scalar(w, in(cc, 2), &s) && s > 0 && s < 1e6)
      c->heads = (int64_t)s, c->heads_at = n;
  }
  bool ms = !strcmp(n->domain, "com.microsoft");
  const char *act = is(n, "Tanh") || (ms && !strcmp(n->op_type, "FastGelu")) ? "gelu_new"
                  : is(n, "Erf") || (ms && (!strcmp(n->op_type, "Gelu") || !strcmp(n->op_type, "BiasGelu"))) ? "gelu"
                  : is(n, "Sigmoid") ? "silu" : is(n, "Relu") ? "relu" : NULL;
  if (act && (!c->act || strcmp(c->act, act))) c->act = act, c->acts++;
  return false;
}

/* ---------------------------------------------------------------- layers */

static bool add_of_x(const cp_ow *w, const cp_onnx_node *n, void *ctx) {
  (void)w;
  return is(n, "Add") && n->n_inputs == 2 && (!strcmp(n->inputs[0], ctx) || !strcmp(n->inputs[1], ctx));
}

/* The residual Add of x and the branch after `from`. */
static int residual(walk *k, const char *from, const char *x, const char **x2, const cp_onnx_node *at) {
  const cp_onnx_node *a = cp_ow_forward(&k->w, from, add_of_x, NULL, (void *)x);
  if (!a) return cp_ow_bad_on(&k->w, at, "its branch is not added back to the residual stream", x, from);
  cp_ow_explain(&k->w, a);
  *x2 = out(a, 0);
  return 0;
}

static int attention(walk *k, const cp_onnx_node *qn, cp_rec_layer *l, const char *x, const char **x2) {
  const char *q, *o;
  int rc = take_lin(k, qn, &l->qkv, &q);
  if (rc) return rc;
  core c = {.k = k};
  cp_ow_forward(&k->w, q, never, see, &c);
  const cp_onnx_node *on = c.proj;
  if (!on) return bad(k, qn, "no output projection after the attention");
  if (c.projs) return bad(k, on, "more than one weight projection after the attention's qkv projection");
  if (c.softmax != 1) return bad(k, on, "not exactly one Softmax between the qkv and output projections");
  c.causal = cp_ow_backward(&k->w, c.softmax_at, mask_piece, linear, &c) != NULL;
  if (!c.causal) return bad(k, on, "no causal mask (a lower-triangular buffer or Trilu) before it");
  if (!c.heads) return bad(k, on, "no Reshape into heads before it");
  int64_t D = k->r.d_model;
  if (D % c.heads) return bad(k, c.heads_at, "its head count does not divide d_model");
  if (!c.scale || fabs(c.scale * sqrt((double)(D / c.heads)) - 1) > 1e-5)
    return bad(k, c.scale_at ? c.scale_at : on, "the scores are not scaled by 1/sqrt(d_head)");
  /* the core's computing nodes: scores MatMul, scale, mask steps, Softmax, the values' MatMul */
  const cp_onnx_node *pv = cp_ow_next(&k->w, out(c.softmax_at, 0), "MatMul", 0);
  if (!pv)
    return cp_ow_bad_on(&k->w, c.softmax_at, "its probabilities feed no MatMul with the values", out(c.softmax_at, 0),
                        NULL);
  const cp_onnx_node *ex[] = {cp_ow_producer(&k->w, in(c.scale_at, 0)), c.scale_at, c.softmax_at, pv};
  for (size_t i = 0; i < sizeof ex / sizeof *ex; i++) cp_ow_explain(&k->w, ex[i]);
  cp_ow_mask_chain(&k->w, out(c.scale_at, 0), c.softmax_at, mask_piece, linear, &c);
  if (k->r.n_layers == 1) {
    k->r.n_heads = k->r.n_kv_heads = c.heads, k->r.d_head = D / c.heads;
    rc = cp_oi_prov(k->im, "n_head", "the constant of Reshape '%s' splitting q into heads", lab(k, c.heads_at));
    if (rc) return rc;
  } else if (c.heads != k->r.n_heads) {
    return bad(k, c.heads_at, "a head count other than the first layer's");
  }
  if ((rc = take_lin(k, on, &l->o, &o))) return rc;
  return residual(k, o, x, x2, on);
}

static int mlp(walk *k, const cp_onnx_node *fc, cp_rec_layer *l, const char *x, const char **x2) {
  const char *h, *o;
  int rc = take_lin(k, fc, &l->up, &h);
  if (rc) return rc;
  core c = {.k = k};
  const cp_onnx_node *pn = cp_ow_forward(&k->w, h, linear, see, &c);
  if (!pn) return bad(k, fc, "no second MLP projection after it");
  if (c.acts != 1) return bad(k, pn, "not one recognised activation (Tanh, Erf, Sigmoid, Relu, FastGelu, Gelu) before it");
  if (c.softmax) return bad(k, pn, "a Softmax in the MLP");
  if (k->r.n_layers > 1 && strcmp(c.act, k->r.act)) return bad(k, pn, "an activation other than the first layer's");
  if ((rc = cp_ow_check_act(&k->w, h, pn, c.act))) return rc;
  if (k->r.n_layers == 1) {
    k->r.act = c.act;
    k->r.d_ff = l->up.w->shape[l->up.out_in ? 0 : 1];
    rc = cp_oi_prov(k->im, "activation_function", "the MLP's %s", c.act);
    if (!rc) rc = cp_oi_prov(k->im, "n_inner", "the first MLP projection's weight '%s'", l->up.w->name);
    if (rc) return rc;
  } else if (strcmp(c.act, k->r.act)) {
    return bad(k, pn, "an activation other than the first layer's");
  }
  if ((rc = take_lin(k, pn, &l->down, &o))) return rc;
  return residual(k, o, x, x2, pn);
}

static int layers(walk *k, const char *x) {
  cp_rec *r = &k->r;
  for (;;) {
    cp_rec_norm nm = {0};
    const char *y = NULL, *x2 = NULL;
    const cp_onnx_node *at;
    int rc = layer_norm(k, x, &nm, &y, &at);
    char s[320];
    if (rc == 1)
      return cp_error_set(CP_EONNX_RECOVER, "%s: value '%s' of the residual stream feeds no LayerNormalization "
                          "(nor its ReduceMean/Sub/Pow/Sqrt/Div spelling)%s", k->im->path, x,
                          cp_ow_stray(&k->w, x, NULL, s));
    if (rc) return rc;
    const cp_onnx_node *ln = cp_ow_forward(&k->w, y, linear, NULL, NULL);
    cp_rec_lin h = {0};
    if (ln) h.w = cp_ow_weight(&k->w, ln, 1, 2);
    bool is_head = ln && (h.w == r->embed || h.w->shape[0] == r->vocab || h.w->shape[1] == r->vocab);
    if (!ln || is_head) {
      r->final_norm = nm;
      if (!ln) {
        if (!cp_ow_is_output(&k->w, y) && !cp_ow_forward(&k->w, y, cp_ow_makes_output, NULL, NULL))
          return bad(k, at, "the final norm's output reaches no graph output");
        k->logits = y;
        return cp_oi_prov(k->im, "lm_head", "none: the graph's output is the final LayerNorm's (node '%s')",
                          lab(k, at));
      }
      const char *o;
      if ((rc = take_lin(k, ln, &r->head, &o))) return rc;
      if (r->head.b) return bad(k, ln, "a bias on the head");
      k->logits = o;
      return cp_oi_prov(k->im, "lm_head", "%s '%s' with '%s'", ln->op_type, lab(k, ln), r->head.w->name);
    }
    cp_rec_layer *l = cp_rec_push(r, k->im->path);
    if (!l) return cp_error_code(); /* cp_rec_push set it */
    l->attn_norm = nm;
    if ((rc = attention(k, ln, l, x, &x2))) return rc;
    rc = layer_norm(k, x2, &l->ffn_norm, &y, &at);
    if (rc == 1)
      return cp_ow_bad_on(&k->w, cp_ow_producer(&k->w, x2), "the attention's residual feeds no LayerNorm", x2, NULL);
    if (rc) return rc;
    const cp_onnx_node *fc = cp_ow_forward(&k->w, y, linear, NULL, NULL);
    if (!fc) return bad(k, at, "no MLP after this LayerNorm");
    if ((rc = mlp(k, fc, l, x2, &x))) return rc;
  }
}

/* ---------------------------------------------------------------- start */

/* Whether index input `v` comes from a graph input through shape-only ops (bounded). */
static bool from_graph_input(walk *k, const char *v) {
  for (int step = 0; step < 32; step++) {
    const cp_onnx_node *p = cp_ow_producer(&k->w, v);
    if (!p && cp_ow_dynamic(&k->w, v)) return true; /* a graph input that is not an initializer */
    if (!p || p->n_inputs < 1 ||
        !(is(p, "Reshape") || is(p, "Slice") || is(p, "Cast") || is(p, "Unsqueeze") || is(p, "Squeeze") ||
          is(p, "Identity") || is(p, "Flatten")))
      return false;
    v = in(p, 0);
  }
  return false;
}

int cp_onnx_recover_pattern(cp_onnx_import *im) {
  const cp_onnx_graph *g = im->om->graph;
  walk k = {.im = im};
  int rc = cp_ow_init(&k.w, im->path, g);
  k.w.unexplained = &im->unexplained;
  const cp_onnx_node *tok = NULL, *pos = NULL, *add = NULL;
  for (size_t i = 0; i < g->n_nodes && !rc && !tok; i++) {
    const cp_onnx_node *n = &g->nodes[g->order[i]];
    if (is(n, "Gather") && n->n_inputs == 2 && cp_ow_weight(&k.w, n, 0, 2) && from_graph_input(&k, in(n, 1)))
      tok = n;
  }
  if (rc || !tok) {
    if (!rc) rc = 1;
    goto done;
  }
  cp_ow_explain_ids(&k.w, in(tok, 1));
  cp_ow_explain(&k.w, tok);
  k.r.family = CP_FAMILY_GPT2;
  k.r.embed = cp_ow_weight(&k.w, tok, 0, 2);
  k.r.vocab = k.r.embed->shape[0], k.r.d_model = k.r.embed->shape[1];
  const cp_onnx_node *c[8];
  size_t nc = cp_ow_consumers(&k.w, out(tok, 0), c, 8);
  for (size_t i = 0; i < nc && i < 8 && !pos; i++) {
    const cp_onnx_node *p = is(c[i], "Add") ? cp_ow_producer(&k.w, other(c[i], out(tok, 0))) : NULL;
    if (p && is(p, "Gather") && cp_ow_weight(&k.w, p, 0, 2)) pos = p, add = c[i];
  }
  if (!pos) { /* no learned positions: a Llama (RMSNorm, RoPE in plain ops) */
    rc = cp_onnx_recover_pattern_llama(im, tok);
    goto done;
  }
  cp_ow_explain(&k.w, pos);
  cp_ow_explain(&k.w, add);
  k.r.pos_embed = cp_ow_weight(&k.w, pos, 0, 2);
  k.r.train_len = k.r.pos_embed->shape[0];
  const char *x = out(add, 0);
  for (int step = 0; step < 8; step++) { /* x + 0 (torch's dropout export), Identity, Dropout */
    const cp_onnx_node *d[2];
    double z = 1;
    if (cp_ow_consumers(&k.w, x, d, 2) != 1) break;
    if ((is(d[0], "Add") && !cp_ow_scalar(&k.w, other(d[0], x), &z) && z == 0) || is(d[0], "Identity") ||
        is(d[0], "Dropout"))
      x = out(d[0], 0), cp_ow_explain(&k.w, d[0]);
    else
      break;
  }
  if ((rc = cp_oi_prov(im, "vocab_size", "rows of token embedding '%s' (Gather '%s')", k.r.embed->name,
                       lab(&k, tok))) ||
      (rc = cp_oi_prov(im, "n_embd", "columns of token embedding '%s'", k.r.embed->name)) ||
      (rc = cp_oi_prov(im, "n_positions", "rows of position embedding '%s' (Gather '%s')", k.r.pos_embed->name,
                       lab(&k, pos))))
    goto done;
  if ((rc = layers(&k, x))) goto done;
  if (k.r.n_layers == 0) {
    rc = cp_error_set(CP_EONNX_RECOVER, "%s: no attention layer found after the embedding", im->path);
    goto done;
  }
  rc = cp_oi_prov(im, "n_layer", "%d attention blocks along the residual stream", k.r.n_layers);
  if (!rc) rc = cp_oi_prov(im, "positions", "learned: Gather '%s' added to the token embedding", lab(&k, pos));
  if (!rc) rc = cp_ow_account(&k.w, k.logits, "plain-op GPT-2 pattern");
  if (!rc) rc = cp_rec_emit(im, &k.r, "pattern");
done:
  free(k.r.layers);
  cp_ow_free(&k.w);
  return rc;
}
