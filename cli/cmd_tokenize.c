/* ctxpatch tokenize: encode text to ids (or decode ids to text) with a model's own tokenizer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "base/json_strict.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/gguf_model.h"
#include "ctxpatch/tokenizers/tokenizer.h"

#define MAX_TEXT_FILE ((size_t)256 << 20)

static void help(FILE *out) {
  fprintf(out,
          "usage: ctxpatch tokenize PATH (--text STR | --text-file FILE) [--no-special] [--json]\n"
          "       ctxpatch tokenize PATH --decode IDS [--no-special] [--json]\n\n"
          "PATH is a Hugging Face tokenizer.json, a SentencePiece .model, a GGUF file (its\n"
          "tokenizer.ggml.* vocabulary), or a model folder (tokenizer.json, else tokenizer.model,\n"
          "else spiece.model).\n\n"
          "  --text STR        text to encode (UTF-8)\n"
          "  --text-file FILE  encode the bytes of FILE\n"
          "  --no-special      encode without the special tokens the post-processor adds\n"
          "                    (add_special_tokens=False); with --decode, leave special tokens out\n"
          "  --decode IDS      print the text of comma-separated ids\n"
          "  --json            print {\"ids\":[...],\"count\":N,...} or {\"text\":\"...\"} instead\n\n"
          "Prints the ids comma-separated on one line. Exit status 0 only on success.\n");
}

/* Parses "1,2, 3" (commas and/or whitespace). Caller frees *ids. */
static bool parse_ids(const char *s, int64_t **ids, size_t *n) {
  size_t cap = 16, k = 0;
  int64_t *v = malloc(cap * sizeof *v);
  if (!v) return false;
  while (*s) {
    while (*s == ',' || *s == ' ' || *s == '\t' || *s == '\n') s++;
    if (!*s) break;
    if (*s < '0' || *s > '9') goto bad;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || x > INT64_MAX || (*end && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n')) goto bad;
    if (k == cap && CP_ARRAY_RESERVE(v, cap, k + 1, "tokenize: ids") < 0) goto bad;
    v[k++] = (int64_t)x;
    s = end;
  }
  *ids = v, *n = k;
  return true;
bad:
  free(v);
  return false;
}

static int print_ids(const int64_t *ids, size_t n, bool json, const cp_tokenizer *tok) {
  if (!json) {
    for (size_t i = 0; i < n; i++) printf("%s%lld", i ? "," : "", (long long)ids[i]);
    printf("\n");
    return 0;
  }
  cJSON *root = cJSON_CreateObject(), *arr = NULL;
  char *text = NULL;
  int rc = 0;
  if (!root || !cJSON_AddStringToObject(root, "tokenizer", cp_tokenizer_path(tok)) ||
      !cJSON_AddStringToObject(root, "kind", cp_tokenizer_kind(tok)) || !(arr = cJSON_AddArrayToObject(root, "ids")))
    goto nomem;
  for (size_t i = 0; i < n; i++) {
    cJSON *num = cJSON_CreateNumber((double)ids[i]);
    if (!num || !cJSON_AddItemToArray(arr, num)) goto nomem;
  }
  if (!cJSON_AddNumberToObject(root, "count", (double)n) || !(text = cp_json_print(root, false))) goto nomem;
  printf("%s\n", text);
  goto done;
nomem:
  rc = cp_nomem("tokenize");
done:
  free(text);
  cJSON_Delete(root);
  return rc;
}

int cmd_tokenize(int argc, char **argv) {
  const char *path = NULL, *text = NULL, *text_file = NULL, *decode = NULL;
  bool no_special = false, json = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (cli_is_help(a)) {
      help(stdout);
      return CLI_OK;
    } else if (!strcmp(a, "--no-special")) {
      no_special = true;
    } else if (!strcmp(a, "--json")) {
      json = true;
    } else if (!strcmp(a, "--text") || !strcmp(a, "--text-file") || !strcmp(a, "--decode")) {
      if (i + 1 >= argc) return cli_usage_error("tokenize", "%s needs a value", a);
      const char **slot = !strcmp(a, "--text") ? &text : !strcmp(a, "--text-file") ? &text_file : &decode;
      if (*slot) return cli_usage_error("tokenize", "%s given twice", a);
      *slot = argv[++i];
    } else if (a[0] == '-' && a[1]) {
      return cli_usage_error("tokenize", "unknown option '%s'", a);
    } else if (!path) {
      path = a;
    } else {
      return cli_usage_error("tokenize", "unexpected argument '%s'", a);
    }
  }
  if (!path) return cli_usage_error("tokenize", "missing PATH (a tokenizer.json, .model, or model folder)");
  if ((text != NULL) + (text_file != NULL) + (decode != NULL) != 1)
    return cli_usage_error("tokenize", "give exactly one of --text, --text-file, --decode");
  int64_t *ids = NULL;
  size_t n = 0;
  if (decode && !parse_ids(decode, &ids, &n))
    return cli_usage_error("tokenize", "--decode expects comma-separated non-negative ids, got '%s'", decode);

  cp_tokenizer *tok = NULL;
  char *buf = NULL, *out = NULL;
  size_t len = 0, outlen = 0;
  int rc = cp_model_tokenizer_open(&tok, path);
  if (rc) goto done;
  if (decode) {
    if ((rc = cp_tokenizer_decode(tok, &out, &outlen, ids, n, no_special))) goto done;
    if (json) {
      cJSON *root = cJSON_CreateObject();
      char *s = NULL;
      /* cJSON strings are NUL-terminated: a decoded NUL byte would truncate; escape-free
       * decoding of U+0000 is rare enough to refuse rather than misprint. */
      if (strlen(out) != outlen) {
        rc = cp_error_set(CP_EUNSUPPORTED, "tokenize: decoded text contains a NUL byte; use plain output");
      } else if (!root || !cJSON_AddStringToObject(root, "text", out) || !(s = cp_json_print(root, false))) {
        rc = cp_nomem("tokenize");
      } else {
        printf("%s\n", s);
      }
      free(s);
      cJSON_Delete(root);
    } else {
      fwrite(out, 1, outlen, stdout);
      printf("\n");
    }
    goto done;
  }
  if (text_file) {
    if ((rc = cp_read_file(&buf, &len, text_file, MAX_TEXT_FILE))) goto done;
    text = buf;
  } else {
    len = strlen(text);
  }
  free(ids);
  ids = NULL;
  if ((rc = cp_tokenizer_encode(tok, &ids, &n, text, len, !no_special))) goto done;
  rc = print_ids(ids, n, json, tok);
done:
  free(ids);
  free(buf);
  free(out);
  cp_tokenizer_free(tok);
  if (rc) return cli_report(rc);
  return fflush(stdout) == 0 ? CLI_OK : CLI_FAIL;
}
