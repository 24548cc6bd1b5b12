/* T5 as two ONNX graphs (export/onnx/onnx_t5.h): the encoder and Optimum's merged decoder,
 * computing what the engine computes for T5 (engine/engine_run.c: run_encoder, run_stack with
 * cross-attention, head), with the attention probabilities (and every rule) from export/onnx/onnx_attention.c and
 * the relative bucket bias computed in the graph from positions through its pos_bias hook. */
#include "export/onnx/onnx_t5.h"
#include "export/onnx/onnx_layer.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/model/onnx_names.h"

/* Per-graph values every layer shares. */
typedef struct {
  cp_og *g;
  const cp_model *m;
  const cp_rule *rule;
  cp_rule_model rm;
  const char *ids;                       /* input_ids [B, S] */
  const char *embed;                     /* the shared embedding [V, D] */
  /* self-attention */
  const char *qpos, *kpos, *n_keys, *visible;
  cp_onnx_attn_memo memo;
  const char *table;                     /* the stack's relative_attention_bias [num_buckets, H] */
  /* decoder only: cross-attention and the cache */
  const char *keep_dec, *keep_enc;       /* [1] int64: past positions kept (0 unless use_cache_branch) */
  const char *enc_rest;                  /* [B, enc - keep_enc, D] encoder rows still to project */
  const char *cross_kpos, *cross_n, *cross_visible;
  cp_onnx_attn_memo cross_memo;          /* cross-attention's own: its keys are not self's */
  const char **past, **present;          /* [layers * 4]: decoder.key, decoder.value, encoder.key, encoder.value */
} t5_t;

static const char *const KV_NAMES[4] = {"decoder.key", "decoder.value", "encoder.key", "encoder.value"};

/* The base name of weight `role` in `stack`'s layer l (ctxpatch/model/onnx_names.h), with `suffix`. */
static const char *wname(char buf[CP_TENSOR_NAME_MAX], cp_tensor_role role, cp_stack_kind stack, int l,
                         const char *suffix) {
  return cp_onnx_name(buf, CP_FAMILY_T5, role, stack, l, suffix);
}

/* ---------------------------------------------------------------- buckets */

const char *cp_onnx_t5_bucket(cp_og *g, const char *rel, bool bidirectional, int num_buckets, int max_distance) {
  int nb = bidirectional ? num_buckets / 2 : num_buckets, max_exact = nb / 2;
  if (max_exact < 1 || max_distance <= max_exact) {
    cp_og_fail(g, cp_error_set(CP_EONNX_EXPORT, "onnx export: T5 relative_attention_num_buckets %d with "
                               "max_distance %d has no log-spaced buckets", num_buckets, max_distance));
    return NULL;
  }
  const char *zero = cp_og_i64(g, 0), *me = cp_og_i64(g, max_exact), *n, *base = NULL;
  if (bidirectional) { /* keys after the query use the upper half of the buckets */
    base = cp_og_op2(g, "Mul", cp_og_cast(g, cp_og_op2(g, "Greater", rel, zero), CP_OG_INT64), cp_og_i64(g, nb));
    n = cp_og_op1(g, "Abs", rel);
  } else {
    n = cp_og_op1(g, "Neg", cp_og_op2(g, "Min", rel, zero));
  }
  /* n >= max_exact: max_exact + trunc(log(n / max_exact) / log(max_distance / max_exact) *
   * (nb - max_exact)), capped at nb - 1. Float32 steps as cp_t5_bucket; the log in double,
   * rounded to float (correctly rounded, as cp_t5_bucket's). n below max_exact is lifted to it
   * only to keep Log finite: Where takes n itself there. */
  const char *nf = cp_og_cast(g, cp_og_op2(g, "Max", n, me), CP_OG_FLOAT);
  const char *a = cp_og_op2(g, "Div", nf, cp_og_f32(g, (float)max_exact));
  const char *l = cp_og_cast(g, cp_og_op1(g, "Log", cp_og_cast(g, a, CP_OG_DOUBLE)), CP_OG_FLOAT);
  const char *x = cp_og_op2(g, "Div", l, cp_og_f32(g, (float)log((double)max_distance / (double)max_exact)));
  x = cp_og_op2(g, "Mul", x, cp_og_f32(g, (float)(nb - max_exact)));
  x = cp_og_op2(g, "Min", x, cp_og_f32(g, (float)(nb - 1 - max_exact)));
  const char *large = cp_og_op2(g, "Add", cp_og_cast(g, x, CP_OG_INT64), me); /* Cast truncates */
  const char *b = cp_og_op3(g, "Where", cp_og_op2(g, "Less", n, me), n, large);
  return base ? cp_og_op2(g, "Add", b, base) : b;
}

/* The pos_bias hook of export/onnx/onnx_attention.h: table[bucket(r')][h] at r' = -d' (d' the
 * clamped qpos - kpos, as engine/attn_call.c buckets cp_plan_distance of j - i), bidirectional
 * in the encoder, causal in the decoder's self-attention. dist is [X, 1, S, T] or a scalar (the
 * top-k distance); adding an int64 zero [1, 1, 1, 1] makes both rank 4, so the result is
 * [X, H, S, T] or [1, H, 1, 1]. The stack's table [num_buckets, H] is stored once per graph. */
static const char *t5_pos_bias(void *user, const cp_onnx_attn_ctx *c, const char *dist) {
  t5_t *t = user;
  const cp_model *m = t->m;
  cp_og *g = t->g;
  bool enc = c->kind == CP_ATTN_ENCODER_SELF;
  if (!t->table) {
    int64_t dims[2] = {m->t5_num_buckets, m->n_heads};
    char name[CP_TENSOR_NAME_MAX];
    wname(name, CP_ROLE_REL_BIAS, enc ? CP_STACK_ENCODER : CP_STACK_DECODER, 0, ".weight");
    t->table = cp_og_weight(g, name, enc ? m->encoder.rel_bias : m->decoder.rel_bias, 2, dims, false);
  }
  static const int64_t perm[] = {0, 4, 2, 3, 1}, ax4[] = {4}, rank4[] = {1, 1, 1, 1};
  const char *zero4 = cp_og_op2(g, "Reshape", cp_og_i64(g, 0), cp_og_i64s(g, rank4, 4));
  const char *rel = cp_og_op1(g, "Neg", cp_og_op2(g, "Add", dist, zero4));
  const char *bucket = cp_onnx_t5_bucket(g, rel, enc, m->t5_num_buckets, m->t5_max_distance);
  const char *per_key = cp_og_op2(g, "Gather", t->table, bucket); /* [X, 1, S, T, H] */
  return cp_og_op2(g, "Squeeze", cp_og_transpose(g, per_key, perm, 5), cp_og_i64s(g, ax4, 1));
}

/* ---------------------------------------------------------------- attention */

/* [1] int64 dim `axis` of x. */
static const char *dim_of(cp_og *g, const char *x, int64_t axis) {
  return cp_og_op2(g, "Gather", cp_og_op1(g, "Shape", x), cp_og_i64s(g, &axis, 1));
}

/* x[lo:hi] on `axis`, lo and hi [1] int64 values. */
static const char *slice_axis(cp_og *g, const char *x, const char *lo, const char *hi, int64_t axis) {
  const char *in[] = {x, lo, hi, cp_og_i64s(g, &axis, 1)};
  return cp_og_node(g, "Slice", in, 4, NULL, 0);
}

/* The stack a module of `kind` belongs to. */
static cp_stack_kind stack_of(cp_attn_kind kind) {
  return kind == CP_ATTN_ENCODER_SELF ? CP_STACK_ENCODER : CP_STACK_DECODER;
}

/* Module `kind` of layer l: q [B, H, S, dh] against k, v [B, H, T, dh], then the output
 * projection `o` (role O, or CO in cross-attention): [B, S, D]. */
static const char *attend(t5_t *t, int l, cp_attn_kind kind, const char *q, const char *k, const char *v,
                          const cp_linear *o) {
  const cp_model *m = t->m;
  cp_og *g = t->g;
  cp_attn_plan plan;
  cp_rule_plan(&plan, t->rule, &t->rm, kind, l);
  bool cross = kind == CP_ATTN_CROSS;
  cp_onnx_attn_ctx c = {.g = g, .m = m, .plan = &plan, .kind = kind, .layer = l, .q = q, .k = k,
                        .qpos = t->qpos, .kpos = cross ? t->cross_kpos : t->kpos,
                        .n_keys = cross ? t->cross_n : t->n_keys, .visible = cross ? t->cross_visible : t->visible,
                        .pos_bias = cross ? NULL : t5_pos_bias, .pos_user = t,
                        .memo = cross ? &t->cross_memo : &t->memo};
  const char *ctxv = cp_og_op2(g, "MatMul", cp_onnx_attention_probs(&c), v); /* [B, H, S, dh] */
  char name[CP_TENSOR_NAME_MAX];
  wname(name, cross ? CP_ROLE_CO : CP_ROLE_O, stack_of(kind), l, "");
  return cp_og_linear(g, cp_og_merge_heads(g, ctxv, m->n_heads, m->d_head), o, name);
}

/* x W^T of linear `role` of `stack`'s layer l, split into heads [B, H, rows, dh]. */
static const char *heads(t5_t *t, const char *x, const cp_linear *L, cp_tensor_role role, cp_stack_kind stack,
                         int l) {
  char name[CP_TENSOR_NAME_MAX];
  wname(name, role, stack, l, "");
  return cp_og_split_heads(t->g, cp_og_linear(t->g, x, L, name), t->m->n_heads, t->m->d_head);
}

/* x + f(norm(x)): the pre-norm residual every T5 sub-layer has; norm weights of `role` in `stack`'s
 * layer l. */
static const char *norm(t5_t *t, const char *x, const cp_norm_weights *w, cp_tensor_role role, cp_stack_kind stack,
                        int l) {
  char name[CP_TENSOR_NAME_MAX];
  wname(name, role, stack, l, "");
  return cp_og_norm(t->g, x, w, t->m->norm, t->m->norm_eps, t->m->d_model, name);
}

/* Graph positions 0 .. n-1 as [1, 1, n, 1] (queries) and [1, 1, 1, n] (keys) from a scalar n. */
static void self_positions(t5_t *t, const char *start, const char *n_q, const char *n_keys) {
  static const int64_t ax013[] = {0, 1, 3}, ax012[] = {0, 1, 2};
  cp_og *g = t->g;
  const char *one = cp_og_i64(g, 1);
  t->qpos = cp_og_unsqueeze(g, cp_og_op3(g, "Range", start, cp_og_op2(g, "Add", start, n_q), one), ax013, 3);
  t->kpos = cp_og_unsqueeze(g, cp_og_op3(g, "Range", cp_og_i64(g, 0), n_keys, one), ax012, 3);
  t->n_keys = n_keys;
}

/* [B, 1, 1, T] bool from an int64 mask [B, T]. */
static const char *key_mask(cp_og *g, const char *mask) {
  static const int64_t ax12[] = {1, 2};
  return cp_og_cast(g, cp_og_unsqueeze(g, mask, ax12, 2), CP_OG_BOOL);
}

/* The cache of layer l, slot w (KV_NAMES): concat(kept past, now) on the position axis. */
static const char *cache(t5_t *t, int l, int w, const char *now) {
  int64_t zero = 0;
  const char *keep = w < 2 ? t->keep_dec : t->keep_enc;
  const char *kept = slice_axis(t->g, t->past[l * 4 + w], cp_og_i64s(t->g, &zero, 1), keep, 2);
  return t->present[l * 4 + w] = cp_og_concat(t->g, kept, now, 2);
}

/* ---------------------------------------------------------------- layers */

/* One T5 layer's state for the residual layout's ops (ctxpatch/model/layer_layout.h, onnx_layer.h);
 * the decoder's self-attention keys and values go through its cache. */
typedef struct {
  cp_og_layer og; /* first: the shared graph ops take the context as a cp_og_layer */
  t5_t *t;
  int l;
  cp_stack_kind stack;
} layer_ctx;

static int op_norm(void *ctx, cp_layer_norm which, cp_slot dst, cp_slot src) {
  layer_ctx *c = ctx;
  const cp_layer *ly = c->og.ly;
  const cp_norm_weights *w =
      which == CP_LAYER_NORM_ATTN ? &ly->attn_norm : which == CP_LAYER_NORM_CROSS ? &ly->cross_norm : &ly->ffn_norm;
  cp_tensor_role role = which == CP_LAYER_NORM_ATTN    ? CP_ROLE_ATTN_NORM
                        : which == CP_LAYER_NORM_CROSS ? CP_ROLE_CROSS_NORM
                                                       : CP_ROLE_FFN_NORM;
  c->og.v[dst] = norm(c->t, c->og.v[src], w, role, c->stack, c->l);
  return 0;
}
static int op_attn(void *ctx, bool cross, cp_slot dst, cp_slot src) {
  layer_ctx *c = ctx;
  t5_t *t = c->t;
  const cp_layer *ly = c->og.ly;
  const cp_stack_kind S = c->stack;
  const int l = c->l;
  const char *h = c->og.v[src];
  if (cross) {
    const char *q = heads(t, h, &ly->cq, CP_ROLE_CQ, S, l);
    const char *k = cache(t, l, 2, heads(t, t->enc_rest, &ly->ck, CP_ROLE_CK, S, l));
    const char *v = cache(t, l, 3, heads(t, t->enc_rest, &ly->cv, CP_ROLE_CV, S, l));
    c->og.v[dst] = attend(t, l, CP_ATTN_CROSS, q, k, v, &ly->co);
  } else if (S == CP_STACK_DECODER) {
    const char *q = heads(t, h, &ly->q, CP_ROLE_Q, S, l);
    const char *k = cache(t, l, 0, heads(t, h, &ly->k, CP_ROLE_K, S, l));
    const char *v = cache(t, l, 1, heads(t, h, &ly->v, CP_ROLE_V, S, l));
    c->og.v[dst] = attend(t, l, CP_ATTN_DECODER_SELF, q, k, v, &ly->o);
  } else {
    const char *q = heads(t, h, &ly->q, CP_ROLE_Q, S, l), *k = heads(t, h, &ly->k, CP_ROLE_K, S, l);
    const char *v = heads(t, h, &ly->v, CP_ROLE_V, S, l);
    c->og.v[dst] = attend(t, l, CP_ATTN_ENCODER_SELF, q, k, v, &ly->o);
  }
  return 0;
}
static int op_ffn_add(void *ctx, cp_slot dst, cp_slot src) {
  layer_ctx *c = ctx;
  return cp_og_layer_ffn_add(&c->og, dst, src, c->stack, c->l);
}
static const cp_layer_ops k_layer_ops = {op_norm, op_attn, cp_og_layer_add, cp_og_layer_copy, op_ffn_add, NULL, NULL};

/* Layer l of the encoder or decoder stack over x, pre-norm (the decoder's with cross-attention). */
static const char *t5_layer(t5_t *t, int l, bool decoder, const char *x) {
  const cp_stack *st = decoder ? &t->m->decoder : &t->m->encoder;
  layer_ctx c = {.og = {t->g, t->m, &st->layers[l], {x}}, .t = t, .l = l,
                 .stack = decoder ? CP_STACK_DECODER : CP_STACK_ENCODER};
  (void)cp_layer_run(&k_layer_ops, &c, CP_RESIDUAL_PRE_NORM, decoder); /* graph errors stay in the builder */
  return c.og.v[CP_SLOT_X];
}

/* ---------------------------------------------------------------- encoder */

int cp_onnx_t5_encoder_graph(cp_og *g, const cp_model *m, const cp_rule *rule) {
  t5_t t = {.g = g, .m = m, .rule = rule};
  cp_model_rule_model(&t.rm, m);
  cp_onnx_dim bs[2] = {{0, "batch_size"}, {0, "encoder_sequence_length"}};
  t.ids = cp_og_input(g, "input_ids", CP_I64, 2, bs);
  const char *mask = cp_og_input(g, "attention_mask", CP_I64, 2, bs);
  const char *n = cp_og_op2(g, "Gather", cp_og_op1(g, "Shape", t.ids), cp_og_i64(g, 1)); /* S, a scalar */
  self_positions(&t, cp_og_i64(g, 0), n, n);
  t.visible = key_mask(g, mask); /* bidirectional: every unmasked key */
  int64_t dims[2] = {m->vocab, m->d_model};
  char name[CP_TENSOR_NAME_MAX];
  const char *embed =
      cp_og_weight_as(g, wname(name, CP_ROLE_EMBED, CP_STACK_ENCODER, 0, ".weight"), m->embed, m->embed_dtype, 2, dims, true);
  const char *x = cp_og_op2(g, "Gather", embed, t.ids);
  for (int l = 0; l < m->encoder.n_layers; l++) x = t5_layer(&t, l, false, x);
  x = norm(&t, x, &m->encoder.final_norm, CP_ROLE_FINAL_NORM, CP_STACK_ENCODER, 0);
  cp_onnx_dim out[3] = {{0, "batch_size"}, {0, "encoder_sequence_length"}, {m->d_model, NULL}};
  return cp_og_output(g, "last_hidden_state", x, CP_F32, 3, out);
}

/* ---------------------------------------------------------------- merged decoder */

/* Inputs in Optimum's order; the kept lengths of the pasts; positions and masks. */
static void decoder_inputs(t5_t *t) {
  const cp_model *m = t->m;
  cp_og *g = t->g;
  cp_onnx_dim ids_d[2] = {{0, "batch_size"}, {0, "decoder_sequence_length"}};
  cp_onnx_dim mask_d[2] = {{0, "batch_size"}, {0, "encoder_sequence_length"}};
  cp_onnx_dim ehs_d[3] = {{0, "batch_size"}, {0, "encoder_sequence_length"}, {m->d_model, NULL}};
  cp_onnx_dim past_d[4] = {{0, "batch_size"}, {m->n_heads, NULL}, {0, NULL}, {m->d_head, NULL}};
  cp_onnx_dim uc_d[1] = {{1, NULL}};
  t->ids = cp_og_input(g, "input_ids", CP_I64, 2, ids_d);
  const char *enc_mask = cp_og_input(g, "encoder_attention_mask", CP_I64, 2, mask_d);
  const char *ehs = cp_og_input(g, "encoder_hidden_states", CP_F32, 3, ehs_d);
  for (int l = 0; l < m->decoder.n_layers; l++)
    for (int w = 0; w < 4; w++) {
      char name[96];
      snprintf(name, sizeof name, "past_key_values.%d.%s", l, KV_NAMES[w]);
      past_d[2].param = w < 2 ? "past_decoder_sequence_length" : "encoder_sequence_length_out";
      t->past[l * 4 + w] = cp_og_input(g, name, CP_F32, 4, past_d);
    }
  const char *uc = cp_og_cast(g, cp_og_input(g, "use_cache_branch", CP_BOOL, 1, uc_d), CP_OG_INT64); /* [1] */
  t->keep_dec = cp_og_op2(g, "Mul", uc, dim_of(g, t->past[0], 2));
  t->keep_enc = cp_og_op2(g, "Mul", uc, dim_of(g, t->past[2], 2));
  int64_t end = INT64_MAX;
  t->enc_rest = slice_axis(g, ehs, t->keep_enc, cp_og_i64s(g, &end, 1), 1);
  /* Self-attention: queries at kept_past + 0 .. s-1 against keys 0 .. kept_past + s - 1. */
  static const int64_t ax0[] = {0}, ax012[] = {0, 1, 2};
  const char *past_n = cp_og_op2(g, "Squeeze", t->keep_dec, cp_og_i64s(g, ax0, 1));
  const char *s = cp_og_op2(g, "Gather", cp_og_op1(g, "Shape", t->ids), cp_og_i64(g, 1));
  self_positions(t, past_n, s, cp_og_op2(g, "Add", past_n, s));
  t->visible = cp_og_op2(g, "GreaterOrEqual", t->qpos, t->kpos); /* causal [1, 1, S, T] */
  /* Cross-attention: every unmasked encoder position. */
  t->cross_n = cp_og_op2(g, "Gather", cp_og_op1(g, "Shape", enc_mask), cp_og_i64(g, 1));
  t->cross_kpos = cp_og_unsqueeze(g, cp_og_op3(g, "Range", cp_og_i64(g, 0), t->cross_n, cp_og_i64(g, 1)), ax012, 3);
  t->cross_visible = key_mask(g, enc_mask);
}

int cp_onnx_t5_decoder_graph(cp_og *g, const cp_model *m, const cp_rule *rule) {
  const int L = m->decoder.n_layers;
  t5_t t = {.g = g, .m = m, .rule = rule};
  cp_model_rule_model(&t.rm, m);
  t.past = calloc((size_t)L * 4 + 1, sizeof *t.past);
  t.present = calloc((size_t)L * 4 + 1, sizeof *t.present);
  if (!t.past || !t.present) {
    cp_og_fail(g, cp_nomem("onnx export: T5 decoder"));
    goto done;
  }
  decoder_inputs(&t);
  int64_t dims[2] = {m->vocab, m->d_model};
  char wn[CP_TENSOR_NAME_MAX];
  t.embed =
      cp_og_weight_as(g, wname(wn, CP_ROLE_EMBED, CP_STACK_DECODER, 0, ".weight"), m->embed, m->embed_dtype, 2, dims, true);
  const char *x = cp_og_op2(g, "Gather", t.embed, t.ids); /* [B, S, D] */
  for (int l = 0; l < L; l++) x = t5_layer(&t, l, true, x);
  x = norm(&t, x, &m->decoder.final_norm, CP_ROLE_FINAL_NORM, CP_STACK_DECODER, 0);
  const char *w = m->lm_head == m->embed ? t.embed
                  : cp_og_weight_as(g, wname(wn, CP_ROLE_LM_HEAD, CP_STACK_DECODER, 0, ".weight"), m->lm_head,
                                    m->lm_head_dtype, 2, dims, true);
  cp_onnx_dim out[3] = {{0, "batch_size"}, {0, "decoder_sequence_length"}, {m->vocab, NULL}};
  if (cp_og_output(g, "logits", cp_og_lm_head(g, m, x, w, t.ids), CP_F32, 3, out) < 0) goto done;
  cp_onnx_dim pres_d[4] = {{0, "batch_size"}, {m->n_heads, NULL}, {0, NULL}, {m->d_head, NULL}};
  for (int l = 0; l < L; l++)
    for (int s = 0; s < 4; s++) {
      char name[96];
      snprintf(name, sizeof name, "present.%d.%s", l, KV_NAMES[s]);
      pres_d[2].param = s < 2 ? "present_decoder_sequence_length" : "encoder_sequence_length_out";
      if (cp_og_output(g, name, t.present[l * 4 + s], CP_F32, 4, pres_d) < 0) goto done;
    }
done:
  free(t.past);
  free(t.present);
  return cp_og_status(g);
}
