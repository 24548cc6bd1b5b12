/* cp_tokenizer: opens a tokenizer.json / SentencePiece .model / model folder and dispatches to
 * the Hugging Face engine (tokenizer_hf.c) or the libsentencepiece shim (tokenizer_spm.cpp). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/utf8.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/tokenizers/tokenizer.h"
#include "tokenizers/hf.h"
#include "tokenizers/spm.h"

#define TK_MAX_JSON_BYTES ((size_t)512 << 20)
#define TK_MAX_MODEL_BYTES ((size_t)64 << 20)

struct cp_tokenizer {
  char *path;
  tk_hf *hf;
  tk_spm *spm;
};

/* A serialised SentencePiece ModelProto: prechecked, then handed to libsentencepiece. */
static int load_spm(cp_tokenizer *tok, const char *data, size_t len) {
  char err[256] = "";
  int rc = 0;
  if (len == 0) rc = cp_error_set(CP_ETOK_MODEL, "%s: empty file", tok->path);
  else if ((rc = tk_spm_precheck((const unsigned char *)data, len, tok->path))) (void)0;
  else if (tk_spm_load(&tok->spm, data, len, err, sizeof err))
    rc = cp_error_set(CP_ETOK_MODEL, "%s: not a SentencePiece model: %s", tok->path, err);
  return rc;
}

int cp_tokenizer_from_spm_vocab(cp_tokenizer **out, const cp_spm_vocab *v, const char *what) {
  *out = NULL;
  cp_strbuf proto = {0};
  cp_tokenizer *tok = calloc(1, sizeof *tok);
  int rc = 0;
  if (!tok || !(tok->path = strdup(what))) {
    rc = cp_nomem("%s", what);
    goto done;
  }
  tk_spm_serialize(&proto, v);
  if (proto.oom) rc = cp_nomem("%s", what);
  else rc = load_spm(tok, proto.s, proto.len);
  if (rc == 0) {
    *out = tok;
    tok = NULL;
  }
done:
  cp_strbuf_free(&proto);
  cp_tokenizer_free(tok);
  return rc;
}

int cp_tokenizer_from_bpe_vocab(cp_tokenizer **out, const cp_bpe_vocab *v, const char *what) {
  *out = NULL;
  cp_tokenizer *tok = calloc(1, sizeof *tok);
  if (!tok || !(tok->path = strdup(what))) {
    free(tok);
    return cp_nomem("%s", what);
  }
  int rc = tk_hf_from_bpe_vocab(&tok->hf, v, what);
  if (rc) cp_tokenizer_free(tok);
  else *out = tok;
  return rc;
}

int cp_tokenizer_spm_piece(cp_spm_piece *out, const cp_tokenizer *tok, size_t id) {
  if (!tok->spm || id >= (size_t)tk_spm_size(tok->spm))
    return cp_error_set(CP_EARG, "%s: piece %zu: not a SentencePiece piece", tok->path, id);
  out->piece = tk_spm_piece(tok->spm, (int)id);
  out->len = strlen(out->piece);
  out->score = tk_spm_score(tok->spm, (int)id);
  out->type = tk_spm_type(tok->spm, (int)id);
  return 0;
}

int cp_tokenizer_open(cp_tokenizer **out, const char *path) {
  *out = NULL;
  struct stat st;
  char *data = NULL, *chosen = NULL;
  size_t len = 0;
  int rc = 0;
  cp_tokenizer *tok = NULL;
  if (stat(path, &st) != 0)
    return cp_error_set(errno == ENOENT ? CP_ENOTFOUND : CP_EIO, "%s: cannot open: %s", path, strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    static const char *const names[] = {"tokenizer.json", "tokenizer.model", "spiece.model"};
    for (size_t i = 0; i < 3 && !chosen; i++) {
      char *p = cp_path_join(path, names[i]);
      CP_CHECK_ALLOC(p, path);
      if (cp_path_is_file(p)) chosen = p;
      else free(p);
    }
    if (!chosen)
      return cp_error_set(CP_ETOK_MISSING, "%s: no tokenizer.json, tokenizer.model or spiece.model in folder", path);
  } else {
    size_t n = strlen(path);
    CP_CHECK_ALLOC(chosen = malloc(n + 1), path);
    memcpy(chosen, path, n + 1);
  }
  /* Content decides, not the name: a protobuf never starts with '{'. */
  bool json = cp_path_has_suffix(chosen, ".json");
  if ((rc = cp_read_file(&data, &len, chosen, json ? TK_MAX_JSON_BYTES : TK_MAX_MODEL_BYTES))) goto done;
  cp_input_note(chosen);
  size_t i = 0;
  while (i < len && (data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t')) i++;
  if (i < len && data[i] == '{') json = true;
  CP_CHECK_ALLOC_GOTO(tok = calloc(1, sizeof *tok), chosen);
  tok->path = chosen;
  chosen = NULL;
  if (json) rc = tk_hf_load(&tok->hf, data, len, tok->path);
  else rc = load_spm(tok, data, len);
  if (rc) goto done;
  *out = tok;
  tok = NULL;
done:
  free(data);
  free(chosen);
  cp_tokenizer_free(tok);
  return rc;
}

void cp_tokenizer_free(cp_tokenizer *tok) {
  if (!tok) return;
  tk_hf_free(tok->hf);
  tk_spm_free(tok->spm);
  free(tok->path);
  free(tok);
}

int cp_tokenizer_encode(const cp_tokenizer *tok, int64_t **ids, size_t *n, const char *text, size_t len,
                        bool add_special) {
  *ids = NULL, *n = 0;
  size_t bad = cp_utf8_check(text, len, CP_UTF8_STRICT);
  if (bad != len) return cp_error_set(CP_ETOK_TEXT, "text: offset %zu: invalid UTF-8", bad);
  if (tok->hf) return tk_hf_encode(tok->hf, ids, n, text, len, add_special);
  int *raw = NULL;
  size_t nraw = 0;
  char err[256] = "";
  if (tk_spm_encode(tok->spm, &raw, &nraw, text, len, err, sizeof err))
    return cp_error_set(CP_ETOK_MODEL, "%s: encode failed: %s", tok->path, err);
  int bos = tk_spm_bos(tok->spm), eos = tk_spm_eos(tok->spm);
  /* transformers' slow tokenizers: Llama prepends BOS; T5 (no BOS) appends EOS. */
  bool pre = add_special && bos >= 0, post = add_special && bos < 0 && eos >= 0;
  int64_t *res = malloc((nraw + 2) * sizeof *res);
  if (!res) {
    free(raw);
    return cp_nomem("%s", tok->path);
  }
  size_t o = 0;
  if (pre) res[o++] = bos;
  for (size_t i = 0; i < nraw; i++) res[o++] = raw[i];
  if (post) res[o++] = eos;
  free(raw);
  *ids = res, *n = o;
  return 0;
}

int cp_tokenizer_decode(const cp_tokenizer *tok, char **text, size_t *len, const int64_t *ids, size_t n,
                        bool skip_special) {
  *text = NULL, *len = 0;
  cp_strbuf out = {0};
  int rc = 0;
  if (tok->hf) {
    rc = tk_hf_decode(tok->hf, &out, ids, n, skip_special);
    if (rc) {
      cp_strbuf_free(&out);
      return rc;
    }
    *text = out.s, *len = out.len;
    return 0;
  }
  int size = tk_spm_size(tok->spm);
  int *run = malloc((n + 1) * sizeof *run);
  CP_CHECK_ALLOC(run, tok->path);
  size_t nrun = 0;
  char err[256] = "";
  /* Control pieces (BOS/EOS/unk) decode to nothing in SentencePiece; without skip_special they
   * are written as their piece text between decoded runs. */
  for (size_t i = 0; i <= n && !rc; i++) {
    if (i < n && (ids[i] < 0 || ids[i] >= size)) {
      rc = cp_error_set(CP_ETOK_ID, "%s: id %lld at position %zu is not a token", tok->path, (long long)ids[i], i);
      break;
    }
    bool control = i < n && tk_spm_is_control(tok->spm, (int)ids[i]);
    if (i < n && !(control && !skip_special)) {
      run[nrun++] = (int)ids[i];
      continue;
    }
    if (nrun) {
      char *piece = NULL;
      size_t plen = 0;
      if (tk_spm_decode(tok->spm, &piece, &plen, run, nrun, err, sizeof err))
        rc = cp_error_set(CP_ETOK_MODEL, "%s: decode failed: %s", tok->path, err);
      else cp_strbuf_put(&out, piece, plen);
      free(piece);
      nrun = 0;
    }
    if (i < n && !rc) cp_strbuf_str(&out, tk_spm_piece(tok->spm, (int)ids[i]));
  }
  free(run);
  if (!rc && !out.s) cp_strbuf_put(&out, "", 0);
  if (!rc && out.oom) rc = cp_nomem("%s", tok->path);
  if (rc) {
    cp_strbuf_free(&out);
    return rc;
  }
  *text = out.s, *len = out.len;
  return 0;
}

int64_t cp_tokenizer_token_id(const cp_tokenizer *tok, const char *name) {
  return tok->hf ? tk_hf_token_id(tok->hf, name) : tk_spm_piece_id(tok->spm, name);
}

size_t cp_tokenizer_vocab_size(const cp_tokenizer *tok) {
  return tok->hf ? tk_hf_vocab_size(tok->hf) : (size_t)tk_spm_size(tok->spm);
}

int64_t cp_tokenizer_bos_id(const cp_tokenizer *tok) { return tok->hf ? tk_hf_bos(tok->hf) : tk_spm_bos(tok->spm); }
int64_t cp_tokenizer_eos_id(const cp_tokenizer *tok) { return tok->hf ? tk_hf_eos(tok->hf) : tk_spm_eos(tok->spm); }
const char *cp_tokenizer_kind(const cp_tokenizer *tok) { return tok->hf ? tk_hf_kind(tok->hf) : "sentencepiece"; }
const char *cp_tokenizer_path(const cp_tokenizer *tok) { return tok->path; }
