/* Tokenizers of the families people ship today against ids made by the real tokenizers:
 * ../shared/fixtures/tokenizers/modern (SOURCES.md there). Two kinds of golden:
 *   - hf-goldens.jsonl beside each tokenizer.json (HF `tokenizers`, the Rust crate), every row with
 *     and without add_special_tokens;
 *   - llama.cpp's ggml-vocab-*.gguf.inp / .out pairs (ids by transformers' AutoTokenizer), run on
 *     the GGUF vocabulary when the fixture has one (the GGUF vocabulary path, import/gguf/) and on
 *     the tokenizer.json that SOURCES.md ties to the pair.
 * Every row must be equal; the counts per family are printed. A failure lists the text. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ctxpatch/base/io.h"
#include "ctxpatch/import/gguf_model.h"
#include "ctxpatch/tokenizers/tokenizer.h"
#include "test.h"

static const char *tmpdir;
static int families_ok, families, texts_ok, texts;

/* Compares one encoding with the wanted ids; lists a mismatch on stderr. */
static bool same_ids(const cp_tokenizer *tok, const char *what, const char *text, size_t len, bool add,
                     const int64_t *want, size_t nwant) {
  int64_t *ids = NULL;
  size_t n = 0;
  int rc = cp_tokenizer_encode(tok, &ids, &n, text, len, add);
  bool eq = rc == 0 && n == nwant;
  for (size_t i = 0; eq && i < n; i++) eq = ids[i] == want[i];
  if (!eq) {
    char shown[49];
    snprintf(shown, sizeof shown, "%.*s", (int)(len < 48 ? len : 48), text);
    for (char *c = shown; *c; c++)
      if ((unsigned char)*c < 0x20) *c = ' ';
    fprintf(stderr, "%s: '%s' (add_special %d): %s; got", what, shown, add, rc ? cp_error_message() : "ids differ");
    for (size_t i = 0; i < n && i < 16; i++) fprintf(stderr, " %lld", (long long)ids[i]);
    fprintf(stderr, "; want");
    for (size_t i = 0; i < nwant && i < 16; i++) fprintf(stderr, " %lld", (long long)want[i]);
    fprintf(stderr, "\n");
  }
  free(ids);
  return eq;
}

/* hf-goldens.jsonl rows through tok; returns equal rows, *rows the total compared. Rows of case
 * `skip` (NULL: none) are left out and counted in *skipped. */
static int run_jsonl(const cp_tokenizer *tok, const char *path, int *rows, const char *skip, int *skipped) {
  char *data = NULL;
  size_t len = 0;
  int ok = 0;
  *rows = 0;
  if (cp_read_file(&data, &len, path, 16u << 20)) {
    CHECK_MSG(0, "%s: %s", path, cp_error_message());
    return 0;
  }
  for (char *line = data; line && *line;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
    cJSON *row = cJSON_Parse(line), *it;
    const cJSON *t = cJSON_GetObjectItem(row, "text"), *want = cJSON_GetObjectItem(row, "ids");
    const cJSON *cs = cJSON_GetObjectItem(row, "case");
    if (!cJSON_IsString(t) || !cJSON_IsArray(want)) {
      CHECK_MSG(0, "%s: malformed row %d", path, *rows);
    } else if (skip && cJSON_IsString(cs) && !strcmp(cs->valuestring, skip)) {
      (*skipped)++;
      (*rows)--;
    } else {
      size_t nw = 0;
      int64_t *w = malloc(((size_t)cJSON_GetArraySize(want) + 1) * sizeof *w);
      cJSON_ArrayForEach(it, want) w[nw++] = (int64_t)it->valuedouble;
      bool add = cJSON_IsTrue(cJSON_GetObjectItem(row, "add_special_tokens"));
      bool eq = same_ids(tok, path, t->valuestring, strlen(t->valuestring), add, w, nw);
      CHECK(eq);
      ok += eq;
      free(w);
    }
    cJSON_Delete(row);
    (*rows)++;
    line = nl ? nl + 1 : NULL;
  }
  free(data);
  return ok;
}

/* llama.cpp's .inp (texts, each followed by the separator) and .out (one line of ids per text). */
static int run_inp_out(const cp_tokenizer *tok, const char *inp, const char *outp, int *rows) {
  static const char sep[] = "\n__ggml_vocab_test__\n";
  char *in = NULL, *out = NULL;
  size_t inlen = 0, outlen = 0;
  int ok = 0;
  *rows = 0;
  if (cp_read_file(&in, &inlen, inp, 1u << 20) || cp_read_file(&out, &outlen, outp, 1u << 20)) {
    CHECK_MSG(0, "%s: %s", inp, cp_error_message());
    free(in);
    return 0;
  }
  char *t = in, *line = out;
  for (char *end; (end = strstr(t, sep)); t = end + strlen(sep)) {
    char *nl = line ? strchr(line, '\n') : NULL;
    if (!line || !nl) {
      CHECK_MSG(0, "%s: fewer id lines than texts", outp);
      break;
    }
    *nl = '\0';
    int64_t want[1024];
    size_t nw = 0;
    for (char *p = line, *e; nw < 1024; p = e) {
      long long v = strtoll(p, &e, 10);
      if (e == p) break;
      want[nw++] = v;
    }
    bool eq = same_ids(tok, inp, t, (size_t)(end - t), false, want, nw);
    CHECK(eq);
    ok += eq;
    (*rows)++;
    line = nl + 1;
  }
  CHECK(*rows == 46);
  free(in);
  free(out);
  return ok;
}

/* fixture path; a .gz is decompressed into tmpdir first (the fixtures are read-only). */
static const char *fixture_file(const char *mod, const char *rel) {
  static char buf[4][8400];
  static int slot;
  char *p = buf[slot++ % 4];
  size_t n = strlen(rel);
  if (n > 3 && !strcmp(rel + n - 3, ".gz")) {
    char name[256], cmd[20000];
    snprintf(name, sizeof name, "%.*s", (int)(n - 3 < 255 ? n - 3 : 255), rel);
    for (char *c = name; *c; c++)
      if (*c == '/') *c = '_';
    snprintf(p, 8400, "%s/%s", tmpdir, name);
    snprintf(cmd, sizeof cmd, "gzip -dc '%s/%s' > '%s'", mod, rel, p);
    CHECK_MSG(system(cmd) == 0, "%s", cmd);
  } else {
    snprintf(p, 8400, "%s/%s", mod, rel);
  }
  return p;
}

static void report(const char *family, const char *what, int ok, int rows) {
  printf("%-14s %-52s %3d / %3d equal\n", family, what, ok, rows);
  texts += rows, texts_ok += ok;
}

typedef struct {
  const char *family;
  const char *tokenizer; /* tokenizer.json(.gz) or a GGUF(.gz), relative to modern/ */
  const char *goldens;   /* hf-goldens.jsonl or NULL */
  const char *pair;      /* llama.cpp .inp/.out stem (without .inp) or NULL */
  const char *skip;      /* a goldens case not compared, and why: a known, stated difference */
  const char *why;
} fixture_case;

static const fixture_case cases[] = {
    {"llama3", "llama3/llama-3-8b-instruct/tokenizer.json.gz", "llama3/llama-3-8b-instruct/hf-goldens.jsonl",
     "llama3/ggml-vocab-llama-bpe.gguf", NULL, NULL},
    {"llama3", "llama3/llama-3.2/tokenizer.json.gz", "llama3/llama-3.2/hf-goldens.jsonl",
     "llama3/ggml-vocab-llama-bpe.gguf", NULL, NULL},
    {"llama3", "llama3/derived/ggml-vocab-llama-bpe.gguf.gz", "llama3/llama-3-8b-instruct/hf-goldens.jsonl",
     "llama3/ggml-vocab-llama-bpe.gguf", NULL, NULL},
    {"qwen2", "qwen2/qwen2.5/tokenizer.json.gz", "qwen2/qwen2.5/hf-goldens.jsonl", "qwen2/ggml-vocab-qwen2.gguf", NULL,
     NULL},
    {"qwen2", "qwen2/qwen3/tokenizer.json.gz", "qwen2/qwen3/hf-goldens.jsonl", "qwen2/ggml-vocab-qwen2.gguf", NULL,
     NULL},
    /* A GGUF tokenizes as llama.cpp does, without Qwen's NFC normalizer (docs/tokenizers.md). */
    {"qwen2", "qwen2/derived/ggml-vocab-qwen2.gguf.gz", "qwen2/qwen2.5/hf-goldens.jsonl", "qwen2/ggml-vocab-qwen2.gguf",
     "extra-common-18", "NFD text: a GGUF carries no normalizer, llama.cpp applies none (HF: NFC)"},
    {"gemma", "gemma/gemma-2/tokenizer.json.gz", "gemma/gemma-2/hf-goldens.jsonl", NULL, NULL, NULL},
    {"gemma", "gemma/gemma-3/tokenizer.json.gz", "gemma/gemma-3/hf-goldens.jsonl", NULL, NULL, NULL},
    {"phi3", "phi3/ggml-vocab-phi-3.gguf", NULL, "phi3/ggml-vocab-phi-3.gguf", NULL, NULL},
    {"mistral-nemo", "mistral-nemo/tokenizer.json.gz", "mistral-nemo/hf-goldens.jsonl", NULL, NULL, NULL},
    {"command-r", "command-r/command-r-plus/tokenizer.json.gz", "command-r/command-r-plus/hf-goldens.jsonl",
     "command-r/ggml-vocab-command-r.gguf", NULL, NULL},
    {"deepseek", "deepseek/deepseek-v3/tokenizer.json.gz", "deepseek/deepseek-v3/hf-goldens.jsonl", NULL, NULL, NULL},
    {"deepseek", "deepseek/ggml-vocab-deepseek-llm.gguf", NULL, "deepseek/ggml-vocab-deepseek-llm.gguf", NULL, NULL},
    {"deepseek", "deepseek/ggml-vocab-deepseek-coder.gguf", NULL, "deepseek/ggml-vocab-deepseek-coder.gguf", NULL,
     NULL},
    {"starcoder2", "starcoder2/ggml-vocab-starcoder.gguf", NULL, "starcoder2/ggml-vocab-starcoder.gguf", NULL, NULL},
    {"falcon", "falcon/ggml-vocab-falcon.gguf", NULL, "falcon/ggml-vocab-falcon.gguf", NULL, NULL},
    {"refact", "refact/ggml-vocab-refact.gguf", NULL, "refact/ggml-vocab-refact.gguf", NULL, NULL},
    {"mpt", "mpt/ggml-vocab-mpt.gguf", NULL, "mpt/ggml-vocab-mpt.gguf", NULL, NULL},
    {"gpt-2", "gpt-2/ggml-vocab-gpt-2.gguf", NULL, "gpt-2/ggml-vocab-gpt-2.gguf", NULL, NULL},
};

static void run_case(const char *mod, const fixture_case *c) {
  const char *path = fixture_file(mod, c->tokenizer);
  cp_tokenizer *tok = NULL;
  int rc = cp_model_tokenizer_open(&tok, path); /* tokenizer.json or GGUF, as the CLI opens them */
  CHECK_MSG(rc == 0, "%s: %s", c->tokenizer, cp_error_message());
  int all = 0, eq = 0;
  if (!rc && c->goldens) {
    int rows = 0, skipped = 0, ok = run_jsonl(tok, fixture_file(mod, c->goldens), &rows, c->skip, &skipped);
    report(c->family, c->goldens, ok, rows);
    if (skipped) printf("%-14s   %d rows of %s not compared: %s\n", c->family, skipped, c->skip, c->why);
    all += rows, eq += ok;
  }
  if (!rc && c->pair) {
    char inp[600], outp[600], what[700];
    snprintf(inp, sizeof inp, "%s.inp", c->pair);
    snprintf(outp, sizeof outp, "%s.out", c->pair);
    int rows = 0, ok = run_inp_out(tok, fixture_file(mod, inp), fixture_file(mod, outp), &rows);
    snprintf(what, sizeof what, "%s on %s", strrchr(outp, '/') + 1, strrchr(c->tokenizer, '/') + 1);
    report(c->family, what, ok, rows);
    all += rows, eq += ok;
  }
  families++;
  families_ok += rc == 0 && all > 0 && eq == all;
  cp_tokenizer_free(tok);
  if (strstr(path, tmpdir) == path) unlink(path);
}

int main(void) {
  const char *fixtures = test_fixtures();
  static char mod[4096];
  snprintf(mod, sizeof mod, "%s/tokenizers/modern", fixtures);
  if (access(mod, R_OK)) test_skip("tokenizers/modern fixtures are absent");
  char tmpl[] = "/tmp/ctxpatch-tokm-XXXXXX";
  if (!(tmpdir = mkdtemp(tmpl))) return 2;
  const char *only = getenv("TOK_ONLY"); /* a family name: run just its cases (when debugging) */
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (!only || !strcmp(only, cases[i].family)) run_case(mod, &cases[i]);
  printf("modern tokenizers: %d / %d texts equal; %d / %d tokenizers all equal\n", texts_ok, texts, families_ok,
         families);
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
  return test_finish();
}
