/* The perplexity probe's corpus (documents, BOS, one token stream), its windows and the NLL of
 * a window by position bucket (include/ctxpatch/verify/ppl.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/verify/ppl.h"
#include "verify/splitmix.h"

#define MAX_CORPUS ((size_t)1 << 30)

void cp_ppl_corpus_free(cp_ppl_corpus *c) {
  if (!c) return;
  free(c->ids);
  free(c->path);
  free(c->delimiter);
  memset(c, 0, sizeof *c);
}

static bool is_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v'; }

/* The first occurrence of `pat` [m] in `s` [n] at or after `from`, or n. */
static size_t find(const char *s, size_t n, size_t from, const char *pat, size_t m) {
  for (size_t at = from; m <= n && at <= n - m; at++)
    if (s[at] == pat[0] && memcmp(s + at, pat, m) == 0) return at;
  return n;
}

/* Appends document text [a, b) (trimmed) to the stream: BOS when there is one, then its ids. */
static int add_doc(cp_ppl_corpus *c, size_t *cap, const char *text, size_t a, size_t b, const cp_tokenizer *tok) {
  while (a < b && is_space(text[a])) a++;
  while (b > a && is_space(text[b - 1])) b--;
  if (a == b) return 0;
  int64_t *ids = NULL;
  size_t n = 0;
  int rc = cp_tokenizer_encode(tok, &ids, &n, text + a, b - a, false);
  if (rc < 0) return rc;
  int64_t bos = cp_tokenizer_bos_id(tok);
  size_t need = c->n_ids + n + (bos >= 0);
  if ((rc = CP_ARRAY_RESERVE(c->ids, *cap, need, c->path)) == 0) {
    if (bos >= 0) c->ids[c->n_ids++] = bos;
    memcpy(c->ids + c->n_ids, ids, n * sizeof *ids);
    c->n_ids += n;
    c->n_docs++;
  }
  free(ids);
  return rc;
}

int cp_ppl_corpus_load(cp_ppl_corpus *out, const char *path, const char *delimiter, const cp_tokenizer *tok) {
  memset(out, 0, sizeof *out);
  if (!delimiter) delimiter = CP_PPL_DEFAULT_DELIMITER;
  size_t m = strlen(delimiter), len = 0, cap = 0;
  if (m == 0) return cp_error_set(CP_EARG, "--corpus-delimiter: empty");
  char *text = NULL;
  int rc = cp_read_file(&text, &len, path, MAX_CORPUS);
  if (rc < 0) return rc;
  cp_input_note(path);
  out->path = strdup(path);
  out->delimiter = strdup(delimiter);
  CP_CHECK_ALLOC_GOTO(out->path && out->delimiter, path);
  cp_sha256_hex(out->sha256, text, len);
  for (size_t a = 0; a <= len && rc == 0;) {
    size_t b = find(text, len, a, delimiter, m);
    rc = add_doc(out, &cap, text, a, b, tok);
    a = b + m;
  }
  if (rc == 0 && out->n_ids == 0) rc = cp_error_set(CP_EVERIFY_LENGTH, "%s: the corpus holds no token", path);
done:
  free(text);
  if (rc < 0) cp_ppl_corpus_free(out);
  return rc;
}

int cp_ppl_window_start(int64_t *start, const cp_ppl_corpus *c, int64_t length, int w, uint64_t seed) {
  if (length < 2 || (uint64_t)length > c->n_ids)
    return cp_error_set(CP_EVERIFY_LENGTH, "ppl: %s: %zu tokens in %zu documents, too few for a window of %lld",
                        c->path, c->n_ids, c->n_docs, (long long)length);
  uint64_t s = seed + (uint64_t)length * 1000003u + (uint64_t)w;
  *start = (int64_t)(cp_splitmix64_next(&s) % (c->n_ids - (uint64_t)length + 1));
  return 0;
}

void cp_ppl_score(double *sum, int64_t *count, const float *logits, const int64_t *ids, int64_t length,
                  int64_t vocab, int n_buckets) {
  cp_ppl_score_rows(sum, count, logits, 0, length, ids, length, vocab, n_buckets);
}

void cp_ppl_score_rows(double *sum, int64_t *count, const float *logits, int64_t row0, int64_t n_rows,
                       const int64_t *ids, int64_t length, int64_t vocab, int n_buckets) {
  /* the logits of position t - 1 score ids[t] */
  int64_t t0 = row0 + 1 > 1 ? row0 + 1 : 1, t1 = row0 + n_rows + 1 < length ? row0 + n_rows + 1 : length;
  for (int64_t t = t0; t < t1; t++) {
    const float *row = logits + (size_t)(t - 1 - row0) * (size_t)vocab;
    double mx = row[0], z = 0;
    for (int64_t v = 1; v < vocab; v++) mx = fmax(mx, row[v]);
    for (int64_t v = 0; v < vocab; v++) z += exp((double)row[v] - mx);
    int b = (int)((t * (int64_t)n_buckets) / length);
    sum[b] += mx + log(z) - (double)row[ids[t]];
    count[b]++;
  }
}
