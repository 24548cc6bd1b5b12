/* A GGUF file's metadata as a model config and a tokenizer (include/ctxpatch/converters/gguf_model.h):
 * the `{arch}.*` keys written out as the config.json HF's LlamaConfig would hold and parsed by
 * the one config parser; tokenizer.ggml.* handed to the tokenizers floor as a SentencePiece
 * vocabulary ("llama") or a byte-level BPE one ("gpt2", converters/gguf_vocab.c). */
#include "ctxpatch/converters/gguf_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/strbuf.h"
#include "converters/gguf_vocab.h"

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

/* Rope checks and scaling: whole-head rotation, scaling "none" or "linear" with a factor. */
static int put_rope(cp_strbuf *js, const cp_gguf_file *g, const char *arch, int64_t d_head) {
  char key[128];
  int64_t dims;
  int rc;
  snprintf(key, sizeof key, "%s.rope.dimension_count", arch);
  if (cp_gguf_find_key(g, key) >= 0) {
    if ((rc = cp_gguf_get_int(&dims, g, key))) return rc;
    if (dims != d_head)
      return cp_error_set(CP_ECFG_POSITION, "%s: key '%s' is %lld but heads have %lld dims; partial rotary is not "
                          "read for %s", cp_gguf_path(g), key, (long long)dims, (long long)d_head, arch);
  }
  snprintf(key, sizeof key, "%s.rope.freq_base", arch);
  if (cp_gguf_find_key(g, key) >= 0 && (rc = put_num(js, g, key, "rope_theta"))) return rc;
  snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
  if (cp_gguf_find_key(g, key) < 0) return 0;
  const char *type;
  size_t len;
  if ((rc = cp_gguf_get_str(&type, &len, g, key))) return rc;
  if (len == 4 && !memcmp(type, "none", 4)) return 0;
  if (!(len == 6 && !memcmp(type, "linear", 6)))
    return cp_error_set(CP_ECFG_POSITION, "%s: key '%s': rope scaling '%.*s' is not supported (none, linear)",
                        cp_gguf_path(g), key, (int)(len < 32 ? len : 32), type);
  cp_strbuf_str(js, ",\"rope_scaling\":{\"type\":\"linear\"");
  snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
  if ((rc = put_num(js, g, key, "factor"))) return rc;
  cp_strbuf_putc(js, '}');
  return 0;
}

/* String key `key` must be `want` (the one value read); `code` when it is another. */
static int require_str(const cp_gguf_file *g, const char *key, const char *want, int code) {
  const char *v;
  size_t len;
  int rc = cp_gguf_get_str(&v, &len, g, key);
  if (rc) return rc;
  if (len != strlen(want) || memcmp(v, want, len))
    return cp_error_set(code, "%s: %s '%.*s' is not supported (%s)", cp_gguf_path(g), key, (int)(len < 64 ? len : 64),
                        v, want);
  return 0;
}

/* The synthetic config.json of a llama GGUF. */
static int llama_json(cp_strbuf *js, const cp_gguf_file *g, const char *arch) {
  int64_t d, heads, d_head, bos, eos, vocab;
  char key[128];
  int rc;
  snprintf(key, sizeof key, "%s.embedding_length", arch);
  if ((rc = cp_gguf_get_int(&d, g, key))) return rc;
  snprintf(key, sizeof key, "%s.attention.head_count", arch);
  if ((rc = cp_gguf_get_int(&heads, g, key))) return rc;
  if (heads <= 0 || d % heads)
    return cp_error_set(CP_ECFG_FIELD, "%s: key '%s': %lld heads do not divide embedding_length %lld",
                        cp_gguf_path(g), key, (long long)heads, (long long)d);
  d_head = d / heads;
  snprintf(key, sizeof key, "%s.attention.key_length", arch);
  if (cp_gguf_find_key(g, key) >= 0 && (rc = cp_gguf_get_int(&d_head, g, key))) return rc;
  int64_t embd = cp_gguf_find(g, "token_embd.weight");
  snprintf(key, sizeof key, "%s.vocab_size", arch);
  if (cp_gguf_find_key(g, key) >= 0) {
    if ((rc = cp_gguf_get_int(&vocab, g, key))) return rc;
  } else if (embd >= 0 && cp_gguf_tensor(g, (size_t)embd)->ndim == 2) {
    vocab = cp_gguf_tensor(g, (size_t)embd)->shape[0];
  } else {
    return cp_error_set(CP_ENOTFOUND, "%s: no %s.vocab_size and no 2-D token_embd.weight", cp_gguf_path(g), arch);
  }
  if ((rc = token_id(&bos, g, "tokenizer.ggml.bos_token_id")) || (rc = token_id(&eos, g, "tokenizer.ggml.eos_token_id")))
    return rc;
  cp_strbuf_printf(js, "{\"model_type\":\"llama\",\"architectures\":[\"LlamaForCausalLM\"],\"hidden_act\":\"silu\","
                   "\"vocab_size\":%lld,\"hidden_size\":%lld,\"num_attention_heads\":%lld,\"head_dim\":%lld,"
                   "\"bos_token_id\":%lld,\"eos_token_id\":%lld,\"tie_word_embeddings\":%s",
                   (long long)vocab, (long long)d, (long long)heads, (long long)d_head, (long long)bos,
                   (long long)eos, cp_gguf_find(g, "output.weight") < 0 ? "true" : "false");
  char eps[128];
  snprintf(eps, sizeof eps, "%s.attention.layer_norm_rms_epsilon", arch);
  if ((rc = put_int(js, g, arch, "block_count", "num_hidden_layers", true)) ||
      (rc = put_int(js, g, arch, "feed_forward_length", "intermediate_size", true)) ||
      (rc = put_int(js, g, arch, "attention.head_count_kv", "num_key_value_heads", false)) ||
      (rc = put_int(js, g, arch, "context_length", "max_position_embeddings", false)) ||
      (rc = put_num(js, g, eps, "rms_norm_eps")) || (rc = put_rope(js, g, arch, d_head)))
    return rc;
  if (cp_gguf_find_key(g, "ctxpatch.rule") >= 0) { /* a patched file's rule (converters/gguf_export.h) */
    const char *rule;
    size_t rule_len;
    if ((rc = cp_gguf_get_str(&rule, &rule_len, g, "ctxpatch.rule"))) return rc;
    cp_strbuf_printf(js, ",\"ctxpatch\":{\"rule\":%.*s}", (int)(rule_len < INT32_MAX ? rule_len : 0), rule);
  }
  cp_strbuf_putc(js, '}');
  return 0;
}

int cp_gguf_config(cp_hf_config **out, const cp_gguf_file *g) {
  *out = NULL;
  int rc = require_str(g, "general.architecture", "llama", CP_ECFG_FAMILY);
  if (rc) return rc;
  cp_strbuf js = {0};
  if ((rc = llama_json(&js, g, "llama")) == 0) {
    char what[600];
    snprintf(what, sizeof what, "%s (GGUF metadata as config.json)", cp_gguf_path(g));
    rc = js.oom ? cp_error_set(CP_ENOMEM, "%s: out of memory", cp_gguf_path(g))
                : cp_hf_config_parse(out, js.s, js.len, what);
  }
  cp_strbuf_free(&js);
  if (rc == 0 && (*out)->train_len > 0)
    snprintf((*out)->train_len_key, sizeof (*out)->train_len_key, "GGUF %s.context_length", "llama");
  return rc;
}

int cp_checkpoint_config(cp_hf_config **out, const cp_checkpoint *ck, const char *path) {
  *out = NULL;
  if (cp_checkpoint_gguf(ck)) return cp_gguf_config(out, cp_checkpoint_gguf(ck));
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
  cp_spm_piece *p = calloc((size_t)(count ? count : 1), sizeof *p);
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
  bool gpt2 = model_len == 4 && !memcmp(model, "gpt2", 4); /* byte-level BPE: converters/gguf_vocab.c */
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
  size_t n_bytes = 0;
  for (size_t i = 0; i < v.n; i++) n_bytes += pieces[i].type == 6;
  v.byte_fallback = n_bytes == 256;
  int *dst[4] = {&v.unk_id, &v.bos_id, &v.eos_id, &v.pad_id};
  for (int k = 0; k < 4; k++) *dst[k] = ids[k] < (int64_t)v.n ? (int)ids[k] : -1;
  rc = cp_tokenizer_from_spm_vocab(out, &v, cp_gguf_path(g));
  free(pieces);
  return rc;
}

int cp_model_tokenizer_open(cp_tokenizer **out, const char *path) {
  *out = NULL;
  cp_gguf_file *g = NULL;
  FILE *fp = NULL;
  char magic[4] = {0};
  bool gguf = false;
  if (cp_fopen_input(&fp, path) == 0) {
    gguf = fread(magic, 1, 4, fp) == 4 && !memcmp(magic, "GGUF", 4);
    fclose(fp);
  }
  if (!gguf) return cp_tokenizer_open(out, path);
  int rc = cp_gguf_open(&g, path);
  if (rc == 0) rc = cp_gguf_tokenizer(out, g);
  cp_gguf_free(g);
  return rc;
}
