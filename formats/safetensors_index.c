/* Sharded safetensors: shard planning and model.safetensors.index.json (write and strict read).
 * Formats as Hugging Face transformers produces them; see include/ctxpatch/formats/safetensors.h. */
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "base/json_strict.h"
#include "ctxpatch/base/quote.h"
#include "ctxpatch/formats/safetensors.h"
#include "ctxpatch/base/strbuf.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Index files of the largest public models are a few MB. */
#define ST_INDEX_MAX_BYTES (256u << 20)
#define ST_INDEX_MAX_DEPTH 16

/* ---------------------------------------------------------------------------------------------
 * Shard plan
 * ------------------------------------------------------------------------------------------- */

void cp_st_shard_plan_free(cp_st_shard_plan *p) {
  if (!p) return;
  for (size_t i = 0; i < p->n_shards; i++) free(p->shard_names[i]);
  free(p->shard_names);
  free(p->shard_bytes);
  free(p->shard_of);
  free(p);
}

int cp_st_plan_shards(cp_st_shard_plan **out, const cp_tensor *tensors, size_t n, uint64_t max_shard_bytes) {
  *out = NULL;
  if (max_shard_bytes == 0) return cp_error_set(CP_EARG, "shard plan: maximum shard size is 0");
  int rc = 0;
  cp_st_shard_plan *p = calloc(1, sizeof *p);
  /* At most one shard per tensor, and at least one shard. */
  size_t cap = n ? n : 1;
  CP_CHECK_ALLOC(p, "shard plan");
  CP_CHECK_ALLOC_GOTO(p->shard_of = calloc(cap, sizeof *p->shard_of), "shard plan");
  CP_CHECK_ALLOC_GOTO(p->shard_bytes = calloc(cap, sizeof *p->shard_bytes), "shard plan");
  p->n_tensors = n;
  size_t cur = 0, in_cur = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t nb;
    if (cp_shape_nbytes(&nb, tensors[i].dtype, tensors[i].ndim, tensors[i].shape) < 0 ||
        cp_dtype_size(tensors[i].dtype) == 0) {
      rc = cp_error_set(CP_EOVERFLOW, "shard plan: tensor '%s': bad dtype or size overflow",
                        tensors[i].name ? tensors[i].name : "?");
      goto done;
    }
    /* transformers: split before a tensor that would tip a non-empty shard over the limit. */
    uint64_t sum;
    if (in_cur > 0 && (!cp_add_u64(&sum, p->shard_bytes[cur], nb) || sum > max_shard_bytes)) {
      cur++;
      in_cur = 0;
    }
    p->shard_of[i] = cur;
    p->shard_bytes[cur] += nb;
    in_cur++;
    if (!cp_add_u64(&p->total_size, p->total_size, nb)) {
      rc = cp_error_set(CP_EOVERFLOW, "shard plan: total size overflows");
      goto done;
    }
  }
  /* n_shards counts the names to free, so it is set only once they can be held. */
  CP_CHECK_ALLOC_GOTO(p->shard_names = calloc(cur + 1, sizeof *p->shard_names), "shard plan");
  p->n_shards = cur + 1;
  for (size_t s = 0; s < p->n_shards; s++) {
    char name[96];
    if (p->n_shards == 1)
      snprintf(name, sizeof name, "model.safetensors");
    else
      snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, p->n_shards);
    CP_CHECK_ALLOC_GOTO(p->shard_names[s] = strdup(name), "shard plan");
  }
done:
  if (rc < 0) {
    cp_st_shard_plan_free(p);
    return rc;
  }
  *out = p;
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Index writer
 * ------------------------------------------------------------------------------------------- */

/* A shard file name must stay inside the index's folder. */
static bool safe_file_name(const char *s) {
  return s[0] != '\0' && strcmp(s, ".") != 0 && !strchr(s, '/') && !strchr(s, '\\') && !strstr(s, "..");
}


/* JSON string as Python's json.dumps (ensure_ascii=True) writes it. `s` is valid UTF-8. */
static void tb_py_string(cp_strbuf *b, const char *str) {
  const unsigned char *s = (const unsigned char *)str;
  char esc[16];
  cp_strbuf_put(b, "\"", 1);
  while (*s) {
    unsigned c = *s;
    if (c == '"') cp_strbuf_put(b, "\\\"", 2), s++;
    else if (c == '\\') cp_strbuf_put(b, "\\\\", 2), s++;
    else if (c == '\n') cp_strbuf_put(b, "\\n", 2), s++;
    else if (c == '\r') cp_strbuf_put(b, "\\r", 2), s++;
    else if (c == '\t') cp_strbuf_put(b, "\\t", 2), s++;
    else if (c == '\b') cp_strbuf_put(b, "\\b", 2), s++;
    else if (c == '\f') cp_strbuf_put(b, "\\f", 2), s++;
    else if (c >= 0x20 && c < 0x7f) cp_strbuf_put(b, (const char *)s, 1), s++;
    else {
      uint32_t cp;
      size_t len;
      if (c < 0x80) cp = c, len = 1;
      else if (c < 0xe0) cp = c & 0x1f, len = 2;
      else if (c < 0xf0) cp = c & 0x0f, len = 3;
      else cp = c & 0x07, len = 4;
      for (size_t k = 1; k < len; k++) cp = cp << 6 | (s[k] & 0x3f);
      s += len;
      if (cp >= 0x10000) {
        cp -= 0x10000;
        snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
        cp_strbuf_put(b, esc, 12);
      } else {
        snprintf(esc, sizeof esc, "\\u%04x", cp);
        cp_strbuf_put(b, esc, 6);
      }
    }
  }
  cp_strbuf_put(b, "\"", 1);
}

typedef struct {
  const char *name, *file;
} pair;

static int cmp_pair(const void *a, const void *b) { return strcmp(((const pair *)a)->name, ((const pair *)b)->name); }

int cp_st_index_write(const char *path, uint64_t total_size, const char *const *names, const char *const *files,
                      size_t n) {
  int rc = 0;
  cp_strbuf b = {0};
  pair *p = n ? malloc(n * sizeof *p) : NULL;
  if (n) CP_CHECK_ALLOC(p, path);
  for (size_t i = 0; i < n; i++) {
    if (!names[i] || !files[i] || !cp_st_utf8_valid(names[i], strlen(names[i]), NULL) ||
        !cp_st_utf8_valid(files[i], strlen(files[i]), NULL)) {
      rc = cp_error_set(CP_EARG, "%s: entry %zu: name or file missing or not UTF-8", path, i);
      goto done;
    }
    if (!safe_file_name(files[i])) {
      rc = cp_error_set(CP_EARG, "%s: tensor '%s': shard file '%s' is not a plain file name", path, names[i], files[i]);
      goto done;
    }
    p[i] = (pair){names[i], files[i]};
  }
  if (n) qsort(p, n, sizeof *p, cmp_pair);
  for (size_t i = 0; i + 1 < n; i++) {
    if (strcmp(p[i].name, p[i + 1].name) == 0) {
      rc = cp_error_set(CP_EARG, "%s: duplicate tensor name '%s'", path, p[i].name);
      goto done;
    }
  }
  char num[32];
  snprintf(num, sizeof num, "%" PRIu64, total_size);
  cp_strbuf_str(&b, "{\n  \"metadata\": {\n    \"total_size\": ");
  cp_strbuf_str(&b, num);
  cp_strbuf_str(&b, "\n  },\n  \"weight_map\": ");
  if (n == 0) {
    cp_strbuf_str(&b, "{}");
  } else {
    cp_strbuf_str(&b, "{\n");
    for (size_t i = 0; i < n; i++) {
      cp_strbuf_str(&b, "    ");
      tb_py_string(&b, p[i].name);
      cp_strbuf_str(&b, ": ");
      tb_py_string(&b, p[i].file);
      cp_strbuf_str(&b, i + 1 < n ? ",\n" : "\n");
    }
    cp_strbuf_str(&b, "  }");
  }
  cp_strbuf_str(&b, "\n}\n");
  if (b.oom) {
    rc = cp_nomem("%s", path);
    goto done;
  }
  rc = cp_write_file_atomic(NULL, path, b.s, b.len);
done:
  free(b.s);
  free(p);
  return rc;
}

int cp_st_index_write_plan(const char *path, const cp_st_shard_plan *plan, const cp_tensor *tensors) {
  size_t n = plan->n_tensors;
  const char **names = n ? malloc(n * sizeof *names) : NULL, **files = n ? malloc(n * sizeof *files) : NULL;
  int rc = 0;
  if (n) {
    CP_CHECK_ALLOC_GOTO(names, path);
    CP_CHECK_ALLOC_GOTO(files, path);
  }
  for (size_t i = 0; i < n; i++) {
    names[i] = tensors[i].name;
    files[i] = plan->shard_names[plan->shard_of[i]];
  }
  rc = cp_st_index_write(path, plan->total_size, names, files, n);
done:
  free(names);
  free(files);
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Index reader
 * ------------------------------------------------------------------------------------------- */

struct cp_st_index {
  size_t n;
  char **names;     /* [n] */
  size_t *file_of;  /* [n] */
  size_t n_files;
  char **files;     /* [n_files] */
  int64_t total_size;
};

void cp_st_index_free(cp_st_index *x) {
  if (!x) return;
  for (size_t i = 0; i < x->n; i++) free(x->names[i]);
  for (size_t i = 0; i < x->n_files; i++) free(x->files[i]);
  free(x->names);
  free(x->file_of);
  free(x->files);
  free(x);
}

/* Offset of the first string in the text holding a \u0000 escape, or (size_t)-1. cJSON stores
 * strings NUL-terminated, so such a string would silently read as a shorter one. */
static size_t find_nul_escape(const char *s, size_t len) {
  bool in_str = false;
  size_t start = 0;
  for (size_t i = 0; i < len; i++) {
    if (!in_str) {
      if (s[i] == '"') in_str = true, start = i;
      continue;
    }
    if (s[i] == '"') {
      in_str = false;
    } else if (s[i] == '\\') {
      if (i + 5 < len && s[i + 1] == 'u' && s[i + 2] == '0' && s[i + 3] == '0' && s[i + 4] == '0' &&
          s[i + 5] == '0')
        return start;
      i++; /* skip the escaped character */
    }
  }
  return (size_t)-1;
}

typedef struct {
  const char *file;
  size_t first; /* entry index of its first appearance */
  size_t entry;
} file_ref;

static int cmp_file_ref(const void *a, const void *b) {
  const file_ref *x = a, *y = b;
  int c = strcmp(x->file, y->file);
  if (c) return c;
  return x->entry < y->entry ? -1 : x->entry > y->entry;
}

static int cmp_first(const void *a, const void *b) {
  const file_ref *x = a, *y = b;
  return x->first < y->first ? -1 : x->first > y->first;
}

int cp_st_index_read(cp_st_index **out, const char *path) {
  *out = NULL;
  char *text = NULL;
  size_t len = 0;
  cJSON *root = NULL;
  file_ref *refs = NULL, *groups = NULL;
  size_t *num = NULL;
  char sb[CP_QUOTE_MASKED_CAP], fb[CP_QUOTE_MASKED_CAP];
  cp_st_index *x = calloc(1, sizeof *x);
  CP_CHECK_ALLOC(x, path);
  x->total_size = -1;
  int rc = cp_read_file(&text, &len, path, ST_INDEX_MAX_BYTES);
  if (rc < 0) goto done;
  cp_input_note(path);
  if ((rc = cp_json_parse_strict(&root, text, len, path, ST_INDEX_MAX_DEPTH, CP_EST_INDEX, CP_EST_INDEX, CP_EST_INDEX,
                                 CP_EST_INDEX)) < 0)
    goto done;
  size_t nul = find_nul_escape(text, len);
  if (nul != (size_t)-1) {
    rc = cp_error_set(CP_EST_INDEX, "%s: offset %zu: string contains a NUL character", path, nul);
    goto done;
  }
  if (!cJSON_IsObject(root)) {
    rc = cp_error_set(CP_EST_INDEX, "%s: offset 0: top level is not an object", path);
    goto done;
  }
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "metadata");
  if (meta && !cJSON_IsNull(meta)) {
    if (!cJSON_IsObject(meta)) {
      rc = cp_error_set(CP_EST_INDEX, "%s: 'metadata' is not an object", path);
      goto done;
    }
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(meta, "total_size");
    if (ts) {
      double d = cJSON_IsNumber(ts) ? ts->valuedouble : -1;
      /* An exact non-negative integer below 2^63 (checked on the double before converting). */
      if (!(d >= 0 && d < 9223372036854775808.0) || d != (double)(int64_t)d) {
        rc = cp_error_set(CP_EST_INDEX, "%s: 'metadata.total_size' is not a non-negative integer", path);
        goto done;
      }
      x->total_size = (int64_t)d;
    }
  }
  const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  if (!cJSON_IsObject(wm)) {
    rc = cp_error_set(CP_EST_INDEX, "%s: 'weight_map' is %s", path, wm ? "not an object" : "missing");
    goto done;
  }
  size_t n = 0;
  for (const cJSON *e = wm->child; e; e = e->next) n++;
  if (n) {
    CP_CHECK_ALLOC_GOTO(x->names = calloc(n, sizeof *x->names), path);
    CP_CHECK_ALLOC_GOTO(x->file_of = calloc(n, sizeof *x->file_of), path);
    CP_CHECK_ALLOC_GOTO(refs = malloc(n * sizeof *refs), path);
  }
  size_t i = 0;
  for (const cJSON *e = wm->child; e; e = e->next, i++) {
    if (!cJSON_IsString(e) || !e->valuestring) {
      rc = cp_error_set(CP_EST_INDEX, "%s: weight_map['%s']: value is not a string", path, cp_quote_masked(sb, e->string, strlen(e->string)));
      goto done;
    }
    if (!safe_file_name(e->valuestring)) {
      rc = cp_error_set(CP_EST_INDEX, "%s: weight_map['%s']: shard file '%s' is not a plain file name in the index's folder",
                        path, cp_quote_masked(sb, e->string, strlen(e->string)), cp_quote_masked(fb, e->valuestring, strlen(e->valuestring)));
      goto done;
    }
    CP_CHECK_ALLOC_GOTO(x->names[i] = strdup(e->string), path);
    x->n = i + 1;
    refs[i] = (file_ref){e->valuestring, 0, i};
  }
  /* Distinct files in order of first appearance, in O(n log n): group equal names (refs sorted
   * by file, then entry, so each group starts with its first appearance), then order the groups
   * by that first entry. */
  if (n) qsort(refs, n, sizeof *refs, cmp_file_ref);
  size_t ng = 0;
  if (n) {
    CP_CHECK_ALLOC_GOTO(groups = malloc(n * sizeof *groups), path);
    CP_CHECK_ALLOC_GOTO(num = malloc(n * sizeof *num), path);
    CP_CHECK_ALLOC_GOTO(x->files = calloc(n, sizeof *x->files), path);
  }
  for (size_t r = 0; r < n; r++)
    if (r == 0 || strcmp(refs[r].file, refs[r - 1].file) != 0) groups[ng] = (file_ref){refs[r].file, refs[r].entry, ng}, ng++;
  if (ng) qsort(groups, ng, sizeof *groups, cmp_first);
  for (size_t g = 0; g < ng; g++) {
    num[groups[g].entry] = g;
    CP_CHECK_ALLOC_GOTO(x->files[g] = strdup(groups[g].file), path);
    x->n_files = g + 1;
  }
  for (size_t r = 0, k = 0; r < n; r++) {
    if (r > 0 && strcmp(refs[r].file, refs[r - 1].file) != 0) k++;
    x->file_of[refs[r].entry] = num[k];
  }
  /* The scan compares keys as written; "a" and "\u0061" only meet after decoding. */
  for (size_t r = 0; r < n; r++) refs[r] = (file_ref){x->names[r], r, r};
  if (n) qsort(refs, n, sizeof *refs, cmp_file_ref);
  for (size_t r = 0; r + 1 < n; r++) {
    if (strcmp(refs[r].file, refs[r + 1].file) == 0) {
      rc = cp_error_set(CP_EST_INDEX, "%s: weight_map: duplicate tensor name '%s'", path, cp_quote_masked(sb, refs[r].file, strlen(refs[r].file)));
      goto done;
    }
  }
  *out = x;
  x = NULL;
done:
  cJSON_Delete(root);
  free(text);
  free(refs);
  free(groups);
  free(num);
  cp_st_index_free(x);
  return rc;
}

size_t cp_st_index_count(const cp_st_index *x) { return x->n; }
const char *cp_st_index_name(const cp_st_index *x, size_t i) { return i < x->n ? x->names[i] : NULL; }
const char *cp_st_index_file(const cp_st_index *x, size_t i) { return i < x->n ? x->files[x->file_of[i]] : NULL; }
size_t cp_st_index_file_of(const cp_st_index *x, size_t i) { return i < x->n ? x->file_of[i] : (size_t)-1; }
size_t cp_st_index_file_count(const cp_st_index *x) { return x->n_files; }
const char *cp_st_index_file_name(const cp_st_index *x, size_t j) { return j < x->n_files ? x->files[j] : NULL; }
int64_t cp_st_index_total_size(const cp_st_index *x) { return x->total_size; }
