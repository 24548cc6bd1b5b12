/* A checkpoint as a llama.cpp GGUF file (include/ctxpatch/export/gguf_export.h): the tensor
 * plan (names, q/k permutation, types), the metadata, and the streaming copy through the GGUF
 * writer. */
#include "ctxpatch/export/gguf_export.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/version.h"
#include "ctxpatch/import/names.h"
#include "ctxpatch/import/gguf_model.h"
#include "ctxpatch/model/rope.h"
#include "ctxpatch/formats/gguf_write.h"
#include "export/gguf/gguf_vocab.h"

#define CHUNK_FLOATS ((size_t)1 << 20) /* rows are converted 4 MiB of float32 at a time */
#define MAPPED_CHUNK ((uint64_t)16 << 20) /* bytes passed through per job of the hash thread */

int cp_gguf_dtype_from_name(uint32_t *out, const char *name) {
  static const struct { const char *name; uint32_t type; } k[] = {
      {"f32", CP_GGML_F32}, {"f16", CP_GGML_F16}, {"bf16", CP_GGML_BF16}, {"q8_0", CP_GGML_Q8_0}};
  for (size_t i = 0; i < sizeof k / sizeof *k; i++)
    if (!strcmp(name, k[i].name)) {
      *out = k[i].type;
      return 0;
    }
  return cp_error_set(CP_EARG, "--dtype '%s': expected f32, f16, bf16 or q8_0", name);
}

/* llama_ftype of a file whose weights are `type`. */
static uint32_t file_type(uint32_t type) {
  switch (type) {
    case CP_GGML_F16: return 1;
    case CP_GGML_Q8_0: return 7;
    case CP_GGML_BF16: return 32;
    default: return 0;
  }
}

/* One output tensor: where its rows come from and how they are stored. */
typedef struct {
  size_t src;         /* checkpoint index */
  char name[CP_GGUF_MAX_NAME];
  uint32_t type;
  cp_gguf_rows rows;  /* llama.cpp's row order (GGUF row r is HF row cp_gguf_row_to_hf(r)) */
  bool transpose;     /* a GPT-2 Conv1D matrix: stored [n_in, n_out], written [n_out, n_in] */
  float scale;        /* values multiplied by it (1: as stored; T5's tied head: d_model^-0.5) */
  float offset;       /* then added (0; Gemma's norms: 1, cp_family_norm_plus_one) */
} plan_entry;

typedef struct {
  plan_entry *v;
  size_t n, cap;
} tensor_plan;

static int plan_add(tensor_plan *p, const cp_checkpoint *ck, const char *src, const char *name, uint32_t want,
                    cp_gguf_rows rows, bool transpose, float scale, float offset) {
  const cp_tensor *t = cp_checkpoint_find(ck, src);
  if (!t) return 0;
  size_t idx = 0;
  while (cp_checkpoint_tensor(ck, idx) != t) idx++;
  if (strlen(name) >= CP_GGUF_MAX_NAME)
    return cp_error_set(CP_EARG, "%s: tensor '%s': GGUF name '%s' too long", cp_checkpoint_dir(ck), src, name);
  if (!cp_dtype_is_float(t->dtype) || t->ndim < 1 || t->ndim > CP_GGUF_MAX_DIMS)
    return cp_error_set(CP_EUNSUPPORTED, "%s: tensor '%s': %s with %d dimensions is not written to GGUF",
                        cp_checkpoint_dir(ck), src, cp_dtype_name(t->dtype), t->ndim);
  if (transpose && t->ndim != 2)
    return cp_error_set(CP_EMODEL_TENSOR, "%s: tensor '%s': a Conv1D weight must have 2 dimensions, not %d",
                        cp_checkpoint_dir(ck), src, t->ndim);
  uint32_t type = t->ndim == 1 ? CP_GGML_F32 : want;
  if (type == CP_GGML_Q8_0 && t->shape[transpose ? 0 : t->ndim - 1] % 32) type = CP_GGML_F16;
  int rc = CP_ARRAY_RESERVE(p->v, p->cap, p->n + 1, "gguf export");
  if (rc) return rc;
  plan_entry *e = &p->v[p->n++];
  e->src = idx;
  snprintf(e->name, sizeof e->name, "%s", name);
  e->type = type;
  e->rows = rows;
  e->transpose = transpose;
  e->scale = scale;
  e->offset = offset;
  return 0;
}

/* An HF folder's tensors by the family table: embedding, layers, final norm, head (for BLOOM and
 * GPT-NeoX, whose llama.cpp loader requires output.weight, the embedding when tied; for a tied T5
 * the embedding times d_model^-0.5, the factor HF's T5 applies to the head's input and llama.cpp's
 * t5 does not); GPT-2's Conv1D matrices transposed, as llama.cpp's converter writes them. */
static int plan_hf(tensor_plan *p, const cp_checkpoint *ck, const cp_hf_config *cfg, uint32_t want) {
  cp_names hf, gg;
  cp_names_init(&hf, ck, cfg);
  gg = hf;
  gg.gguf = true;
  static const char *const suffixes[2] = {".weight", ".bias"};
  int rc = 0;
  /* llama.cpp's order: model-level tensors, each layer's in table order, then the tail. */
  int depth = cfg->n_layers > cfg->n_decoder_layers ? cfg->n_layers : cfg->n_decoder_layers;
  for (int pass = 0; pass < 3 && rc == 0; pass++) {
    int n_layers = pass == 1 ? depth : 1;
    for (int l = 0; l < n_layers && rc == 0; l++)
      for (size_t r = 0; r < hf.fl->n_tensors && rc == 0; r++) {
        const cp_family_tensor *row = &hf.fl->tensors[r];
        bool layered = strstr(row->hf, "%d") != NULL;
        bool tail = row->role == CP_ROLE_FINAL_NORM || row->role == CP_ROLE_LM_HEAD;
        if ((pass == 1) != layered || (pass == 2) != tail || !row->gguf || !cp_names_row_applies(&hf, row) ||
            l >= cp_names_layers(cfg, row))
          continue;
        cp_gguf_rows rows = cp_gguf_rows_of(cfg, row->role);
        for (int s = 0; s < 2 && rc == 0; s++) {
          char src[CP_TENSOR_NAME_MAX], dst[CP_TENSOR_NAME_MAX];
          cp_names_row(src, &hf, row, l, suffixes[s]);
          cp_names_row(dst, &gg, row, l, suffixes[s]);
          if (row->role == CP_ROLE_EMBED) /* whichever copy the checkpoint has (T5: shared or encoder's) */
            cp_names_get(src, &hf, CP_ROLE_EMBED, CP_STACK_DECODER, 0, suffixes[s]);
          bool tied_head = row->role == CP_ROLE_LM_HEAD && cfg->tie_word_embeddings && s == 0 &&
                           (cfg->family == CP_FAMILY_BLOOM || cfg->family == CP_FAMILY_GPT_NEOX ||
                            cfg->family == CP_FAMILY_T5);
          if (tied_head) cp_names_get(src, &hf, CP_ROLE_EMBED, CP_STACK_DECODER, 0, ".weight");
          float scale = tied_head && cfg->family == CP_FAMILY_T5 ? (float)(1.0 / sqrt((double)cfg->d_model)) : 1.0f;
          float offset = s == 0 && cp_family_norm_plus_one(cfg->family, row->role) ? 1.0f : 0.0f;
          rc = plan_add(p, ck, src, dst, want, rows, s == 0 && cp_names_conv1d(&hf, row), scale, offset);
        }
      }
  }
  return rc;
}

/* A GGUF input: every tensor in file order under its own name. */
static int plan_gguf(tensor_plan *p, const cp_checkpoint *ck, uint32_t want) {
  int rc = 0;
  for (size_t i = 0; i < cp_checkpoint_count(ck) && rc == 0; i++) {
    const char *name = cp_checkpoint_tensor(ck, i)->name;
    rc = plan_add(p, ck, name, name, want, (cp_gguf_rows){CP_GGUF_ROWS_SAME, 0, 0}, false, 1.0f, 0.0f);
  }
  return rc;
}

/* ---------------------------------------------------------------- metadata */

/* Copies key i of `g` with its type (arrays of scalars and strings; nested arrays refused). */
static int copy_kv(cp_gguf_writer *w, const cp_gguf_file *g, size_t i) {
  const char *key = cp_gguf_kv_key(g, i);
  cp_gguf_vtype t = cp_gguf_kv_type(g, i);
  const char *s;
  size_t len;
  int64_t iv;
  double dv;
  bool bv;
  int rc;
  switch (t) {
    case CP_GGUF_STRING:
      return (rc = cp_gguf_get_str(&s, &len, g, key)) ? rc : cp_gguf_put_str(w, key, s, len);
    case CP_GGUF_BOOL: return (rc = cp_gguf_get_bool(&bv, g, key)) ? rc : cp_gguf_put_bool(w, key, bv);
    case CP_GGUF_F32: case CP_GGUF_F64: {
      if ((rc = cp_gguf_get_f64(&dv, g, key))) return rc;
      float f = (float)dv;
      return t == CP_GGUF_F32 ? cp_gguf_put_scalar(w, key, t, &f) : cp_gguf_put_scalar(w, key, t, &dv);
    }
    case CP_GGUF_ARRAY: break;
    default: { /* integers, stored back in their own width */
      if ((rc = cp_gguf_get_int(&iv, g, key))) return rc;
      uint64_t u = (uint64_t)iv;
      unsigned char buf[8];
      memcpy(buf, &u, 8); /* little-endian host: the low bytes are the narrower value */
      return cp_gguf_put_scalar(w, key, t, buf);
    }
  }
  cp_gguf_vtype elem;
  uint64_t n;
  if ((rc = cp_gguf_get_arr(&elem, &n, g, key))) return rc;
  if (elem == CP_GGUF_ARRAY)
    return cp_error_set(CP_EUNSUPPORTED, "%s: key '%s': nested arrays are not copied", cp_gguf_path(g), key);
  size_t width = elem == CP_GGUF_STRING ? sizeof(char *) + sizeof(size_t) : 8;
  void *buf = NULL;
  if (n > SIZE_MAX / width || !(buf = malloc(n ? (size_t)n * width : 1)))
    return cp_nomem("%s: key '%s'", cp_gguf_path(g), key);
  rc = 0;
  if (elem == CP_GGUF_STRING) {
    const char **ss = buf;
    size_t *ls = (size_t *)(ss + n);
    for (uint64_t k = 0; k < n && rc == 0; k++) rc = cp_gguf_arr_str(&ss[k], &ls[k], g, key, k);
    if (rc == 0) rc = cp_gguf_put_arr_str(w, key, ss, ls, n);
  } else {
    unsigned char *o = buf;
    int size = elem == CP_GGUF_U8 || elem == CP_GGUF_I8 || elem == CP_GGUF_BOOL ? 1
             : elem == CP_GGUF_U16 || elem == CP_GGUF_I16                     ? 2
             : elem == CP_GGUF_U32 || elem == CP_GGUF_I32 || elem == CP_GGUF_F32 ? 4 : 8;
    for (uint64_t k = 0; k < n && rc == 0; k++) {
      if (elem == CP_GGUF_F32 || elem == CP_GGUF_F64) {
        if ((rc = cp_gguf_arr_f64(&dv, g, key, k))) break;
        float f = (float)dv;
        if (elem == CP_GGUF_F32) memcpy(o + 4 * k, &f, 4);
        else memcpy(o + 8 * k, &dv, 8);
      } else {
        if ((rc = cp_gguf_arr_int(&iv, g, key, k))) break;
        uint64_t u = (uint64_t)iv;
        memcpy(o + (size_t)size * k, &u, (size_t)size);
      }
    }
    if (rc == 0) rc = cp_gguf_put_arr(w, key, elem, buf, n);
  }
  free(buf);
  return rc;
}

static bool skip_copied(const char *key, const char *arch, bool rope_override, bool ctx_override) {
  static const char *const owned[] = {"general.architecture", "general.name", "general.alignment",
                                      "general.file_type", "general.quantization_version"};
  for (size_t i = 0; i < sizeof owned / sizeof *owned; i++)
    if (!strcmp(key, owned[i])) return true;
  size_t n = strlen(arch);
  return !strncmp(key, "ctxpatch.", 9) ||
         (rope_override && !strncmp(key, arch, n) && !strncmp(key + n, ".rope.scaling.", 14)) ||
         (ctx_override && !strncmp(key, arch, n) && !strcmp(key + n, ".context_length"));
}

/* A u32 key `{arch}.suffix`. */
static int put_u32(cp_gguf_writer *w, const char *arch, const char *suffix, int64_t v) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  return cp_gguf_put_u32(w, key, (uint32_t)v);
}

static int put_f32(cp_gguf_writer *w, const char *arch, const char *suffix, double v) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  return cp_gguf_put_f32(w, key, (float)v);
}

/* convert_hf_to_gguf.py GemmaModel / Gemma2Model: head_dim as key_length and value_length (Gemma's
 * 256 is not D/H), and for gemma2 the two soft-caps and the window (cp_gguf_export_check has refused
 * what llama.cpp would run otherwise: no cap, another scale, other sliding layers). */
static int put_gemma(cp_gguf_writer *w, const cp_hf_config *cfg, const char *arch) {
  int rc;
  if ((rc = put_u32(w, arch, "rope.dimension_count", cfg->d_head)) ||
      (rc = put_f32(w, arch, "rope.freq_base", cfg->rope_theta)) ||
      (rc = put_f32(w, arch, "attention.layer_norm_rms_epsilon", cfg->norm_eps)) ||
      (rc = put_u32(w, arch, "attention.key_length", cfg->d_head)) ||
      (rc = put_u32(w, arch, "attention.value_length", cfg->d_head)) || !cfg->sandwich_norms)
    return rc;
  /* gemma3 (convert_hf_to_gguf.py Gemma3Model): no soft-cap keys, the sliding layers' base as
   * rope.freq_base_swa (10000, the only one gemma_check lets through: what llama.cpp's gemma3 runs
   * whether or not it reads the key) */
  if (cfg->rope_local_theta > 0)
    return (rc = put_f32(w, arch, "rope.freq_base_swa", cfg->rope_local_theta))
               ? rc
               : put_u32(w, arch, "attention.sliding_window", cfg->sliding_window);
  if ((rc = put_f32(w, arch, "attn_logit_softcapping", cfg->attn_softcap)) ||
      (rc = put_f32(w, arch, "final_logit_softcapping", cfg->final_softcap)))
    return rc;
  return put_u32(w, arch, "attention.sliding_window", cfg->sliding_window);
}

/* The {arch}.* keys of an HF config (see the header for which architecture gets which). */
static int put_arch(cp_gguf_writer *w, const cp_hf_config *cfg, const char *arch) {
  int rc = 0;
  if (cfg->train_len > 0) rc = put_u32(w, arch, "context_length", cfg->train_len);
  if (rc || (rc = put_u32(w, arch, "embedding_length", cfg->d_model)) ||
      (rc = put_u32(w, arch, "block_count", cfg->n_layers)) ||
      (rc = put_u32(w, arch, "feed_forward_length", cfg->d_ff)) ||
      (rc = put_u32(w, arch, "attention.head_count", cfg->n_heads)) ||
      (rc = put_u32(w, arch, "attention.head_count_kv", cfg->n_kv_heads)) ||
      (rc = put_u32(w, arch, "vocab_size", cfg->vocab_size)))
    return rc;
  if (cfg->family == CP_FAMILY_T5) { /* conversion/t5.py's T5Model.set_gguf_parameters */
    if ((rc = put_u32(w, arch, "decoder_block_count", cfg->n_decoder_layers)) ||
        (rc = put_u32(w, arch, "attention.key_length", cfg->d_head)) ||
        (rc = put_u32(w, arch, "attention.value_length", cfg->d_head)) ||
        (rc = put_f32(w, arch, "attention.layer_norm_epsilon", cfg->norm_eps)) ||
        (rc = put_f32(w, arch, "attention.layer_norm_rms_epsilon", cfg->norm_eps)) ||
        (rc = put_u32(w, arch, "attention.relative_buckets_count", cfg->t5_num_buckets)))
      return rc;
    if (cfg->decoder_start_token_id >= 0) rc = put_u32(w, arch, "decoder_start_token_id", cfg->decoder_start_token_id);
    return rc;
  }
  if (cfg->family == CP_FAMILY_LLAMA) {
    if ((rc = put_u32(w, arch, "rope.dimension_count", cfg->d_head)) ||
        (rc = put_f32(w, arch, "attention.layer_norm_rms_epsilon", cfg->norm_eps)) ||
        (rc = put_f32(w, arch, "rope.freq_base", cfg->rope_theta)))
      return rc;
    /* llama.cpp takes both head sizes as n_embd / n_head unless stated (Qwen3, Mistral's head_dim). */
    if (cfg->d_head * cfg->n_heads != cfg->d_model &&
        ((rc = put_u32(w, arch, "attention.key_length", cfg->d_head)) ||
         (rc = put_u32(w, arch, "attention.value_length", cfg->d_head))))
      return rc;
    /* llama.cpp's granite (convert_hf_to_gguf.py GraniteModel): the four multipliers as its keys;
     * llm_build_granite divides the logits by logit_scale, as GraniteForCausalLM. */
    if (cfg->granite &&
        ((rc = put_f32(w, arch, "embedding_scale", cfg->embedding_multiplier)) ||
         (rc = put_f32(w, arch, "residual_scale", cfg->residual_multiplier)) ||
         (rc = put_f32(w, arch, "attention.scale", cfg->attention_multiplier)) ||
         (rc = put_f32(w, arch, "logit_scale", cfg->logits_scaling))))
      return rc;
    return rc;
  }
  if (cfg->family == CP_FAMILY_PHI3) { /* convert_hf_to_gguf.py Phi3MiniModel: the rotated dims, not the head */
    if ((rc = put_u32(w, arch, "rope.dimension_count", cfg->rotary_dims)) ||
        (rc = put_f32(w, arch, "attention.layer_norm_rms_epsilon", cfg->norm_eps)) ||
        (rc = put_f32(w, arch, "rope.freq_base", cfg->rope_theta)) || strcmp(cfg->rope_scaling_type, "longrope") != 0)
      return rc;
    /* longrope: the lists are the rope_factors_* tensors; llama.cpp multiplies cos and sin by
     * attn_factor (llama-context.cpp: yarn_attn_factor *= hparams.rope_attn_factor) and picks the
     * long list when its context passes original_context_length */
    cp_rope_table t;
    if ((rc = cp_rope_table_init(&t, cfg, cfg->rope_theta, cfg->rotary_dims, "gguf export")) ||
        (rc = put_f32(w, arch, "rope.scaling.attn_factor", t.mscale)))
      return rc;
    return put_u32(w, arch, "rope.scaling.original_context_length", cfg->rope_original_max_pos);
  }
  if (cfg->family == CP_FAMILY_GEMMA) return put_gemma(w, cfg, arch);
  if (cfg->family == CP_FAMILY_OLMO2) /* convert_hf_to_gguf.py Olmo2Model: TextModel's keys */
    return (rc = put_u32(w, arch, "rope.dimension_count", cfg->d_head)) ||
                   (rc = put_f32(w, arch, "attention.layer_norm_rms_epsilon", cfg->norm_eps))
               ? rc
               : put_f32(w, arch, "rope.freq_base", cfg->rope_theta);
  if (cfg->family == CP_FAMILY_STARCODER2) { /* convert_hf_to_gguf.py StarCoder2Model (TextModel's keys) */
    if ((rc = put_u32(w, arch, "rope.dimension_count", cfg->d_head)) ||
        (rc = put_f32(w, arch, "attention.layer_norm_epsilon", cfg->norm_eps)))
      return rc;
    return put_f32(w, arch, "rope.freq_base", cfg->rope_theta);
  }
  if ((rc = put_f32(w, arch, "attention.layer_norm_epsilon", cfg->norm_eps))) return rc;
  if (cfg->family == CP_FAMILY_GPT_NEOX) {
    char key[128];
    snprintf(key, sizeof key, "%s.use_parallel_residual", arch);
    if ((rc = put_u32(w, arch, "rope.dimension_count", cfg->rotary_dims)) ||
        (rc = put_f32(w, arch, "rope.freq_base", cfg->rope_theta)))
      return rc;
    return cp_gguf_put_bool(w, key, cfg->use_parallel_residual);
  }
  if (cfg->family == CP_FAMILY_MPT) {
    if ((rc = put_f32(w, arch, "attention.max_alibi_bias", cfg->alibi_bias_max))) return rc;
    if (cfg->mpt_clip_qkv > 0) rc = put_f32(w, arch, "attention.clamp_kqv", cfg->mpt_clip_qkv);
  }
  return rc;
}

/* tokenizer.ggml.* of an HF folder: its byte-level BPE tokenizer.json, else its tokenizer.model,
 * else no vocabulary. */
static int put_tokenizer(cp_gguf_writer *w, const cp_checkpoint *ck, const cp_hf_config *cfg) {
  bool done = false;
  int rc = 0;
  for (size_t i = 0; i < cp_checkpoint_aux_count(ck) && rc == 0; i++) {
    if (strcmp(cp_checkpoint_aux(ck, i), "tokenizer.json")) continue;
    char *path = cp_path_join(cp_checkpoint_dir(ck), "tokenizer.json");
    CP_CHECK_ALLOC(path, cp_checkpoint_dir(ck));
    rc = cp_gguf_put_hf_vocab(&done, w, path, cfg->vocab_size, cfg->bos_token_id, cfg->eos_token_id,
                              cfg->pad_token_id);
    free(path);
  }
  /* a SentencePiece tokenizer.model as llama.cpp's "llama" vocabulary; not for T5, whose Unigram
   * SentencePiece llama.cpp runs as its "t5" vocabulary, which is not written */
  if (rc == 0 && !done && cfg->family != CP_FAMILY_T5)
    rc = cp_gguf_put_spm_vocab(&done, w, cp_checkpoint_dir(ck), cfg->vocab_size, cfg->bos_token_id,
                               cfg->eos_token_id, cfg->pad_token_id);
  if (rc || done) return rc;
  static const char no_vocab[] = "no_vocab"; /* token ids only (see the header) */
  if ((rc = cp_gguf_put_str(w, "tokenizer.ggml.model", no_vocab, sizeof no_vocab - 1))) return rc;
  if (cfg->bos_token_id >= 0 && (rc = cp_gguf_put_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)cfg->bos_token_id)))
    return rc;
  if (cfg->eos_token_id >= 0 && (rc = cp_gguf_put_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)cfg->eos_token_id)))
    return rc;
  return 0;
}

static int put_rope_scaling(cp_gguf_writer *w, const char *arch, double factor, int64_t train_len) {
  static const char linear[] = "linear";
  char key[128];
  snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
  int rc = cp_gguf_put_str(w, key, linear, sizeof linear - 1);
  if (rc == 0) rc = put_f32(w, arch, "rope.scaling.factor", factor);
  if (rc == 0 && train_len > 0) rc = put_u32(w, arch, "rope.scaling.original_context_length", train_len);
  return rc;
}

/* YaRN as llama.cpp reads it on llama, qwen2 and qwen3 (src/llama-model.cpp load_hparams: type,
 * factor, original_context_length, attn_factor; src/llama-context.cpp: ext_factor 1, beta_fast 32,
 * beta_slow 1, and ggml's rope multiplies cos and sin by 0.1 ln(factor) + 1 times attn_factor).
 * The converter writes HF's attention_factor as yarn_attn_factor, which those architectures do not
 * read; here it becomes attn_factor = attention_factor / (0.1 ln(factor) + 1), which they do, and
 * only when it is not 1 (cp_gguf_export_check refuses the betas and truncate they cannot run). */
static int put_yarn(cp_gguf_writer *w, const char *arch, const cp_hf_config *cfg) {
  static const char yarn[] = "yarn";
  char key[128];
  snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
  const double f = cfg->rope_scaling_factor, m = f > 1 ? 0.1 * log(f) + 1.0 : 1.0;
  const int64_t original = cfg->rope_original_max_pos > 0 ? cfg->rope_original_max_pos : cfg->train_len;
  int rc = cp_gguf_put_str(w, key, yarn, sizeof yarn - 1);
  if (rc == 0) rc = put_f32(w, arch, "rope.scaling.factor", f);
  if (rc == 0 && original > 0) rc = put_u32(w, arch, "rope.scaling.original_context_length", original);
  if (rc == 0 && cfg->rope_attention_factor > 0 && fabs(cfg->rope_attention_factor / m - 1.0) > 1e-7)
    rc = put_f32(w, arch, "rope.scaling.attn_factor", cfg->rope_attention_factor / m);
  return rc;
}

static const char *base_name(const char *path) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--;
  const char *s = path + n;
  while (s > path && s[-1] != '/') s--;
  return s;
}

static int put_meta(cp_gguf_writer *w, const cp_checkpoint *ck, const cp_hf_config *cfg, const char *in,
                    const cp_gguf_export_params *p, uint32_t want) {
  if (p->source) in = p->source;
  const cp_gguf_file *g = cp_checkpoint_gguf(ck);
  char name[256];
  const char *gname = NULL;
  size_t glen = 0;
  if (p->name) snprintf(name, sizeof name, "%s", p->name);
  else if (g && cp_gguf_find_key(g, "general.name") >= 0 && cp_gguf_get_str(&gname, &glen, g, "general.name") == 0)
    snprintf(name, sizeof name, "%.*s", (int)(glen < 255 ? glen : 255), gname);
  else snprintf(name, sizeof name, "%.*s", (int)strcspn(base_name(in), "/"), base_name(in));
  const char *arch = cp_gguf_arch_of_config(cfg); /* checked by cp_gguf_export_check */
  int rc;
  if ((rc = cp_gguf_put_str(w, "general.architecture", arch, strlen(arch))) ||
      (rc = cp_gguf_put_str(w, "general.name", name, strlen(name))) ||
      (rc = cp_gguf_put_u32(w, "general.file_type", file_type(want))) ||
      (want == CP_GGML_Q8_0 && (rc = cp_gguf_put_u32(w, "general.quantization_version", 2))))
    return rc;
  bool rope = p->rope_factor > 0;
  if (g) {
    for (size_t i = 0; i < cp_gguf_kv_count(g) && rc == 0; i++)
      if (!skip_copied(cp_gguf_kv_key(g, i), arch, rope, p->train_len > 0)) rc = copy_kv(w, g, i);
    if (rc == 0 && p->train_len > 0) rc = put_u32(w, arch, "context_length", p->train_len);
  } else {
    if ((rc = put_arch(w, cfg, arch)) == 0 && !p->tokenizer_gguf) rc = put_tokenizer(w, ck, cfg);
    for (size_t i = 0; p->tokenizer_gguf && rc == 0 && i < cp_gguf_kv_count(p->tokenizer_gguf); i++)
      if (!strncmp(cp_gguf_kv_key(p->tokenizer_gguf, i), "tokenizer.", 10)) rc = copy_kv(w, p->tokenizer_gguf, i);
    if (rc == 0 && !rope && !strcmp(cfg->rope_scaling_type, "linear") && cfg->rope_scaling_factor != 1.0)
      rc = put_rope_scaling(w, arch, cfg->rope_scaling_factor, cfg->train_len);
    if (rc == 0 && !strcmp(cfg->rope_scaling_type, "yarn")) rc = put_yarn(w, arch, cfg);
  }
  if (rc == 0 && rope) rc = put_rope_scaling(w, arch, p->rope_factor, cfg->train_len);
  const char *src = base_name(in);
  if (rc || (rc = cp_gguf_put_str(w, "ctxpatch.tool_version", cp_version(), strlen(cp_version()))) ||
      (rc = cp_gguf_put_str(w, "ctxpatch.source", src, strcspn(src, "/"))))
    return rc;
  for (size_t i = 0; i < p->n_meta && rc == 0; i++) {
    const cp_gguf_meta *m = &p->meta[i];
    if (m->type == CP_GGUF_STRING) rc = cp_gguf_put_str(w, m->key, m->s, strlen(m->s));
    else if (m->type == CP_GGUF_BOOL) rc = cp_gguf_put_bool(w, m->key, m->b);
    else rc = cp_gguf_put_f32(w, m->key, (float)m->num);
  }
  return rc;
}

/* ---------------------------------------------------------------- tensor data */

/* GGUF rows [r0, r0 + nr) of a Conv1D matrix stored [n_in, n_out]: column slices of every stored
 * row read into raw ([n_in, nr] in the stored type), widened, transposed into out [nr, n_in]. */
static int read_transposed(float *out /* [nr, n_in] */, cp_checkpoint *ck, const plan_entry *e, uint64_t r0,
                           uint64_t nr, float *vals, unsigned char *raw) {
  const cp_tensor *t = cp_checkpoint_tensor(ck, e->src);
  uint64_t n_in = (uint64_t)t->shape[0], n_out = (uint64_t)t->shape[1];
  size_t es = cp_dtype_size(t->dtype);
  int rc = 0;
  for (uint64_t i = 0; i < n_in && rc == 0; i++) {
    rc = cp_checkpoint_read(ck, e->src, (i * n_out + r0) * es, raw + i * nr * es, (size_t)nr * es);
    cp_checkpoint_release(ck, e->src, (i * n_out + r0) * es, nr * es);
  }
  if (rc || (rc = cp_convert_to_f32(vals, raw, t->dtype, n_in * nr))) return rc;
  for (uint64_t i = 0; i < n_in; i++)
    for (uint64_t o = 0; o < nr; o++) out[o * n_in + i] = vals[i * nr + o];
  return 0;
}

/* Streams one tensor: bytes copied when stored in the output type and in order, else rows
 * widened to float32 (and permuted or transposed) a chunk at a time and encoded by the writer. */
static int write_tensor(cp_gguf_writer *w, cp_checkpoint *ck, const plan_entry *e, float *vals, unsigned char *raw) {
  const cp_tensor *t = cp_checkpoint_tensor(ck, e->src);
  uint64_t numel = 0;
  cp_shape_numel(&numel, t->ndim, t->shape); /* checked by the reader */
  /* A vector's rows are its elements (a fused q/k/v bias is reordered like the weight). */
  uint64_t cols = t->ndim >= 2 ? (uint64_t)t->shape[e->transpose ? 0 : t->ndim - 1] : 1, rows = cols ? numel / cols : 0;
  size_t es = cp_dtype_size(t->dtype);
  bool in_order = e->rows.order == CP_GGUF_ROWS_SAME && !e->transpose;
  /* stored in the output type, values unchanged: rows move as bytes (llama q/k reordered included) */
  bool as_stored = !e->transpose && e->scale == 1.0f && e->offset == 0.0f &&
                   ((t->dtype == CP_F32 && e->type == CP_GGML_F32) || (t->dtype == CP_F16 && e->type == CP_GGML_F16) ||
                    (t->dtype == CP_BF16 && e->type == CP_GGML_BF16));
  bool same = in_order && as_stored;
  int rc = cp_gguf_rows_check(&e->rows, rows, cp_checkpoint_dir(ck), t->name);
  if (rc) return rc;
  if (cols > CHUNK_FLOATS)
    return cp_error_set(CP_EUNSUPPORTED, "%s: tensor '%s': rows of %llu values are too long", cp_checkpoint_dir(ck),
                        t->name, (unsigned long long)cols);
  int fd = -1;
  uint64_t file_off = 0;
  if (same && t->data && cp_checkpoint_source(&fd, &file_off, ck, e->src) == 0) {
    /* the bytes as stored: the kernel copies them from the input file and the hash thread hashes
     * them from the mapping while this thread goes on (the copy and a hash on one thread ran at
     * 0.57x of the hash alone) */
    for (uint64_t at = 0; at < t->nbytes && rc == 0; at += MAPPED_CHUNK) {
      size_t len = (size_t)(t->nbytes - at < MAPPED_CHUNK ? t->nbytes - at : MAPPED_CHUNK);
      rc = cp_gguf_write_mapped(w, (const char *)t->data + at, len, fd, file_off + at);
    }
    return rc;
  }
  uint64_t per = CHUNK_FLOATS / (cols ? cols : 1);
  for (uint64_t r0 = 0; r0 < rows && rc == 0; r0 += per) {
    uint64_t nr = rows - r0 < per ? rows - r0 : per;
    size_t row_bytes = (size_t)cols * es;
    if (e->transpose) { /* raw is CHUNK_FLOATS * 8 bytes, malloc-aligned: floats fit in it */
      if ((rc = read_transposed((float *)(void *)raw, ck, e, r0, nr, vals, raw)) == 0)
        rc = cp_gguf_write_f32(w, (const float *)(const void *)raw, (size_t)(nr * cols));
      continue;
    }
    if (!in_order) {
      for (uint64_t r = 0; r < nr && rc == 0; r++)
        rc = cp_checkpoint_read(ck, e->src, cp_gguf_row_to_hf(&e->rows, r0 + r) * row_bytes, raw + r * row_bytes, row_bytes);
    } else {
      rc = cp_checkpoint_read(ck, e->src, r0 * row_bytes, raw, (size_t)nr * row_bytes);
    }
    if (rc) break;
    if (as_stored && !same && es == 2) /* the NaNs as the widened path wrote them (bytes unchanged) */
      cp_half_canon((uint16_t *)(void *)raw, (const uint16_t *)(const void *)raw, (size_t)(nr * cols),
                    t->dtype == CP_F16);
    if (as_stored) rc = cp_gguf_write_data(w, raw, (size_t)nr * row_bytes);
    else if ((rc = cp_convert_to_f32(vals, raw, t->dtype, nr * cols)) == 0) {
      for (size_t k = 0; e->scale != 1.0f && k < (size_t)(nr * cols); k++) vals[k] *= e->scale;
      for (size_t k = 0; e->offset != 0.0f && k < (size_t)(nr * cols); k++) vals[k] += e->offset;
      rc = cp_gguf_write_f32(w, vals, (size_t)(nr * cols));
    }
    cp_checkpoint_release(ck, e->src, r0 * row_bytes, (uint64_t)nr * row_bytes);
  }
  return rc;
}

/* What llama.cpp's YaRN cannot run (see put_yarn): other betas, and HF's truncate false where it
 * moves the correction range (ggml always floors and ceils it). The engine follows transformers. */
static int yarn_check(const cp_hf_config *cfg, const char *in, const char *arch) {
  const char *name = cfg->rope_parameters_layout ? "rope_parameters" : "rope_scaling";
  if (cfg->rope_beta_fast != 32 || cfg->rope_beta_slow != 1)
    return cp_error_set(CP_EUNSUPPORTED, "%s: key '%s.%s': %g, but llama.cpp's %s runs YaRN with beta_fast 32 and "
                        "beta_slow 1 (it reads no yarn_beta key)", in, name,
                        cfg->rope_beta_fast != 32 ? "beta_fast" : "beta_slow",
                        cfg->rope_beta_fast != 32 ? cfg->rope_beta_fast : cfg->rope_beta_slow, arch);
  if (cfg->rope_truncate) return 0;
  cp_hf_config truncated = *cfg;
  truncated.rope_truncate = true;
  cp_rope_table mine, its;
  int rot = cfg->rotary_dims > 0 ? cfg->rotary_dims : cfg->d_head, rc;
  if ((rc = cp_rope_table_init(&mine, cfg, cfg->rope_theta, rot, in)) ||
      (rc = cp_rope_table_init(&its, &truncated, cfg->rope_theta, rot, in)))
    return rc;
  for (int a = 0; a < mine.n; a++)
    if (fabs(its.inv[a] / mine.inv[a] - 1.0) > 1e-6)
      return cp_error_set(CP_EUNSUPPORTED, "%s: key '%s.truncate': false, but llama.cpp always truncates YaRN's "
                          "correction range, which moves pair %d's frequency by %.3g of it", in, name, a,
                          fabs(its.inv[a] / mine.inv[a] - 1.0));
  return 0;
}

/* What llama.cpp's gemma3 runs beyond gemma2's checks (src/models/gemma3.cpp, llama-model.cpp
 * LLM_ARCH_GEMMA3): set_swa_pattern(6), layer il sliding when il % 6 < 5 (HF's
 * sliding_window_pattern 6, or layer_types saying the same); the sliding layers at base 10000,
 * scale 1 (rope_freq_base_train_swa / rope_freq_scale_train_swa: HF's rope_local_base_freq,
 * unscaled); the linear rope.scaling.* on the full layers only (get_rope_freq_scale per layer), as
 * transformers; a final soft-cap only in some llama.cpp versions (the iswa graph skipped it). */
static int gemma3_check(const cp_hf_config *cfg, const char *in) {
  if (cfg->rope_local_theta != 10000.0)
    return cp_error_set(CP_EUNSUPPORTED, "%s: key 'rope_local_base_freq': %g, but llama.cpp's gemma3 rotates its "
                        "sliding layers at base 10000", in, cfg->rope_local_theta);
  if (cfg->final_softcap > 0)
    return cp_error_set(CP_EUNSUPPORTED, "%s: key 'final_logit_softcapping': %g, but llama.cpp's gemma3 applies it "
                        "in some versions only (Gemma3TextConfig's default is null)", in, cfg->final_softcap);
  for (int l = 0; l < cfg->n_layers; l++)
    if (cfg->layer_sliding[l] != (l % 6 < 5))
      return cp_error_set(CP_EUNSUPPORTED, "%s: key 'layer_types[%d]': '%s', but llama.cpp's gemma3 slides layer il "
                          "when il %% 6 < 5 (sliding_window_pattern 6)", in, l,
                          cfg->layer_sliding[l] ? "sliding_attention" : "full_attention");
  return 0;
}

/* What llama.cpp's gemma and gemma2 run (src/models/gemma.cpp, gemma2.cpp): the embedding as the
 * head, no biases, ggml_gelu (the tanh form); gemma2 always soft-caps both (50 and 30 without a
 * key), scales q by f_attention_scale, 1/sqrt(head_dim) unless the model has 46 layers (its "27B",
 * then 1/sqrt(n_embd / n_head)), and slides the even layers (set_swa_pattern(2): il % 2 < 1). */
static int gemma_check(const cp_hf_config *cfg, const char *in) {
  const char *act = cfg->activation;
  if (!cfg->tie_word_embeddings)
    return cp_error_set(CP_EUNSUPPORTED, "%s: key 'tie_word_embeddings': false, but llama.cpp's %s runs the embedding "
                        "as its head", in, cfg->model_type);
  if (cfg->qkv_bias)
    return cp_error_set(CP_EUNSUPPORTED, "%s: key 'attention_bias': true, but llama.cpp's %s has no attention biases",
                        in, cfg->model_type);
  if (strcmp(act, "gelu_pytorch_tanh") && strcmp(act, "gelu_new") && strcmp(act, "gelu_fast"))
    return cp_error_set(CP_EUNSUPPORTED, "%s: key 'hidden_activation': '%s', but llama.cpp's %s runs GELU in its tanh "
                        "form", in, act, cfg->model_type);
  if (!cfg->sandwich_norms) return 0;
  const bool g3 = cfg->rope_local_theta > 0;
  const int big = g3 ? 62 : 46; /* the layer count llama.cpp takes for its "27B" */
  double scalar = cfg->n_layers == big ? (double)(cfg->d_model / cfg->n_heads) : (double)cfg->d_head;
  if (fabs(cfg->query_pre_attn_scalar - scalar) > 1e-9 * scalar)
    return cp_error_set(CP_EUNSUPPORTED, "%s: key 'query_pre_attn_scalar': %g, but llama.cpp's %s scales by "
                        "1/sqrt(%g) (%s)", in, cfg->query_pre_attn_scalar, g3 ? "gemma3" : "gemma2", scalar,
                        cfg->n_layers == big ? "hidden_size / num_attention_heads at its 27B layer count" : "head_dim");
  if (g3) return gemma3_check(cfg, in);
  if (cfg->attn_softcap <= 0 || cfg->final_softcap <= 0)
    return cp_error_set(CP_EUNSUPPORTED, "%s: key '%s': null, but llama.cpp's gemma2 always soft-caps (50 and 30 "
                        "without a key)", in, cfg->attn_softcap <= 0 ? "attn_logit_softcapping"
                                                                     : "final_logit_softcapping");
  if (cfg->sliding_window <= 0)
    return cp_error_set(CP_EUNSUPPORTED, "%s: key 'sliding_window': null, but llama.cpp's gemma2 slides its even "
                        "layers (4096 without a key)", in);
  for (int l = 0; l < cfg->n_layers; l++)
    if (cfg->layer_sliding[l] != (l % 2 == 0))
      return cp_error_set(CP_EUNSUPPORTED, "%s: key 'layer_types[%d]': '%s', but llama.cpp's gemma2 slides the even "
                          "layers only", in, l, cfg->layer_sliding[l] ? "sliding_attention" : "full_attention");
  return 0;
}

int cp_gguf_export_check(const cp_hf_config *cfg, const char *in) {
  const char *act = cfg->activation, *type = cfg->rope_scaling_type, *arch = cp_gguf_arch_of_config(cfg);
  /* llama3 scaling is llama.cpp's rope_freqs tensor, which its llama architecture reads (its
   * qwen2 does not); YaRN is its own keys, on the llama body (llama, qwen2, qwen3). */
  bool llama3 = !strcmp(type, "llama3") && arch && !strcmp(arch, "llama");
  bool yarn = !strcmp(type, "yarn") && cfg->family == CP_FAMILY_LLAMA;
  if (!strcmp(type, "dynamic"))
    return cp_error_set(CP_EUNSUPPORTED, "%s: key 'rope_scaling.type': 'dynamic' has no GGUF form (llama.cpp has no "
                        "dynamic NTK scaling)", in);
  /* longrope: llama.cpp's phi3 reads rope_factors_long / rope_factors_short, but picks the list
   * once per context (n_ctx), where transformers picks it per call (docs/gguf.md) */
  bool longrope = !strcmp(type, "longrope") && cfg->family == CP_FAMILY_PHI3;
  if (!strcmp(type, "longrope") && !longrope)
    return cp_error_set(CP_EUNSUPPORTED, "%s: key 'rope_scaling.type': 'longrope' is written to GGUF for phi3 only "
                        "(llama.cpp's phi3 reads rope_factors_long / rope_factors_short; this is %s)", in,
                        cp_family_name(cfg->family));
  if (type[0] && strcmp(type, "linear") != 0 && !llama3 && !yarn && !longrope)
    return cp_error_set(CP_EUNSUPPORTED, "%s: key 'rope_scaling.type': '%s' is not written to GGUF for %s (llama.cpp "
                        "reads a rope_freqs tensor for llama only, and YaRN keys on the llama body); use --to onnx",
                        in, type, cp_family_name(cfg->family));
  int rc;
  if (yarn && (rc = yarn_check(cfg, in, arch))) return rc;
  /* llama.cpp's llama and qwen2/qwen3 read no window key, its phi3 reads one and drops it
   * (llama-model.cpp: "Phi SWA is currently disabled"), its starcoder2 reads none either
   * (LLM_ARCH_STARCODER2 loads only the LayerNorm epsilon): all attend to every key. That is the HF
   * model up to the window only, so a window below the context length written is refused. */
  if ((cfg->family == CP_FAMILY_LLAMA || cfg->family == CP_FAMILY_PHI3 || cfg->family == CP_FAMILY_STARCODER2) &&
      cfg->sliding_window > 0 &&
      cfg->sliding_window < cfg->train_len)
    return cp_error_set(CP_EUNSUPPORTED, "%s: key 'sliding_window': %d is below the context length %lld, but "
                        "llama.cpp's %s runs no sliding window (it would attend to keys beyond it); use --to onnx",
                        in, cfg->sliding_window, (long long)cfg->train_len, arch ? arch : cp_family_name(cfg->family));
  switch (cfg->family) {
    case CP_FAMILY_LLAMA:
      if (cfg->qk_norm && cfg->qkv_bias) /* src/llama-model.cpp LLM_ARCH_QWEN3 loads no bias tensor */
        return cp_error_set(CP_EUNSUPPORTED, "%s: key 'attention_bias': true, but llama.cpp's qwen3 has no attention "
                            "biases", in);
      return 0;
    case CP_FAMILY_PHI3: /* llama.cpp's phi3: SiLU gate, no biases (both as HF's Phi3MLP, Phi3Attention) */
      if (strcmp(act, "silu") && strcmp(act, "swish"))
        return cp_error_set(CP_EUNSUPPORTED, "%s: key 'hidden_act': '%s', but llama.cpp's phi3 always runs SiLU", in,
                            act);
      return 0;
    case CP_FAMILY_BLOOM:
      if (!cfg->residual_post_layernorm) return 0;
      return cp_error_set(CP_EUNSUPPORTED, "%s: key 'apply_residual_connection_post_layernorm': true is not run by "
                          "llama.cpp's bloom (its residual is the block input)", in);
    case CP_FAMILY_GPT_NEOX:
      if (!cfg->qkv_bias)
        return cp_error_set(CP_EUNSUPPORTED, "%s: key 'attention_bias': false, but llama.cpp's gptneox requires "
                            "attn_qkv and attn_output biases", in);
      if (strncmp(act, "gelu", 4))
        return cp_error_set(CP_EUNSUPPORTED, "%s: key 'hidden_act': '%s', but llama.cpp's gptneox always runs GELU",
                            in, act);
      return 0;
    case CP_FAMILY_MPT:
      if (cfg->mpt_softmax_scale > 0 && fabs(cfg->mpt_softmax_scale * sqrt((double)cfg->d_head) - 1.0) > 1e-6)
        return cp_error_set(CP_EUNSUPPORTED, "%s: key 'attn_config.softmax_scale': %g, but llama.cpp's mpt scales by "
                            "1/sqrt(%d)", in, cfg->mpt_softmax_scale, cfg->d_head);
      return 0;
    case CP_FAMILY_T5: /* llama.cpp's t5 (src/models/t5.cpp, llama-graph.cpp's relative buckets) */
      if (cfg->t5_max_distance != 128)
        return cp_error_set(CP_EUNSUPPORTED, "%s: key 'relative_attention_max_distance': %d, but llama.cpp's t5 buckets "
                            "distances up to 128", in, cfg->t5_max_distance);
      if (strcmp(act, "relu") && strcmp(act, "gated-gelu"))
        return cp_error_set(CP_EUNSUPPORTED, "%s: key 'feed_forward_proj': '%s', but llama.cpp's t5 runs relu or "
                            "gated-gelu only", in, act);
      return 0;
    case CP_FAMILY_GPT2: /* llama.cpp's gpt2 scales every layer's scores by 1/sqrt(dh) and runs GELU */
      if (!cfg->scale_attn_weights || cfg->scale_attn_inverse_layer)
        return cp_error_set(CP_EUNSUPPORTED, "%s: key %s, but llama.cpp's gpt2 always scales attention scores by "
                            "1/sqrt(%d)", in, cfg->scale_attn_weights ? "'scale_attn_by_inverse_layer_idx': true"
                                                                      : "'scale_attn_weights': false", cfg->d_head);
      if (strncmp(act, "gelu", 4))
        return cp_error_set(CP_EUNSUPPORTED, "%s: key 'activation_function': '%s', but llama.cpp's gpt2 always runs "
                            "GELU", in, act);
      return 0;
    case CP_FAMILY_GEMMA: return gemma_check(cfg, in);
    case CP_FAMILY_OLMO2: /* src/llama-model.cpp LLM_ARCH_OLMO2: n_embd_head = n_embd / n_head; SiLU gate */
      if (cfg->d_head * cfg->n_heads != cfg->d_model)
        return cp_error_set(CP_EUNSUPPORTED, "%s: key 'head_dim': %d x %d heads is not hidden_size %d, but llama.cpp's "
                            "olmo2 takes the head width as hidden_size / num_attention_heads", in, cfg->d_head,
                            cfg->n_heads, cfg->d_model);
      if (strcmp(act, "silu") && strcmp(act, "swish"))
        return cp_error_set(CP_EUNSUPPORTED, "%s: key 'hidden_act': '%s', but llama.cpp's olmo2 always runs SiLU", in,
                            act);
      return 0;
    case CP_FAMILY_STARCODER2: /* src/models/starcoder2.cpp: required biases, attn_output [D, D], LLM_FFN_GELU */
      if (cfg->d_head * cfg->n_heads != cfg->d_model)
        return cp_error_set(CP_EUNSUPPORTED, "%s: key 'head_dim': %d x %d heads is not the width %d, which llama.cpp's "
                            "starcoder2 requires of its heads", in, cfg->d_head, cfg->n_heads, cfg->d_model);
      if (!cfg->qkv_bias)
        return cp_error_set(CP_EUNSUPPORTED, "%s: key 'use_bias': false, but llama.cpp's starcoder2 requires the "
                            "q/k/v/o and FFN biases", in);
      if (strcmp(act, "gelu_pytorch_tanh") && strcmp(act, "gelu_new") && strcmp(act, "gelu_fast"))
        return cp_error_set(CP_EUNSUPPORTED, "%s: key 'hidden_act': '%s', but llama.cpp's starcoder2 always runs GELU "
                            "in its tanh form", in, act);
      return 0;
    default:
      return cp_error_set(CP_ECFG_FAMILY, "%s: --to gguf writes llama, gpt_neox, bloom, mpt, gpt2, t5, phi3, gemma, olmo2 and starcoder2 models; %s has no "
                          "llama.cpp architecture", in, cp_family_name(cfg->family));
  }
}

/* Stored ALiBi slopes (JAIS-style, or a baked ALiBi factor) have no llama.cpp key: refused rather
 * than dropped. */
static int no_stored_slopes(const cp_checkpoint *ck, const cp_hf_config *cfg, const char *in) {
  cp_names nm;
  cp_names_init(&nm, ck, cfg);
  size_t i = cp_names_next_slopes(&nm, 0);
  if (i == (size_t)-1) return 0;
  return cp_error_set(CP_EUNSUPPORTED, "%s: tensor '%s': stored ALiBi slopes have no llama.cpp counterpart (it "
                      "computes them from the head count and the max bias)", in, cp_checkpoint_tensor(ck, i)->name);
}

int cp_gguf_output_check(const char *out, bool replace) {
  cp_output kind;
  int rc = cp_output_kind(&kind, out, 0);
  if (rc == 0 && kind == CP_OUTPUT_REPLACE && !replace)
    rc = cp_error_set(CP_EEXIST, "%s: output already exists (remove it or pass --force)", out);
  return rc;
}

int cp_gguf_export(cp_gguf_export_stats *stats, const char *in, const char *out, const cp_gguf_export_params *p) {
  cp_gguf_export_params defaults = {0};
  if (!p) p = &defaults;
  uint32_t want = p->type;
  cp_checkpoint *ck = NULL;
  cp_hf_config *cfg = NULL;
  cp_gguf_writer *w = NULL;
  tensor_plan plan = {0};
  float freqs[CP_ROPE_MAX_DIMS / 2]; /* llama3's rope_freqs */
  int64_t n_freqs = 0;
  float lr[2][CP_ROPE_MAX_DIMS / 2]; /* longrope's rope_factors_long, rope_factors_short */
  int64_t n_lr = 0;
  float *vals = malloc(CHUNK_FLOATS * sizeof *vals);
  unsigned char *raw = malloc(CHUNK_FLOATS * 8);
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(vals && raw, out);
  if (want != CP_GGML_F32 && want != CP_GGML_F16 && want != CP_GGML_BF16 && want != CP_GGML_Q8_0) {
    rc = cp_error_set(CP_EARG, "%s: ggml type %u is not written (f32, f16, bf16, q8_0)", out, want);
    goto done;
  }
  if ((rc = cp_gguf_output_check(out, p->replace)) || (rc = cp_checkpoint_open(&ck, in)) ||
      (rc = cp_checkpoint_config(&cfg, ck, in)))
    goto done;
  if ((rc = cp_gguf_export_check(cfg, in))) goto done;
  if (p->train_len > 0 && cfg->family == CP_FAMILY_GPT2 && p->train_len != cfg->train_len) {
    rc = cp_error_set(CP_EARG, "%s: --train-len %lld: gpt2's context_length is n_positions (%lld), the rows of its "
                      "position table", in, (long long)p->train_len, (long long)cfg->train_len);
    goto done;
  }
  /* yarn's frequencies depend on the training length (its original, or max_position_embeddings
   * through transformers 4.x's factor check): another one would not be the same model */
  if (p->train_len > 0 && p->train_len != cfg->train_len && !strcmp(cfg->rope_scaling_type, "yarn")) {
    rc = cp_error_set(CP_EARG, "%s: --train-len %lld: the yarn scaling is defined over max_position_embeddings "
                      "%lld (original %d); another training length would change it", in, (long long)p->train_len,
                      (long long)cfg->train_len, cfg->rope_original_max_pos);
    goto done;
  }
  if (p->train_len > 0) cfg->train_len = p->train_len; /* context_length, rope.scaling.original_context_length */
  if (!cp_checkpoint_gguf(ck) && (rc = no_stored_slopes(ck, cfg, in))) goto done;
  rc = cp_checkpoint_gguf(ck) ? plan_gguf(&plan, ck, want) : plan_hf(&plan, ck, cfg, want);
  if (rc) goto done;
  if (plan.n == 0) {
    rc = cp_error_set(CP_ECKPT_EMPTY, "%s: no tensor of the %s layout found", in, cp_family_name(cfg->family));
    goto done;
  }
  if ((rc = cp_gguf_writer_new(&w, out)) || (rc = put_meta(w, ck, cfg, in, p, want)) ||
      (p->digest_key && (rc = cp_gguf_writer_content_digest(w, p->digest_key, "ctxpatch."))))
    goto done;
  /* llama3 scaling: the per-pair divisors first, as llama.cpp's converter writes them (a GGUF
   * input already has its own among its tensors). */
  if (!cp_checkpoint_gguf(ck) && !strcmp(cfg->rope_scaling_type, "llama3")) {
    int rot = cfg->rotary_dims > 0 ? cfg->rotary_dims : cfg->d_head;
    n_freqs = rot / 2;
    if ((rc = cp_rope_freq_factors(freqs, cfg, cfg->rope_theta, rot, in)) ||
        (rc = cp_gguf_add_tensor(w, "rope_freqs.weight", CP_GGML_F32, 1, &n_freqs)))
      goto done;
  }
  /* longrope's lists likewise (Phi3MiniModel writes them before the blocks), as float32 */
  if (!cp_checkpoint_gguf(ck) && !strcmp(cfg->rope_scaling_type, "longrope")) {
    n_lr = cfg->rope_n_factors;
    for (int a = 0; a < n_lr; a++) lr[0][a] = (float)cfg->rope_long_factor[a], lr[1][a] = (float)cfg->rope_short_factor[a];
    if ((rc = cp_gguf_add_tensor(w, "rope_factors_long.weight", CP_GGML_F32, 1, &n_lr)) ||
        (rc = cp_gguf_add_tensor(w, "rope_factors_short.weight", CP_GGML_F32, 1, &n_lr)))
      goto done;
  }
  for (size_t i = 0; i < plan.n && rc == 0; i++) {
    const cp_tensor *t = cp_checkpoint_tensor(ck, plan.v[i].src);
    int64_t shape[CP_GGUF_MAX_DIMS] = {0};
    for (int d = 0; d < t->ndim; d++) shape[d] = t->shape[plan.v[i].transpose ? t->ndim - 1 - d : d];
    rc = cp_gguf_add_tensor(w, plan.v[i].name, plan.v[i].type, t->ndim, shape);
  }
  if (rc || (rc = cp_gguf_writer_begin(w))) goto done;
  if (n_freqs > 0 && (rc = cp_gguf_write_f32(w, freqs, (size_t)n_freqs))) goto done;
  if (n_lr > 0 && ((rc = cp_gguf_write_f32(w, lr[0], (size_t)n_lr)) || (rc = cp_gguf_write_f32(w, lr[1], (size_t)n_lr))))
    goto done;
  for (size_t i = 0; i < plan.n && rc == 0; i++) rc = write_tensor(w, ck, &plan.v[i], vals, raw);
  if (rc) goto done;
  cp_gguf_export_stats st = {plan.n + (n_freqs > 0) + 2 * (n_lr > 0), ""};
  rc = cp_gguf_writer_commit(w, st.sha256);
  w = NULL;
  if (rc == 0 && stats) *stats = st;
done:
  cp_gguf_writer_abort(w);
  free(plan.v);
  free(vals);
  free(raw);
  cp_hf_config_free(cfg);
  cp_checkpoint_free(ck);
  return rc;
}
