/* The decoder-only ONNX graph (export/onnx/onnx_decoder.h): Llama/Mistral/Qwen/Phi-3, Gemma and
 * Gemma 2, GPT-NeoX, BLOOM, MPT, FIRE and GPT-2, computing what the engine computes (engine/engine_run.c run_stack, engine_cpu.c
 * cpu_attention and cpu_head) with the attention probabilities from export/onnx/onnx_attention.c. */
#include "export/onnx/onnx_decoder.h"
#include "export/onnx/onnx_layer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "export/onnx/onnx_attention.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/model/onnx_names.h"

/* Per-export values every layer shares. */
typedef struct {
  cp_og *g;
  const cp_model *m;
  const cp_rule *rule;
  cp_rule_model rm;
  const char *ids, *mask, *pos; /* graph inputs */
  const char *rope_pos;         /* [B, 1, S, 1] position_ids: what RoPE rotates by */
  const char *qpos, *kpos, *n_keys, *visible;
  /* RoPE tables, [1]: Gemma 3's sliding layers' (rope_local; NULL elsewhere) */
  const char *cos[2], *sin[2];   /* [B, 1, S, rope_dims] */
  const char *kcos[2], *ksin[2]; /* with an unrotated cache: [1, 1, T, rope_dims] (key_tables) */
  const char *embed;            /* the embedding initializer [V, D] */
  const char *visible_window;   /* visible and inside the model's sliding window (made once) */
  cp_onnx_attn_memo memo;
} dec_t;


/* ---------------------------------------------------------------- inputs and positions */

static void add_inputs(dec_t *d) {
  cp_og *g = d->g;
  cp_onnx_dim bs[2] = {{0, "batch_size"}, {0, "sequence_length"}};
  cp_onnx_dim bt[2] = {{0, "batch_size"}, {0, "total_sequence_length"}};
  d->ids = cp_og_input(g, "input_ids", CP_I64, 2, bs);
  d->mask = cp_og_input(g, "attention_mask", CP_I64, 2, bt);
  d->pos = cp_og_input(g, "position_ids", CP_I64, 2, bs);
}

/* Query positions [1, 1, S, 1], key positions [1, 1, 1, T] and what each query sees. A query's
 * place is its index in the cache, T - S + row, as the keys' are 0 .. T-1: masks, windows and rule
 * distances compare the two in one frame whatever position_ids counts from (transformers.js 4.3.1
 * gives gemma3_text position_ids from 1, transformers' Gemma3ForCausalLM from 0). RoPE rotates by
 * position_ids (rope_pos), which a shared offset leaves each query-key score unchanged. */
static void positions(dec_t *d) {
  cp_og *g = d->g;
  static const int64_t ax13[] = {1, 3}, ax013[] = {0, 1, 3}, ax012[] = {0, 1, 2}, ax12[] = {1, 2};
  const char *one = cp_og_i64(g, 1);
  d->rope_pos = cp_og_unsqueeze(g, d->pos, ax13, 2);
  const char *shape = cp_og_op1(g, "Shape", d->mask);
  d->n_keys = cp_og_op2(g, "Gather", shape, one); /* T, a scalar */
  const char *n_q = cp_og_op2(g, "Gather", cp_og_op1(g, "Shape", d->ids), one); /* S */
  const char *start = cp_og_op2(g, "Sub", d->n_keys, n_q);
  d->qpos = cp_og_unsqueeze(g, cp_og_op3(g, "Range", start, d->n_keys, one), ax013, 3);
  const char *range = cp_og_op3(g, "Range", cp_og_i64(g, 0), d->n_keys, one);
  d->kpos = cp_og_unsqueeze(g, range, ax012, 3);
  const char *causal = cp_og_op2(g, "GreaterOrEqual", d->qpos, d->kpos);  /* [1, 1, S, T] */
  const char *keep = cp_og_cast(g, cp_og_unsqueeze(g, d->mask, ax12, 2), CP_OG_BOOL); /* [B, 1, 1, T] */
  d->visible = cp_og_op2(g, "And", causal, keep);
}

/* Which table layer l rotates with: 1 for Gemma 3's sliding layers (cp_model_rope_at), else 0. */
static int table_of(const dec_t *d, int l) {
  double div;
  cp_rope_table scratch; /* unused: cp_onnx_export_rule refuses tables by call length */
  return cp_model_rope_at(d->m, l, 0, &scratch, &div) == &d->m->rope_local;
}

/* RoPE tables cos, sin [B, 1, S, rope_dims] of the query positions, made once per table. */
static void rope_tables(dec_t *d, int l) {
  const int t = table_of(d, l);
  if (!d->cos[t]) cp_onnx_rope_tables(d->g, d->m, l, d->rope_pos, false, &d->cos[t], &d->sin[t]);
}

/* The tables of the key positions 0 .. T-1, [1, 1, T, rope_dims], made once per table: a cache of
 * unrotated keys is rotated in the graph at every step. */
static void key_tables(dec_t *d, int l) {
  const int t = table_of(d, l);
  if (d->kcos[t]) return;
  static const int64_t ax013[] = {0, 1, 3};
  const char *range = cp_og_op3(d->g, "Range", cp_og_i64(d->g, 0), d->n_keys, cp_og_i64(d->g, 1));
  cp_onnx_rope_tables(d->g, d->m, l, cp_og_unsqueeze(d->g, range, ax013, 3), false, &d->kcos[t], &d->ksin[t]);
}

/* ---------------------------------------------------------------- attention */

/* [B, Hkv, T, dh] -> [B, H, T, dh], kv head g serving query heads g*G .. g*G+G-1 (engine:
 * t.g = h / (H / Hkv)). */
static const char *expand_kv(dec_t *d, const char *x) {
  const cp_model *m = d->m;
  if (m->n_kv_heads == m->n_heads) return x;
  static const int64_t ax2[] = {2};
  int64_t rep[5] = {1, 1, m->n_heads / m->n_kv_heads, 1, 1}, shape[4] = {0, m->n_heads, -1, m->d_head};
  const char *e = cp_og_op2(d->g, "Expand", cp_og_unsqueeze(d->g, x, ax2, 1), cp_og_i64s(d->g, rep, 5));
  return cp_og_op2(d->g, "Reshape", e, cp_og_i64s(d->g, shape, 4));
}

/* The layer's past cache input and present output for one of "key" / "value". */
static const char *cache(dec_t *d, int l, const char *which, const char *now) {
  char in[64], out[64];
  cp_onnx_dim past[4] = {{0, "batch_size"}, {d->m->n_kv_heads, NULL}, {0, "past_sequence_length"},
                         {d->m->d_head, NULL}};
  cp_onnx_dim total[4] = {{0, "batch_size"}, {d->m->n_kv_heads, NULL}, {0, "total_sequence_length"},
                          {d->m->d_head, NULL}};
  snprintf(in, sizeof in, "past_key_values.%d.%s", l, which);
  snprintf(out, sizeof out, "present.%d.%s", l, which);
  const char *all = cp_og_concat(d->g, cp_og_input(d->g, in, CP_F32, 4, past), now, 2);
  cp_og_output(d->g, out, all, CP_F32, 4, total);
  return all;
}

static const char *clip(dec_t *d, const char *x) {
  if (d->m->clip_qkv <= 0) return x;
  return cp_og_op3(d->g, "Clip", x, cp_og_f32(d->g, -d->m->clip_qkv), cp_og_f32(d->g, d->m->clip_qkv));
}

/* The base name of layer l's weight of `role` (ctxpatch/model/onnx_names.h). */
static const char *wname(char buf[CP_TENSOR_NAME_MAX], const dec_t *d, cp_tensor_role role, int l) {
  return cp_onnx_name(buf, d->m->family, role, CP_STACK_DECODER, l, "");
}

/* The model's norm of `role` over the last axis of x (Gemma's (1 + w) with the 1 as a node). */
static const char *norm(dec_t *d, const char *x, const cp_norm_weights *nw, cp_tensor_role role, int l) {
  const cp_model *m = d->m;
  char name[CP_TENSOR_NAME_MAX];
  if (cp_family_norm_plus_one(m->family, role))
    return cp_og_norm_plus_one(d->g, x, nw, m->norm_eps, m->d_model, wname(name, d, role, l));
  return cp_og_norm(d->g, x, nw, m->norm, m->norm_eps, m->d_model, wname(name, d, role, l));
}

/* x -> cap tanh(x / cap) (Gemma 2's soft-caps; engine: softcap_span, engine_run.c's final logits). */
static const char *softcap(cp_og *g, const char *x, float cap) {
  return cp_og_op2(g, "Mul", cp_og_op1(g, "Tanh", cp_og_op2(g, "Div", x, cp_og_f32(g, cap))), cp_og_f32(g, cap));
}

/* What a sliding layer's queries see: visible and qpos - kpos < window (Gemma 2; decision 17). */
static const char *window_visible(dec_t *d) {
  if (!d->visible_window) {
    const char *dist = cp_og_op2(d->g, "Sub", d->qpos, d->kpos);
    const char *in = cp_og_op2(d->g, "Less", dist, cp_og_i64(d->g, d->rm.sliding_window));
    d->visible_window = cp_og_op2(d->g, "And", d->visible, in);
  }
  return d->visible_window;
}

/* Self-attention of layer l on h [B, S, D]: returns the output projection [B, S, D]. */
static const char *attention(dec_t *d, int l, const char *h) {
  const cp_model *m = d->m;
  const cp_layer *ly = &m->decoder.layers[l];
  cp_og *g = d->g;
  char name[CP_TENSOR_NAME_MAX];
  cp_attn_plan plan;
  cp_rule_plan(&plan, d->rule, &d->rm, CP_ATTN_DECODER_SELF, l);
  const char *q = cp_og_linear(g, h, &ly->q, wname(name, d, CP_ROLE_Q, l));
  const char *k = cp_og_linear(g, h, &ly->k, wname(name, d, CP_ROLE_K, l));
  if (m->qk_norm_whole) { /* OLMo 2: RMSNorm over the whole q and k rows, before the head split */
    q = cp_og_norm(g, q, &ly->q_norm, CP_NORM_RMS, m->norm_eps, m->n_heads * m->d_head,
                   wname(name, d, CP_ROLE_Q_NORM, l));
    k = cp_og_norm(g, k, &ly->k_norm, CP_NORM_RMS, m->norm_eps, m->n_kv_heads * m->d_head,
                   wname(name, d, CP_ROLE_K_NORM, l));
  }
  q = cp_og_split_heads(g, clip(d, q), m->n_heads, m->d_head);
  k = cp_og_split_heads(g, clip(d, k), m->n_kv_heads, m->d_head);
  if (ly->q_norm.w && !m->qk_norm_whole && cp_family_norm_plus_one(m->family, CP_ROLE_Q_NORM)) {
    /* Gemma 3: (1 + w) per head */
    q = cp_og_norm_plus_one(g, q, &ly->q_norm, m->norm_eps, m->d_head, wname(name, d, CP_ROLE_Q_NORM, l));
    k = cp_og_norm_plus_one(g, k, &ly->k_norm, m->norm_eps, m->d_head, wname(name, d, CP_ROLE_K_NORM, l));
  } else if (ly->q_norm.w && !m->qk_norm_whole) { /* Qwen3: RMSNorm over each head's dh, before RoPE (the engine's head norm) */
    q = cp_og_norm(g, q, &ly->q_norm, CP_NORM_RMS, m->norm_eps, m->d_head, wname(name, d, CP_ROLE_Q_NORM, l));
    k = cp_og_norm(g, k, &ly->k_norm, CP_NORM_RMS, m->norm_eps, m->d_head, wname(name, d, CP_ROLE_K_NORM, l));
  }
  const char *v = cp_og_linear(g, h, &ly->v, wname(name, d, CP_ROLE_V, l));
  v = cp_og_split_heads(g, clip(d, v), m->n_kv_heads, m->d_head);
  const char *q_raw = NULL, *k_raw = NULL, *kall;
  if (m->pos == CP_POS_ROPE) {
    const int t = table_of(d, l);
    rope_tables(d, l);
    q_raw = q, q = cp_onnx_rope(g, m, q, d->cos[t], d->sin[t]);
    if (cp_onnx_attn_needs_raw_keys(m, &plan)) {
      /* the cache holds unrotated keys (ctxpatch.kv_cache = "unrotated"), rotated here each step */
      const char *raw_all = cache(d, l, "key", k);
      key_tables(d, l);
      k_raw = expand_kv(d, raw_all);
      kall = expand_kv(d, cp_onnx_rope(g, m, raw_all, d->kcos[t], d->ksin[t]));
    } else {
      kall = expand_kv(d, cache(d, l, "key", cp_onnx_rope(g, m, k, d->cos[t], d->sin[t])));
    }
  } else {
    kall = expand_kv(d, cache(d, l, "key", k));
  }
  const char *vall = expand_kv(d, cache(d, l, "value", v));
  cp_onnx_attn_ctx c = {.g = g, .m = m, .plan = &plan, .kind = CP_ATTN_DECODER_SELF, .layer = l,
                        .fire = ly->fire, .q = q, .k = kall, .q_raw = q_raw, .k_raw = k_raw,
                        .qpos = d->qpos, .kpos = d->kpos, .n_keys = d->n_keys,
                        .visible = plan.window > 0 ? window_visible(d) : d->visible,
                        .memo = &d->memo};
  const char *ctxv = cp_og_op2(g, "MatMul", cp_onnx_attention_probs(&c), vall); /* [B, H, S, dh] */
  const char *merged = cp_og_merge_heads(g, ctxv, m->n_heads, m->d_head);
  return cp_og_linear(g, merged, &ly->o, wname(name, d, CP_ROLE_O, l));
}

/* ---------------------------------------------------------------- blocks */

/* One layer's state for the residual layout's ops (ctxpatch/model/layer_layout.h, onnx_layer.h). */
typedef struct {
  cp_og_layer og; /* first: the shared graph ops take the context as a cp_og_layer */
  dec_t *d;
  int l;
} layer_ctx;

static int op_norm(void *ctx, cp_layer_norm which, cp_slot dst, cp_slot src) {
  layer_ctx *c = ctx;
  const cp_layer *ly = c->og.ly;
  const cp_norm_weights *nw = &ly->ffn_norm;
  cp_tensor_role role = CP_ROLE_FFN_NORM;
  if (which == CP_LAYER_NORM_ATTN) nw = &ly->attn_norm, role = CP_ROLE_ATTN_NORM;
  else if (which == CP_LAYER_NORM_POST_ATTN) nw = &ly->post_attn_norm, role = CP_ROLE_POST_ATTN_NORM;
  else if (which == CP_LAYER_NORM_POST_FFN) nw = &ly->post_ffn_norm, role = CP_ROLE_POST_FFN_NORM;
  c->og.v[dst] = norm(c->d, c->og.v[src], nw, role, c->l);
  return 0;
}
static int op_attn(void *ctx, bool cross, cp_slot dst, cp_slot src) {
  layer_ctx *c = ctx;
  (void)cross; /* decoder-only graphs have no cross-attention (T5 is onnx_t5.c) */
  c->og.v[dst] = attention(c->d, c->l, c->og.v[src]);
  return 0;
}
static int op_ffn_add(void *ctx, cp_slot dst, cp_slot src) {
  layer_ctx *c = ctx;
  return cp_og_layer_ffn_add(&c->og, dst, src, CP_STACK_DECODER, c->l);
}
static int op_ffn(void *ctx, cp_slot dst, cp_slot src) { /* Gemma 2's sandwich: the FFN's output alone */
  layer_ctx *c = ctx;
  c->og.v[dst] = cp_og_ffn(c->og.g, c->og.m, c->og.ly, c->og.v[src], CP_STACK_DECODER, c->l);
  return 0;
}
/* Granite's residual multiplier on a module's output (engine: the backend's scale). */
static int op_scale(void *ctx, cp_slot s) {
  layer_ctx *c = ctx;
  c->og.v[s] = cp_og_op2(c->og.g, "Mul", c->og.v[s], cp_og_f32(c->og.g, c->d->m->residual_scale));
  return 0;
}
static const cp_layer_ops k_layer_ops = {op_norm,    op_attn, cp_og_layer_add, cp_og_layer_copy,
                                         op_ffn_add, op_ffn,  op_scale};

/* One layer over x [B, S, D] in the model's residual layout, as the engines run it. */
static const char *layer(dec_t *d, int l, const char *x) {
  layer_ctx c = {.og = {d->g, d->m, &d->m->decoder.layers[l], {x}}, .d = d, .l = l};
  (void)cp_layer_run(&k_layer_ops, &c, cp_model_residual(d->m), false); /* graph errors stay in the builder */
  return c.og.v[CP_SLOT_X];
}

/* Final norm and output head: logits [B, S, V] by Gemm against the [V, D] head (the embedding
 * initializer itself when tied, so the weights are stored once). */
static const char *head(dec_t *d, const char *x) {
  const cp_model *m = d->m;
  cp_og *g = d->g;
  char name[CP_TENSOR_NAME_MAX];
  const char *h = norm(d, x, &m->decoder.final_norm, CP_ROLE_FINAL_NORM, 0);
  int64_t dims[2] = {m->vocab, m->d_model};
  const char *w = m->lm_head == m->embed ? d->embed
                  : cp_og_weight_as(g, cp_onnx_name(name, m->family, CP_ROLE_LM_HEAD, CP_STACK_DECODER, 0, ".weight"),
                                    m->lm_head, m->lm_head_dtype, 2, dims, true);
  const char *logits = cp_og_lm_head(g, m, h, w, d->ids);
  return m->final_softcap > 0 ? softcap(g, logits, m->final_softcap) : logits;
}

const char *cp_onnx_decoder_kv_cache(const cp_model *m, const cp_rule *rule) {
  cp_rule_model rm;
  cp_model_rule_model(&rm, m);
  for (int l = 0; l < m->decoder.n_layers; l++) {
    cp_attn_plan plan;
    cp_rule_plan(&plan, rule, &rm, CP_ATTN_DECODER_SELF, l);
    if (cp_onnx_attn_needs_raw_keys(m, &plan)) return "unrotated";
  }
  return "rotated";
}

int cp_onnx_decoder_graph(cp_og *g, const cp_model *m, const cp_rule *rule) {
  if (m->family == CP_FAMILY_T5)
    return cp_og_fail(g, cp_error_set(CP_EONNX_EXPORT, "onnx export: T5 is two graphs (export/onnx/onnx_t5.h), not a decoder-only one"));
  dec_t d = {.g = g, .m = m, .rule = rule};
  cp_model_rule_model(&d.rm, m);
  add_inputs(&d);
  positions(&d);
  /* the full layers' table first, as before Gemma 3 (layer -1: m->rope), the sliding layers' on first use */
  if (m->pos == CP_POS_ROPE) cp_onnx_rope_tables(g, m, -1, d.rope_pos, false, &d.cos[0], &d.sin[0]);
  int64_t dims[2] = {m->vocab, m->d_model};
  char name[CP_TENSOR_NAME_MAX];
  d.embed = cp_og_weight_as(g, cp_onnx_name(name, m->family, CP_ROLE_EMBED, CP_STACK_DECODER, 0, ".weight"), m->embed,
                            m->embed_dtype, 2, dims, true);
  const char *x = cp_og_op2(g, "Gather", d.embed, d.ids); /* [B, S, D] */
  if (m->embed_scale != 1.0f) x = cp_og_op2(g, "Mul", x, cp_og_f32(g, m->embed_scale)); /* Gemma: x sqrt(D); Granite */
  if (m->pos_embed) { /* GPT-2 wpe: the learned row of each absolute position (engine: embed) */
    int64_t pdims[2] = {m->train_len, m->d_model};
    const char *wpe = cp_og_weight(g, cp_onnx_name(name, m->family, CP_ROLE_POS_EMBED, CP_STACK_DECODER, 0, ".weight"),
                                   m->pos_embed, 2, pdims, true);
    x = cp_og_op2(g, "Add", x, cp_og_op2(g, "Gather", wpe, d.pos));
  }
  if (m->embed_norm.w) x = norm(&d, x, &m->embed_norm, CP_ROLE_EMBED_NORM, 0);
  for (int l = 0; l < m->decoder.n_layers; l++) x = layer(&d, l, x);
  cp_onnx_dim out[3] = {{0, "batch_size"}, {0, "sequence_length"}, {m->vocab, NULL}};
  return cp_og_output(g, "logits", head(&d, x), CP_F32, 3, out);
}
