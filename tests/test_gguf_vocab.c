/* Byte-level BPE vocabularies given as data (cp_tokenizer_from_bpe_vocab) and GGUF "gpt2"
 * vocabularies (cp_gguf_tokenizer): a tiny consistent one encodes and decodes by its merges; every
 * inconsistent one is refused with its one-line message. (Real vocabularies against the real
 * tokenizer's goldens: test_tokenizer and test_gguf_vocab_bpe.sh.) */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctxpatch/import/gguf_model.h"
#include "ctxpatch/formats/gguf_write.h"
#include "ctxpatch/tokenizers/tokenizer.h"
#include "test.h"

/* "a", "b", "ab", "Ġ" (a space), "Ġab", "<|end|>" (control); merges "a b", "Ġ ab". */
static cp_spm_piece toks[6] = {{"a", 1, 0, 1}, {"b", 1, 0, 1}, {"ab", 2, 0, 1},
                               {"\xc4\xa0", 2, 0, 1}, {"\xc4\xa0" "ab", 4, 0, 1}, {"<|end|>", 7, 0, 3}};
static cp_str_span merges[2] = {{"a b", 3}, {"\xc4\xa0 ab", 5}};

static cp_bpe_vocab vocab(void) {
  return (cp_bpe_vocab){.tokens = toks, .n = 6, .merges = merges, .n_merges = 2, .bos_id = -1, .eos_id = 5};
}

static void refused(const cp_bpe_vocab *v, const char *want) {
  cp_tokenizer *tok = NULL;
  CHECK_RC(CP_ETOK_MODEL, cp_tokenizer_from_bpe_vocab(&tok, v, "v.gguf"));
  CHECK_MSG(!tok && !strcmp(cp_error_message(), want), "got '%s', want '%s'", cp_error_message(), want);
}

/* A vocabulary-only GGUF with the tiny vocabulary and tokenizer.ggml.pre = pre. */
static int write_gguf(const char *path, const char *pre) {
  const char *s[6], *m[2];
  size_t len[6], mlen[2];
  int32_t type[6];
  for (int i = 0; i < 6; i++) s[i] = toks[i].piece, len[i] = toks[i].len, type[i] = toks[i].type;
  for (int i = 0; i < 2; i++) m[i] = merges[i].s, mlen[i] = merges[i].len;
  cp_gguf_writer *w = NULL;
  int rc = cp_gguf_writer_new(&w, path);
  if (rc) return rc;
  if ((rc = cp_gguf_put_str(w, "general.architecture", "llama", 5)) ||
      (rc = cp_gguf_put_str(w, "tokenizer.ggml.model", "gpt2", 4)) ||
      (rc = cp_gguf_put_str(w, "tokenizer.ggml.pre", pre, strlen(pre))) ||
      (rc = cp_gguf_put_arr_str(w, "tokenizer.ggml.tokens", s, len, 6)) ||
      (rc = cp_gguf_put_arr(w, "tokenizer.ggml.token_type", CP_GGUF_I32, type, 6)) ||
      (rc = cp_gguf_put_arr_str(w, "tokenizer.ggml.merges", m, mlen, 2)) ||
      (rc = cp_gguf_put_u32(w, "tokenizer.ggml.eos_token_id", 5)) || (rc = cp_gguf_writer_begin(w))) {
    cp_gguf_writer_abort(w);
    return rc;
  }
  return cp_gguf_writer_commit(w, NULL);
}

int main(void) {
  cp_bpe_vocab v = vocab();
  cp_tokenizer *tok = NULL;
  CHECK_RC(0, cp_tokenizer_from_bpe_vocab(&tok, &v, "v.gguf"));
  if (tok) {
    int64_t *ids = NULL;
    size_t n = 0;
    CHECK_RC(0, cp_tokenizer_encode(tok, &ids, &n, "ab ab<|end|>ba", 14, false));
    CHECK_MSG(n == 5 && ids[0] == 2 && ids[1] == 4 && ids[2] == 5 && ids[3] == 1 && ids[4] == 0, "n %zu", n);
    char *text = NULL;
    size_t len = 0;
    CHECK_RC(0, cp_tokenizer_decode(tok, &text, &len, ids, n, true));
    CHECK_MSG(text && !strcmp(text, "ab abba"), "got '%s'", text ? text : "");
    CHECK(cp_tokenizer_eos_id(tok) == 5 && cp_tokenizer_vocab_size(tok) == 6);
    free(text);
    free(ids);
    cp_tokenizer_free(tok);
  }

  v = vocab(), v.n = 0;
  refused(&v, "v.gguf: 0 tokens and 2 merges (1..2097152 tokens, at most 4194304 merges)");
  v = vocab(), v.eos_id = 6;
  refused(&v, "v.gguf: bos id -1 / eos id 6: not tokens of the 6 (or added without one)");
  v = vocab(), v.add_bos = true;
  refused(&v, "v.gguf: bos id -1 / eos id 5: not tokens of the 6 (or added without one)");
  cp_spm_piece bad[6];
  memcpy(bad, toks, sizeof bad);
  bad[2] = (cp_spm_piece){"a", 1, 0, 1};
  v = vocab(), v.tokens = bad;
  refused(&v, "v.gguf: token 2 'a' repeats token 0");
  memcpy(bad, toks, sizeof bad);
  bad[1] = (cp_spm_piece){"b\0c", 3, 0, 1};
  v = vocab(), v.tokens = bad;
  refused(&v, "v.gguf: token 1: 3 bytes: empty, over 1024 bytes, with a NUL or not UTF-8");
  bad[1] = (cp_spm_piece){"\xff", 1, 0, 1};
  refused(&v, "v.gguf: token 1: 1 bytes: empty, over 1024 bytes, with a NUL or not UTF-8");
  bad[1] = (cp_spm_piece){"b", 1, 0, 7};
  refused(&v, "v.gguf: token 1: type 7, not 1..6");
  cp_str_span bad_merges[2] = {{"a b", 3}, {"ab", 2}};
  v = vocab(), v.merges = bad_merges;
  refused(&v, "v.gguf: merge 1: 2 bytes, not 'left right' (two tokens, one space)");
  bad_merges[1] = (cp_str_span){"a  b", 4};
  refused(&v, "v.gguf: merge 1: 4 bytes, not 'left right' (two tokens, one space)");
  bad_merges[1] = (cp_str_span){"b a", 3}; /* "ba" is not a token: the tokenizer.json loader's check */
  tok = NULL;
  CHECK(cp_tokenizer_from_bpe_vocab(&tok, &v, "v.gguf") < 0 && !tok);
  CHECK_MSG(strstr(cp_error_message(), "v.gguf: model.merges[1]") != NULL, "got '%s'", cp_error_message());

  /* Through a GGUF file: gpt-2 and llama-bpe read, an unknown pre-tokenizer is refused by name. */
  char dir[] = "/tmp/ctxpatch-vocab-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char path[64];
  snprintf(path, sizeof path, "%s/v.gguf", dir);
  CHECK_RC(0, write_gguf(path, "gpt-2"));
  tok = NULL;
  CHECK_RC(0, cp_model_tokenizer_open(&tok, path));
  if (tok) CHECK(cp_tokenizer_token_id(tok, "<|end|>") == 5 && cp_tokenizer_eos_id(tok) == 5);
  cp_tokenizer_free(tok);
  CHECK_RC(0, write_gguf(path, "llama-bpe")); /* llama.cpp's other names read (goldens: test_tokenizer_modern) */
  tok = NULL;
  CHECK_RC(0, cp_model_tokenizer_open(&tok, path));
  cp_tokenizer_free(tok);
  CHECK_RC(0, write_gguf(path, "kimi-k2"));
  tok = NULL;
  CHECK_RC(CP_ETOK_UNSUPPORTED, cp_model_tokenizer_open(&tok, path));
  char want[160];
  snprintf(want, sizeof want, "%s: pre-tokenizer (tokenizer.ggml.pre) 'kimi-k2' is not supported (gpt-2, ", path);
  CHECK_MSG(!strncmp(cp_error_message(), want, strlen(want)) && !strchr(cp_error_message(), '\n'), "got '%s'",
            cp_error_message());
  unlink(path);
  rmdir(dir);
  return test_finish();
}
