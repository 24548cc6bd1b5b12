/* Checkpoint folder -> cp_model (include/ctxpatch/converters/model.h): HF tensor names per family, shape
 * checks, fused-QKV splitting. Family semantics follow the HF modeling code of each family
 * (T5, BLOOM, MPT, Llama/Mistral, GPT-NeoX) and docs/fire-layout.md. */
#include "ctxpatch/converters/model.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/converters/checkpoint.h"
#include "ctxpatch/base/error.h"

typedef struct {
  cp_model *m;
  cp_checkpoint *ck;
  const char *path;
  const char *prefix; /* "transformer.", "model.", "" ... */
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
  if (m->n_bufs == m->cap_bufs) {
    size_t cap = m->cap_bufs ? 2 * m->cap_bufs : 64;
    float **b = realloc(m->bufs, cap * sizeof *b);
    if (!b) {
      free(buf);
      return cp_error_set(CP_ENOMEM, "model: out of memory");
    }
    m->bufs = b;
    m->cap_bufs = cap;
  }
  m->bufs[m->n_bufs++] = buf;
  return 0;
}

static float *alloc_floats(cp_model *m, size_t n) {
  float *p = calloc(n ? n : 1, sizeof *p);
  if (!p) {
    cp_error_set(CP_ENOMEM, "model: out of memory for %zu floats", n);
    return NULL;
  }
  if (keep(m, p)) return NULL;
  return p;
}

/* Full tensor name: the loader's prefix + printf-style rest. */
static const char *tname(char buf[512], const loader *L, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static const char *tname(char buf[512], const loader *L, const char *fmt, ...) {
  va_list ap;
  size_t n = (size_t)snprintf(buf, 512, "%s", L->prefix);
  va_start(ap, fmt);
  vsnprintf(buf + n, 512 - n, fmt, ap);
  va_end(ap);
  return buf;
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

/* As load(), but an absent tensor gives NULL. */
static int load_opt(const float **out, loader *L, const char *name, int ndim, int64_t d0,
                    int64_t d1) {
  *out = NULL;
  return has(L, name) ? load(out, L, name, ndim, d0, d1) : 0;
}

typedef enum { BIAS_NONE, BIAS_REQUIRED, BIAS_OPTIONAL } bias_mode;

/* A linear layer "<base>.weight" [n_out, n_in] and "<base>.bias" [n_out]. */
static int load_linear(cp_linear *out, loader *L, const char *base, int n_out, int n_in,
                       bias_mode bias) {
  char w[600], b[600];
  snprintf(w, sizeof w, "%s.weight", base);
  snprintf(b, sizeof b, "%s.bias", base);
  out->n_out = n_out;
  out->n_in = n_in;
  out->b = NULL;
  int rc = load(&out->w, L, w, 2, n_out, n_in);
  if (rc) return rc;
  if (bias == BIAS_REQUIRED) return load(&out->b, L, b, 1, n_out, 0);
  if (bias == BIAS_OPTIONAL) return load_opt(&out->b, L, b, 1, n_out, 0);
  return 0;
}

static int load_norm(cp_norm_weights *out, loader *L, const char *base, int n, bias_mode bias) {
  char w[600], b[600];
  snprintf(w, sizeof w, "%s.weight", base);
  snprintf(b, sizeof b, "%s.bias", base);
  out->b = NULL;
  int rc = load(&out->w, L, w, 1, n, 0);
  if (rc) return rc;
  if (bias == BIAS_REQUIRED) return load(&out->b, L, b, 1, n, 0);
  if (bias == BIAS_OPTIONAL) return load_opt(&out->b, L, b, 1, n, 0);
  return 0;
}

/* Splits a fused QKV weight [n_q + 2 n_kv, D] (and bias) into q, k, v.
 * interleaved: per-head [H, 3, dh] rows (BLOOM, GPT-NeoX; needs H == Hkv);
 * otherwise q | k | v concatenated (MPT). */
static int split_qkv(cp_layer *ly, loader *L, const char *base, bool interleaved,
                     bias_mode bias) {
  cp_model *m = L->m;
  int D = m->d_model, H = m->n_heads, Hkv = m->n_kv_heads, dh = m->d_head;
  int nq = H * dh, nkv = Hkv * dh, total = nq + 2 * nkv;
  cp_linear fused;
  int rc = load_linear(&fused, L, base, total, D, bias);
  if (rc) return rc;
  cp_linear *dst[3] = {&ly->q, &ly->k, &ly->v};
  int rows[3] = {nq, nkv, nkv};
  for (int t = 0; t < 3; t++) {
    float *w = alloc_floats(m, (size_t)rows[t] * D);
    float *b = fused.b ? alloc_floats(m, (size_t)rows[t]) : NULL;
    if (!w || (fused.b && !b)) return CP_ENOMEM;
    for (int r = 0; r < rows[t]; r++) {
      size_t src;
      if (interleaved) {
        int h = r / dh, e = r % dh;
        src = (size_t)h * 3 * dh + (size_t)t * dh + e;
      } else {
        src = (size_t)(t == 0 ? 0 : t == 1 ? nq : nq + nkv) + r;
      }
      memcpy(w + (size_t)r * D, fused.w + src * D, (size_t)D * sizeof *w);
      if (b) b[r] = fused.b[src];
    }
    dst[t]->w = w;
    dst[t]->b = b;
    dst[t]->n_out = rows[t];
    dst[t]->n_in = D;
  }
  return 0;
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

static int alloc_layers(cp_stack *s, int n) {
  s->n_layers = n;
  s->layers = calloc((size_t)(n ? n : 1), sizeof *s->layers);
  return s->layers ? 0 : cp_error_set(CP_ENOMEM, "model: out of memory");
}

/* Which of `prefixes` names `rest` in the checkpoint; the first one by default. */
static const char *find_prefix(const loader *L, const char *const *prefixes, size_t n,
                               const char *rest) {
  char buf[512];
  for (size_t i = 0; i < n; i++) {
    snprintf(buf, sizeof buf, "%s%s", prefixes[i], rest);
    if (has(L, buf)) return prefixes[i];
  }
  return prefixes[0];
}

/* Output head: the embedding when tied, else `name` [V, D]. */
static int load_head(loader *L, const char *name) {
  cp_model *m = L->m;
  m->lm_head_scale = 1.0f;
  if (m->cfg->tie_word_embeddings) {
    m->lm_head = m->embed;
    return 0;
  }
  return load(&m->lm_head, L, name, 2, m->vocab, m->d_model);
}

/* ---------------------------------------------------------------- T5 */

static int load_t5(loader *L) {
  cp_model *m = L->m;
  const cp_hf_config *c = m->cfg;
  int D = m->d_model, H = m->n_heads, dh = m->d_head, F = m->d_ff;
  char n[512], b[512];
  int rc = 0;
  m->norm = CP_NORM_RMS;
  m->attn_scale = 1.0f; /* T5 folds the scaling into its initialisation */
  m->t5_num_buckets = c->t5_num_buckets;
  m->t5_max_distance = c->t5_max_distance;
  /* feed_forward_proj: "ACT" or "gated-ACT"; HF maps "gated-gelu" to gelu_new. */
  const char *act = c->activation;
  if (!strncmp(act, "gated-", 6)) {
    m->gated_ffn = true;
    act += 6;
    if (!strcmp(act, "gelu")) act = "gelu_new";
  }
  TRY(parse_act(m, "config.json feed_forward_proj", act));

  L->prefix = "";
  TRY(load(&m->embed, L, has(L, "shared.weight") ? "shared.weight" : "encoder.embed_tokens.weight", 2,
           m->vocab, D));
  for (int s = 0; s < 2; s++) {
    const char *sn = s == 0 ? "encoder" : "decoder";
    cp_stack *st = s == 0 ? &m->encoder : &m->decoder;
    TRY(alloc_layers(st, s == 0 ? c->n_layers : c->n_decoder_layers));
    TRY(load(&st->rel_bias, L,
             tname(n, L, "%s.block.0.layer.0.SelfAttention.relative_attention_bias.weight", sn), 2,
             c->t5_num_buckets, H));
    for (int l = 0; l < st->n_layers; l++) {
      cp_layer *ly = &st->layers[l];
      TRY(load_norm(&ly->attn_norm, L, tname(n, L, "%s.block.%d.layer.0.layer_norm", sn, l), D, BIAS_NONE));
      static const char *qkvo[4] = {"q", "k", "v", "o"};
      cp_linear *self[4] = {&ly->q, &ly->k, &ly->v, &ly->o};
      cp_linear *cross[4] = {&ly->cq, &ly->ck, &ly->cv, &ly->co};
      for (int t = 0; t < 4; t++) {
        TRY(load_linear(self[t], L, tname(n, L, "%s.block.%d.layer.0.SelfAttention.%s", sn, l, qkvo[t]),
                        t == 3 ? D : H * dh, t == 3 ? H * dh : D, BIAS_NONE));
        if (s == 1)
          TRY(load_linear(cross[t], L, tname(n, L, "decoder.block.%d.layer.1.EncDecAttention.%s", l, qkvo[t]),
                          t == 3 ? D : H * dh, t == 3 ? H * dh : D, BIAS_NONE));
      }
      if (s == 1) TRY(load_norm(&ly->cross_norm, L, tname(n, L, "decoder.block.%d.layer.1.layer_norm", l), D, BIAS_NONE));
      int fi = s == 0 ? 1 : 2;
      TRY(load_norm(&ly->ffn_norm, L, tname(n, L, "%s.block.%d.layer.%d.layer_norm", sn, l, fi), D, BIAS_NONE));
      snprintf(b, sizeof b, "%s.block.%d.layer.%d.DenseReluDense", sn, l, fi);
      if (m->gated_ffn) {
        TRY(load_linear(&ly->gate, L, tname(n, L, "%s.wi_0", b), F, D, BIAS_NONE));
        TRY(load_linear(&ly->up, L, tname(n, L, "%s.wi_1", b), F, D, BIAS_NONE));
      } else {
        TRY(load_linear(&ly->up, L, tname(n, L, "%s.wi", b), F, D, BIAS_NONE));
      }
      TRY(load_linear(&ly->down, L, tname(n, L, "%s.wo", b), D, F, BIAS_NONE));
    }
    TRY(load_norm(&st->final_norm, L, tname(n, L, "%s.final_layer_norm", sn), D, BIAS_NONE));
  }
  TRY(load_head(L, "lm_head.weight"));
  if (c->tie_word_embeddings) m->lm_head_scale = (float)(1.0 / sqrt((double)D));
done:
  return rc;
}

/* ---------------------------------------------------------------- BLOOM */

static int load_bloom(loader *L) {
  cp_model *m = L->m;
  int D = m->d_model, F = m->d_ff;
  char n[512];
  int rc = 0;
  static const char *prefixes[] = {"transformer.", ""}; /* hub BLOOMs store without the prefix */
  L->prefix = find_prefix(L, prefixes, 2, "word_embeddings.weight");
  m->norm = CP_NORM_LAYER;
  m->residual_from_norm = m->cfg->residual_post_layernorm;
  TRY(parse_act(m, "config.json", m->cfg->activation));
  TRY(load(&m->embed, L, tname(n, L, "word_embeddings.weight"), 2, m->vocab, D));
  TRY(load_norm(&m->embed_norm, L, tname(n, L, "word_embeddings_layernorm"), D, BIAS_REQUIRED));
  TRY(alloc_layers(&m->decoder, m->cfg->n_layers));
  for (int l = 0; l < m->decoder.n_layers; l++) {
    cp_layer *ly = &m->decoder.layers[l];
    TRY(load_norm(&ly->attn_norm, L, tname(n, L, "h.%d.input_layernorm", l), D, BIAS_REQUIRED));
    TRY(split_qkv(ly, L, tname(n, L, "h.%d.self_attention.query_key_value", l), true, BIAS_REQUIRED));
    TRY(load_linear(&ly->o, L, tname(n, L, "h.%d.self_attention.dense", l), D, D, BIAS_REQUIRED));
    TRY(load_norm(&ly->ffn_norm, L, tname(n, L, "h.%d.post_attention_layernorm", l), D, BIAS_REQUIRED));
    TRY(load_linear(&ly->up, L, tname(n, L, "h.%d.mlp.dense_h_to_4h", l), F, D, BIAS_REQUIRED));
    TRY(load_linear(&ly->down, L, tname(n, L, "h.%d.mlp.dense_4h_to_h", l), D, F, BIAS_REQUIRED));
  }
  TRY(load_norm(&m->decoder.final_norm, L, tname(n, L, "ln_f"), D, BIAS_REQUIRED));
  L->prefix = "";
  TRY(load_head(L, "lm_head.weight"));
done:
  return rc;
}

/* ---------------------------------------------------------------- MPT */

static int load_mpt(loader *L) {
  cp_model *m = L->m;
  int D = m->d_model, F = m->d_ff;
  char n[512];
  int rc = 0;
  static const char *prefixes[] = {"transformer.", ""};
  L->prefix = find_prefix(L, prefixes, 2, "wte.weight");
  m->norm = CP_NORM_LAYER;
  TRY(parse_act(m, "config.json", m->cfg->activation));
  if (m->cfg->mpt_softmax_scale > 0) m->attn_scale = (float)m->cfg->mpt_softmax_scale;
  m->clip_qkv = (float)m->cfg->mpt_clip_qkv;
  if (m->cfg->mpt_qk_ln) {
    rc = cp_error_set(CP_ECFG_FIELD, "%s: key 'attn_config.qk_ln': true is not supported",
                      cp_checkpoint_config_path(L->ck));
    goto done;
  }
  /* HF's MptForCausalLM has no biases at all; mosaicml's code has them when no_bias is false. */
  bias_mode bm = m->cfg->no_bias ? BIAS_NONE : BIAS_OPTIONAL;
  TRY(load(&m->embed, L, tname(n, L, "wte.weight"), 2, m->vocab, D));
  TRY(alloc_layers(&m->decoder, m->cfg->n_layers));
  for (int l = 0; l < m->decoder.n_layers; l++) {
    cp_layer *ly = &m->decoder.layers[l];
    TRY(load_norm(&ly->attn_norm, L, tname(n, L, "blocks.%d.norm_1", l), D, bm));
    TRY(split_qkv(ly, L, tname(n, L, "blocks.%d.attn.Wqkv", l), false, bm));
    TRY(load_linear(&ly->o, L, tname(n, L, "blocks.%d.attn.out_proj", l), D, D, bm));
    TRY(load_norm(&ly->ffn_norm, L, tname(n, L, "blocks.%d.norm_2", l), D, bm));
    TRY(load_linear(&ly->up, L, tname(n, L, "blocks.%d.ffn.up_proj", l), F, D, bm));
    TRY(load_linear(&ly->down, L, tname(n, L, "blocks.%d.ffn.down_proj", l), D, F, bm));
  }
  TRY(load_norm(&m->decoder.final_norm, L, tname(n, L, "norm_f"), D, bm));
  L->prefix = "";
  TRY(load_head(L, "lm_head.weight"));
done:
  return rc;
}

/* ---------------------------------------------------------------- Llama, Mistral, FIRE */

static int load_fire_mlp(cp_fire_mlp *f, loader *L, const char *base) {
  cp_model *m = L->m;
  int W = m->cfg->fire_mlp_width, H = m->n_heads;
  char n[600];
  const float *c, *Lv;
  int rc = 0;
  f->width = W;
  snprintf(n, sizeof n, "%s.mlp.0.weight", base);
  TRY(load(&f->w1, L, n, 2, W, 1));
  snprintf(n, sizeof n, "%s.mlp.0.bias", base);
  TRY(load(&f->b1, L, n, 1, W, 0));
  snprintf(n, sizeof n, "%s.mlp.2.weight", base);
  TRY(load(&f->w2, L, n, 2, H, W));
  snprintf(n, sizeof n, "%s.mlp.2.bias", base);
  TRY(load(&f->b2, L, n, 1, H, 0));
  snprintf(n, sizeof n, "%s.c", base);
  TRY(load(&c, L, n, 0, 0, 0));
  if (!(c[0] > 0) || !isfinite(c[0])) {
    rc = cp_error_set(CP_EMODEL_TENSOR, "%s: tensor '%s' is %g; FIRE needs c > 0", L->path, n, (double)c[0]);
    goto done;
  }
  snprintf(n, sizeof n, "%s.L", base);
  TRY(load(&Lv, L, n, 0, 0, 0));
  if (!(Lv[0] > 0) || !isfinite(Lv[0])) {
    rc = cp_error_set(CP_EMODEL_TENSOR, "%s: tensor '%s' is %g; FIRE needs L > 0", L->path, n, (double)Lv[0]);
    goto done;
  }
  f->c = c[0];
  f->L = Lv[0];
done:
  return rc;
}

static int load_llama(loader *L, bool fire) {
  cp_model *m = L->m;
  int D = m->d_model, F = m->d_ff, H = m->n_heads, Hkv = m->n_kv_heads, dh = m->d_head;
  char n[512];
  int rc = 0;
  L->prefix = "model.";
  m->norm = CP_NORM_RMS;
  m->gated_ffn = true;
  TRY(parse_act(m, "config.json hidden_act", m->cfg->activation));
  TRY(load(&m->embed, L, tname(n, L, "embed_tokens.weight"), 2, m->vocab, D));
  TRY(alloc_layers(&m->decoder, m->cfg->n_layers));
  if (fire) {
    m->n_fire = m->cfg->fire_shared ? 1 : m->decoder.n_layers;
    m->fire = calloc((size_t)m->n_fire, sizeof *m->fire);
    if (!m->fire) {
      rc = cp_error_set(CP_ENOMEM, "model: out of memory");
      goto done;
    }
    for (int i = 0; i < m->n_fire; i++) {
      if (m->cfg->fire_shared) TRY(load_fire_mlp(&m->fire[i], L, tname(n, L, "fire")));
      else TRY(load_fire_mlp(&m->fire[i], L, tname(n, L, "layers.%d.self_attn.fire", i)));
    }
  }
  for (int l = 0; l < m->decoder.n_layers; l++) {
    cp_layer *ly = &m->decoder.layers[l];
    TRY(load_norm(&ly->attn_norm, L, tname(n, L, "layers.%d.input_layernorm", l), D, BIAS_NONE));
    /* attention_bias / mlp_bias checkpoints carry biases; use them when present. */
    TRY(load_linear(&ly->q, L, tname(n, L, "layers.%d.self_attn.q_proj", l), H * dh, D, BIAS_OPTIONAL));
    TRY(load_linear(&ly->k, L, tname(n, L, "layers.%d.self_attn.k_proj", l), Hkv * dh, D, BIAS_OPTIONAL));
    TRY(load_linear(&ly->v, L, tname(n, L, "layers.%d.self_attn.v_proj", l), Hkv * dh, D, BIAS_OPTIONAL));
    TRY(load_linear(&ly->o, L, tname(n, L, "layers.%d.self_attn.o_proj", l), D, H * dh, BIAS_OPTIONAL));
    TRY(load_norm(&ly->ffn_norm, L, tname(n, L, "layers.%d.post_attention_layernorm", l), D, BIAS_NONE));
    TRY(load_linear(&ly->gate, L, tname(n, L, "layers.%d.mlp.gate_proj", l), F, D, BIAS_OPTIONAL));
    TRY(load_linear(&ly->up, L, tname(n, L, "layers.%d.mlp.up_proj", l), F, D, BIAS_OPTIONAL));
    TRY(load_linear(&ly->down, L, tname(n, L, "layers.%d.mlp.down_proj", l), D, F, BIAS_OPTIONAL));
    if (fire) ly->fire = &m->fire[m->cfg->fire_shared ? 0 : l];
  }
  TRY(load_norm(&m->decoder.final_norm, L, tname(n, L, "norm"), D, BIAS_NONE));
  L->prefix = "";
  TRY(load_head(L, "lm_head.weight"));
done:
  return rc;
}

/* ---------------------------------------------------------------- GPT-NeoX */

static int load_gpt_neox(loader *L) {
  cp_model *m = L->m;
  int D = m->d_model, F = m->d_ff;
  char n[512];
  int rc = 0;
  L->prefix = "gpt_neox.";
  m->norm = CP_NORM_LAYER;
  m->parallel_residual = m->cfg->use_parallel_residual;
  TRY(parse_act(m, "config.json hidden_act", m->cfg->activation));
  bias_mode ab = m->cfg->qkv_bias ? BIAS_REQUIRED : BIAS_NONE; /* attention_bias: qkv and dense */
  TRY(load(&m->embed, L, tname(n, L, "embed_in.weight"), 2, m->vocab, D));
  TRY(alloc_layers(&m->decoder, m->cfg->n_layers));
  for (int l = 0; l < m->decoder.n_layers; l++) {
    cp_layer *ly = &m->decoder.layers[l];
    TRY(load_norm(&ly->attn_norm, L, tname(n, L, "layers.%d.input_layernorm", l), D, BIAS_REQUIRED));
    TRY(split_qkv(ly, L, tname(n, L, "layers.%d.attention.query_key_value", l), true, ab));
    TRY(load_linear(&ly->o, L, tname(n, L, "layers.%d.attention.dense", l), D, D, ab));
    TRY(load_norm(&ly->ffn_norm, L, tname(n, L, "layers.%d.post_attention_layernorm", l), D, BIAS_REQUIRED));
    TRY(load_linear(&ly->up, L, tname(n, L, "layers.%d.mlp.dense_h_to_4h", l), F, D, BIAS_REQUIRED));
    TRY(load_linear(&ly->down, L, tname(n, L, "layers.%d.mlp.dense_4h_to_h", l), D, F, BIAS_REQUIRED));
  }
  TRY(load_norm(&m->decoder.final_norm, L, tname(n, L, "final_layer_norm"), D, BIAS_REQUIRED));
  L->prefix = "";
  TRY(load_head(L, "embed_out.weight"));
done:
  return rc;
}

/* ---------------------------------------------------------------- ALiBi slopes */

/* Stored slopes (e.g. JAIS's relative_pe.slopes) win over the family rule (spec). */
static int load_slopes(loader *L) {
  cp_model *m = L->m;
  int H = m->n_heads, rc = 0;
  m->alibi_slopes = calloc((size_t)H, sizeof *m->alibi_slopes);
  if (!m->alibi_slopes) return cp_error_set(CP_ENOMEM, "model: out of memory");
  static const char suffix[] = "relative_pe.slopes";
  for (size_t i = 0; i < cp_checkpoint_count(L->ck); i++) {
    const cp_tensor *t = cp_checkpoint_tensor(L->ck, i);
    size_t len = strlen(t->name);
    if (len < sizeof suffix - 1 || strcmp(t->name + len - (sizeof suffix - 1), suffix) != 0) continue;
    uint64_t numel = 0;
    if (cp_shape_numel(&numel, t->ndim, t->shape) || numel != (uint64_t)H)
      return cp_error_set(CP_EMODEL_TENSOR, "%s: tensor '%s' has %llu elements, expected %d slopes",
                          L->path, t->name, (unsigned long long)numel, H);
    float *s = NULL;
    if ((rc = cp_checkpoint_load_f32(&s, L->ck, t->name, -1, NULL))) return rc;
    for (int h = 0; h < H; h++) m->alibi_slopes[h] = s[h];
    free(s);
    return 0;
  }
  cp_alibi_slopes(m->alibi_slopes, H, m->cfg->alibi_bias_max);
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

int cp_model_open(cp_model **out, const char *path) {
  assert(out && path);
  *out = NULL;
  cp_checkpoint *ck = NULL;
  cp_model *m = NULL;
  int rc = cp_checkpoint_open(&ck, path);
  if (rc) goto done;
  const char *cfg_path = cp_checkpoint_config_path(ck);
  if (!cfg_path) {
    rc = cp_error_set(CP_ENOTFOUND, "%s: no config.json beside the weights", path);
    goto done;
  }
  m = calloc(1, sizeof *m);
  if (!m) {
    rc = cp_error_set(CP_ENOMEM, "model: out of memory");
    goto done;
  }
  TRY(cp_hf_config_load(&m->cfg, cfg_path));
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
  m->norm_eps = (float)c->norm_eps;
  m->attn_scale = (float)(1.0 / sqrt((double)c->d_head));
  m->lm_head_scale = 1.0f;
  m->rope_theta = c->rope_theta;
  m->rope_dims = c->rotary_dims;
  m->rope_scale = c->rope_scaling_factor > 0 ? c->rope_scaling_factor : 1.0;
  if (c->pos == CP_POS_ROPE && c->rope_scaling_type[0] && strcmp(c->rope_scaling_type, "linear") != 0) {
    rc = cp_error_set(CP_ECFG_FIELD, "%s: key 'rope_scaling.type': '%s' is not supported (only linear)",
                      cfg_path, c->rope_scaling_type);
    goto done;
  }
  if (c->pos == CP_POS_ROPE && !c->rope_scaling_type[0]) m->rope_scale = 1.0;

  loader L = {m, ck, cp_checkpoint_dir(ck), ""};
  switch (c->family) {
    case CP_FAMILY_T5: rc = load_t5(&L); break;
    case CP_FAMILY_BLOOM: rc = load_bloom(&L); break;
    case CP_FAMILY_MPT: rc = load_mpt(&L); break;
    case CP_FAMILY_LLAMA: rc = load_llama(&L, false); break;
    case CP_FAMILY_GPT_NEOX: rc = load_gpt_neox(&L); break;
    case CP_FAMILY_FIRE: rc = load_llama(&L, true); break;
    case CP_FAMILY_COUNT: rc = cp_error_set(CP_ECFG_FAMILY, "%s: unknown family", cfg_path); break;
  }
  if (rc) goto done;
  if (c->pos == CP_POS_ALIBI) TRY(load_slopes(&L));
  TRY(load_metadata_rule(m, cfg_path));
  *out = m;
  m = NULL;
done:
  cp_model_free(m);
  cp_checkpoint_free(ck);
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
  cp_hf_config_free(m->cfg);
  free(m);
}

const cp_hf_config *cp_model_config(const cp_model *m) { return m->cfg; }

void cp_model_rule_model(cp_rule_model *out, const cp_model *m) {
  memset(out, 0, sizeof *out);
  out->is_encoder_decoder = m->family == CP_FAMILY_T5;
  out->n_layers_encoder = m->encoder.n_layers;
  out->n_layers_decoder = m->decoder.n_layers;
  out->train_len = m->train_len;
  out->has_alibi = m->pos == CP_POS_ALIBI;
  out->has_fire = m->pos == CP_POS_FIRE;
}

int cp_model_check_ids(const cp_model *m, const int64_t *ids, int64_t n, const char *what) {
  if (n <= 0) return cp_error_set(CP_EMODEL_INPUT, "%s: no token ids", what);
  for (int64_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= m->vocab)
      return cp_error_set(CP_EMODEL_INPUT, "%s: entry %lld: id %lld is outside the vocabulary [0, %d)",
                          what, (long long)i, (long long)ids[i], m->vocab);
  return 0;
}

double cp_fire_mlp_bias(const cp_fire_mlp *f, int h, double x) {
  const float *w2 = f->w2 + (size_t)h * f->width;
  double s = f->b2[h];
  for (int w = 0; w < f->width; w++) {
    double a = (double)f->w1[w] * x + (double)f->b1[w];
    if (a > 0) s += (double)w2[w] * a;
  }
  return s;
}
