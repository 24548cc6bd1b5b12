/* Tokenizers against reference ids: the Hugging Face / SentencePiece goldens in
 * ../shared/fixtures/tokenizers/goldens (SOURCES.md) and tests/goldens/tokenizers (made by
 * SentencePiece itself, script beside them); decode round trips of the lossless byte-level
 * tokenizers; refusals of bad files with their exact codes. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "export/gguf/gguf_vocab.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/gguf_model.h"
#include "ctxpatch/tokenizers/tokenizer.h"
#include "test.h"

static const char *tmpdir;

/* Runs every row of a goldens file through `tok`; returns the number of equal rows. With
 * `strict` every mismatch is a failure, else mismatches are only listed. */
static int run_goldens(const cp_tokenizer *tok, const char *goldens, bool strict, int *rows, bool roundtrip) {
  char *text = NULL;
  size_t len = 0;
  int ok = 0, rt_ok = 0, rt_rows = 0;
  *rows = 0;
  if (cp_read_file(&text, &len, goldens, 16u << 20)) {
    CHECK_MSG(0, "%s: %s", goldens, cp_error_message());
    return 0;
  }
  for (char *line = text; line && *line;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    cJSON *row = cJSON_Parse(line);
    const cJSON *t = cJSON_GetObjectItem(row, "text"), *want = cJSON_GetObjectItem(row, "ids");
    bool add = cJSON_IsTrue(cJSON_GetObjectItem(row, "add_special_tokens"));
    if (!cJSON_IsString(t) || !cJSON_IsArray(want)) {
      CHECK_MSG(0, "%s: malformed row %d", goldens, *rows);
    } else {
      int64_t *ids = NULL;
      size_t n = 0;
      int rc = cp_tokenizer_encode(tok, &ids, &n, t->valuestring, strlen(t->valuestring), add);
      bool eq = rc == 0 && n == (size_t)cJSON_GetArraySize(want);
      for (size_t i = 0; eq && i < n; i++) eq = ids[i] == (int64_t)cJSON_GetArrayItem(want, (int)i)->valuedouble;
      if (eq) {
        ok++;
      } else {
        char shown[41];
        snprintf(shown, sizeof shown, "%s", t->valuestring);
        for (char *c = shown; *c; c++)
          if ((unsigned char)*c < 0x20) *c = ' '; /* keep the report on one line */
        fprintf(stderr, "%s row %d ('%s'...): %s; got", goldens, *rows, shown, rc ? cp_error_message() : "ids differ");
        for (size_t i = 0; i < n && i < 12; i++) fprintf(stderr, " %lld", (long long)ids[i]);
        fprintf(stderr, "\n");
      }
      if (strict) CHECK(eq);
      if (roundtrip && rc == 0) {
        /* Byte-level BPE is lossless: decode(encode(x)) == x (no special tokens added, and
         * special tokens in the text decode to themselves). */
        int64_t *plain = NULL;
        size_t np = 0;
        char *back = NULL;
        size_t blen = 0;
        rt_rows++;
        if (!cp_tokenizer_encode(tok, &plain, &np, t->valuestring, strlen(t->valuestring), false) &&
            !cp_tokenizer_decode(tok, &back, &blen, plain, np, false) && blen == strlen(t->valuestring) &&
            !memcmp(back, t->valuestring, blen))
          rt_ok++;
        else
          fprintf(stderr, "%s row %d: round trip differs: '%.40s'\n", goldens, *rows, back ? back : "(error)");
        free(plain);
        free(back);
      }
      free(ids);
    }
    cJSON_Delete(row);
    (*rows)++;
    line = nl ? nl + 1 : NULL;
  }
  if (roundtrip) {
    printf("  round trip decode(encode(x)) == x: %d / %d\n", rt_ok, rt_rows);
    CHECK(rt_ok == rt_rows);
  }
  free(text);
  return ok;
}

static void goldens_case(const char *fixtures, const char *tokpath, const char *goldens, bool strict, bool roundtrip) {
  cp_tokenizer *tok = NULL;
  int rc = cp_tokenizer_open(&tok, tokpath);
  CHECK_RC(0, rc);
  if (rc) return;
  int rows = 0, ok = run_goldens(tok, goldens, strict, &rows, roundtrip);
  printf("%-44s on %-34s %3d / %3d rows equal%s\n", strrchr(goldens, '/') + 1, tokpath + strlen(fixtures) + 1, ok, rows,
         strict ? "" : " (informational)");
  CHECK(rows > 0);
  cp_tokenizer_free(tok);
}

/* A byte-level BPE tokenizer.json written as a vocabulary-only GGUF ("gpt2": tokens, token types,
 * merges, pre "gpt-2"; as llama.cpp's ggml-vocab-*.gguf files), read back through the GGUF
 * vocabulary path (export/gguf/gguf_vocab.c) and run on the tokenizer.json's goldens. */
static void gguf_goldens_case(const char *tokpath, int64_t n_vocab, const char *goldens, bool roundtrip) {
  const char *path = test_path(tmpdir, "vocab.gguf");
  cp_gguf_writer *w = NULL;
  bool written = false;
  int rc = cp_gguf_writer_new(&w, path);
  if (!rc) rc = cp_gguf_put_str(w, "general.architecture", "llama", 5);
  if (!rc) rc = cp_gguf_put_hf_vocab(&written, w, tokpath, n_vocab, -1, -1, -1);
  if (!rc) rc = cp_gguf_writer_begin(w);
  if (!rc) rc = cp_gguf_writer_commit(w, NULL);
  else cp_gguf_writer_abort(w);
  CHECK_RC(0, rc);
  CHECK(written);
  cp_tokenizer *tok = NULL;
  CHECK_RC(0, rc = rc ? rc : cp_model_tokenizer_open(&tok, path));
  if (rc) return;
  int rows = 0, ok = run_goldens(tok, goldens, true, &rows, roundtrip);
  printf("%-44s on %-34s %3d / %3d rows equal\n", strrchr(goldens, '/') + 1, "(as a GGUF gpt2 vocabulary)", ok, rows);
  CHECK(rows > 0 && cp_tokenizer_vocab_size(tok) == (size_t)n_vocab);
  cp_tokenizer_free(tok);
}

/* Decodings by HF's Rust tokenizers (tests/goldens/tokenizers/decode.jsonl): text must be equal. */
static void decode_goldens(const char *tf, const char *goldens, const char *llama_json) {
  static const char *const names[] = {"t5/tokenizer.json", "gpt2/tokenizer.json", "gpt-neox/tokenizer.json",
                                      "llama2-tokenizer.json"};
  cp_tokenizer *toks[4] = {0};
  int ok[4] = {0}, rows[4] = {0};
  for (int i = 0; i < 4; i++) CHECK_RC(0, cp_tokenizer_open(&toks[i], i == 3 ? llama_json : test_path(tf, names[i])));
  char *text = NULL;
  size_t len = 0;
  if (cp_read_file(&text, &len, goldens, 16u << 20)) {
    CHECK_MSG(0, "%s: %s", goldens, cp_error_message());
    goto done;
  }
  for (char *line = text; line && *line;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    cJSON *row = cJSON_Parse(line);
    const cJSON *name = cJSON_GetObjectItem(row, "tokenizer"), *ids = cJSON_GetObjectItem(row, "ids"),
                *want = cJSON_GetObjectItem(row, "text"), *it;
    int k = -1;
    for (int i = 0; i < 4 && cJSON_IsString(name); i++)
      if (!strcmp(name->valuestring, names[i])) k = i;
    if (k < 0 || !toks[k] || !cJSON_IsArray(ids) || !cJSON_IsString(want)) {
      CHECK_MSG(k >= 0 && toks[k], "%s: row for an unknown or unopened tokenizer", goldens);
    } else {
      size_t n = 0, got_len = 0;
      int64_t *v = malloc(((size_t)cJSON_GetArraySize(ids) + 1) * sizeof *v);
      char *got = NULL;
      cJSON_ArrayForEach(it, ids) v[n++] = (int64_t)it->valuedouble;
      bool skip = cJSON_IsTrue(cJSON_GetObjectItem(row, "skip_special"));
      int rc = cp_tokenizer_decode(toks[k], &got, &got_len, v, n, skip);
      rows[k]++;
      if (rc == 0 && got_len == strlen(want->valuestring) && !memcmp(got, want->valuestring, got_len)) ok[k]++;
      else CHECK_MSG(0, "%s: decode of %zu ids (skip %d): got '%.40s' want '%.40s'", names[k], n, skip, got ? got : "",
                     want->valuestring);
      free(v);
      free(got);
    }
    cJSON_Delete(row);
    line = nl ? nl + 1 : NULL;
  }
  for (int i = 0; i < 4; i++) {
    printf("decode.jsonl (HF decode) on %-29s %3d / %3d rows equal\n", names[i], ok[i], rows[i]);
    CHECK(rows[i] > 0);
  }
done:
  free(text);
  for (int i = 0; i < 4; i++) cp_tokenizer_free(toks[i]);
}

static const char *write_tmp(const char *name, const char *content) {
  const char *p = test_path(tmpdir, name);
  FILE *f = fopen(p, "wb");
  if (!f) return p;
  fputs(content, f);
  fclose(f);
  return p;
}

static void expect_open_fails(int want, const char *path) {
  cp_tokenizer *tok = NULL;
  CHECK_RC(want, cp_tokenizer_open(&tok, path));
  CHECK(tok == NULL);
  CHECK_MSG(strchr(cp_error_message(), '\n') == NULL && strlen(cp_error_message()) > 0, "message '%s'",
            cp_error_message());
  cp_tokenizer_free(tok);
}

/* Tiny tokenizers whose ids follow from the HF algorithm by hand. */
static void synthetic(void) {
  const char *bpe = write_tmp("bpe.json",
                              "{\"added_tokens\":[{\"id\":5,\"content\":\"<s>\",\"special\":true}],"
                              "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"WhitespaceSplit\"},"
                              "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
                              "{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],"
                              "\"pair\":[],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[5],\"tokens\":[\"<s>\"]}}},"
                              "\"decoder\":null,"
                              "\"model\":{\"type\":\"BPE\",\"unk_token\":\"?\",\"fuse_unk\":true,"
                              "\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"abb\":3,\"?\":4},\"merges\":[\"a b\",[\"ab\",\"b\"]]}}");
  cp_tokenizer *tok = NULL;
  CHECK_RC(0, cp_tokenizer_open(&tok, bpe));
  if (tok) {
    int64_t *ids = NULL;
    size_t n = 0;
    /* "abb" -> a b b -> ab b -> abb; "xyb": x, y unknown and fused, then b; <s> is an added token */
    CHECK_RC(0, cp_tokenizer_encode(tok, &ids, &n, "abb xyb<s>a", 11, true));
    int64_t want[] = {5, 3, 4, 1, 5, 0};
    CHECK(n == 6 && !memcmp(ids, want, sizeof want));
    char *text = NULL;
    size_t len = 0;
    CHECK_RC(0, cp_tokenizer_decode(tok, &text, &len, ids, n, true));
    CHECK(text && !strcmp(text, "abb ? b a")); /* no decoder: tokens joined with spaces */
    free(text);
    int64_t bad[] = {2, 99};
    CHECK_RC(CP_ETOK_ID, cp_tokenizer_decode(tok, &text, &len, bad, 2, false));
    free(ids);
    CHECK_RC(CP_ETOK_TEXT, cp_tokenizer_encode(tok, &ids, &n, "a\xff", 2, false));
    CHECK(ids == NULL);
    CHECK(cp_tokenizer_token_id(tok, "abb") == 3 && cp_tokenizer_token_id(tok, "<s>") == 5 &&
          cp_tokenizer_token_id(tok, "zz") == -1);
    CHECK(cp_tokenizer_vocab_size(tok) == 6 && cp_tokenizer_bos_id(tok) == 5);
    cp_tokenizer_free(tok);
  }
  /* Unigram: "abc" is best as ab + c (-1 + -1) over a + bc (-1.5 + -1) and abc absent. */
  const char *uni = write_tmp("uni.json", "{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"<unk>\",0],"
                                          "[\"a\",-1.5],[\"ab\",-1],[\"bc\",-1],[\"c\",-1],[\"b\",-3]]}}");
  tok = NULL;
  CHECK_RC(0, cp_tokenizer_open(&tok, uni));
  if (tok) {
    int64_t *ids = NULL;
    size_t n = 0;
    CHECK_RC(0, cp_tokenizer_encode(tok, &ids, &n, "abcxyc", 6, true));
    int64_t want[] = {2, 4, 0, 4}; /* xy fused into one unknown */
    CHECK(n == 4 && !memcmp(ids, want, sizeof want));
    free(ids);
    cp_tokenizer_free(tok);
  }
}

static void refusals(const char *fixtures) {
  expect_open_fails(CP_ETOK_MISSING, tmpdir); /* a folder without a tokenizer */
  expect_open_fails(CP_ENOTFOUND, test_path(tmpdir, "nonexistent.json"));
  expect_open_fails(CP_ETOK_JSON, write_tmp("invalid.json", "{\"model\": {\"type\": \"BPE\",}"));
  expect_open_fails(CP_ETOK_JSON, write_tmp("dup.json", "{\"model\": {}, \"model\": {}}"));
  expect_open_fails(CP_ETOK_UNSUPPORTED, write_tmp("wp.json", "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}"));
  expect_open_fails(CP_ETOK_JSON, write_tmp("merge.json", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},"
                                                         "\"merges\":[\"a zz\"]}}"));
  expect_open_fails(CP_ETOK_JSON, write_tmp("id.json", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}"));
  expect_open_fails(CP_ETOK_JSON, write_tmp("charsmap.json", "{\"normalizer\":{\"type\":\"Precompiled\","
                                                            "\"precompiled_charsmap\":\"/////wAAAAA=\"},"
                                                            "\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",0]]}}"));
  expect_open_fails(CP_ETOK_UNSUPPORTED, write_tmp("norm.json", "{\"normalizer\":{\"type\":\"BertNormalizer\"},"
                                                                "\"model\":{\"type\":\"Unigram\",\"vocab\":[[\"a\",0]]}}"));
  expect_open_fails(CP_ETOK_MODEL, write_tmp("garbage.model", "\x0a\xff\xff\xff\xff\x0f garbage"));
  /* A well-formed ModelProto (one piece "a") whose normalizer charsmap trie points outside itself:
   * refused before libsentencepiece, which does not bound-check its trie lookups, sees it. */
  static const char hostile[] = "\x0a\x08\x0a\x01" "a" "\x15\x00\x00\x80\xbf"       /* pieces {piece, score} */
                                "\x1a\x0c\x12\x0a\x04\x00\x00\x00\x00\xfc\xff\x7f" "x"; /* charsmap */
  const char *hp = test_path(tmpdir, "hostile.model");
  FILE *hf = fopen(hp, "wb");
  if (hf) {
    fwrite(hostile, 1, sizeof hostile, hf); /* sizeof includes the final NUL: the strings' end */
    fclose(hf);
  }
  expect_open_fails(CP_ETOK_MODEL, hp);
  CHECK_MSG(strstr(cp_error_message(), "outside the trie") != NULL, "%s", cp_error_message());
  /* A tokenizer.json cut in half is refused, not half-read. */
  char *full = NULL;
  size_t len = 0;
  if (!cp_read_file(&full, &len, test_path(fixtures, "gpt2/tokenizer.json"), 64u << 20)) {
    full[len / 2] = '\0';
    expect_open_fails(CP_ETOK_JSON, write_tmp("cut.json", full));
    free(full);
  }
}

int main(void) {
  const char *src = test_env("CTXPATCH_SOURCE_DIR");
  char tmpl[] = "/tmp/ctxpatch-tok-XXXXXX";
  tmpdir = mkdtemp(tmpl);
  if (!tmpdir) return 2;
  static char srcdir[4096];
  snprintf(srcdir, sizeof srcdir, "%s", src);
  src = srcdir;
  /* The probe models' own tokenizer (in the repository), ids from HF's Rust tokenizers. */
  printf("golden rows equal per file:\n");
  goldens_case(src, test_path(src, "examples/probe-models/tokenizer.json"),
               test_path(src, "tests/goldens/tokenizers/probe.jsonl"), true, true);
  const char *fixtures = test_fixtures();
  static char tf[4096]; /* test_path() reuses 8 slots: keep the base folder in its own buffer */
  snprintf(tf, sizeof tf, "%s/tokenizers", fixtures);

  goldens_case(tf, test_path(tf, "gpt2/tokenizer.json"), test_path(tf, "goldens/gpt2.jsonl"), true, true);
  gguf_goldens_case(test_path(tf, "gpt2/tokenizer.json"), 50257, test_path(tf, "goldens/gpt2.jsonl"), true);
  gguf_goldens_case(test_path(src, "examples/probe-models/tokenizer.json"), 600,
                    test_path(src, "tests/goldens/tokenizers/probe.jsonl"), true);
  goldens_case(tf, test_path(tf, "gpt-neox/tokenizer.json"), test_path(tf, "goldens/gpt-neox-20b.jsonl"), true, false);
  goldens_case(tf, test_path(tf, "t5/tokenizer.json"), test_path(tf, "goldens/t5.jsonl"), true, false);
  goldens_case(tf, test_path(tf, "llama2/tokenizer.model"), test_path(tf, "goldens/llama2.jsonl"), true, false);
  goldens_case(tf, test_path(tf, "llama2"), test_path(tf, "goldens/llama2.jsonl"), true, false); /* folder */
  /* The T5 .model is encoded by SentencePiece, which breaks one tie differently from HF
   * (SOURCES.md): it is checked strictly against SentencePiece's own ids, and against the HF
   * goldens for information only. */
  goldens_case(tf, test_path(tf, "t5/spiece.model"), test_path(src, "tests/goldens/tokenizers/t5-spm.jsonl"), true, false);
  goldens_case(tf, test_path(tf, "t5/spiece.model"), test_path(tf, "goldens/t5.jsonl"), false, false);

  /* A Llama-2-style tokenizer.json (BPE + byte_fallback, Prepend/Replace normalizers), made from
   * the .model by a stdlib script that HF's Rust tokenizers was checked to agree with. */
  char cmd[16384];
  const char *llama_json = test_path(tmpdir, "llama2-tokenizer.json");
  snprintf(cmd, sizeof cmd, "'%s' '%s/tests/goldens/tokenizers/spm_to_llama_json.py' '%s/llama2/tokenizer.model' '%s'",
           test_env("CTXPATCH_PYTHON"), src, tf, llama_json);
  CHECK(system(cmd) == 0);
  goldens_case(tmpdir, llama_json, test_path(tf, "goldens/llama2.jsonl"), true, false);
  decode_goldens(tf, test_path(src, "tests/goldens/tokenizers/decode.jsonl"), llama_json);
  /* A Llama-3-style tokenizer.json (Split on Llama-3's regex, ignore_merges) built from GPT-2's;
   * reference ids from HF's Rust tokenizers (scripts beside the goldens). */
  const char *llama3_json = test_path(tmpdir, "llama3-style.json");
  snprintf(cmd, sizeof cmd, "'%s' '%s/tests/goldens/tokenizers/make_llama3_style.py' '%s/gpt2/tokenizer.json' '%s'",
           test_env("CTXPATCH_PYTHON"), src, tf, llama3_json);
  CHECK(system(cmd) == 0);
  goldens_case(tmpdir, llama3_json, test_path(src, "tests/goldens/tokenizers/gpt2-llama3-style.jsonl"), true, true);

  cp_tokenizer *tok = NULL;
  CHECK_RC(0, cp_tokenizer_open(&tok, llama_json));
  if (tok) { /* Replace + ByteFallback + Fuse + Strip decoding */
    int64_t ids[] = {1, 15043, 3186, 13, 29871, 243, 162, 147, 139, 2}; /* "\n 🐈" via byte pieces */
    char *text = NULL;
    size_t len = 0;
    CHECK_RC(0, cp_tokenizer_decode(tok, &text, &len, ids, 10, true));
    CHECK_MSG(text && !strcmp(text, "Hello world\n \xF0\x9F\x90\x88"), "got '%s'", text ? text : "");
    free(text);
    CHECK(cp_tokenizer_bos_id(tok) == 1 && cp_tokenizer_eos_id(tok) == 2);
    cp_tokenizer_free(tok);
  }

  /* Folder preference and metadata. */
  tok = NULL;
  CHECK_RC(0, cp_tokenizer_open(&tok, test_path(tf, "t5")));
  if (tok) {
    CHECK(!strcmp(cp_tokenizer_kind(tok), "unigram")); /* tokenizer.json preferred over spiece.model */
    CHECK(cp_tokenizer_vocab_size(tok) == 32100 && cp_tokenizer_eos_id(tok) == 1);
    CHECK(cp_tokenizer_token_id(tok, "<extra_id_0>") == 32099);
    cp_tokenizer_free(tok);
  }
  tok = NULL;
  CHECK_RC(0, cp_tokenizer_open(&tok, test_path(tf, "llama2/tokenizer.model")));
  if (tok) {
    CHECK(!strcmp(cp_tokenizer_kind(tok), "sentencepiece") && cp_tokenizer_vocab_size(tok) == 32000);
    CHECK(cp_tokenizer_bos_id(tok) == 1 && cp_tokenizer_eos_id(tok) == 2 && cp_tokenizer_token_id(tok, "<0x0A>") == 13);
    int64_t ids[] = {1, 15043, 3186, 2};
    char *text = NULL;
    size_t len = 0;
    CHECK_RC(0, cp_tokenizer_decode(tok, &text, &len, ids, 4, true));
    CHECK(text && !strcmp(text, "Hello world"));
    free(text);
    CHECK_RC(0, cp_tokenizer_decode(tok, &text, &len, ids, 4, false));
    CHECK(text && !strcmp(text, "<s>Hello world</s>"));
    free(text);
    int64_t bad = 32000;
    CHECK_RC(CP_ETOK_ID, cp_tokenizer_decode(tok, &text, &len, &bad, 1, false));
    cp_tokenizer_free(tok);
  }
  tok = NULL;
  CHECK_RC(0, cp_tokenizer_open(&tok, test_path(tf, "t5/tokenizer.json")));
  if (tok) { /* Metaspace decoding */
    int64_t ids[] = {100, 19, 3, 9, 3106, 1};
    char *text = NULL;
    size_t len = 0;
    CHECK_RC(0, cp_tokenizer_decode(tok, &text, &len, ids, 6, true));
    CHECK_MSG(text && !strcmp(text, "This is a sample"), "got '%s'", text ? text : "");
    free(text);
    cp_tokenizer_free(tok);
  }

  synthetic();
  refusals(tf);

  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
  return test_finish();
}
