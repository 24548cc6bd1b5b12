/* The baseline cache (docs/certificate.md, "Baseline cache"): the key, the bounded reader of a
 * cache file and its writer. A file holds exactly the plan's prompts (one answer each, by the
 * prompt's place in the plan: probe, length, depth, sample; '-' for one a sequential run did not
 * ask, which a later run asks the original itself) and, as the plan asks, the ppl NLL
 * and the attention statistics per length, as the bits of each double (hex), so a later run
 * reproduces the numbers exactly. A bad file is a warning, never an error: the cache only saves
 * time, and ignoring it gives the run the cache would have replaced. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/json_strict.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/cpus.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/tokenizers/tokenizer.h"
#include "verify/baseline_cache.h"
#include "verify/certificate_json.h"

#define CACHE_FORMAT "ctxpatch baseline cache"
#define CACHE_VERSION 1

/* The bits of x as 16 hex digits: exact, NaN included. */
static void put_bits(cp_strbuf *b, double x) {
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  cp_strbuf_printf(b, " %016llx", (unsigned long long)u);
}

/* A string as its length and bytes in hex: no byte of it can run into the next field. */
static void put_text(cp_strbuf *b, const char *s) {
  cp_strbuf_printf(b, " %zu:", strlen(s));
  for (const char *c = s; *c; c++) cp_strbuf_printf(b, "%02x", (unsigned char)*c);
}

/* SHA-256 over the files the certificate would list for `path` (model.files). */
static int files_digest(char hex[65], const char *path) {
  cJSON *files = cJSON_CreateArray();
  char *text = NULL;
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(files, path);
  if ((rc = cp_certificate_files(files, path)) < 0) goto done;
  CP_CHECK_ALLOC_GOTO(text = cp_json_print(files, false), path);
  cp_sha256_hex(hex, text, strlen(text));
done:
  free(text);
  cJSON_Delete(files);
  return rc;
}

/* The tokenizer: its kind, vocabulary size and file (hashed unless it is one of the model's
 * files, which the model's digest covers: a GGUF's own vocabulary). */
static int put_tokenizer(cp_strbuf *b, const cp_tokenizer *tok, const char *model_path) {
  const char *tp = cp_tokenizer_path(tok);
  char hex[65] = "-";
  size_t n = strlen(model_path);
  bool in_model = tp && !strncmp(tp, model_path, n) && (tp[n] == '/' || tp[n] == 0);
  if (tp && *tp && !in_model && cp_path_is_file(tp)) {
    int rc = cp_sha256_file(hex, tp);
    if (rc < 0) return rc;
  }
  cp_strbuf_printf(b, "tokenizer %s %zu %s %lld %lld\n", cp_tokenizer_kind(tok), cp_tokenizer_vocab_size(tok), hex,
                   (long long)cp_tokenizer_bos_id(tok), (long long)cp_tokenizer_eos_id(tok));
  return 0;
}

/* Everything that determines the baseline side's outcomes, one line each. Left out as they
 * change no result: the patched side's rule and shift, side threads, shared prefixes. */
static int key_text(cp_strbuf *b, const cp_model *base, const cp_tokenizer *tok, const cp_verify_params *p) {
  char hex[65];
  int rc = files_digest(hex, p->baseline_path);
  if (rc < 0) return rc;
  cp_strbuf_printf(b, "%s %d\nctxpatch %s\n", CACHE_FORMAT, CACHE_VERSION, CTXPATCH_VERSION);
  cp_strbuf_printf(b, "model.files %s\nwidened %d\ntrain_len %lld\n", hex, p->baseline_widened,
                   (long long)base->train_len);
  if ((rc = put_tokenizer(b, tok, p->baseline_path)) < 0) return rc;
  cp_strbuf_str(b, "probes");
  for (int i = 0; i < p->n_probes; i++) cp_strbuf_printf(b, " %s", cp_probe_name(p->probes[i]));
  cp_strbuf_str(b, "\nlengths");
  for (int i = 0; i < p->n_lengths; i++) cp_strbuf_printf(b, " %lld", (long long)p->lengths[i]);
  cp_strbuf_str(b, "\ndepths");
  for (int i = 0; i < p->n_depths; i++) put_bits(b, p->depths[i]);
  cp_strbuf_printf(b, "\nsamples %d\nseed %llu\nmax_new_tokens %d\nstats %d\n", p->samples, (unsigned long long)p->seed,
                   p->max_new_tokens, p->stats);
  if (p->corpus_path) {
    if ((rc = cp_sha256_file(hex, p->corpus_path)) < 0) return rc;
    cp_strbuf_printf(b, "ppl %s", hex);
    put_text(b, p->corpus_delimiter ? p->corpus_delimiter : CP_PPL_DEFAULT_DELIMITER);
    cp_strbuf_printf(b, " %d %d\n", p->ppl_windows, p->ppl_buckets);
  } else cp_strbuf_str(b, "ppl none\n");
  /* the engine, the weights mode it reads (engine/kern16.h) and the threads, which the
   * certificate's determinism is stated for */
  const char *weights = getenv("CTXPATCH_WEIGHTS");
  cp_strbuf_printf(b, "engine %s\nweights", p->device == CP_DEVICE_CUDA ? "cuda-fp32" : "cpu-fp32");
  put_text(b, weights ? weights : "");
  cp_strbuf_printf(b, "\nthreads %d\n", p->threads > 0 ? p->threads : cp_cpu_count());
  return b->oom ? cp_nomem("verify: baseline cache key") : 0;
}

static char *cache_path(const char *dir, const char key[65]) {
  char name[80];
  snprintf(name, sizeof name, "%s.json", key);
  return cp_path_join(dir, name);
}

/* The bound on a cache file of plan p: the answers, and per length the ppl and statistics doubles
 * with room for the printer's indentation. */
static size_t max_file_bytes(size_t prompts, const cp_verify_params *p) {
  size_t per_length = 256 + (p->corpus_path ? ((size_t)p->ppl_buckets + 1) * 64 : 0);
  return 4096 + prompts + (size_t)p->n_lengths * per_length;
}

static int bad_file(const char *path, const char *where, const char *what) {
  return cp_error_set(CP_EFORMAT, "%s: %s: %s", path, where, what);
}

/* A double from its 16 hex digits (put_bits). */
static int read_bits(double *out, const cJSON *v, const char *path, const char *where) {
  const char *s = cJSON_IsString(v) ? v->valuestring : NULL;
  uint64_t u = 0;
  for (int i = 0; s && i < 16; i++) {
    char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) s = NULL;
    else u = u << 4 | (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  if (!s || s[16]) return bad_file(path, where, "expected 16 lowercase hex digits (a double's bits)");
  memcpy(out, &u, sizeof *out);
  return 0;
}

/* The object `o` has exactly the keys `names` (n of them). */
static int only_keys(const cJSON *o, const char *const *names, int n, const char *path, const char *where) {
  const cJSON *v;
  if (!cJSON_IsObject(o)) return bad_file(path, where, "expected an object");
  int found = 0;
  cJSON_ArrayForEach(v, o) {
    bool known = false;
    for (int i = 0; i < n && !known; i++) known = !strcmp(v->string, names[i]);
    if (!known) {
      char at[96];
      snprintf(at, sizeof at, "%s key '%.40s'", where, v->string);
      return bad_file(path, at, "not a key of a baseline cache");
    }
    found++;
  }
  return found == n ? 0 : bad_file(path, where, "a key is missing");
}

/* results per length: "ppl" [{nll, nll_by_bucket}] or "attention" [{pmax, entropy}] into f's
 * patched side. */
static int read_lengths(cp_verify_result *f, const cJSON *arr, bool ppl, const char *path) {
  const char *what = ppl ? "ppl" : "attention";
  if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != f->n_lengths)
    return bad_file(path, what, "expected one entry per length of the plan");
  static const char *const ppl_keys[] = {"nll", "nll_by_bucket"}, *const att_keys[] = {"pmax", "entropy"};
  char where[64];
  int rc = 0;
  for (int l = 0; l < f->n_lengths && rc == 0; l++) {
    const cJSON *e = cJSON_GetArrayItem(arr, l);
    snprintf(where, sizeof where, "%s[%d]", what, l);
    if ((rc = only_keys(e, ppl ? ppl_keys : att_keys, 2, path, where)) < 0) break;
    if (!ppl) {
      if ((rc = read_bits(&f->pmax[0][l], cJSON_GetObjectItemCaseSensitive(e, "pmax"), path, where)) == 0)
        rc = read_bits(&f->entropy[0][l], cJSON_GetObjectItemCaseSensitive(e, "entropy"), path, where);
      continue;
    }
    if ((rc = read_bits(&f->ppl_mean[0][l], cJSON_GetObjectItemCaseSensitive(e, "nll"), path, where)) < 0) break;
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(e, "nll_by_bucket");
    if (!cJSON_IsArray(by) || cJSON_GetArraySize(by) != f->ppl_buckets)
      return bad_file(path, where, "nll_by_bucket: expected one entry per bucket of the plan");
    for (int k = 0; k < f->ppl_buckets && rc == 0; k++)
      rc = read_bits(&f->ppl_nll[0][(size_t)l * (size_t)f->ppl_buckets + (size_t)k], cJSON_GetArrayItem(by, k), path,
                     where);
  }
  return rc;
}

/* The document against the key and the plan, into f's patched side. */
static int read_doc(cp_verify_result *f, const cJSON *doc, const char *path, const char key[65], size_t prompts,
                    const cp_verify_params *p) {
  const char *names[8] = {"format", "version", "ctxpatch", "key_sha256", "prompts", "answers"};
  int n = 6;
  if (p->corpus_path) names[n++] = "ppl";
  if (p->stats) names[n++] = "attention";
  int rc = only_keys(doc, names, n, path, "top level");
  if (rc < 0) return rc;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, "format");
  if (!cJSON_IsString(v) || strcmp(v->valuestring, CACHE_FORMAT)) return bad_file(path, "format", "not " CACHE_FORMAT);
  v = cJSON_GetObjectItemCaseSensitive(doc, "version");
  if (!cJSON_IsNumber(v) || v->valuedouble != CACHE_VERSION) return bad_file(path, "version", "not 1");
  v = cJSON_GetObjectItemCaseSensitive(doc, "ctxpatch");
  if (!cJSON_IsString(v) || strcmp(v->valuestring, CTXPATCH_VERSION))
    return bad_file(path, "ctxpatch", "written by another version");
  v = cJSON_GetObjectItemCaseSensitive(doc, "key_sha256");
  if (!cJSON_IsString(v) || strcmp(v->valuestring, key))
    return bad_file(path, "key_sha256", "another run's key (the file's name and content disagree)");
  v = cJSON_GetObjectItemCaseSensitive(doc, "prompts");
  if (!cJSON_IsNumber(v) || v->valuedouble != (double)prompts)
    return bad_file(path, "prompts", "not the plan's number of prompts");
  v = cJSON_GetObjectItemCaseSensitive(doc, "answers");
  if (!cJSON_IsString(v) || strlen(v->valuestring) != prompts)
    return bad_file(path, "answers", "expected one '0', '1' or '-' per prompt of the plan");
  size_t cells = (size_t)f->n_probes * (size_t)f->n_lengths * (size_t)f->n_depths, unknown = 0;
  CP_CHECK_ALLOC(f->answered_known = malloc(prompts + 1), path);
  for (size_t i = 0; i < prompts; i++) {
    char c = v->valuestring[i];
    if (c != '0' && c != '1' && c != '-') {
      char where[48];
      snprintf(where, sizeof where, "answers[%zu]", i);
      return bad_file(path, where, "expected '0', '1' or '-' (not asked)");
    }
    f->answered[i] = c == '1';
    f->answered_known[i] = c != '-';
    unknown += c == '-';
    if (i / (size_t)f->samples < cells) f->correct[0][i / (size_t)f->samples] += c == '1';
  }
  if (!unknown) { /* every prompt: the result is a whole baseline side */
    free(f->answered_known);
    f->answered_known = NULL;
  }
  if (p->corpus_path && (rc = read_lengths(f, cJSON_GetObjectItemCaseSensitive(doc, "ppl"), true, path)) < 0) return rc;
  if (p->stats && (rc = read_lengths(f, cJSON_GetObjectItemCaseSensitive(doc, "attention"), false, path)) < 0)
    return rc;
  return 0;
}

/* 1 with a good file read into f, 0 with none there, negative for a bad one (message set). */
static int read_file(cp_verify_result *f, char file_sha256[65], const char *path, const char key[65],
                     const cp_verify_params *p) {
  struct stat st;
  if (lstat(path, &st) != 0 && errno == ENOENT) return 0;
  size_t prompts = 0;
  if (!cp_size_mul(&prompts, (size_t)p->n_probes * (size_t)p->n_lengths * (size_t)p->n_depths, (size_t)p->samples))
    return cp_error_set(CP_EOVERFLOW, "%s: the plan's prompts overflow", path);
  char *text = NULL;
  size_t len = 0;
  cJSON *doc = NULL;
  int rc = cp_read_file(&text, &len, path, max_file_bytes(prompts, p));
  if (rc == 0) rc = cp_json_parse_strict(&doc, text, len, path, 8, CP_EFORMAT, CP_EFORMAT, CP_EFORMAT, CP_EFORMAT);
  if (rc == 0) rc = read_doc(f, doc, path, key, prompts, p);
  if (rc == 0) cp_sha256_hex(file_sha256, text, len);
  cJSON_Delete(doc);
  free(text);
  return rc < 0 ? rc : 1;
}

/* The current error message as a warning line, and the error cleared. */
static void warn_line(cp_strbuf *warn, const char *suffix) {
  if (warn->len) cp_strbuf_putc(warn, '\n');
  cp_strbuf_printf(warn, "%s%s", cp_error_message(), suffix);
  cp_error_clear();
}

int verify_cache_lookup(cp_verify_result **from, char key[65], char file_sha256[65], cp_strbuf *warn,
                        const cp_model *base, const cp_tokenizer *tok, const cp_verify_params *p) {
  *from = NULL;
  key[0] = file_sha256[0] = 0;
  if (!p->baseline_path) {
    cp_error_set(CP_EARG, "%s: no baseline cache for this run (the original's files are not known)", p->baseline_cache);
    warn_line(warn, "");
    return 0;
  }
  cp_strbuf b = {0};
  int rc = key_text(&b, base, tok, p);
  if (rc == 0) cp_sha256_hex(key, b.s, b.len);
  cp_strbuf_free(&b);
  if (rc < 0) return rc;
  cp_verify_params q = *p; /* the original's side alone, every prompt */
  q.baseline = false;
  q.baseline_from = NULL;
  q.looks = 0;
  q.replay = NULL;
  cp_verify_result *f = NULL;
  char *path = cache_path(p->baseline_cache, key);
  if (!path) return cp_nomem("%s", p->baseline_cache);
  if ((rc = verify_result_alloc(&f, &q)) == 0) rc = read_file(f, file_sha256, path, key, p);
  free(path);
  if (rc == CP_ENOMEM) {
    cp_verify_result_free(f);
    return rc;
  }
  if (rc < 0) warn_line(warn, " (ignored: the original runs)");
  if (rc == 1) *from = f;
  else cp_verify_result_free(f);
  return 0;
}

/* x's bits as put_bits writes them, without the space. */
static cJSON *bits_item(double x) {
  uint64_t u;
  char hex[17];
  memcpy(&u, &x, sizeof u);
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)u);
  return cJSON_CreateString(hex);
}

/* The document of r's baseline side (NULL: out of memory). */
static cJSON *cache_doc(const cp_verify_result *r, const cp_verify_result *cached, const char key[65], size_t prompts,
                        const cp_verify_params *p) {
  cJSON *d = cJSON_CreateObject();
  char *answers = malloc(prompts + 1);
  if (!d || !answers) {
    free(answers);
    cJSON_Delete(d);
    return NULL;
  }
  cJSON_AddStringToObject(d, "format", CACHE_FORMAT);
  cJSON_AddNumberToObject(d, "version", CACHE_VERSION);
  cJSON_AddStringToObject(d, "ctxpatch", CTXPATCH_VERSION);
  cJSON_AddStringToObject(d, "key_sha256", key);
  cJSON_AddNumberToObject(d, "prompts", (double)prompts);
  for (size_t i = 0; i < prompts; i++) {
    bool read = cached && (!cached->answered_known || cached->answered_known[i]);
    answers[i] = r->baseline_answered[i] ? (r->baseline_answered[i] == 2 ? '1' : '0')
                 : read                  ? (cached->answered[i] ? '1' : '0')
                                         : '-';
  }
  answers[prompts] = 0;
  cJSON_AddStringToObject(d, "answers", answers);
  free(answers);
  const size_t nb = (size_t)r->ppl_buckets;
  cJSON *ppl = p->corpus_path ? cJSON_AddArrayToObject(d, "ppl") : NULL;
  for (int l = 0; ppl && l < r->n_lengths; l++) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddItemToArray(ppl, e);
    cJSON_AddItemToObject(e, "nll", bits_item(r->ppl_mean[CP_SIDE_BASELINE][l]));
    cJSON *by = cJSON_AddArrayToObject(e, "nll_by_bucket");
    for (size_t k = 0; by && k < nb; k++)
      cJSON_AddItemToArray(by, bits_item(r->ppl_nll[CP_SIDE_BASELINE][(size_t)l * nb + k]));
  }
  cJSON *att = p->stats ? cJSON_AddArrayToObject(d, "attention") : NULL;
  for (int l = 0; att && l < r->n_lengths; l++) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddItemToArray(att, e);
    cJSON_AddItemToObject(e, "pmax", bits_item(r->pmax[CP_SIDE_BASELINE][l]));
    cJSON_AddItemToObject(e, "entropy", bits_item(r->entropy[CP_SIDE_BASELINE][l]));
  }
  return d;
}

void verify_cache_store(const cp_verify_result *r, const cp_verify_result *cached, const char key[65], cp_strbuf *warn,
                        const cp_verify_params *p) {
  size_t prompts = (size_t)r->n_probes * (size_t)r->n_lengths * (size_t)r->n_depths * (size_t)r->samples;
  char *path = cache_path(p->baseline_cache, key);
  cJSON *doc = NULL;
  int rc = path ? 0 : cp_nomem("%s", p->baseline_cache);
  if (rc == 0 && mkdir(p->baseline_cache, 0777) != 0 && errno != EEXIST)
    rc = cp_error_set(CP_EIO, "%s: %s", p->baseline_cache, strerror(errno));
  if (rc == 0 && !(doc = cache_doc(r, cached, key, prompts, p))) rc = cp_nomem("%s", path);
  if (rc == 0) rc = cp_write_json_atomic(NULL, path, doc);
  if (rc < 0) warn_line(warn, " (the baseline cache is not written)");
  cJSON_Delete(doc);
  free(path);
}
