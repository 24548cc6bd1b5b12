/* Checkpoint folder -> cp_model (include/ctxpatch/import/model.h): each family's settings, then its
 * tensors loaded through the family table (include/ctxpatch/model/families.h) with shape checks
 * and fused-QKV splitting. Family semantics follow the HF modeling code of each family (T5, BLOOM,
 * MPT, Llama/Mistral, GPT-NeoX, GPT-2) and docs/fire-layout.md. */
#include "ctxpatch/import/model.h"

#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/model/gguf_rows.h"
#include "ctxpatch/import/checkpoint.h"
#include "ctxpatch/import/names.h"
#include "ctxpatch/import/gguf_model.h"
#include "ctxpatch/import/onnx_import.h"

typedef struct {
  cp_model *m;
  cp_checkpoint *ck;
  const char *path;
  cp_names nm; /* the checkpoint's tensor names */
  bool stored; /* cp_model_open_params.stored_dtype */
} loader;

#define TRY(expr)        \
  do {                   \
    rc = (expr);         \
    if (rc) goto done;   \
  } while (0)

const char *cp_act_name(cp_act act) {
  switch (act) {
    case CP_ACT_RELU: return "relu";
    case CP_ACT_GELU: return "gelu";
    case CP_ACT_GELU_TANH: return "gelu_tanh";
    case CP_ACT_SILU: return "silu";
  }
  return "?";
}

static int keep(cp_model *m, float *buf) {
  int rc = CP_ARRAY_RESERVE(m->bufs, m->cap_bufs, m->n_bufs + 1, "model");
  if (rc) {
    free(buf);
    return rc;
  }
  m->bufs[m->n_bufs++] = buf;
  return 0;
}

static float *alloc_floats(cp_model *m, size_t n) {
  float *p = calloc(n ? n : 1, sizeof *p);
  if (!p) {
    cp_nomem("model: %zu floats", n);
    return NULL;
  }
  if (keep(m, p)) return NULL;
  return p;
}

static bool has(const loader *L, const char *name) { return cp_checkpoint_find(L->ck, name) != NULL; }

/* Loads `name` with shape [d0] (ndim 1), [d0, d1] (ndim 2) or a scalar (ndim 0). */
static int load(const float **out, loader *L, const char *name, int ndim, int64_t d0, int64_t d1) {
  int64_t shape[2] = {d0, d1};
  float *buf = NULL;
  int rc = cp_checkpoint_load_f32(&buf, L->ck, name, ndim, shape);
  if (rc) return rc;
  if ((rc = keep(L->m, buf))) return rc;
  *out = buf;
  return 0;
}

/* Whether `n` bytes at a and b are equal, compared in chunks whose resident pages are dropped
 * again (cp_checkpoint_release), so comparing two checkpoints does not hold both in memory. */
static bool same_bytes(const cp_checkpoint *ca, size_t ia, const void *a, const cp_checkpoint *cb, size_t ib,
                       const void *b, uint64_t n) {
  const uint64_t chunk = (uint64_t)4 << 20;
  bool same = true;
  for (uint64_t at = 0; same && at < n; at += chunk) {
    uint64_t len = n - at < chunk ? n - at : chunk;
    same = memcmp((const char *)a + at, (const char *)b + at, (size_t)len) == 0;
    cp_checkpoint_release(ca, ia, at, len);
    cp_checkpoint_release(cb, ib, at, len);
  }
  return same;
}

/* The matrix `name` [rows, cols] (or [rows] when cols is 0) as the engines read it: float32
 * (an owned copy), or with L->stored the stored F32/F16/BF16 bytes in place in the mapping, or
 * in the mapping of the share_from model when its tensor of that name is byte-equal. */
static int load_matrix(const void **out, cp_dtype *dtype, loader *L, const char *name, int rows, int cols) {
  int64_t shape[2] = {rows, cols};
  int ndim = cols ? 2 : 1;
  const cp_tensor *t;
  size_t ti;
  *dtype = CP_F32;
  int rc = cp_checkpoint_lookup(&t, &ti, L->ck, name, ndim, shape);
  if (rc) return rc;
  bool in_place = L->stored && t->data && (t->dtype == CP_F32 || t->dtype == CP_F16 || t->dtype == CP_BF16) &&
                  (uintptr_t)t->data % cp_dtype_size(t->dtype) == 0;
  cp_dtype bt_dtype = CP_F32;
  const void *blocks = L->stored && cols && !t->data ? cp_checkpoint_blocks(&bt_dtype, L->ck, ti) : NULL;
  if (blocks) { /* GGUF quant: the blocks as stored, decoded tile by tile by the engine */
    /* rows are whole blocks: the GGUF reader refuses ne[0] not a multiple of the block
     * (tests/gguf/make_gguf_cases.py block_partial), and cols is ne[0] (shape checked above) */
    assert(cols % (int)cp_dtype_block(bt_dtype) == 0);
    *out = blocks;
    *dtype = bt_dtype;
    return 0;
  }
  if (!in_place) {
    const float *f = NULL;
    rc = load(&f, L, name, ndim, rows, cols);
    *out = f;
    return rc;
  }
  *out = t->data;
  *dtype = t->dtype;
  const cp_model *base = L->m->share_from;
  const cp_tensor *bt = base && base->ck ? cp_checkpoint_find(base->ck, name) : NULL;
  size_t bi = 0;
  if (!bt || bt->dtype != t->dtype || bt->nbytes != t->nbytes || !bt->data ||
      cp_checkpoint_lookup(&bt, &bi, base->ck, name, ndim, shape) != 0)
    return 0;
  if (same_bytes(L->ck, ti, t->data, base->ck, bi, bt->data, t->nbytes)) {
    *out = bt->data;
    L->m->shared_bytes += t->nbytes;
  }
  return 0;
}

/* A table dimension in this model's numbers. */
static int dim(const cp_model *m, cp_dim d) {
  switch (d) {
    case CP_DIM_NONE: return 0;
    case CP_DIM_D: return m->d_model;
    case CP_DIM_Q: return m->n_heads * m->d_head;
    case CP_DIM_KV: return m->n_kv_heads * m->d_head;
    case CP_DIM_QKV: return (m->n_heads + 2 * m->n_kv_heads) * m->d_head;
    case CP_DIM_FF: return m->d_ff;
    case CP_DIM_FF2: return 2 * m->d_ff; /* bounded: parse_phi3 keeps d_ff <= 2^30 */
    case CP_DIM_VOCAB: return m->vocab;
    case CP_DIM_BUCKETS: return m->t5_num_buckets;
    case CP_DIM_HEADS: return m->n_heads;
    case CP_DIM_POSITIONS: return (int)m->train_len; /* GPT-2 requires n_positions, an int */
    case CP_DIM_HEAD: return m->d_head;
  }
  return 0;
}

/* Whether a row's matrix is stored [cols, rows]: GPT-2's Conv1D layers in an HF checkpoint. */
static bool stored_in_out(const loader *L, const cp_family_tensor *row) { return cp_names_conv1d(&L->nm, row); }

/* `name` stored [cols, rows] (Conv1D) loaded and transposed into [rows, cols]. */
static int load_transposed(const float **out, loader *L, const char *name, int rows, int cols) {
  const float *t;
  int rc = load(&t, L, name, 2, cols, rows);
  if (rc) return rc;
  float *w = alloc_floats(L->m, (size_t)rows * (size_t)cols);
  if (!w) return CP_ENOMEM;
  for (size_t i = 0; i < (size_t)cols; i++)
    for (size_t o = 0; o < (size_t)rows; o++) w[o * (size_t)cols + i] = t[i * (size_t)rows + o];
  *out = w;
  return 0;
}

/* A row's "<name>.weight" [rows(, cols)] into *w and its "<name>.bias" [rows] into *b as the
 * config's bias rule says (*b NULL when absent). With `dtype` NULL, *w is float32; else a
 * matrix (load_matrix) whose dtype goes to *dtype. */
static int load_row(const void **w, cp_dtype *dtype, const float **b, loader *L, const cp_family_tensor *row,
                    int layer) {
  char wn[CP_TENSOR_NAME_MAX], bn[CP_TENSOR_NAME_MAX];
  int rows = dim(L->m, row->rows), cols = dim(L->m, row->cols);
  cp_names_row(wn, &L->nm, row, layer, ".weight");
  cp_names_row(bn, &L->nm, row, layer, ".bias");
  *b = NULL;
  const float *f = NULL;
  int rc;
  if (dtype) *dtype = CP_F32;
  if (stored_in_out(L, row)) rc = load_transposed(&f, L, wn, rows, cols);
  else if (dtype && row->cols != CP_DIM_NONE) rc = load_matrix(w, dtype, L, wn, rows, cols);
  else rc = load(&f, L, wn, row->cols == CP_DIM_NONE ? 1 : 2, rows, cols);
  if (f) *w = f;
  if (rc) return rc;
  switch (cp_names_bias(row, L->m->cfg)) {
    case CP_BIAS_REQUIRED: return load(b, L, bn, 1, rows, 0);
    case CP_BIAS_OPTIONAL: return has(L, bn) ? load(b, L, bn, 1, rows, 0) : 0;
    default: return 0;
  }
}

/* `f32`: a float32 copy whatever the mode (the loader rearranges its rows). */
static int load_linear_as(cp_linear *out, loader *L, const cp_family_tensor *row, int layer, bool f32) {
  out->n_out = dim(L->m, row->rows);
  out->n_in = dim(L->m, row->cols);
  out->dtype = CP_F32;
  return load_row(&out->w, f32 ? NULL : &out->dtype, &out->b, L, row, layer);
}

static int load_linear(cp_linear *out, loader *L, const cp_family_tensor *row, int layer) {
  return load_linear_as(out, L, row, layer, false);
}

/* Gemma's RMSNorm multiplies by (1 + w) (GemmaRMSNorm.forward, in float32): the 1 is added here,
 * once, so every engine runs the usual x / rms(x) * w'. A GGUF already stores 1 + w (llama.cpp's
 * converter adds it). */
static int load_norm(cp_norm_weights *out, loader *L, const cp_family_tensor *row, int layer) {
  const void *w = NULL;
  int rc = load_row(&w, NULL, &out->b, L, row, layer);
  out->w = w;
  if (rc == 0 && L->m->family == CP_FAMILY_GEMMA && !L->nm.gguf) {
    float *own = (float *)w; /* a float32 copy the model owns (norms always are) */
    for (int i = 0; i < dim(L->m, row->rows); i++) own[i] += 1.0f;
  }
  return rc;
}

/* Splits a fused QKV weight [n_q + 2 n_kv, D] (and bias) into q, k, v in the family's layout:
 * per-head [H, 3, dh] rows when interleaved (needs H == Hkv), else q | k | v concatenated (every
 * GGUF attn_qkv: llama.cpp's converter reorders interleaved rows, cp_gguf_rows). */
static int split_qkv(cp_layer *ly, loader *L, const cp_family_tensor *row, int layer) {
  cp_model *m = L->m;
  int D = m->d_model, dh = m->d_head, nq = dim(m, CP_DIM_Q), nkv = dim(m, CP_DIM_KV);
  bool interleaved = L->nm.fl->qkv == CP_QKV_INTERLEAVED && !L->nm.gguf;
  cp_linear fused;
  int rc = load_linear_as(&fused, L, row, layer, true);
  if (rc) return rc;
  cp_linear *dst[3] = {&ly->q, &ly->k, &ly->v};
  int rows[3] = {nq, nkv, nkv};
  for (int t = 0; t < 3; t++) {
    float *w = alloc_floats(m, (size_t)rows[t] * D);
    float *b = fused.b ? alloc_floats(m, (size_t)rows[t]) : NULL;
    if (!w || (fused.b && !b)) return CP_ENOMEM;
    for (int r = 0; r < rows[t]; r++) {
      size_t src = interleaved ? (size_t)(r / dh) * 3 * dh + (size_t)t * dh + (size_t)(r % dh)
                               : (size_t)(t == 0 ? 0 : t == 1 ? nq : nq + nkv) + (size_t)r;
      memcpy(w + (size_t)r * D, (const float *)fused.w + src * D, (size_t)D * sizeof *w);
      if (b) b[r] = fused.b[src];
    }
    *dst[t] = (cp_linear){w, b, rows[t], D, CP_F32};
  }
  return 0;
}

/* Splits a fused gate | up weight [2 d_ff, D] (Phi-3 gate_up_proj; GGUF phi3 ffn_up) into the gate
 * (first d_ff rows, the half Phi3MLP activates) and up. */
static int split_gate_up(cp_layer *ly, loader *L, const cp_family_tensor *row, int layer) {
  cp_model *m = L->m;
  const size_t D = (size_t)m->d_model, ff = (size_t)m->d_ff;
  cp_linear fused;
  int rc = load_linear_as(&fused, L, row, layer, true);
  if (rc) return rc;
  cp_linear *dst[2] = {&ly->gate, &ly->up};
  for (size_t t = 0; t < 2; t++) {
    float *w = alloc_floats(m, ff * D);
    float *b = fused.b ? alloc_floats(m, ff) : NULL;
    if (!w || (fused.b && !b)) return CP_ENOMEM;
    memcpy(w, (const float *)fused.w + t * ff * D, ff * D * sizeof *w);
    if (b) memcpy(b, fused.b + t * ff, ff * sizeof *b);
    *dst[t] = (cp_linear){w, b, (int)ff, (int)D, CP_F32};
  }
  return 0;
}

/* llama.cpp's converter reorders each head's q/k rows for interleaved rotary pairs: HF row
 * i*dh/2 + j (half i, pair j) is stored at row 2j + i. Puts them back in HF order in an owned
 * copy of the same dtype: a row is whole elements or whole quant blocks, moved byte for byte. */
static int gguf_unpermute(cp_linear *lin, loader *L, int heads) {
  const int dh = L->m->d_head;
  const cp_gguf_rows order = {CP_GGUF_ROWS_ROTARY, heads, dh};
  const size_t rows = (size_t)heads * (size_t)dh;
  const size_t row_bytes = (size_t)cp_dtype_span(lin->dtype, (uint64_t)lin->n_in); /* bounded: the tensor's size */
  unsigned char *w = (unsigned char *)alloc_floats(L->m, (rows * row_bytes + sizeof(float) - 1) / sizeof(float));
  float *b = lin->b ? alloc_floats(L->m, rows) : NULL;
  if (!w || (lin->b && !b)) return CP_ENOMEM;
  for (size_t r = 0; r < rows; r++) { /* HF row r is GGUF row cp_gguf_row_to_gguf(r): one formula */
    size_t src = (size_t)cp_gguf_row_to_gguf(&order, r);
    memcpy(w + r * row_bytes, (const unsigned char *)lin->w + src * row_bytes, row_bytes);
    if (b) b[r] = lin->b[src];
  }
  lin->w = w;
  if (b) lin->b = b;
  return 0;
}

/* q or k of a llama layer read from GGUF: loaded (as stored when the model is), then
 * un-permuted into a copy of the same dtype. */
static int load_rotary(cp_linear *out, loader *L, const cp_family_tensor *row, int layer, int heads) {
  bool rotary = L->nm.gguf && cp_gguf_rows_of(L->m->cfg, row->role).order == CP_GGUF_ROWS_ROTARY;
  int rc = load_linear_as(out, L, row, layer, false);
  if (rc || !rotary) return rc;
  return gguf_unpermute(out, L, heads);
}

/* Loads one per-layer row into its place in the layer. */
static int load_layer_row(cp_layer *ly, loader *L, const cp_family_tensor *row, int layer) {
  switch (row->role) {
    case CP_ROLE_ATTN_NORM: return load_norm(&ly->attn_norm, L, row, layer);
    case CP_ROLE_CROSS_NORM: return load_norm(&ly->cross_norm, L, row, layer);
    case CP_ROLE_FFN_NORM: return load_norm(&ly->ffn_norm, L, row, layer);
    case CP_ROLE_Q_NORM: return load_norm(&ly->q_norm, L, row, layer);
    case CP_ROLE_K_NORM: return load_norm(&ly->k_norm, L, row, layer);
    case CP_ROLE_POST_ATTN_NORM: return load_norm(&ly->post_attn_norm, L, row, layer);
    case CP_ROLE_POST_FFN_NORM: return load_norm(&ly->post_ffn_norm, L, row, layer);
    case CP_ROLE_QKV: return split_qkv(ly, L, row, layer);
    case CP_ROLE_GATE_UP: return split_gate_up(ly, L, row, layer);
    case CP_ROLE_Q: return load_rotary(&ly->q, L, row, layer, L->m->n_heads);
    case CP_ROLE_K: return load_rotary(&ly->k, L, row, layer, L->m->n_kv_heads);
    case CP_ROLE_V: return load_linear(&ly->v, L, row, layer);
    case CP_ROLE_O: return load_linear(&ly->o, L, row, layer);
    case CP_ROLE_CQ: return load_linear(&ly->cq, L, row, layer);
    case CP_ROLE_CK: return load_linear(&ly->ck, L, row, layer);
    case CP_ROLE_CV: return load_linear(&ly->cv, L, row, layer);
    case CP_ROLE_CO: return load_linear(&ly->co, L, row, layer);
    case CP_ROLE_GATE: return load_linear(&ly->gate, L, row, layer);
    case CP_ROLE_UP: return load_linear(&ly->up, L, row, layer);
    case CP_ROLE_DOWN: return load_linear(&ly->down, L, row, layer);
    default: return 0; /* model- and stack-level roles, FIRE: loaded elsewhere */
  }
}

static int parse_act(cp_model *m, const char *what, const char *name) {
  if (!strcmp(name, "relu")) m->act = CP_ACT_RELU;
  else if (!strcmp(name, "gelu")) m->act = CP_ACT_GELU;
  else if (!strcmp(name, "gelu_new") || !strcmp(name, "gelu_pytorch_tanh") || !strcmp(name, "gelu_fast"))
    m->act = CP_ACT_GELU_TANH;
  else if (!strcmp(name, "silu") || !strcmp(name, "swish")) m->act = CP_ACT_SILU;
  else
    return cp_error_set(CP_ECFG_FIELD, "%s: activation '%s' is not supported (relu, gelu, gelu_new, "
                        "gelu_pytorch_tanh, silu)", what, name);
  return 0;
}

/* What the engines need to know besides the tensors: norms, activation, scales, residual wiring. */
static int family_settings(cp_model *m, const loader *L) {
  const cp_hf_config *c = m->cfg;
  m->gated_ffn = L->nm.gated;
  switch (c->family) {
    case CP_FAMILY_T5: {
      m->norm = CP_NORM_RMS;
      m->attn_scale = 1.0f; /* T5 folds the scaling into its initialisation */
      /* feed_forward_proj: "ACT" or "gated-ACT"; HF maps "gated-gelu" to gelu_new. */
      const char *act = m->gated_ffn ? c->activation + 6 : c->activation;
      if (m->gated_ffn && !strcmp(act, "gelu")) act = "gelu_new";
      return parse_act(m, "config.json feed_forward_proj", act);
    }
    case CP_FAMILY_BLOOM:
      m->norm = CP_NORM_LAYER;
      m->residual_from_norm = c->residual_post_layernorm;
      return parse_act(m, "config.json", c->activation);
    case CP_FAMILY_MPT:
      m->norm = CP_NORM_LAYER;
      if (c->mpt_softmax_scale > 0) m->attn_scale = (float)c->mpt_softmax_scale;
      m->clip_qkv = (float)c->mpt_clip_qkv;
      int rc = parse_act(m, "config.json", c->activation);
      if (rc == 0 && c->mpt_qk_ln)
        rc = cp_error_set(CP_ECFG_FIELD, "%s: key 'attn_config.qk_ln': true is not supported",
                          cp_checkpoint_config_path(L->ck));
      return rc;
    case CP_FAMILY_LLAMA:
    case CP_FAMILY_FIRE:
    case CP_FAMILY_PHI3:
      m->norm = CP_NORM_RMS;
      /* modeling_granite.py: GraniteModel, GraniteAttention, GraniteDecoderLayer (the multipliers
       * as float, what a GGUF stores, so a folder and its GGUF run the same numbers) */
      if (c->granite) {
        m->embed_scale = (float)c->embedding_multiplier;
        m->attn_scale = (float)c->attention_multiplier;
        m->residual_scale = (float)c->residual_multiplier;
      }
      return parse_act(m, "config.json hidden_act", c->activation);
    case CP_FAMILY_STARCODER2: /* Starcoder2DecoderLayer: nn.LayerNorm, pre-norm residuals */
      m->norm = CP_NORM_LAYER;
      return parse_act(m, "config.json hidden_act", c->activation);
    case CP_FAMILY_GPT_NEOX:
      m->norm = CP_NORM_LAYER;
      m->parallel_residual = c->use_parallel_residual;
      return parse_act(m, "config.json hidden_act", c->activation);
    case CP_FAMILY_GEMMA:
      /* GemmaModel.forward scales the embedding by sqrt(hidden_size) cast to the activations' dtype
       * (float32 here); Gemma2Attention scales by query_pre_attn_scalar^-1/2. */
      m->norm = CP_NORM_RMS;
      m->embed_scale = (float)sqrt((double)c->d_model);
      if (c->query_pre_attn_scalar > 0) m->attn_scale = (float)(1.0 / sqrt(c->query_pre_attn_scalar));
      m->attn_softcap = (float)c->attn_softcap;
      m->final_softcap = (float)c->final_softcap;
      m->sandwich_norms = c->sandwich_norms;
      return parse_act(m, "config.json hidden_activation", c->activation);
    case CP_FAMILY_OLMO2: /* modeling_olmo2.py: Olmo2RMSNorm, Olmo2DecoderLayer, Olmo2Attention */
      m->norm = CP_NORM_RMS;
      m->post_norms = c->post_norms;
      m->qk_norm_whole = c->qk_norm_whole;
      return parse_act(m, "config.json hidden_act", c->activation);
    case CP_FAMILY_GPT2:
      m->norm = CP_NORM_LAYER;
      if (!c->scale_attn_weights) m->attn_scale = 1.0f;
      m->attn_scale_inverse_layer = c->scale_attn_inverse_layer;
      return parse_act(m, "config.json activation_function", c->activation);
    case CP_FAMILY_COUNT: break;
  }
  return cp_error_set(CP_ECFG_FAMILY, "%s: unknown family", cp_checkpoint_config_path(L->ck));
}

/* The FIRE MLP of `layer` (docs/fire-layout.md), with c > 0 and L > 0 checked. The config's
 * fire_mlp_layers decides the layout; a checkpoint whose tensors say otherwise is refused by
 * name (an mlp.4 beside fire_mlp_layers 1 here, a missing mlp.4 or an [H, W] mlp.2 by load). */
static int load_fire_mlp(cp_fire_mlp *f, loader *L, int layer) {
  const int W = L->m->cfg->fire_mlp_width, H = L->m->n_heads, nl = L->m->cfg->fire_mlp_layers;
  const char *parts[8] = {"." CP_FIRE_IN ".weight", "." CP_FIRE_IN ".bias", "." CP_FIRE_MID ".weight",
                          "." CP_FIRE_MID ".bias",  cp_fire_out_part(nl, false), cp_fire_out_part(nl, true),
                          "." CP_FIRE_C,           "." CP_FIRE_L};
  const int shapes[8][3] = {{2, W, 1}, {1, W, 0}, {2, W, W}, {1, W, 0}, {2, H, W}, {1, H, 0}, {0, 0, 0}, {0, 0, 0}};
  const float **dst[6] = {&f->w1, &f->b1, &f->wm, &f->bm, &f->w2, &f->b2};
  const float *scalars[2];
  char n[CP_TENSOR_NAME_MAX];
  f->width = W, f->layers = nl;
  if (nl == 1) {
    cp_names_get(n, &L->nm, CP_ROLE_FIRE, CP_STACK_DECODER, layer, "." CP_FIRE_OUT2 ".weight");
    if (has(L, n))
      return cp_error_set(CP_EMODEL_TENSOR,
                          "%s: tensor '%s' is present: a FIRE MLP with two hidden layers needs config.json "
                          "fire_mlp_layers 2 (it is 1)",
                          L->path, n);
  }
  for (int i = 0; i < 8; i++) {
    if (nl == 1 && (i == 2 || i == 3)) continue; /* mlp.2 is then the output layer */
    cp_names_get(n, &L->nm, CP_ROLE_FIRE, CP_STACK_DECODER, layer, parts[i]);
    int rc = load(i < 6 ? dst[i] : &scalars[i - 6], L, n, shapes[i][0], shapes[i][1], shapes[i][2]);
    if (rc) return rc;
    if (i >= 6 && (!(scalars[i - 6][0] > 0) || !isfinite(scalars[i - 6][0])))
      return cp_error_set(CP_EMODEL_TENSOR, "%s: tensor '%s' is %g; FIRE needs %s > 0", L->path, n,
                          (double)scalars[i - 6][0], parts[i] + 1);
  }
  f->c = scalars[0][0];
  f->L = scalars[1][0];
  return 0;
}

static int load_fire(loader *L) {
  cp_model *m = L->m;
  m->n_fire = m->cfg->fire_shared ? 1 : m->decoder.n_layers;
  m->fire = calloc((size_t)m->n_fire, sizeof *m->fire);
  CP_CHECK_ALLOC(m->fire, "model");
  for (int i = 0; i < m->n_fire; i++) {
    int rc = load_fire_mlp(&m->fire[i], L, i);
    if (rc) return rc;
  }
  for (int l = 0; l < m->decoder.n_layers; l++) m->decoder.layers[l].fire = &m->fire[m->cfg->fire_shared ? 0 : l];
  return 0;
}

/* One stack: its bucket table (T5), every per-layer row of the table, its final norm. */
static int load_stack(loader *L, cp_stack_kind kind, cp_stack *st, int n_layers) {
  const cp_family_layout *fl = L->nm.fl;
  char n[CP_TENSOR_NAME_MAX];
  int rc = 0;
  st->n_layers = n_layers;
  st->layers = calloc((size_t)(n_layers ? n_layers : 1), sizeof *st->layers);
  CP_CHECK_ALLOC(st->layers, "model");
  if (cp_names_get(n, &L->nm, CP_ROLE_REL_BIAS, kind, 0, ".weight"))
    TRY(load(&st->rel_bias, L, n, 2, L->m->t5_num_buckets, L->m->n_heads));
  if (kind == CP_STACK_DECODER && L->m->pos == CP_POS_FIRE) TRY(load_fire(L));
  for (int l = 0; l < n_layers; l++)
    for (size_t i = 0; i < fl->n_tensors; i++)
      if (fl->tensors[i].stack == kind && cp_names_row_applies(&L->nm, &fl->tensors[i]))
        TRY(load_layer_row(&st->layers[l], L, &fl->tensors[i], l));
  const cp_family_tensor *fin = cp_names_get(n, &L->nm, CP_ROLE_FINAL_NORM, kind, 0, "");
  TRY(load_norm(&st->final_norm, L, fin, 0));
done:
  return rc;
}

/* Every tensor of the model, in the table's terms. */
static int load_tensors(loader *L) {
  cp_model *m = L->m;
  char n[CP_TENSOR_NAME_MAX];
  int rc = 0;
  TRY(load_matrix(&m->embed, &m->embed_dtype, L,
                  (cp_names_get(n, &L->nm, CP_ROLE_EMBED, CP_STACK_DECODER, 0, ".weight"), n), m->vocab, m->d_model));
  const cp_family_tensor *en = cp_names_get(n, &L->nm, CP_ROLE_EMBED_NORM, CP_STACK_DECODER, 0, "");
  if (en) TRY(load_norm(&m->embed_norm, L, en, 0));
  if (cp_names_get(n, &L->nm, CP_ROLE_POS_EMBED, CP_STACK_DECODER, 0, ".weight"))
    TRY(load(&m->pos_embed, L, n, 2, m->train_len, m->d_model));
  if (m->family == CP_FAMILY_T5) TRY(load_stack(L, CP_STACK_ENCODER, &m->encoder, m->cfg->n_layers));
  TRY(load_stack(L, CP_STACK_DECODER, &m->decoder,
                 m->family == CP_FAMILY_T5 ? m->cfg->n_decoder_layers : m->cfg->n_layers));
  /* Output head: the embedding when tied; T5 then rescales by d_model^-0.5. */
  m->lm_head_scale = 1.0f;
  if (m->cfg->tie_word_embeddings) {
    m->lm_head = m->embed;
    m->lm_head_dtype = m->embed_dtype;
    if (m->family == CP_FAMILY_T5) m->lm_head_scale = (float)(1.0 / sqrt((double)m->d_model));
  } else {
    cp_names_get(n, &L->nm, CP_ROLE_LM_HEAD, CP_STACK_DECODER, 0, ".weight");
    TRY(load_matrix(&m->lm_head, &m->lm_head_dtype, L, n, m->vocab, m->d_model));
  }
  /* GraniteForCausalLM divides the logits by logits_scaling: the head is linear without a bias,
   * so the final-normed states are divided instead (1 for every other family). */
  if (m->cfg->logits_scaling != 1.0) m->lm_head_scale = (float)(1.0 / (double)(float)m->cfg->logits_scaling);
done:
  return rc;
}

/* ---------------------------------------------------------------- ALiBi slopes */

/* Stored slopes (e.g. JAIS's relative_pe.slopes) win over the family rule (spec). */
static int load_slopes(loader *L) {
  cp_model *m = L->m;
  int H = m->n_heads, rc = 0;
  m->alibi_slopes = calloc((size_t)H, sizeof *m->alibi_slopes);
  CP_CHECK_ALLOC(m->alibi_slopes, "model");
  size_t i = cp_names_next_slopes(&L->nm, 0);
  if (i == (size_t)-1) {
    cp_alibi_slopes(m->alibi_slopes, H, m->cfg->alibi_bias_max);
    return 0;
  }
  const cp_tensor *t = cp_checkpoint_tensor(L->ck, i);
  uint64_t numel = 0;
  if (cp_shape_numel(&numel, t->ndim, t->shape) || numel != (uint64_t)H)
    return cp_error_set(CP_EMODEL_TENSOR, "%s: tensor '%s' has %llu elements, expected %d slopes", L->path,
                        t->name, (unsigned long long)numel, H);
  float *s = NULL;
  if ((rc = cp_checkpoint_load_f32(&s, L->ck, t->name, -1, NULL))) return rc;
  for (int h = 0; h < H; h++) m->alibi_slopes[h] = s[h];
  free(s);
  return 0;
}

/* ---------------------------------------------------------------- patched artifacts */

/* config.json "ctxpatch": {"rule": {...}} (include/ctxpatch/patchers/patch.h): the part of a patch that
 * the weights do not carry. Checked against the model here so a bad artifact fails at open. */
static int load_metadata_rule(cp_model *m, const char *cfg_path) {
  m->metadata_rule = m->cfg->ctxpatch_rule;
  char what[600];
  snprintf(what, sizeof what, "%s: key 'ctxpatch.rule'", cfg_path);
  cp_rule_model rm;
  cp_model_rule_model(&rm, m);
  int rc = cp_rule_check_model(&m->metadata_rule, &rm, what);
  if (rc) return rc;
  m->has_metadata_rule = !cp_rule_is_identity(&m->metadata_rule);
  return 0;
}

/* ---------------------------------------------------------------- entry points */

void cp_model_open_params_init(cp_model_open_params *p) { memset(p, 0, sizeof *p); }

int cp_model_open(cp_model **out, const char *path) { return cp_model_open_ex(out, path, NULL); }

int cp_model_open_stored(cp_model **out, const char *path) {
  cp_model_open_params p;
  cp_model_open_params_init(&p);
  p.stored_dtype = true;
  return cp_model_open_ex(out, path, &p);
}

int cp_model_open_ex(cp_model **out, const char *path, const cp_model_open_params *params) {
  assert(out && path);
  *out = NULL;
  cp_model_open_params op;
  if (params) op = *params;
  else cp_model_open_params_init(&op);
  assert(!op.share_from || op.stored_dtype);
  assert(!op.checkpoint || !op.stored_dtype); /* a stored-dtype model keeps its checkpoint */
  cp_checkpoint *ck = op.checkpoint;
  cp_model *m = NULL;
  int rc = ck ? 0 : cp_checkpoint_open(&ck, path);
  if (rc) goto done;
  /* config.json, or a GGUF file's own metadata */
  const char *cfg_path = cp_checkpoint_gguf(ck) || cp_checkpoint_onnx(ck) ? path : cp_checkpoint_config_path(ck);
  m = calloc(1, sizeof *m);
  CP_CHECK_ALLOC_GOTO(m, "model");
  m->share_from = op.share_from;
  m->embed_dtype = m->lm_head_dtype = CP_F32;
  TRY(cp_checkpoint_config(&m->cfg, ck, path));
  const cp_hf_config *c = m->cfg;
  m->family = c->family;
  m->pos = c->pos;
  m->vocab = c->vocab_size;
  m->d_model = c->d_model;
  m->n_heads = c->n_heads;
  m->n_kv_heads = c->n_kv_heads;
  m->d_head = c->d_head;
  m->d_ff = c->d_ff;
  m->train_len = c->train_len;
  m->from_gguf = cp_checkpoint_gguf(ck) != NULL;
  m->norm_eps = (float)c->norm_eps;
  m->attn_scale = (float)(1.0 / sqrt((double)c->d_head));
  m->lm_head_scale = 1.0f;
  m->embed_scale = 1.0f;
  m->residual_scale = 1.0f;
  m->t5_num_buckets = c->t5_num_buckets;
  m->t5_max_distance = c->t5_max_distance;
  m->rope_theta = c->rope_theta;
  m->rope_dims = c->rotary_dims;
  m->rope_scale = 1.0;
  if (c->pos == CP_POS_ROPE) {
    /* linear divides positions (as always); llama3 and yarn change the frequency table. */
    if (!strcmp(c->rope_scaling_type, "linear")) m->rope_scale = c->rope_scaling_factor;
    snprintf(m->rope_type, sizeof m->rope_type, "%s", c->rope_scaling_type);
    TRY(cp_rope_table_init(&m->rope, c, c->rope_theta, c->rotary_dims, cfg_path));
    m->rope_by_length = cp_rope_by_length(c);
    /* Gemma3TextModel.__init__: rotary_emb_local is a copy of the config with rope_theta =
     * rope_local_base_freq and rope_scaling {"rope_type": "default"}. */
    if (c->rope_local_theta > 0) TRY(cp_rope_table_init(&m->rope_local, NULL, c->rope_local_theta, c->rotary_dims, cfg_path));
  }

  loader L = {m, ck, cp_checkpoint_dir(ck), {0}, op.stored_dtype};
  cp_names_init(&L.nm, ck, c);
  TRY(family_settings(m, &L));
  TRY(load_tensors(&L));
  if (c->pos == CP_POS_ALIBI) TRY(load_slopes(&L));
  TRY(load_metadata_rule(m, cfg_path));
  /* an own ONNX export must be the graph ctxpatch writes for these weights (its names alone prove nothing) */
  if (cp_checkpoint_onnx(ck)) TRY(cp_onnx_run_own_check(path, cp_checkpoint_onnx(ck), m));
  if (op.stored_dtype) { /* the matrices point into its mapping */
    m->ck = ck;
    ck = NULL;
  }
  *out = m;
  m = NULL;
done:
  cp_model_free(m);
  if (ck != op.checkpoint) cp_checkpoint_free(ck);
  return rc;
}

void cp_model_free(cp_model *m) {
  if (!m) return;
  for (size_t i = 0; i < m->n_bufs; i++) free(m->bufs[i]);
  free(m->bufs);
  free(m->encoder.layers);
  free(m->decoder.layers);
  free(m->alibi_slopes);
  free(m->fire);
  cp_checkpoint_free(m->ck);
  cp_hf_config_free(m->cfg);
  free(m);
}

const cp_hf_config *cp_model_config(const cp_model *m) { return m->cfg; }

void cp_model_release(const cp_model *m, const void *data, uint64_t len) {
  if (!m->ck || !len) return;
  uintptr_t p = (uintptr_t)data;
  for (size_t i = 0; i < cp_checkpoint_count(m->ck); i++) { /* only pages of the mapping: never heap memory */
    const cp_tensor *t = cp_checkpoint_tensor(m->ck, i);
    uintptr_t at = (uintptr_t)t->data;
    int fd;
    uint64_t off;
    if (at && p >= at && len <= t->nbytes && p - at <= t->nbytes - len) {
      /* only a view of a file mapping (cp_checkpoint_source): an ONNX or converted view may be heap */
      if (cp_checkpoint_source(&fd, &off, m->ck, i) == 0) cp_checkpoint_release(m->ck, i, (uint64_t)(p - at), len);
      return;
    }
  }
}

void cp_model_rule_model(cp_rule_model *out, const cp_model *m) {
  memset(out, 0, sizeof *out);
  out->is_encoder_decoder = m->family == CP_FAMILY_T5;
  out->n_layers_encoder = m->encoder.n_layers;
  out->n_layers_decoder = m->decoder.n_layers;
  out->train_len = m->train_len;
  out->has_alibi = m->pos == CP_POS_ALIBI;
  out->has_fire = m->pos == CP_POS_FIRE;
  out->learned_pos = m->pos == CP_POS_LEARNED;
  out->family = cp_family_name(m->family);
  if (m->cfg->sliding_window > 0) {
    out->sliding_window = m->cfg->sliding_window;
    out->layer_sliding = m->cfg->layer_sliding;
  }
}

float cp_model_attn_scale(const cp_model *m, int layer) {
  return m->attn_scale_inverse_layer ? m->attn_scale / (float)(layer + 1) : m->attn_scale;
}

const cp_rope_table *cp_model_rope_at(const cp_model *m, int layer, int64_t seq_len, cp_rope_table *scratch,
                                      double *pos_div) {
  if (m->rope_local.n > 0 && layer >= 0 && layer < CP_RULE_MAX_LAYERS && m->cfg->layer_sliding[layer]) {
    *pos_div = 1.0;
    return &m->rope_local;
  }
  *pos_div = m->rope_scale;
  if (!m->rope_by_length) return &m->rope;
  /* the load computed the same config's table: only seq_len differs, which cannot fail */
  int rc = cp_rope_table_at(scratch, m->cfg, m->rope_theta, m->rope_dims, seq_len, "model");
  assert(rc == 0);
  (void)rc;
  return scratch;
}

int cp_model_check_positions(const cp_model *m, int64_t n, const char *what) {
  if (!m->pos_embed || n <= m->train_len) return 0;
  return cp_error_set(CP_EMODEL_INPUT, "%s: %lld positions, but this %s model learned %lld (%s): its position "
                      "table has no row for position %lld or later", what, (long long)n, cp_family_name(m->family),
                      (long long)m->train_len, m->cfg->train_len_key, (long long)m->train_len);
}

int cp_model_check_ids(const cp_model *m, const int64_t *ids, int64_t n, const char *what) {
  if (n <= 0) return cp_error_set(CP_EMODEL_INPUT, "%s: no token ids", what);
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= m->vocab)
      return cp_error_set(CP_EMODEL_INPUT, "%s: entry %lld: id %lld is outside the vocabulary [0, %d)",
                          what, (long long)i, (long long)ids[i], m->vocab);
  return 0;
}

/* The pre-activations v[W] of the MLP's last hidden layer at input x (layers 1: w1 x + b1;
 * layers 2: wm relu(w1 x + b1) + bm). Shared by every head: only the output layer is per head. */
static void fire_hidden(const cp_fire_mlp *f, double x, double *v) {
  const int W = f->width;
  assert(W <= CP_FIRE_MAX_WIDTH); /* hf_config.c */
  if (f->layers != 2) {
    for (int w = 0; w < W; w++) v[w] = (double)f->w1[w] * x + (double)f->b1[w];
    return;
  }
  double a[CP_FIRE_MAX_WIDTH]; /* relu(w1 x + b1) */
  for (int w = 0; w < W; w++) {
    double t = (double)f->w1[w] * x + (double)f->b1[w];
    a[w] = t > 0 ? t : 0;
  }
  /* Four rows of wm at a time: each row's dot product still sums its terms in w order (the same
   * doubles, bit for bit), but four independent sums instead of one long dependent chain, which
   * made this loop the latency-bound cost of a two-layer FIRE forward. */
  int u = 0;
  for (; u + 4 <= W; u += 4) {
    const float *r0 = f->wm + (size_t)u * W, *r1 = r0 + W, *r2 = r1 + W, *r3 = r2 + W;
    double v0 = f->bm[u], v1 = f->bm[u + 1], v2 = f->bm[u + 2], v3 = f->bm[u + 3];
    for (int w = 0; w < W; w++) {
      const double aw = a[w];
      v0 += (double)r0[w] * aw;
      v1 += (double)r1[w] * aw;
      v2 += (double)r2[w] * aw;
      v3 += (double)r3[w] * aw;
    }
    v[u] = v0, v[u + 1] = v1, v[u + 2] = v2, v[u + 3] = v3;
  }
  for (; u < W; u++) {
    const float *wm = f->wm + (size_t)u * W;
    double t = f->bm[u];
    for (int w = 0; w < W; w++) t += (double)wm[w] * a[w];
    v[u] = t;
  }
}

/* Head h's output from the hidden pre-activations: b2[h] + w2[h] . relu(v), the terms in u
 * order and a non-positive v[u] skipped (not added as a zero, which could flip a -0). */
static double fire_out(const cp_fire_mlp *f, int h, const double *v) {
  const float *w2 = f->w2 + (size_t)h * f->width;
  double s = f->b2[h];
  for (int u = 0; u < f->width; u++)
    if (v[u] > 0) s += (double)w2[u] * v[u];
  return s;
}

double cp_fire_mlp_bias(const cp_fire_mlp *f, int h, double x) {
  double v[CP_FIRE_MAX_WIDTH];
  fire_hidden(f, x, v);
  return fire_out(f, h, v);
}

void cp_fire_mlp_bias_heads(double *out, const cp_fire_mlp *f, int H, double x) {
  double v[CP_FIRE_MAX_WIDTH];
  fire_hidden(f, x, v);
  for (int h = 0; h < H; h++) out[h] = fire_out(f, h, v);
}
