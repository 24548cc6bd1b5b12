/* A tokenizer.json as llama.cpp's "gpt2" (byte-level BPE) or "llama" (SentencePiece-derived BPE)
 * vocabulary keys, and a SentencePiece .model as "llama" (export/gguf/gguf_vocab.h). */
#include "export/gguf/gguf_vocab.h"
#include "export/gguf/gguf_vocab_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json_strict.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/strbuf.h"

#define MAX_TOKENIZER_JSON ((size_t)256 << 20)
#define MAX_VOCAB 4000000

static const cJSON *member(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static bool is_true(const cJSON *o, const char *k) { return cJSON_IsTrue(member(o, k)); }

/* tokens[id] from model.vocab and added_tokens; added tokens are control (3) when special, else
 * user-defined (4), as llama.cpp's converter types them (both are matched in the text before the
 * model runs, as tokenizers matches added tokens). */
static int fill_tokens(const char **tok, int32_t *type, int64_t n, const cJSON *root, const char *path) {
  const cJSON *e;
  cJSON_ArrayForEach(e, member(member(root, "model"), "vocab")) {
    if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= (double)n || e->valuedouble != (int64_t)e->valuedouble)
      return cp_error_set(CP_ETOK_MODEL, "%s: model.vocab '%.100s': id outside 0..%lld", path, e->string, (long long)n - 1);
    tok[(int64_t)e->valuedouble] = e->string;
  }
  cJSON_ArrayForEach(e, member(root, "added_tokens")) {
    const cJSON *id = member(e, "id"), *content = member(e, "content");
    if (!cJSON_IsNumber(id) || !cJSON_IsString(content) || id->valuedouble < 0 || id->valuedouble >= (double)n ||
        id->valuedouble != (int64_t)id->valuedouble)
      return cp_error_set(CP_ETOK_MODEL, "%s: added_tokens: entry without an id in 0..%lld and a content", path,
                          (long long)n - 1);
    tok[(int64_t)id->valuedouble] = content->valuestring;
    type[(int64_t)id->valuedouble] = is_true(e, "special") ? 3 : 4;
  }
  return 0;
}

/* model.merges as "a b" strings (the older string form or the [a, b] pair form), into `all` with
 * a span per merge (*out, n of them) and the length of its left part (*left; the string form
 * splits at its first space); the caller frees all three. */
static int collect_merges(cp_str_span **out, size_t **left, cp_strbuf *all, const cJSON *merges, const char *path) {
  int n = cJSON_GetArraySize(merges), i = 0;
  size_t *at = calloc((size_t)n + 1, sizeof *at);
  *out = calloc((size_t)n + 1, sizeof **out);
  *left = calloc((size_t)n + 1, sizeof **left);
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(at && *out && *left, path);
  const cJSON *e;
  cJSON_ArrayForEach(e, merges) {
    at[i] = all->len;
    if (cJSON_IsString(e)) {
      const char *sp = strchr(e->valuestring, ' ');
      (*left)[i] = sp ? (size_t)(sp - e->valuestring) : 0;
      cp_strbuf_str(all, e->valuestring);
    } else if (cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
               cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
      (*left)[i] = strlen(cJSON_GetArrayItem(e, 0)->valuestring);
      cp_strbuf_printf(all, "%s %s", cJSON_GetArrayItem(e, 0)->valuestring, cJSON_GetArrayItem(e, 1)->valuestring);
    } else {
      rc = cp_error_set(CP_ETOK_MODEL, "%s: model.merges[%d]: not a string or a pair of strings", path, i);
      goto done;
    }
    (*out)[i].len = all->len - at[i];
    i++;
  }
  CP_CHECK_ALLOC_GOTO(!all->oom, path);
  for (int k = 0; k < n; k++) (*out)[k].s = all->s + at[k];
done:
  free(at);
  return rc;
}

static int put_merges(cp_gguf_writer *w, const cp_str_span *m, size_t n, const char *path) {
  size_t *len = calloc(n + 1, sizeof *len);
  const char **s = calloc(n + 1, sizeof *s);
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(len && s, path);
  for (size_t k = 0; k < n; k++) s[k] = m[k].s, len[k] = m[k].len;
  rc = cp_gguf_put_arr_str(w, "tokenizer.ggml.merges", s, len, (uint64_t)n);
done:
  free(len);
  free(s);
  return rc;
}

/* cJSON ends a string at an escaped NUL (\u0000), so a token holding one would be written cut
 * short; the reader refuses NUL bytes, so the writer refuses the file. Finds the first string
 * literal with one: its offset, and the id when it is an object key followed by a number (a
 * model.vocab entry), else -1. False when there is none. */
static bool nul_escape(size_t *at, long long *id, const char *t, size_t n) {
  for (size_t p = 0; p < n; p++) {
    if (t[p] != '"') continue;
    size_t start = p++;
    bool nul = false;
    for (; p < n && t[p] != '"'; p++)
      if (t[p] == '\\' && p + 1 < n) {
        nul |= t[p + 1] == 'u' && p + 5 < n && !memcmp(t + p + 2, "0000", 4);
        p++;
      }
    if (!nul) continue;
    size_t q = p + 1;
    while (q < n && t[q] && strchr(" \t\r\n", t[q])) q++;
    *at = start, *id = -1;
    if (q < n && t[q] == ':') {
      for (q++; q < n && t[q] && strchr(" \t\r\n", t[q]); q++) {}
      if (q < n && t[q] >= '0' && t[q] <= '9') *id = strtoll(t + q, NULL, 10);
    }
    return true;
  }
  return false;
}

static int put_id(cp_gguf_writer *w, const char *key, int id) {
  return id >= 0 ? cp_gguf_put_u32(w, key, (uint32_t)id) : 0;
}

/* The vocabulary as written, shared by the two kinds. */
typedef struct {
  const char *path;
  size_t n;
  const char **tok;
  size_t *len;
  int32_t *type;
  float *score;      /* "llama" only */
  char (*pads)[32];  /* "[PAD" + 20 digits of a size_t + "]" */
  cp_str_span *merges;
  size_t *left, n_merges;
  cp_strbuf merges_text;
  int bos, eos, unk, pad;
  bool add_bos, add_eos, space_prefix;
  const char *pre; /* "gpt2" only */
} hf_vocab;

static void hf_vocab_free(hf_vocab *v) {
  free(v->tok);
  free(v->len);
  free(v->type);
  free(v->score);
  free(v->pads);
  free(v->merges);
  free(v->left);
  cp_strbuf_free(&v->merges_text);
}

/* Tokens, types and merges of `root`, padded to n_vocab with "[PAD<id>]" pieces of type unused
 * (llama.cpp's converter pads a short vocabulary so), checked with the reader's bounds
 * (tokenizers/hf_vocab.c) so nothing is written that it refuses. */
static int hf_vocab_fill(hf_vocab *v, const cJSON *root, int64_t n_vocab) {
  const char *path = v->path;
  if (n_vocab <= 0 || n_vocab > MAX_VOCAB)
    return cp_error_set(CP_ETOK_MODEL, "%s: vocabulary of %lld tokens", path, (long long)n_vocab);
  size_t n = v->n = (size_t)n_vocab;
  v->tok = calloc(n, sizeof *v->tok);
  v->len = calloc(n, sizeof *v->len);
  v->type = calloc(n, sizeof *v->type);
  v->score = calloc(n, sizeof *v->score);
  v->pads = calloc(n, sizeof *v->pads);
  cp_spm_piece *pieces = calloc(n, sizeof *pieces);
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(v->tok && v->len && v->type && v->score && v->pads && pieces, path);
  for (size_t i = 0; i < n; i++) v->type[i] = 1;
  if ((rc = fill_tokens(v->tok, v->type, n_vocab, root, path))) goto done;
  for (size_t i = 0; i < n; i++) {
    if (!v->tok[i]) {
      snprintf(v->pads[i], sizeof v->pads[i], "[PAD%zu]", i);
      v->tok[i] = v->pads[i];
      v->type[i] = 5;
    }
    v->len[i] = strlen(v->tok[i]);
    pieces[i] = (cp_spm_piece){.piece = v->tok[i], .len = v->len[i], .type = v->type[i]};
  }
  const cJSON *merges = member(member(root, "model"), "merges");
  if ((rc = collect_merges(&v->merges, &v->left, &v->merges_text, merges, path))) goto done;
  v->n_merges = (size_t)cJSON_GetArraySize(merges);
  /* bos/eos are left out: the reader drops ids past the tokens */
  cp_bpe_vocab b = {.tokens = pieces, .n = n, .merges = v->merges, .n_merges = v->n_merges, .bos_id = -1,
                    .eos_id = -1};
  rc = cp_bpe_vocab_check(&b, path);
done:
  free(pieces);
  return rc;
}

/* What the post-processor's TemplateProcessing adds around a single sequence (HF
 * add_special_tokens): a leading special token is add_bos (its id the bos when config.json names
 * none), a trailing one add_eos (likewise). */
static void template_adds(hf_vocab *v, const cJSON *post) {
  const cJSON *type = member(post, "type"), *p;
  if (cJSON_IsString(type) && !strcmp(type->valuestring, "Sequence")) {
    cJSON_ArrayForEach(p, member(post, "processors")) template_adds(v, p);
    return;
  }
  if (!cJSON_IsString(type) || strcmp(type->valuestring, "TemplateProcessing")) return;
  const cJSON *single = member(post, "single");
  int n = cJSON_GetArraySize(single);
  for (int end = 0; end < 2 && n > 0; end++) {
    const cJSON *sp = member(cJSON_GetArrayItem(single, end ? n - 1 : 0), "SpecialToken");
    const cJSON *name = sp ? member(sp, "id") : NULL;
    if (!cJSON_IsString(name)) continue;
    const cJSON *ids = member(member(member(post, "special_tokens"), name->valuestring), "ids");
    const cJSON *id = cJSON_GetArraySize(ids) == 1 ? cJSON_GetArrayItem(ids, 0) : NULL;
    int *want = end ? &v->eos : &v->bos;
    if (cJSON_IsNumber(id) && *want < 0 && id->valuedouble >= 0 && id->valuedouble < (double)v->n)
      *want = (int)id->valuedouble;
    if (cJSON_IsNumber(id) && id->valueint == *want) *(end ? &v->add_eos : &v->add_bos) = true;
  }
}

static int put_common(cp_gguf_writer *w, const hf_vocab *v) {
  int rc;
  if ((rc = cp_gguf_put_arr_str(w, "tokenizer.ggml.tokens", v->tok, v->len, v->n)) ||
      (v->score && (rc = cp_gguf_put_arr(w, "tokenizer.ggml.scores", CP_GGUF_F32, v->score, v->n))) ||
      (rc = cp_gguf_put_arr(w, "tokenizer.ggml.token_type", CP_GGUF_I32, v->type, v->n)) ||
      (rc = put_id(w, "tokenizer.ggml.bos_token_id", v->bos)) ||
      (rc = put_id(w, "tokenizer.ggml.eos_token_id", v->eos)) ||
      (rc = put_id(w, "tokenizer.ggml.unknown_token_id", v->unk)) ||
      (rc = put_id(w, "tokenizer.ggml.padding_token_id", v->pad)) ||
      (rc = cp_gguf_put_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos)) ||
      (rc = cp_gguf_put_bool(w, "tokenizer.ggml.add_eos_token", v->add_eos)))
    return rc;
  return 0;
}

int cp_gguf_put_hf_vocab(bool *written, cp_gguf_writer *w, const char *path, int64_t n_vocab, int bos, int eos,
                         int pad) {
  *written = false;
  char *text = NULL;
  size_t text_len = 0;
  cJSON *root = NULL;
  hf_vocab v = {.path = path, .bos = bos, .eos = eos, .unk = -1, .pad = pad};
  int rc = cp_read_file(&text, &text_len, path, MAX_TOKENIZER_JSON);
  if (rc == 0) cp_input_note(path);
  if (rc || (rc = cp_json_parse_strict(&root, text, text_len, path, 64, CP_ETOK_JSON, CP_ETOK_JSON, CP_ETOK_JSON,
                                       CP_ETOK_JSON)))
    goto done;
  cp_gguf_hf_kind kind;
  if ((rc = cp_gguf_hf_kind_of(&kind, &v.pre, &v.space_prefix, root, path)) || kind == CP_GGUF_HF_NONE) goto done;
  size_t nul_at;
  long long nul_id;
  if (nul_escape(&nul_at, &nul_id, text, text_len)) {
    rc = nul_id >= 0 ? cp_error_set(CP_ETOK_MODEL, "%s: token %lld holds a NUL byte (\\u0000), which GGUF's reader "
                                    "refuses", path, nul_id)
                     : cp_error_set(CP_ETOK_MODEL, "%s: offset %zu: a string holding a NUL byte (\\u0000), which "
                                    "GGUF's reader refuses in a token", path, nul_at);
    goto done;
  }
  if ((rc = hf_vocab_fill(&v, root, n_vocab))) goto done;
  template_adds(&v, member(root, "post_processor"));
  if (kind == CP_GGUF_HF_GPT2) {
    static const char model[] = "gpt2";
    free(v.score);
    v.score = NULL;
    if ((rc = cp_gguf_put_str(w, "tokenizer.ggml.model", model, sizeof model - 1)) ||
        (rc = cp_gguf_put_str(w, "tokenizer.ggml.pre", v.pre, strlen(v.pre))) || (rc = put_common(w, &v)) ||
        (rc = put_merges(w, v.merges, v.n_merges, path)))
      goto done;
  } else {
    static const char model[] = "llama";
    cp_gguf_spm_json s = {.tok = v.tok, .len = v.len, .n = v.n, .merges = v.merges, .left = v.left,
                          .n_merges = v.n_merges};
    if ((rc = cp_gguf_spm_json_types(v.type, &v.unk, &s, root, path)) ||
        (rc = cp_gguf_spm_json_scores(v.score, &s, path)) ||
        (rc = cp_gguf_put_str(w, "tokenizer.ggml.model", model, sizeof model - 1)) || (rc = put_common(w, &v)) ||
        (rc = cp_gguf_put_bool(w, "tokenizer.ggml.add_space_prefix", v.space_prefix)))
      goto done;
  }
  *written = true;
done:
  cJSON_Delete(root);
  free(text);
  hf_vocab_free(&v);
  return rc;
}

/* ------------------------------------------------- SentencePiece .model as "llama" written */

/* The pieces of `tok` (n of them) padded to n_vocab, written with the ids. */
static int put_spm_pieces(cp_gguf_writer *w, const cp_tokenizer *tok, size_t n, size_t n_vocab, int bos, int eos,
                          int pad, const char *path) {
  const char **s = calloc(n_vocab, sizeof *s);
  size_t *len = calloc(n_vocab, sizeof *len);
  float *score = calloc(n_vocab, sizeof *score);
  int32_t *type = calloc(n_vocab, sizeof *type);
  char (*pads)[32] /* "[PAD" + 20 digits of a size_t + "]" */ = calloc(n_vocab - n + 1, sizeof *pads);
  int rc = 0, unk = -1;
  CP_CHECK_ALLOC_GOTO(s && len && score && type && pads, path);
  for (size_t i = 0; i < n_vocab && rc == 0; i++) {
    cp_spm_piece p = {0};
    if (i < n) {
      rc = cp_tokenizer_spm_piece(&p, tok, i);
      if (p.type == 2 && unk < 0) unk = (int)i;
    } else { /* llama.cpp's converter pads a short vocabulary the same way */
      snprintf(pads[i - n], sizeof pads[i - n], "[PAD%zu]", i);
      p = (cp_spm_piece){pads[i - n], strlen(pads[i - n]), -1000.0f, 5};
    }
    s[i] = p.piece, len[i] = p.len, score[i] = p.score, type[i] = p.type;
  }
  static const char model[] = "llama";
  if (rc == 0 && ((rc = cp_gguf_put_str(w, "tokenizer.ggml.model", model, sizeof model - 1)) ||
      (rc = cp_gguf_put_arr_str(w, "tokenizer.ggml.tokens", s, len, n_vocab)) ||
      (rc = cp_gguf_put_arr(w, "tokenizer.ggml.scores", CP_GGUF_F32, score, n_vocab)) ||
      (rc = cp_gguf_put_arr(w, "tokenizer.ggml.token_type", CP_GGUF_I32, type, n_vocab)) ||
      (rc = put_id(w, "tokenizer.ggml.bos_token_id", bos)) || (rc = put_id(w, "tokenizer.ggml.eos_token_id", eos)) ||
      (rc = put_id(w, "tokenizer.ggml.unknown_token_id", unk)) ||
      (rc = put_id(w, "tokenizer.ggml.padding_token_id", pad)) ||
      (rc = cp_gguf_put_bool(w, "tokenizer.ggml.add_bos_token", true)) ||
      (rc = cp_gguf_put_bool(w, "tokenizer.ggml.add_eos_token", false))))
    (void)0; /* rc holds the first failure */
done:
  free(s);
  free(len);
  free(score);
  free(type);
  free(pads);
  return rc;
}

int cp_gguf_put_spm_vocab(bool *written, cp_gguf_writer *w, const char *folder, int64_t n_vocab, int bos, int eos,
                          int pad) {
  *written = false;
  cp_tokenizer *tok = NULL;
  char *path = cp_path_join(folder, "tokenizer.model");
  CP_CHECK_ALLOC(path, folder);
  FILE *fp = NULL;
  int rc = 0;
  if (cp_fopen_input(&fp, path) != 0) goto done; /* no tokenizer.model: nothing to write */
  fclose(fp);
  if ((rc = cp_tokenizer_open(&tok, path)) || strcmp(cp_tokenizer_kind(tok), "sentencepiece")) goto done;
  size_t n = cp_tokenizer_vocab_size(tok);
  if (n_vocab <= 0 || n_vocab > MAX_VOCAB || (int64_t)n > n_vocab) {
    rc = cp_error_set(CP_ETOK_MODEL, "%s: %zu pieces for a model vocabulary of %lld", path, n, (long long)n_vocab);
    goto done;
  }
  if (bos < 0) bos = (int)cp_tokenizer_bos_id(tok);
  if (eos < 0) eos = (int)cp_tokenizer_eos_id(tok);
  if ((rc = put_spm_pieces(w, tok, n, (size_t)n_vocab, bos, eos, pad, path)) == 0) *written = true;
done:
  cp_tokenizer_free(tok);
  free(path);
  return rc;
}
