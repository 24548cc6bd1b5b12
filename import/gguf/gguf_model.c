/* A GGUF file's metadata as a model config and a tokenizer (include/ctxpatch/import/gguf_model.h):
 * the `{arch}.*` keys written out as the config.json HF's LlamaConfig would hold and parsed by
 * the one config parser; tokenizer.ggml.* handed to the tokenizers floor as a SentencePiece
 * vocabulary ("llama") or a byte-level BPE one ("gpt2", export/gguf/gguf_vocab.c). */
#include "ctxpatch/import/gguf_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/onnx_import.h"
#include "ctxpatch/model/rope.h"
#include "ctxpatch/base/strbuf.h"
#include "base/json_strict.h"
#include "import/gguf/gguf_vocab_read.h"

/* An integer key `{arch}.<suffix>` as a JSON field; absent optional keys are skipped. */
static int put_int(cp_strbuf *js, const cp_gguf_file *g, const char *arch, const char *suffix, const char *field,
                   bool required) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  if (!required && cp_gguf_find_key(g, key) < 0) return 0;
  int64_t v;
  int rc = cp_gguf_get_int(&v, g, key);
  if (rc) return rc;
  cp_strbuf_printf(js, ",\"%s\":%lld", field, (long long)v);
  return 0;
}

static int put_num(cp_strbuf *js, const cp_gguf_file *g, const char *key, const char *field) {
  double v;
  int rc = cp_gguf_get_f64(&v, g, key);
  if (rc) return rc;
  if (!isfinite(v)) return cp_error_set(CP_EGGUF_KEY, "%s: key '%s' is %g, not a finite number", cp_gguf_path(g), key, v);
  cp_strbuf_printf(js, ",\"%s\":%.17g", field, v);
  return 0;
}

/* A special token id; u32 0xFFFFFFFF (llama.cpp's "none") and absence become -1. */
static int token_id(int64_t *out, const cp_gguf_file *g, const char *key) {
  *out = -1;
  if (cp_gguf_find_key(g, key) < 0) return 0;
  int rc = cp_gguf_get_int(out, g, key);
  if (rc == 0 && (*out < 0 || *out > INT32_MAX)) *out = -1;
  return rc;
}

/* A field whose parser floors `field * den` back to an integer (rotary_pct, MPT's
 * expansion_ratio): num/den, nudged up by half a unit when the product would round below num. */
static void put_fraction(cp_strbuf *js, const char *field, int64_t num, int64_t den) {
  double v = (double)num / (double)den;
  if (floor(v * (double)den) != (double)num) v = ((double)num + 0.5) / (double)den;
  cp_strbuf_printf(js, ",\"%s\":%.17g", field, v);
}

/* llama.cpp's per-pair RoPE divisors (the rope_freqs tensor its converter writes for llama3
 * scaling) as the rope_scaling that gives them (model/rope.h cp_rope_fit_factors); no scaling key
 * may come with them. RoPE theta is `arch`.rope.freq_base (llama.cpp's default 10000). */
static int put_rope_freqs(cp_strbuf *js, const cp_gguf_file *g, size_t i, const char *arch, int64_t dims) {
  const cp_tensor *t = cp_gguf_tensor(g, i);
  char what[600], key[128], base_key[128];
  float f[CP_ROPE_MAX_DIMS / 2];
  double theta = 10000;
  int rc;
  snprintf(what, sizeof what, "%s: tensor 'rope_freqs.weight'", cp_gguf_path(g));
  uint64_t numel = 0;
  cp_shape_numel(&numel, t->ndim, t->shape); /* checked by the reader */
  if (t->dtype != CP_F32 || t->ndim != 1 || t->shape[0] != dims / 2 || dims / 2 > CP_ROPE_MAX_DIMS / 2)
    return cp_error_set(CP_ECFG_POSITION, "%s: want %lld float32 factors (one per rotated pair), not %llu %s values in "
                        "a %d-dim tensor", what, (long long)(dims / 2), (unsigned long long)numel,
                        cp_dtype_name(t->dtype), t->ndim);
  snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
  snprintf(base_key, sizeof base_key, "%s.rope.freq_base", arch);
  if (cp_gguf_find_key(g, key) >= 0)
    return cp_error_set(CP_ECFG_POSITION, "%s: comes with key '%s': two RoPE scalings", what, key);
  if ((cp_gguf_find_key(g, base_key) >= 0 && (rc = cp_gguf_get_f64(&theta, g, base_key))) ||
      (rc = cp_gguf_read(g, i, 0, f, (size_t)(dims / 2) * sizeof *f)))
    return rc;
  cp_rope_fit fit;
  if ((rc = cp_rope_fit_factors(&fit, f, (int)(dims / 2), theta, (int)dims, what))) return rc;
  if (!strcmp(fit.type, "linear"))
    cp_strbuf_printf(js, ",\"rope_scaling\":{\"type\":\"linear\",\"factor\":%.17g}", fit.factor);
  else if (fit.type[0])
    cp_strbuf_printf(js, ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":%.17g,\"low_freq_factor\":%.17g,"
                     "\"high_freq_factor\":%.17g,\"original_max_position_embeddings\":%d}", fit.factor,
                     fit.low_freq_factor, fit.high_freq_factor, fit.original_max_pos);
  return 0;
}

/* llama.cpp's YaRN (src/llama-model.cpp load_hparams; src/llama-context.cpp): factor,
 * original_context_length (absent: context_length, as HF's max_position_embeddings) and
 * attn_factor, which multiplies the 0.1 ln(factor) + 1 that ggml's rope applies, so HF's
 * attention_factor is their product. The yarn_* keys are read only by other architectures than
 * llama, qwen2 and qwen3, which run beta_fast 32, beta_slow 1, ext_factor 1, no log multiplier and
 * their own attention factor: such a key with another value is refused (which one was meant?). */
static int put_yarn(cp_strbuf *js, const cp_gguf_file *g, const char *arch) {
  char key[128];
  double factor, attn = 1;
  int rc;
  snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
  if ((rc = cp_gguf_get_f64(&factor, g, key))) return rc;
  if (!(factor >= 1 && factor <= 1e6))
    return cp_error_set(CP_ECFG_POSITION, "%s: key '%s' is %g: want a YaRN factor in [1, 1e6]", cp_gguf_path(g), key,
                        factor);
  const double m = factor > 1 ? 0.1 * log(factor) + 1.0 : 1.0;
  snprintf(key, sizeof key, "%s.rope.scaling.attn_factor", arch);
  bool has_attn = cp_gguf_find_key(g, key) >= 0;
  if (has_attn && (rc = cp_gguf_get_f64(&attn, g, key))) return rc;
  if (!(attn > 0 && attn <= 1e6))
    return cp_error_set(CP_ECFG_POSITION, "%s: key '%s' is %g: want a positive factor", cp_gguf_path(g), key, attn);
  const struct {
    const char *suffix;
    double runs;
  } unread[] = {{"yarn_beta_fast", 32}, {"yarn_beta_slow", 1}, {"yarn_ext_factor", 1}, {"yarn_log_multiplier", 0},
                {"yarn_attn_factor", attn * m}};
  for (size_t k = 0; k < sizeof unread / sizeof *unread; k++) {
    double v;
    snprintf(key, sizeof key, "%s.rope.scaling.%s", arch, unread[k].suffix);
    if (cp_gguf_find_key(g, key) < 0) continue;
    if ((rc = cp_gguf_get_f64(&v, g, key))) return rc;
    if (!(fabs(v - unread[k].runs) <= 1e-6 * fabs(unread[k].runs)))
      return cp_error_set(CP_ECFG_POSITION, "%s: key '%s' is %g, but llama.cpp's %s does not read it and runs %g",
                          cp_gguf_path(g), key, v, arch, unread[k].runs);
  }
  cp_strbuf_printf(js, ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":%.17g", factor);
  snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
  if (cp_gguf_find_key(g, key) >= 0 && (rc = put_int(js, g, arch, "rope.scaling.original_context_length",
                                                      "original_max_position_embeddings", true)))
    return rc;
  if (has_attn) cp_strbuf_printf(js, ",\"attention_factor\":%.17g", attn * m);
  cp_strbuf_putc(js, '}');
  return 0;
}

/* Rope keys: dimension_count (the whole head unless `partial`, the HF key of the fraction:
 * rotary_pct, partial_rotary_factor), freq_base, and scaling "none" or "linear" with a factor. */
static int put_rope(cp_strbuf *js, const cp_gguf_file *g, const char *arch, int64_t d_head, const char *partial) {
  char key[128];
  int64_t dims = d_head;
  int rc;
  snprintf(key, sizeof key, "%s.rope.dimension_count", arch);
  if (cp_gguf_find_key(g, key) >= 0) {
    if ((rc = cp_gguf_get_int(&dims, g, key))) return rc;
    if (dims != d_head && (!partial || dims < 2 || dims > d_head || dims % 2))
      return cp_error_set(CP_ECFG_POSITION, "%s: key '%s' is %lld but heads have %lld dims; %s", cp_gguf_path(g), key,
                          (long long)dims, (long long)d_head,
                          partial ? "expected an even count in [2, head size]" : "partial rotary is not read for llama");
  }
  if (partial) put_fraction(js, partial, dims, d_head);
  snprintf(key, sizeof key, "%s.rope.freq_base", arch);
  if (cp_gguf_find_key(g, key) >= 0 && (rc = put_num(js, g, key, "rope_theta"))) return rc;
  int64_t freqs = cp_gguf_find(g, "rope_freqs.weight");
  if (freqs >= 0) {
    if (strcmp(arch, "llama"))
      return cp_error_set(CP_ECFG_POSITION, "%s: tensor 'rope_freqs.weight': llama.cpp's %s does not read "
                          "per-pair RoPE frequency factors", cp_gguf_path(g), arch);
    return put_rope_freqs(js, g, (size_t)freqs, arch, dims);
  }
  snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
  if (cp_gguf_find_key(g, key) < 0) return 0;
  const char *type;
  size_t len;
  if ((rc = cp_gguf_get_str(&type, &len, g, key))) return rc;
  if (len == 4 && !memcmp(type, "none", 4)) return 0;
  if (len == 4 && !memcmp(type, "yarn", 4)) return put_yarn(js, g, arch);
  if (!(len == 6 && !memcmp(type, "linear", 6)))
    return cp_error_set(CP_ECFG_POSITION, "%s: key '%s': rope scaling '%.*s' is not supported (none, linear, yarn)",
                        cp_gguf_path(g), key, (int)(len < 32 ? len : 32), type);
  cp_strbuf_str(js, ",\"rope_scaling\":{\"type\":\"linear\"");
  snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
  if ((rc = put_num(js, g, key, "factor"))) return rc;
  cp_strbuf_putc(js, '}');
  return 0;
}

/* One of llama.cpp's longrope lists: float32, one finite positive factor per rotated pair. */
static int read_factors(cp_strbuf *js, const cp_gguf_file *g, int64_t i, const char *name, int64_t pairs) {
  const cp_tensor *t = cp_gguf_tensor(g, (size_t)i);
  float f[CP_ROPE_MAX_DIMS / 2];
  int rc;
  if (t->dtype != CP_F32 || t->ndim != 1 || t->shape[0] != pairs || pairs > CP_ROPE_MAX_DIMS / 2)
    return cp_error_set(CP_ECFG_POSITION, "%s: tensor '%s': want %lld float32 factors (one per rotated pair)",
                        cp_gguf_path(g), name, (long long)pairs);
  if ((rc = cp_gguf_read(g, (size_t)i, 0, f, (size_t)pairs * sizeof *f))) return rc;
  for (int64_t a = 0; a < pairs; a++) {
    if (!isfinite(f[a]) || !(f[a] > 0) || f[a] > 1e6)
      return cp_error_set(CP_ECFG_POSITION, "%s: tensor '%s': factor %lld is %.9g (want a number in (0, 1e6])",
                          cp_gguf_path(g), name, (long long)a, (double)f[a]);
    cp_strbuf_printf(js, "%s%.9g", a ? "," : "", (double)f[a]);
  }
  return 0;
}

/* Phi-3's longrope as llama.cpp reads it (convert_hf_to_gguf.py Phi3MiniModel): the
 * rope_factors_long / rope_factors_short tensors, rope.scaling.original_context_length (absent:
 * context_length, llama.cpp's n_ctx_orig_yarn) and rope.scaling.attn_factor (absent: 1, which
 * llama.cpp multiplies into cos and sin), written back as transformers' longrope with an explicit
 * attention_factor. Both tensors or neither. */
static int put_longrope(cp_strbuf *js, const cp_gguf_file *g, const char *arch) {
  const int64_t il = cp_gguf_find(g, "rope_factors_long.weight"), is = cp_gguf_find(g, "rope_factors_short.weight");
  if (il < 0 && is < 0) return 0;
  if (il < 0 || is < 0)
    return cp_error_set(CP_ECFG_POSITION, "%s: tensor '%s' without '%s'", cp_gguf_path(g),
                        il >= 0 ? "rope_factors_long.weight" : "rope_factors_short.weight",
                        il >= 0 ? "rope_factors_short.weight" : "rope_factors_long.weight");
  char key[128];
  int64_t dims = 0, orig = 0;
  double attn = 1.0;
  int rc;
  snprintf(key, sizeof key, "%s.rope.dimension_count", arch);
  if ((rc = cp_gguf_get_int(&dims, g, key))) return rc;
  snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
  if (cp_gguf_find_key(g, key) >= 0 && (rc = cp_gguf_get_int(&orig, g, key))) return rc;
  if (cp_gguf_find_key(g, key) < 0) {
    snprintf(key, sizeof key, "%s.context_length", arch);
    if ((rc = cp_gguf_get_int(&orig, g, key))) return rc;
  }
  if (orig < 1 || orig > INT32_MAX)
    return cp_error_set(CP_ECFG_POSITION, "%s: key '%s': %lld is not a context length", cp_gguf_path(g), key,
                        (long long)orig);
  snprintf(key, sizeof key, "%s.rope.scaling.attn_factor", arch);
  if (cp_gguf_find_key(g, key) >= 0 && (rc = cp_gguf_get_f64(&attn, g, key))) return rc;
  if (!isfinite(attn) || !(attn > 0) || attn > 1e6)
    return cp_error_set(CP_ECFG_POSITION, "%s: key '%s': %.9g (want a number in (0, 1e6])", cp_gguf_path(g), key,
                        attn);
  cp_strbuf_printf(js, ",\"original_max_position_embeddings\":%lld,\"rope_scaling\":{\"type\":\"longrope\","
                   "\"attention_factor\":%.9g,\"long_factor\":[", (long long)orig, attn);
  if ((rc = read_factors(js, g, il, "rope_factors_long.weight", dims / 2))) return rc;
  cp_strbuf_str(js, "],\"short_factor\":[");
  if ((rc = read_factors(js, g, is, "rope_factors_short.weight", dims / 2))) return rc;
  cp_strbuf_str(js, "]}");
  return 0;
}

/* llama.cpp's architecture names of the families it shares with ctxpatch. */
static const struct {
  const char *arch;
  cp_family family;
  const char *model_type; /* HF model_type and architecture of the synthetic config */
  const char *hf_arch;
} k_archs[] = {{"llama", CP_FAMILY_LLAMA, "llama", "LlamaForCausalLM"},
               {"gptneox", CP_FAMILY_GPT_NEOX, "gpt_neox", NULL},
               {"bloom", CP_FAMILY_BLOOM, "bloom", NULL},
               {"mpt", CP_FAMILY_MPT, "mpt", NULL},
               {"gpt2", CP_FAMILY_GPT2, "gpt2", NULL},
               {"t5", CP_FAMILY_T5, "t5", NULL},
               {"qwen2", CP_FAMILY_LLAMA, "qwen2", "Qwen2ForCausalLM"},
               {"qwen3", CP_FAMILY_LLAMA, "qwen3", "Qwen3ForCausalLM"},
               {"phi3", CP_FAMILY_PHI3, "phi3", "Phi3ForCausalLM"},
               {"gemma", CP_FAMILY_GEMMA, "gemma", "GemmaForCausalLM"},
               {"gemma2", CP_FAMILY_GEMMA, "gemma2", "Gemma2ForCausalLM"},
               {"gemma3", CP_FAMILY_GEMMA, "gemma3_text", "Gemma3ForCausalLM"},
               {"granite", CP_FAMILY_LLAMA, "granite", "GraniteForCausalLM"},
               {"olmo2", CP_FAMILY_OLMO2, "olmo2", "Olmo2ForCausalLM"},
               {"starcoder2", CP_FAMILY_STARCODER2, "starcoder2", "Starcoder2ForCausalLM"}};

const char *cp_gguf_arch_of(cp_family family) {
  for (size_t i = 0; i < sizeof k_archs / sizeof *k_archs; i++)
    if (k_archs[i].family == family) return k_archs[i].arch;
  return NULL;
}

const char *cp_gguf_arch_of_config(const cp_hf_config *cfg) {
  for (size_t i = 0; i < sizeof k_archs / sizeof *k_archs; i++)
    if (k_archs[i].family == cfg->family && !strcmp(k_archs[i].model_type, cfg->model_type)) return k_archs[i].arch;
  return cp_gguf_arch_of(cfg->family); /* mistral: llama.cpp's llama */
}

/* The numbers every architecture states: heads, head size, vocabulary, special ids, tied head. */
typedef struct {
  int64_t d, heads, kv_heads, d_head, vocab, ff;
} arch_dims;

static int read_dims(arch_dims *a, cp_strbuf *js, const cp_gguf_file *g, const char *arch) {
  char key[128];
  int64_t bos, eos;
  int rc;
  snprintf(key, sizeof key, "%s.embedding_length", arch);
  if ((rc = cp_gguf_get_int(&a->d, g, key))) return rc;
  snprintf(key, sizeof key, "%s.attention.head_count", arch);
  if ((rc = cp_gguf_get_int(&a->heads, g, key))) return rc;
  if (a->heads <= 0 || a->d % a->heads)
    return cp_error_set(CP_ECFG_FIELD, "%s: key '%s': %lld heads do not divide embedding_length %lld",
                        cp_gguf_path(g), key, (long long)a->heads, (long long)a->d);
  a->d_head = a->d / a->heads;
  a->kv_heads = a->heads;
  snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
  if (cp_gguf_find_key(g, key) >= 0 && (rc = cp_gguf_get_int(&a->kv_heads, g, key))) return rc;
  snprintf(key, sizeof key, "%s.feed_forward_length", arch);
  if ((rc = cp_gguf_get_int(&a->ff, g, key))) return rc;
  int64_t embd = cp_gguf_find(g, "token_embd.weight");
  snprintf(key, sizeof key, "%s.vocab_size", arch);
  if (cp_gguf_find_key(g, key) >= 0) {
    if ((rc = cp_gguf_get_int(&a->vocab, g, key))) return rc;
  } else if (embd >= 0 && cp_gguf_tensor(g, (size_t)embd)->ndim == 2) {
    a->vocab = cp_gguf_tensor(g, (size_t)embd)->shape[0];
  } else {
    return cp_error_set(CP_ENOTFOUND, "%s: no %s.vocab_size and no 2-D token_embd.weight", cp_gguf_path(g), arch);
  }
  if ((rc = token_id(&bos, g, "tokenizer.ggml.bos_token_id")) || (rc = token_id(&eos, g, "tokenizer.ggml.eos_token_id")))
    return rc;
  cp_strbuf_printf(js, ",\"vocab_size\":%lld,\"bos_token_id\":%lld,\"eos_token_id\":%lld,\"tie_word_embeddings\":%s",
                   (long long)a->vocab, (long long)bos, (long long)eos,
                   cp_gguf_find(g, "output.weight") < 0 ? "true" : "false");
  snprintf(key, sizeof key, "%s.context_length", arch);
  if (cp_gguf_find_key(g, key) >= 0) { /* the family's own training-length field */
    static const struct { cp_family f; const char *field; } len_fields[] = {
        {CP_FAMILY_BLOOM, "seq_length"}, {CP_FAMILY_MPT, "max_seq_len"}, {CP_FAMILY_GPT2, "n_positions"}, {CP_FAMILY_T5, "n_positions"}};
    const char *field = "max_position_embeddings";
    for (size_t i = 0; i < sizeof len_fields / sizeof *len_fields; i++)
      if (!strcmp(arch, cp_gguf_arch_of(len_fields[i].f))) field = len_fields[i].field;
    if ((rc = put_int(js, g, arch, "context_length", field, true))) return rc;
  }
  return 0;
}

/* Whether the file has any bias tensor. */
static bool has_biases(const cp_gguf_file *g) {
  for (size_t i = 0; i < cp_gguf_count(g); i++) {
    const char *n = cp_gguf_tensor(g, i)->name;
    size_t len = strlen(n);
    if (len >= 5 && !strcmp(n + len - 5, ".bias")) return true;
  }
  return false;
}

static int no_gqa(const cp_gguf_file *g, const char *arch, const arch_dims *a) {
  if (a->kv_heads == a->heads) return 0;
  return cp_error_set(CP_ECFG_FIELD, "%s: key '%s.attention.head_count_kv' is %lld; %s has no grouped-query attention "
                      "(head_count %lld)", cp_gguf_path(g), arch, (long long)a->kv_heads, arch, (long long)a->heads);
}

/* T5Config of llama.cpp's t5 keys (conversion/t5.py): relu FFN unless the encoder has a gate
 * (then gated-gelu, llama.cpp's LLM_FFN_GELU), relative buckets up to distance 128 (llama.cpp's
 * fixed max_distance), an untied head (llama.cpp runs a missing output.weight as the embedding
 * unscaled, which no T5Config describes: refused). */
static int t5_json(cp_strbuf *js, const cp_gguf_file *g, const char *arch, const arch_dims *a) {
  char key[128];
  int64_t d_kv = a->d_head, start = -1;
  int rc;
  if (cp_gguf_find(g, "output.weight") < 0)
    return cp_error_set(CP_ENOTFOUND, "%s: tensor 'output.weight' is absent: llama.cpp's t5 would run the embedding "
                        "as an unscaled head, which HF's T5 does not", cp_gguf_path(g));
  if ((rc = no_gqa(g, arch, a))) return rc;
  snprintf(key, sizeof key, "%s.attention.key_length", arch);
  if (cp_gguf_find_key(g, key) >= 0 && (rc = cp_gguf_get_int(&d_kv, g, key))) return rc;
  snprintf(key, sizeof key, "%s.decoder_start_token_id", arch);
  if ((rc = token_id(&start, g, key))) return rc;
  cp_strbuf_printf(js, ",\"architectures\":[\"T5ForConditionalGeneration\"],\"is_encoder_decoder\":true,"
                   "\"d_model\":%lld,\"num_heads\":%lld,\"d_kv\":%lld,\"d_ff\":%lld,\"feed_forward_proj\":\"%s\","
                   "\"relative_attention_max_distance\":128,\"decoder_start_token_id\":%lld", (long long)a->d,
                   (long long)a->heads, (long long)d_kv, (long long)a->ff,
                   cp_gguf_find(g, "enc.blk.0.ffn_gate.weight") >= 0 ? "gated-gelu" : "relu", (long long)start);
  snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
  if ((rc = put_int(js, g, arch, "block_count", "num_layers", true)) ||
      (rc = put_int(js, g, arch, "decoder_block_count", "num_decoder_layers", false)) ||
      (rc = put_int(js, g, arch, "attention.relative_buckets_count", "relative_attention_num_buckets", true)))
    return rc;
  return put_num(js, g, key, "layer_norm_epsilon");
}

/* An f32 key `{arch}.<suffix>` as a JSON field, llama.cpp's default `def` when absent. */
static int put_num_or(cp_strbuf *js, const cp_gguf_file *g, const char *arch, const char *suffix, const char *field,
                      double def) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  if (cp_gguf_find_key(g, key) >= 0) return put_num(js, g, key, field);
  cp_strbuf_printf(js, ",\"%s\":%.17g", field, def);
  return 0;
}

/* Gemma3TextConfig of llama.cpp's gemma3 (src/models/gemma3.cpp; llama-model.cpp LLM_ARCH_GEMMA3):
 * the window from attention.sliding_window (required, as llama.cpp reads it), layer il sliding when
 * il % 6 < 5 (set_swa_pattern(6): HF's default sliding_window_pattern 6), the sliding layers at
 * base 10000 unscaled (rope_freq_base_train_swa, rope_freq_scale_train_swa), the full ones at
 * rope.freq_base (llama.cpp's default 10000 when absent, not Gemma3TextConfig's 1e6) with the
 * linear scaling keys; q scaled by 1/sqrt(head_dim), or 1/sqrt(hidden / heads) at 62 layers (its
 * "27B"). A pattern key, another local base or a final soft-cap (which llama.cpp's gemma3 applies
 * in some versions only) are refused naming the key. */
static int gemma3_json(cp_strbuf *js, const cp_gguf_file *g, const char *arch, int64_t layers, const arch_dims *a) {
  char key[128];
  int64_t window;
  int rc;
  static const char *const unread[] = {"attention.sliding_window_pattern", "final_logit_softcapping",
                                       "attn_logit_softcapping"};
  for (size_t i = 0; i < sizeof unread / sizeof *unread; i++) {
    snprintf(key, sizeof key, "%s.%s", arch, unread[i]);
    if (cp_gguf_find_key(g, key) >= 0)
      return cp_error_set(CP_EUNSUPPORTED, "%s: key '%s' is not read (gemma3: every sixth layer full, no soft-cap)",
                          cp_gguf_path(g), key);
  }
  snprintf(key, sizeof key, "%s.rope.freq_base_swa", arch);
  if (cp_gguf_find_key(g, key) >= 0) {
    double base;
    if ((rc = cp_gguf_get_f64(&base, g, key))) return rc;
    if (base != 10000.0)
      return cp_error_set(CP_EUNSUPPORTED, "%s: key '%s' is %g: llama.cpp's gemma3 rotates its sliding layers at base "
                          "10000", cp_gguf_path(g), key, base);
  }
  snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
  if ((rc = cp_gguf_get_int(&window, g, key))) return rc;
  if (window <= 0 || window > INT32_MAX)
    return cp_error_set(CP_ECFG_FIELD, "%s: key '%s' is %lld: want a positive window", cp_gguf_path(g), key,
                        (long long)window);
  cp_strbuf_printf(js, ",\"sliding_window\":%lld,\"sliding_window_pattern\":6,\"rope_local_base_freq\":10000,"
                   "\"query_pre_attn_scalar\":%lld,\"final_logit_softcapping\":null", (long long)window,
                   (long long)(layers == 62 ? a->d / a->heads : a->d_head));
  snprintf(key, sizeof key, "%s.rope.freq_base", arch);
  if (cp_gguf_find_key(g, key) < 0) cp_strbuf_str(js, ",\"rope_theta\":10000");
  return 0;
}

/* GemmaConfig / Gemma2Config of llama.cpp's gemma and gemma2 (src/models/gemma.cpp, gemma2.cpp):
 * head size key_length, GELU (tanh form), the embedding as the head (an output.weight would be a
 * tensor llama.cpp does not load: refused); norms stored as 1 + w, which the loader keeps
 * (import/model_load.c). gemma2: soft-caps and window from their keys or llama.cpp's defaults (50,
 * 30, 4096), the even layers sliding (llama.cpp's pattern 2: another pattern, or another RoPE base
 * on the sliding layers, is refused), and query_pre_attn_scalar what llama.cpp scales by: head_dim,
 * or hidden / heads at 46 layers (its "27B"). */
static int gemma_json(cp_strbuf *js, const cp_gguf_file *g, const char *arch, const char *hf_arch, arch_dims *a) {
  char key[128];
  int64_t dv, layers;
  int rc;
  const bool g2 = !strcmp(arch, "gemma2");
  if (cp_gguf_find(g, "output.weight") >= 0)
    return cp_error_set(CP_EUNSUPPORTED, "%s: tensor 'output.weight': llama.cpp's %s runs the embedding as its head "
                        "and does not load it", cp_gguf_path(g), arch);
  snprintf(key, sizeof key, "%s.attention.key_length", arch);
  if (cp_gguf_find_key(g, key) >= 0 && (rc = cp_gguf_get_int(&a->d_head, g, key))) return rc;
  dv = a->d_head;
  snprintf(key, sizeof key, "%s.attention.value_length", arch);
  if (cp_gguf_find_key(g, key) >= 0 && (rc = cp_gguf_get_int(&dv, g, key))) return rc;
  if (dv != a->d_head || a->d_head <= 0 || a->d_head > 65536)
    return cp_error_set(CP_ECFG_FIELD, "%s: key '%s' is %lld: want the key length %lld", cp_gguf_path(g), key,
                        (long long)dv, (long long)a->d_head);
  snprintf(key, sizeof key, "%s.block_count", arch);
  if ((rc = cp_gguf_get_int(&layers, g, key))) return rc;
  cp_strbuf_printf(js, ",\"architectures\":[\"%s\"],\"hidden_activation\":\"gelu_pytorch_tanh\",\"hidden_size\":%lld,"
                   "\"num_attention_heads\":%lld,\"num_key_value_heads\":%lld,\"head_dim\":%lld,"
                   "\"intermediate_size\":%lld,\"num_hidden_layers\":%lld", hf_arch, (long long)a->d,
                   (long long)a->heads, (long long)a->kv_heads, (long long)a->d_head, (long long)a->ff, (long long)layers);
  snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
  if ((rc = put_num(js, g, key, "rms_norm_eps"))) return rc;
  if (g2) {
    static const char *const unread[] = {"attention.sliding_window_pattern", "rope.freq_base_swa"};
    for (size_t i = 0; i < sizeof unread / sizeof *unread; i++) {
      snprintf(key, sizeof key, "%s.%s", arch, unread[i]);
      if (cp_gguf_find_key(g, key) >= 0)
        return cp_error_set(CP_EUNSUPPORTED, "%s: key '%s' is not read (gemma2's even layers slide, with the one "
                            "RoPE base)", cp_gguf_path(g), key);
    }
    int64_t window = 4096;
    snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
    if (cp_gguf_find_key(g, key) >= 0 && (rc = cp_gguf_get_int(&window, g, key))) return rc;
    cp_strbuf_printf(js, ",\"sliding_window\":%lld,\"query_pre_attn_scalar\":%lld", (long long)window,
                     (long long)(layers == 46 ? a->d / a->heads : a->d_head));
    if ((rc = put_num_or(js, g, arch, "attn_logit_softcapping", "attn_logit_softcapping", 50)) ||
        (rc = put_num_or(js, g, arch, "final_logit_softcapping", "final_logit_softcapping", 30)))
      return rc;
  }
  if (!strcmp(arch, "gemma3") && (rc = gemma3_json(js, g, arch, layers, a))) return rc;
  return put_rope(js, g, arch, a->d_head, NULL);
}

/* llama.cpp's granite keys as GraniteConfig's multipliers (absent: llama.cpp's and GraniteConfig's
 * 1, written out so that the config says granite's four); nothing for other architectures. */
static int put_granite(cp_strbuf *js, const cp_gguf_file *g, const char *arch) {
  static const char *const keys[4][2] = {{"embedding_scale", "embedding_multiplier"},
                                         {"residual_scale", "residual_multiplier"},
                                         {"attention.scale", "attention_multiplier"},
                                         {"logit_scale", "logits_scaling"}};
  if (strcmp(arch, "granite")) return 0;
  for (int i = 0; i < 4; i++) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, keys[i][0]);
    if (cp_gguf_find_key(g, key) < 0) {
      cp_strbuf_printf(js, ",\"%s\":1.0", keys[i][1]);
      continue;
    }
    int rc = put_num(js, g, key, keys[i][1]);
    if (rc) return rc;
  }
  return 0;
}

/* The synthetic config.json of each architecture: the fields its HF config names. */
static int arch_json(cp_strbuf *js, const cp_gguf_file *g, const char *arch, cp_family family, const char *model_type,
                     const char *hf_arch) {
  arch_dims a;
  char eps[128];
  int rc;
  cp_strbuf_printf(js, "{\"model_type\":\"%s\"", model_type);
  if ((rc = read_dims(&a, js, g, arch))) return rc;
  snprintf(eps, sizeof eps, "%s.attention.layer_norm_%sepsilon", arch, family == CP_FAMILY_LLAMA || family == CP_FAMILY_PHI3 || family == CP_FAMILY_OLMO2 ? "rms_" : "");
  switch (family) {
    case CP_FAMILY_LLAMA:
    case CP_FAMILY_OLMO2: { /* llama.cpp's olmo2: the llama keys, its own tensors (model/families.c) */
      char key[128];
      snprintf(key, sizeof key, "%s.attention.key_length", arch);
      if (cp_gguf_find_key(g, key) >= 0 && (rc = cp_gguf_get_int(&a.d_head, g, key))) return rc;
      cp_strbuf_printf(js, ",\"architectures\":[\"%s\"],\"hidden_act\":\"silu\",\"hidden_size\":%lld,"
                       "\"num_attention_heads\":%lld,\"num_key_value_heads\":%lld,\"head_dim\":%lld,"
                       "\"intermediate_size\":%lld", hf_arch, (long long)a.d, (long long)a.heads, (long long)a.kv_heads,
                       (long long)a.d_head, (long long)a.ff);
      if ((rc = put_int(js, g, arch, "block_count", "num_hidden_layers", true)) ||
          (rc = put_num(js, g, eps, "rms_norm_eps")) || (rc = put_granite(js, g, arch)))
        return rc;
      return put_rope(js, g, arch, a.d_head, NULL);
    }
    case CP_FAMILY_PHI3: {
      /* llama.cpp's phi3 (convert_hf_to_gguf.py Phi3MiniModel): fused attn_qkv and ffn_up, NEOX
       * rotation of rope.dimension_count dims; longrope's per-pair factors are the
       * rope_factors_long / rope_factors_short tensors (put_longrope; llama.cpp picks one by its
       * context size, transformers by each call's length: docs/gguf.md).
       * llama.cpp drops phi3's sliding_window key (llama-model.cpp: "Phi SWA is currently
       * disabled") and runs full attention, which is the model that HF's window describes only up
       * to that window: one below the context length is refused (which model the file means is
       * unclear), one at least as long is dropped as llama.cpp drops it. */
      char key[128];
      cp_strbuf_printf(js, ",\"architectures\":[\"%s\"],\"hidden_act\":\"silu\",\"hidden_size\":%lld,"
                       "\"num_attention_heads\":%lld,\"num_key_value_heads\":%lld,\"intermediate_size\":%lld",
                       hf_arch, (long long)a.d, (long long)a.heads, (long long)a.kv_heads, (long long)a.ff);
      int64_t window = 0; /* 0 or absent: none */
      snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
      if (cp_gguf_find_key(g, key) >= 0 && (rc = cp_gguf_get_int(&window, g, key))) return rc;
      int64_t ctx = 0;
      snprintf(key, sizeof key, "%s.context_length", arch);
      if (window != 0 && cp_gguf_find_key(g, key) >= 0 && (rc = cp_gguf_get_int(&ctx, g, key))) return rc;
      if (window != 0 && window < ctx)
        return cp_error_set(CP_ECFG_FIELD, "%s: key '%s.attention.sliding_window': %lld is below the context length "
                            "%lld: llama.cpp's phi3 ignores it where transformers slides (which model the file means "
                            "is unclear)", cp_gguf_path(g), arch, (long long)window, (long long)ctx);
      if ((rc = put_int(js, g, arch, "block_count", "num_hidden_layers", true)) ||
          (rc = put_num(js, g, eps, "rms_norm_eps")) || (rc = put_rope(js, g, arch, a.d_head, "partial_rotary_factor")))
        return rc;
      return put_longrope(js, g, arch);
    }
    case CP_FAMILY_GPT_NEOX: {
      /* llama.cpp's gptneox runs ggml_gelu, the tanh form, whatever the HF config said. */
      char par[128];
      bool parallel = true;
      snprintf(par, sizeof par, "%s.use_parallel_residual", arch);
      if (cp_gguf_find_key(g, par) >= 0 && (rc = cp_gguf_get_bool(&parallel, g, par))) return rc;
      if ((rc = no_gqa(g, arch, &a))) return rc;
      cp_strbuf_printf(js, ",\"architectures\":[\"GPTNeoXForCausalLM\"],\"hidden_act\":\"gelu_pytorch_tanh\","
                       "\"hidden_size\":%lld,\"num_attention_heads\":%lld,\"intermediate_size\":%lld,"
                       "\"use_parallel_residual\":%s,\"attention_bias\":%s", (long long)a.d, (long long)a.heads,
                       (long long)a.ff, parallel ? "true" : "false",
                       cp_gguf_find(g, "blk.0.attn_qkv.bias") >= 0 ? "true" : "false");
      if ((rc = put_int(js, g, arch, "block_count", "num_hidden_layers", true)) ||
          (rc = put_num(js, g, eps, "layer_norm_eps")))
        return rc;
      return put_rope(js, g, arch, a.d_head, "rotary_pct");
    }
    case CP_FAMILY_BLOOM:
      if ((rc = no_gqa(g, arch, &a))) return rc;
      if (a.ff != 4 * a.d)
        return cp_error_set(CP_ECFG_FIELD, "%s: key '%s.feed_forward_length' is %lld; BLOOM's MLP is 4 x %lld wide",
                            cp_gguf_path(g), arch, (long long)a.ff, (long long)a.d);
      cp_strbuf_printf(js, ",\"architectures\":[\"BloomForCausalLM\"],\"hidden_size\":%lld,\"n_head\":%lld",
                       (long long)a.d, (long long)a.heads);
      if ((rc = put_int(js, g, arch, "block_count", "n_layer", true))) return rc;
      return put_num(js, g, eps, "layer_norm_epsilon");
    case CP_FAMILY_MPT: {
      /* max_alibi_bias absent or 0: llama.cpp runs no ALiBi (learned positions), which the engine does not. */
      char key[128];
      double bias_max = 0, clamp = 0;
      snprintf(key, sizeof key, "%s.attention.max_alibi_bias", arch);
      if (cp_gguf_find_key(g, key) >= 0 && (rc = cp_gguf_get_f64(&bias_max, g, key))) return rc;
      if (!(bias_max > 0) || !isfinite(bias_max))
        return cp_error_set(CP_ECFG_POSITION, "%s: key '%s' is absent or not positive: an MPT without ALiBi is not "
                            "supported", cp_gguf_path(g), key);
      snprintf(key, sizeof key, "%s.attention.clamp_kqv", arch);
      if (cp_gguf_find_key(g, key) >= 0 && (rc = cp_gguf_get_f64(&clamp, g, key))) return rc;
      cp_strbuf_printf(js, ",\"architectures\":[\"MptForCausalLM\"],\"d_model\":%lld,\"n_heads\":%lld,\"no_bias\":%s",
                       (long long)a.d, (long long)a.heads, has_biases(g) ? "false" : "true");
      put_fraction(js, "expansion_ratio", a.ff, a.d);
      cp_strbuf_printf(js, ",\"attn_config\":{\"alibi\":true,\"alibi_bias_max\":%.17g", bias_max);
      if (clamp > 0 && isfinite(clamp)) cp_strbuf_printf(js, ",\"clip_qkv\":%.17g", clamp);
      if (a.kv_heads != a.heads)
        cp_strbuf_printf(js, ",\"attn_type\":\"grouped_query_attention\",\"kv_n_heads\":%lld", (long long)a.kv_heads);
      cp_strbuf_putc(js, '}');
      if ((rc = put_int(js, g, arch, "block_count", "n_layers", true))) return rc;
      return put_num(js, g, eps, "layer_norm_epsilon");
    }
    case CP_FAMILY_GPT2: {
      /* llama.cpp's gpt2: learned positions (position_embd, n_positions rows = context_length),
       * scores scaled by 1/sqrt(dh) in every layer, ggml_gelu (the tanh form, HF's gelu_new). */
      char key[128];
      snprintf(key, sizeof key, "%s.context_length", arch);
      if (cp_gguf_find_key(g, key) < 0)
        return cp_error_set(CP_ENOTFOUND, "%s: key '%s' is absent: gpt2's learned position table needs it",
                            cp_gguf_path(g), key);
      if ((rc = no_gqa(g, arch, &a))) return rc;
      cp_strbuf_printf(js, ",\"architectures\":[\"GPT2LMHeadModel\"],\"activation_function\":\"gelu_new\","
                       "\"n_embd\":%lld,\"n_head\":%lld,\"n_inner\":%lld", (long long)a.d, (long long)a.heads,
                       (long long)a.ff);
      if ((rc = put_int(js, g, arch, "block_count", "n_layer", true))) return rc;
      return put_num(js, g, eps, "layer_norm_epsilon");
    }
    case CP_FAMILY_T5: return t5_json(js, g, arch, &a);
    case CP_FAMILY_STARCODER2: {
      /* llama.cpp's starcoder2 (src/models/starcoder2.cpp): LayerNorms with bias, biased q/k/v/o and
       * ffn_up / ffn_down, ggml_gelu (the tanh form), NEOX rotation of the whole head of D / H dims,
       * no sliding window key read. */
      cp_strbuf_printf(js, ",\"architectures\":[\"%s\"],\"hidden_act\":\"gelu_pytorch_tanh\",\"hidden_size\":%lld,"
                       "\"num_attention_heads\":%lld,\"num_key_value_heads\":%lld,\"head_dim\":%lld,"
                       "\"intermediate_size\":%lld,\"use_bias\":%s", hf_arch, (long long)a.d, (long long)a.heads,
                       (long long)a.kv_heads, (long long)a.d_head, (long long)a.ff,
                       cp_gguf_find(g, "blk.0.attn_q.bias") >= 0 ? "true" : "false");
      if ((rc = put_int(js, g, arch, "block_count", "num_hidden_layers", true)) ||
          (rc = put_num(js, g, eps, "norm_epsilon")))
        return rc;
      return put_rope(js, g, arch, a.d_head, NULL);
    }
    case CP_FAMILY_GEMMA: return gemma_json(js, g, arch, hf_arch, &a);
    default: return cp_error_set(CP_ECFG_FAMILY, "%s: no GGUF reading for %s", cp_gguf_path(g), arch);
  }
}

/* Every blk.N / enc.blk.N / dec.blk.N tensor inside the block count: a count below the layers
 * present ran the model on its first layers and dropped the rest without a word. */
static int check_block_count(const cp_gguf_file *g, const char *arch, const cp_hf_config *cfg) {
  for (size_t i = 0; i < cp_gguf_count(g); i++) {
    const char *name = cp_gguf_tensor(g, i)->name, *p = name;
    bool dec = !strncmp(p, "dec.", 4);
    if (dec || !strncmp(p, "enc.", 4)) p += 4;
    if (strncmp(p, "blk.", 4) || p[4] < '0' || p[4] > '9') continue;
    long long layer = strtoll(p + 4, NULL, 10), n = dec ? cfg->n_decoder_layers : cfg->n_layers;
    if (layer >= n)
      return cp_error_set(CP_EGGUF_KEY, "%s: key '%s.%sblock_count' is %lld, but tensor '%s' is of layer %lld",
                          cp_gguf_path(g), arch, dec ? "decoder_" : "", n, name, layer);
  }
  return 0;
}

/* A patched file's ctxpatch.* keys (ctxpatch/export/gguf_export.h, patchers/patch_gguf.c) as
 * config.json's "ctxpatch" block, which the config parser checks as strictly as a folder's:
 * rule, baked_rule and effective_in are JSON text; method, fidelity and certificate_sha256 are
 * taken only when they are short names (anything else is left out, as if absent). */
static int ctxpatch_json(cp_strbuf *js, const cp_gguf_file *g) {
  static const char *const json_keys[][2] = {{"ctxpatch.rule", "rule"}, {"ctxpatch.baked_rule", "baked_rule"},
                                             {"ctxpatch.effective_in", "effective_in"}};
  static const char *const name_keys[][2] = {{"ctxpatch.method", "method"}, {"ctxpatch.fidelity", "fidelity"},
                                             {"ctxpatch.certificate_sha256", "certificate_sha256"}};
  const char *v;
  size_t len;
  int rc = 0;
  cp_strbuf_str(js, ",\"ctxpatch\":{");
  for (size_t i = 0; i < sizeof json_keys / sizeof *json_keys && rc == 0; i++) {
    if (cp_gguf_find_key(g, json_keys[i][0]) < 0) continue;
    if ((rc = cp_gguf_get_str(&v, &len, g, json_keys[i][0]))) break;
    /* One JSON value, printed again: the key's text cannot close the block and add config keys. */
    cJSON *val = NULL;
    char what[600], *text = NULL;
    snprintf(what, sizeof what, "%s: %s", cp_gguf_path(g), json_keys[i][0]);
    if ((rc = cp_json_parse_strict(&val, v, len, what, 64, CP_ECFG_FIELD, CP_ECFG_FIELD, CP_ECFG_FIELD, CP_ECFG_FIELD)))
      break;
    text = cJSON_PrintUnformatted(val);
    cJSON_Delete(val);
    CP_CHECK_ALLOC(text, what);
    cp_strbuf_printf(js, "%s\"%s\":%s", i ? "," : "", json_keys[i][1], text);
    free(text);
  }
  for (size_t i = 0; i < sizeof name_keys / sizeof *name_keys && rc == 0; i++) {
    if (cp_gguf_find_key(g, name_keys[i][0]) < 0 || cp_gguf_get_str(&v, &len, g, name_keys[i][0])) continue;
    bool plain = len > 0 && len < 65;
    for (size_t c = 0; plain && c < len; c++) plain = strchr("abcdefghijklmnopqrstuvwxyz0123456789-", v[c]) != NULL;
    if (plain) cp_strbuf_printf(js, ",\"%s\":\"%.*s\"", name_keys[i][1], (int)len, v);
  }
  bool certified;
  if (rc == 0 && cp_gguf_find_key(g, "ctxpatch.certified") >= 0 && cp_gguf_get_bool(&certified, g, "ctxpatch.certified") == 0)
    cp_strbuf_printf(js, ",\"certified\":%s", certified ? "true" : "false");
  if (rc == 0) cp_error_clear(); /* an unreadable name or flag is left out, not an error */
  cp_strbuf_putc(js, '}');
  return rc;
}

int cp_gguf_config(cp_hf_config **out, const cp_gguf_file *g) {
  *out = NULL;
  const char *arch;
  size_t len;
  int rc = cp_gguf_get_str(&arch, &len, g, "general.architecture");
  if (rc) return rc;
  size_t k = 0;
  while (k < sizeof k_archs / sizeof *k_archs && (strlen(k_archs[k].arch) != len || memcmp(arch, k_archs[k].arch, len)))
    k++;
  if (k == sizeof k_archs / sizeof *k_archs)
    return cp_error_set(CP_ECFG_FAMILY, "%s: general.architecture '%.*s' is not supported (llama, qwen2, qwen3, phi3, gemma, gemma2, "
                        "gemma3, granite, olmo2, gptneox, bloom, mpt, gpt2, t5)",
                        cp_gguf_path(g), (int)(len < 64 ? len : 64), arch);
  arch = k_archs[k].arch;
  cp_strbuf js = {0};
  if ((rc = arch_json(&js, g, arch, k_archs[k].family, k_archs[k].model_type, k_archs[k].hf_arch)) == 0 &&
      cp_gguf_find_key(g, "ctxpatch.rule") >= 0)
    rc = ctxpatch_json(&js, g);
  if (rc == 0) {
    cp_strbuf_putc(&js, '}');
    char what[600];
    snprintf(what, sizeof what, "%s (GGUF metadata as config.json)", cp_gguf_path(g));
    rc = js.oom ? cp_nomem("%s", cp_gguf_path(g))
                : cp_hf_config_parse(out, js.s, js.len, what);
  }
  cp_strbuf_free(&js);
  if (rc == 0 && (rc = check_block_count(g, arch, *out))) {
    cp_hf_config_free(*out);
    *out = NULL;
  }
  if (rc) return rc;
  /* MptConfig has no activation field (MptMLP is exact GELU); llama.cpp's mpt runs ggml_gelu, the tanh form. */
  if ((*out)->family == CP_FAMILY_MPT) snprintf((*out)->activation, sizeof (*out)->activation, "gelu_pytorch_tanh");
  if ((*out)->train_len > 0)
    snprintf((*out)->train_len_key, sizeof (*out)->train_len_key, "GGUF %s.context_length", arch);
  return 0;
}

int cp_checkpoint_config(cp_hf_config **out, const cp_checkpoint *ck, const char *path) {
  *out = NULL;
  if (cp_checkpoint_gguf(ck)) return cp_gguf_config(out, cp_checkpoint_gguf(ck));
  if (cp_checkpoint_onnx(ck)) return cp_onnx_import_config(out, cp_checkpoint_onnx(ck));
  if (!cp_checkpoint_config_path(ck))
    return cp_error_set(CP_ENOTFOUND, "%s: no config.json beside the weights", path);
  return cp_hf_config_load(out, cp_checkpoint_config_path(ck));
}

/* ---------------------------------------------------------------- tokenizer */

/* tokenizer.ggml.tokens / scores / token_type as SentencePiece pieces. */
static int read_pieces(cp_spm_piece **out, size_t *n, const cp_gguf_file *g) {
  cp_gguf_vtype elem;
  uint64_t count, n_scores = 0, n_types = 0;
  int rc = cp_gguf_get_arr(&elem, &count, g, "tokenizer.ggml.tokens");
  if (rc) return rc;
  bool scores = cp_gguf_find_key(g, "tokenizer.ggml.scores") >= 0;
  bool types = cp_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0;
  if ((scores && (rc = cp_gguf_get_arr(&elem, &n_scores, g, "tokenizer.ggml.scores"))) ||
      (types && (rc = cp_gguf_get_arr(&elem, &n_types, g, "tokenizer.ggml.token_type"))))
    return rc;
  if ((scores && n_scores != count) || (types && n_types != count))
    return cp_error_set(CP_ETOK_MODEL, "%s: tokenizer.ggml.tokens has %llu entries but scores %llu and token_type %llu",
                        cp_gguf_path(g), (unsigned long long)count, (unsigned long long)n_scores,
                        (unsigned long long)n_types);
  cp_spm_piece *p = calloc((size_t)count + 256, sizeof *p); /* room for missing byte pieces (below) */
  CP_CHECK_ALLOC(p, cp_gguf_path(g));
  for (uint64_t i = 0; i < count && rc == 0; i++) {
    double s = 0;
    int64_t t = 1;
    rc = cp_gguf_arr_str(&p[i].piece, &p[i].len, g, "tokenizer.ggml.tokens", i);
    if (rc == 0 && scores) rc = cp_gguf_arr_f64(&s, g, "tokenizer.ggml.scores", i);
    if (rc == 0 && types) rc = cp_gguf_arr_int(&t, g, "tokenizer.ggml.token_type", i);
    if (rc == 0 && (t < 1 || t > 6))
      rc = cp_error_set(CP_ETOK_MODEL, "%s: tokenizer.ggml.token_type[%llu] is %lld, not 1..6", cp_gguf_path(g),
                        (unsigned long long)i, (long long)t);
    p[i].score = (float)s;
    p[i].type = (int)t;
  }
  if (rc) {
    free(p);
    return rc;
  }
  *out = p;
  *n = (size_t)count;
  return 0;
}

int cp_gguf_tokenizer(cp_tokenizer **out, const cp_gguf_file *g) {
  *out = NULL;
  const char *model;
  size_t model_len;
  int rc = cp_gguf_get_str(&model, &model_len, g, "tokenizer.ggml.model");
  if (rc) return rc;
  bool gpt2 = model_len == 4 && !memcmp(model, "gpt2", 4); /* byte-level BPE: export/gguf/gguf_vocab.c */
  if (!gpt2 && !(model_len == 5 && !memcmp(model, "llama", 5)))
    return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' is not supported (llama, gpt2)",
                        cp_gguf_path(g), (int)(model_len < 64 ? model_len : 64), model);
  cp_spm_vocab v = {.bpe = true, .add_dummy_prefix = true};
  int64_t ids[4];
  static const char *const id_keys[4] = {"tokenizer.ggml.unknown_token_id", "tokenizer.ggml.bos_token_id",
                                         "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id"};
  for (int k = 0; k < 4; k++)
    if ((rc = token_id(&ids[k], g, id_keys[k]))) return rc;
  if (cp_gguf_find_key(g, "tokenizer.ggml.add_space_prefix") >= 0 &&
      (rc = cp_gguf_get_bool(&v.add_dummy_prefix, g, "tokenizer.ggml.add_space_prefix")))
    return rc;
  cp_spm_piece *pieces = NULL;
  if ((rc = read_pieces(&pieces, &v.n, g))) return rc;
  if (gpt2) {
    rc = cp_gguf_bpe_tokenizer(out, g, pieces, v.n, ids[1] < (int64_t)v.n ? (int)ids[1] : -1,
                               ids[2] < (int64_t)v.n ? (int)ids[2] : -1);
    free(pieces);
    return rc;
  }
  v.pieces = pieces;
  /* SentencePiece's byte fallback wants all 256 <0xXX> pieces; Gemma's tokenizer.json (so a GGUF
   * written from it, export/gguf/gguf_vocab_json.c) lacks <0x09>, its tab being a piece of its own.
   * The missing ones go after the vocabulary, where the text only reaches them for a byte the
   * vocabulary cannot spell otherwise (never for Gemma; llama.cpp would fail there). */
  bool have[256] = {false};
  char names[256][8];
  size_t n_bytes = 0, n = v.n;
  for (size_t i = 0; i < n; i++) {
    unsigned b;
    char end;
    if (pieces[i].type != 6) continue;
    n_bytes++;
    if (pieces[i].len == 6 && sscanf(pieces[i].piece, "<0x%2X%c", &b, &end) == 2 && end == '>') have[b] = true;
  }
  for (unsigned b = 0; b < 256 && n_bytes > 0 && n_bytes < 256; b++)
    if (!have[b]) {
      snprintf(names[b], sizeof names[b], "<0x%02X>", b);
      pieces[v.n++] = (cp_spm_piece){names[b], 6, 0.0f, 6};
    }
  v.byte_fallback = n_bytes > 0;
  int *dst[4] = {&v.unk_id, &v.bos_id, &v.eos_id, &v.pad_id};
  for (int k = 0; k < 4; k++) *dst[k] = ids[k] < (int64_t)v.n ? (int)ids[k] : -1;
  /* SentencePiece allows one UNKNOWN piece; llama.cpp takes the unknown id from its key and never
   * produces other UNKNOWN (2) pieces (Phi-3's [PADn] padding; its <unk> is CONTROL): the unknown
   * id's piece is UNKNOWN, the others UNUSED (5), which SentencePiece never emits either. */
  for (size_t i = 0; i < v.n && v.unk_id >= 0; i++)
    if ((int64_t)i == v.unk_id) pieces[i].type = 2;
    else if (pieces[i].type == 2) pieces[i].type = 5;
  rc = cp_tokenizer_from_spm_vocab(out, &v, cp_gguf_path(g));
  free(pieces);
  return rc;
}

/* An ONNX graph's tokenizer: its folder's, else its parent's (Optimum's onnx/ layout). */
static int onnx_tokenizer_open(cp_tokenizer **out, const char *path) {
  char *dir = strdup(path), *slash, *up = NULL;
  int rc = 0;
  CP_CHECK_ALLOC(dir, path);
  slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else strcpy(dir, ".");
  if ((rc = cp_tokenizer_open(out, dir)) == CP_ETOK_MISSING) {
    cp_error_clear();
    if (!(up = cp_path_join(dir, ".."))) rc = cp_nomem("%s", path);
    else if ((rc = cp_tokenizer_open(out, up)) == CP_ETOK_MISSING)
      rc = cp_error_set(CP_ETOK_MISSING, "%s: no tokenizer.json, tokenizer.model or spiece.model beside the graph "
                        "or in its parent folder", path);
  }
  free(up);
  free(dir);
  return rc;
}

int cp_model_tokenizer_open(cp_tokenizer **out, const char *path) {
  *out = NULL;
  size_t n = strlen(path);
  if (n > 5 && !strcmp(path + n - 5, ".onnx")) return onnx_tokenizer_open(out, path);
  cp_gguf_file *g = NULL;
  FILE *fp = NULL;
  char magic[4] = {0};
  bool gguf = false;
  if (cp_fopen_input(&fp, path) == 0) {
    gguf = fread(magic, 1, 4, fp) == 4 && !memcmp(magic, "GGUF", 4);
    fclose(fp);
  }
  if (!gguf) {
    int rc = cp_tokenizer_open(out, path);
    char *graph = rc == CP_ETOK_MISSING ? cp_onnx_export_graph(path) : NULL;
    if (graph) { /* an ONNX export folder, or its onnx/ subfolder: the graph's tokenizer */
      cp_error_clear();
      rc = onnx_tokenizer_open(out, graph);
      free(graph);
    }
    return rc;
  }
  int rc = cp_gguf_open(&g, path);
  if (rc == 0) rc = cp_gguf_tokenizer(out, g);
  cp_gguf_free(g);
  return rc;
}
