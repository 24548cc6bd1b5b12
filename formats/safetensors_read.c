/* safetensors reader: mmap + strict header validation (layout in include/ctxpatch/formats/safetensors.h).
 *
 * The header goes through four gates, in the reference reader's order so both refuse a file for
 * the same reason: UTF-8, first byte '{', strict JSON scan (syntax, duplicate keys, depth), and
 * then a walk over the now well-formed text that checks the schema. The walk reads numbers from
 * the text itself rather than through doubles, so 1.0, 1e3 and 2^53+1 are judged exactly. */
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/json.h"
#include "ctxpatch/base/le.h"
#include "ctxpatch/base/quote.h"
#include "ctxpatch/formats/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A valid header nests 3 deep (object, entry, shape); the margin only decides which code a
 * deeper value gets (schema error up to here, CP_EST_HEADER_JSON beyond). */
#define ST_MAX_DEPTH 64

typedef struct {
  char *name;
  size_t key_off; /* header offset of the name's opening quote */
  uint64_t begin, end;
  cp_tensor t;
} st_entry;

typedef struct {
  const char *name;
  size_t i; /* index into e */
} name_ix;

struct cp_st_file {
  char *path;
  unsigned char *map;
  uint64_t size;
  uint64_t header_len;
  size_t n;
  st_entry *e;       /* [n] in file order */
  name_ix *by_name;  /* [n] sorted by name */
  size_t n_meta;
  char **meta_key;   /* [n_meta] sorted */
  char **meta_val;   /* [n_meta] */
};

/* ---------------------------------------------------------------------------------------------
 * UTF-8
 * ------------------------------------------------------------------------------------------- */

int cp_st_utf8_valid(const char *str, size_t len, size_t *bad) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  while (i < len) {
    unsigned c = s[i];
    size_t need;
    unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c < 0x80) {
      i++;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      need = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
      need = 2;
      if (c == 0xe0) lo = 0xa0; /* overlong */
      if (c == 0xed) hi = 0x9f; /* UTF-16 surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
      need = 3;
      if (c == 0xf0) lo = 0x90; /* overlong */
      if (c == 0xf4) hi = 0x8f; /* past U+10FFFF */
    } else {
      goto fail;
    }
    if (len - i <= need) goto fail;
    if (s[i + 1] < lo || s[i + 1] > hi) goto fail;
    for (size_t k = 2; k <= need; k++)
      if ((s[i + k] & 0xc0) != 0x80) goto fail;
    i += need + 1;
  }
  return 1;
fail:
  if (bad) *bad = i;
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Walk over a header that cp_json_scan has already found well-formed.
 * ------------------------------------------------------------------------------------------- */

typedef struct {
  const char *s;
  size_t len;
  size_t pos;
  const char *path;
} walker;

static void ws(walker *w) {
  while (w->pos < w->len && (w->s[w->pos] == ' ' || w->s[w->pos] == '\t' || w->s[w->pos] == '\n' ||
                             w->s[w->pos] == '\r'))
    w->pos++;
}

static int peek(walker *w) {
  ws(w);
  return w->pos < w->len ? (unsigned char)w->s[w->pos] : -1;
}

/* Consumes `c` after whitespace; the scan guarantees structure, so a miss is a bug or an
 * inconsistency between the scan and this walk: refuse as invalid JSON rather than assert. */
static int expect(walker *w, char c) {
  if (peek(w) != c)
    return cp_error_set(CP_EST_HEADER_JSON, "%s: header offset %zu: expected '%c'", w->path, w->pos, c);
  w->pos++;
  return 0;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool read_hex4(walker *w, unsigned *out) {
  if (w->len - w->pos < 4) return false;
  unsigned v = 0;
  for (int k = 0; k < 4; k++) {
    int h = hexval((unsigned char)w->s[w->pos + (size_t)k]);
    if (h < 0) return false;
    v = v * 16 + (unsigned)h;
  }
  w->pos += 4;
  *out = v;
  return true;
}

/* Decodes the string at the cursor into a new NUL-terminated buffer; *out_len excludes the NUL
 * and may differ from strlen when the string holds \u0000 (callers refuse that). */
static int read_string(walker *w, char **out, size_t *out_len) {
  *out = NULL;
  size_t start = w->pos;
  int rc = expect(w, '"');
  if (rc < 0) return rc;
  /* Decoded UTF-8 is never longer than the escaped text. */
  size_t cap = 1;
  for (size_t p = w->pos; p < w->len && w->s[p] != '"'; p++) {
    cap++;
    if (w->s[p] == '\\') p++, cap++;
  }
  char *buf = malloc(cap + 4);
  CP_CHECK_ALLOC(buf, w->path);
  size_t o = 0;
  for (;;) {
    if (w->pos >= w->len) goto bad;
    unsigned char c = (unsigned char)w->s[w->pos++];
    if (c == '"') break;
    if (c != '\\') {
      buf[o++] = (char)c;
      continue;
    }
    if (w->pos >= w->len) goto bad;
    c = (unsigned char)w->s[w->pos++];
    unsigned cp;
    switch (c) {
    case '"': case '\\': case '/': buf[o++] = (char)c; continue;
    case 'b': buf[o++] = '\b'; continue;
    case 'f': buf[o++] = '\f'; continue;
    case 'n': buf[o++] = '\n'; continue;
    case 'r': buf[o++] = '\r'; continue;
    case 't': buf[o++] = '\t'; continue;
    case 'u':
      if (!read_hex4(w, &cp)) goto bad;
      if (cp >= 0xdc00 && cp <= 0xdfff) goto surrogate;
      if (cp >= 0xd800 && cp <= 0xdbff) {
        unsigned lo;
        if (w->len - w->pos < 2 || w->s[w->pos] != '\\' || w->s[w->pos + 1] != 'u') goto surrogate;
        w->pos += 2;
        if (!read_hex4(w, &lo)) goto bad;
        if (lo < 0xdc00 || lo > 0xdfff) goto surrogate;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      }
      if (cp < 0x80) {
        buf[o++] = (char)cp;
      } else if (cp < 0x800) {
        buf[o++] = (char)(0xc0 | (cp >> 6));
        buf[o++] = (char)(0x80 | (cp & 0x3f));
      } else if (cp < 0x10000) {
        buf[o++] = (char)(0xe0 | (cp >> 12));
        buf[o++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        buf[o++] = (char)(0x80 | (cp & 0x3f));
      } else {
        buf[o++] = (char)(0xf0 | (cp >> 18));
        buf[o++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        buf[o++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        buf[o++] = (char)(0x80 | (cp & 0x3f));
      }
      continue;
    default:
      goto bad;
    }
  }
  buf[o] = '\0';
  *out = buf;
  *out_len = o;
  return 0;
surrogate:
  free(buf);
  /* serde_json refuses lone surrogates; so does this reader. */
  return cp_error_set(CP_EST_HEADER_JSON, "%s: header offset %zu: string holds a lone UTF-16 surrogate escape",
                      w->path, start);
bad:
  free(buf);
  return cp_error_set(CP_EST_HEADER_JSON, "%s: header offset %zu: malformed string", w->path, start);
}

typedef enum { NUM_OK, NUM_NOT_NUMBER, NUM_NEGATIVE, NUM_NOT_INTEGER, NUM_TOO_LARGE } num_status;

static const char *num_problem(num_status st) {
  switch (st) {
  case NUM_NOT_NUMBER: return "is not a number";
  case NUM_NEGATIVE: return "is negative";
  case NUM_NOT_INTEGER: return "is not a plain integer";
  case NUM_TOO_LARGE: return "is too large";
  default: return "is invalid";
  }
}

/* Reads a JSON number at the cursor as an exact unsigned integer. Only digits are accepted, as
 * serde does for usize: "1.0" and "1e3" are not integers here. */
static num_status read_uint(walker *w, uint64_t *out) {
  int c = peek(w);
  if (c != '-' && (c < '0' || c > '9')) return NUM_NOT_NUMBER;
  size_t p = w->pos;
  bool neg = false, frac = false, big = false;
  if (w->s[p] == '-') neg = true, p++;
  uint64_t v = 0;
  while (p < w->len && w->s[p] >= '0' && w->s[p] <= '9') {
    if (!cp_mul_u64(&v, v, 10) || !cp_add_u64(&v, v, (uint64_t)(w->s[p] - '0'))) big = true;
    p++;
  }
  while (p < w->len && (w->s[p] == '.' || w->s[p] == 'e' || w->s[p] == 'E' || w->s[p] == '+' ||
                        w->s[p] == '-' || (w->s[p] >= '0' && w->s[p] <= '9'))) {
    frac = true;
    p++;
  }
  w->pos = p;
  if (neg) return NUM_NEGATIVE; /* "-0" too: serde refuses any sign for usize */
  if (frac) return NUM_NOT_INTEGER;
  if (big) return NUM_TOO_LARGE;
  *out = v;
  return NUM_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Schema
 * ------------------------------------------------------------------------------------------- */

typedef struct {
  walker w;
  st_entry *e;
  size_t n, cap;
  char **mk, **mv;
  size_t n_meta;
  bool have_meta;
} parse_state;

static int parse_metadata(parse_state *ps) {
  walker *w = &ps->w;
  char sb[CP_QUOTE_MASKED_CAP];
  if (peek(w) != '{')
    return cp_error_set(CP_EST_METADATA, "%s: header offset %zu: __metadata__ is not an object", w->path, w->pos);
  w->pos++;
  ps->have_meta = true;
  size_t kcap = 0, vcap = 0; /* parse_metadata runs once: a second __metadata__ is refused */
  if (peek(w) == '}') {
    w->pos++;
    return 0;
  }
  for (;;) {
    size_t koff = (ws(w), w->pos), klen, vlen;
    char *k = NULL, *v = NULL;
    int rc = read_string(w, &k, &klen);
    if (rc < 0) return rc;
    if ((rc = expect(w, ':')) < 0) {
      free(k);
      return rc;
    }
    if (peek(w) != '"') {
      rc = cp_error_set(CP_EST_METADATA, "%s: header offset %zu: __metadata__ value of '%s' is not a string",
                        w->path, w->pos, cp_quote_masked(sb, k, klen));
      free(k);
      return rc;
    }
    if ((rc = read_string(w, &v, &vlen)) < 0) {
      free(k);
      return rc;
    }
    if (strlen(k) != klen || strlen(v) != vlen) {
      rc = cp_error_set(CP_EST_METADATA, "%s: header offset %zu: __metadata__ entry '%s' contains a NUL character",
                        w->path, koff, cp_quote_masked(sb, k, klen));
      free(k);
      free(v);
      return rc;
    }
    if ((rc = CP_ARRAY_RESERVE(ps->mk, kcap, ps->n_meta + 1, w->path)) < 0 ||
        (rc = CP_ARRAY_RESERVE(ps->mv, vcap, ps->n_meta + 1, w->path)) < 0) {
      free(k);
      free(v);
      return rc;
    }
    ps->mk[ps->n_meta] = k;
    ps->mv[ps->n_meta] = v;
    ps->n_meta++;
    int c = peek(w);
    w->pos++;
    if (c == '}') break;
    if (c != ',')
      return cp_error_set(CP_EST_HEADER_JSON, "%s: header offset %zu: expected ',' or '}'", w->path, w->pos - 1);
  }
  return 0;
}

/* Reads a JSON array of unsigned integers into v[0..*count), at most `max` of them; returns the
 * status of the first bad element (its offset in *bad_off) or NUM_OK. *count may exceed max
 * (elements past max are parsed but not stored). */
static int read_uint_array(walker *w, uint64_t *v, size_t max, size_t *count, num_status *st,
                           size_t *bad_off) {
  *count = 0;
  *st = NUM_OK;
  w->pos++; /* '[' */
  if (peek(w) == ']') {
    w->pos++;
    return 0;
  }
  for (;;) {
    uint64_t x = 0;
    *bad_off = (ws(w), w->pos);
    num_status s = read_uint(w, &x);
    if (s != NUM_OK) {
      *st = s;
      return 0;
    }
    if (*count < max) v[*count] = x;
    (*count)++;
    int c = peek(w);
    w->pos++;
    if (c == ']') return 0;
    if (c != ',')
      return cp_error_set(CP_EST_HEADER_JSON, "%s: header offset %zu: expected ',' or ']'", w->path, w->pos - 1);
  }
}

static int parse_entry(parse_state *ps, st_entry *e) {
  walker *w = &ps->w;
  char sb[CP_QUOTE_MASKED_CAP], nb[CP_QUOTE_MASKED_CAP];
  const char *nm = cp_quote_masked(nb, e->name, strlen(e->name));
  int rc;
  if (peek(w) != '{')
    return cp_error_set(CP_EST_ENTRY, "%s: header offset %zu: tensor '%s': entry is not an object", w->path,
                        w->pos, nm);
  size_t obj_off = w->pos++;
  bool have_dtype = false, have_shape = false, have_offsets = false;
  if (peek(w) != '}') {
    for (;;) {
      size_t koff = (ws(w), w->pos), klen;
      char *k = NULL;
      if ((rc = read_string(w, &k, &klen)) < 0) return rc;
      if ((rc = expect(w, ':')) < 0) {
        free(k);
        return rc;
      }
      size_t voff = (ws(w), w->pos);
      if (strcmp(k, "dtype") == 0 && klen == 5) {
        free(k);
        if (peek(w) != '"')
          return cp_error_set(CP_EST_DTYPE, "%s: header offset %zu: tensor '%s': dtype is not a string", w->path,
                              voff, nm);
        char *d = NULL;
        size_t dlen;
        if ((rc = read_string(w, &d, &dlen)) < 0) return rc;
        if (strlen(d) != dlen || cp_dtype_from_name(&e->t.dtype, d) < 0) {
          rc = cp_error_set(CP_EST_DTYPE, "%s: header offset %zu: tensor '%s': unsupported dtype '%s'", w->path,
                            voff, nm, cp_quote_masked(sb, d, dlen));
          free(d);
          return rc;
        }
        free(d);
        have_dtype = true;
      } else if (strcmp(k, "shape") == 0 && klen == 5) {
        free(k);
        if (peek(w) != '[')
          return cp_error_set(CP_EST_SHAPE, "%s: header offset %zu: tensor '%s': shape is not an array", w->path,
                              voff, nm);
        uint64_t dims[CP_MAX_DIMS];
        size_t count, bad_off = voff;
        num_status st;
        if ((rc = read_uint_array(w, dims, CP_MAX_DIMS, &count, &st, &bad_off)) < 0) return rc;
        if (st != NUM_OK)
          return cp_error_set(CP_EST_SHAPE, "%s: header offset %zu: tensor '%s': dimension %zu %s", w->path,
                              bad_off, nm, count, num_problem(st));
        if (count > CP_MAX_DIMS)
          return cp_error_set(CP_EST_SHAPE, "%s: header offset %zu: tensor '%s': shape has more than %d dimensions",
                              w->path, voff, nm, CP_MAX_DIMS);
        for (size_t i = 0; i < count; i++) {
          if (dims[i] > (uint64_t)INT64_MAX)
            return cp_error_set(CP_EST_SHAPE, "%s: header offset %zu: tensor '%s': dimension %zu is too large",
                                w->path, voff, nm, i);
          e->t.shape[i] = (int64_t)dims[i];
        }
        e->t.ndim = (int)count;
        have_shape = true;
      } else if (strcmp(k, "data_offsets") == 0 && klen == 12) {
        free(k);
        if (peek(w) != '[')
          return cp_error_set(CP_EST_OFFSETS, "%s: header offset %zu: tensor '%s': data_offsets is not an array",
                              w->path, voff, nm);
        uint64_t o[2];
        size_t count, bad_off = voff;
        num_status st;
        if ((rc = read_uint_array(w, o, 2, &count, &st, &bad_off)) < 0) return rc;
        if (st != NUM_OK)
          return cp_error_set(CP_EST_OFFSETS, "%s: header offset %zu: tensor '%s': data_offsets[%zu] %s", w->path,
                              bad_off, nm, count, num_problem(st));
        if (count != 2)
          return cp_error_set(CP_EST_OFFSETS, "%s: header offset %zu: tensor '%s': data_offsets has %zu elements, not 2",
                              w->path, voff, nm, count);
        if (o[0] > o[1])
          return cp_error_set(CP_EST_OFFSETS, "%s: header offset %zu: tensor '%s': data_offsets [%llu, %llu] end before they begin",
                              w->path, voff, nm, (unsigned long long)o[0], (unsigned long long)o[1]);
        e->begin = o[0];
        e->end = o[1];
        have_offsets = true;
      } else {
        rc = cp_error_set(CP_EST_ENTRY, "%s: header offset %zu: tensor '%s': unexpected key '%s'", w->path, koff,
                          nm, cp_quote_masked(sb, k, klen));
        free(k);
        return rc;
      }
      int c = peek(w);
      w->pos++;
      if (c == '}') break;
      if (c != ',')
        return cp_error_set(CP_EST_HEADER_JSON, "%s: header offset %zu: expected ',' or '}'", w->path, w->pos - 1);
    }
  } else {
    w->pos++;
  }
  if (!have_dtype || !have_shape || !have_offsets)
    return cp_error_set(CP_EST_ENTRY, "%s: header offset %zu: tensor '%s': entry lacks '%s'", w->path, obj_off, nm,
                        !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
  if (cp_shape_nbytes(&e->t.nbytes, e->t.dtype, e->t.ndim, e->t.shape) < 0)
    return cp_error_set(CP_EST_SHAPE_OVERFLOW, "%s: header offset %zu: tensor '%s': shape x %s size overflows 2^63 bytes",
                        w->path, obj_off, nm, cp_dtype_name(e->t.dtype));
  if (e->end - e->begin != e->t.nbytes)
    return cp_error_set(CP_EST_OFFSETS_SIZE,
                        "%s: header offset %zu: tensor '%s': data_offsets [%llu, %llu] span %llu bytes, shape and dtype need %llu",
                        w->path, obj_off, nm, (unsigned long long)e->begin, (unsigned long long)e->end,
                        (unsigned long long)(e->end - e->begin), (unsigned long long)e->t.nbytes);
  return 0;
}

static int parse_header(parse_state *ps) {
  walker *w = &ps->w;
  int rc;
  char sb[CP_QUOTE_MASKED_CAP];
  if ((rc = expect(w, '{')) < 0) return rc;
  if (peek(w) == '}') {
    w->pos++;
    return 0;
  }
  for (;;) {
    size_t koff = (ws(w), w->pos), klen;
    char *k = NULL;
    if ((rc = read_string(w, &k, &klen)) < 0) return rc;
    if ((rc = expect(w, ':')) < 0) {
      free(k);
      return rc;
    }
    if (strcmp(k, "__metadata__") == 0 && klen == 12) {
      free(k);
      if (ps->have_meta)
        return cp_error_set(CP_EST_DUPLICATE_NAME, "%s: header offset %zu: duplicate key '__metadata__'", w->path, koff);
      if ((rc = parse_metadata(ps)) < 0) return rc;
    } else {
      if (strlen(k) != klen) {
        rc = cp_error_set(CP_EST_ENTRY, "%s: header offset %zu: tensor name '%s' contains a NUL character", w->path,
                          koff, cp_quote_masked(sb, k, klen));
        free(k);
        return rc;
      }
      if ((rc = CP_ARRAY_RESERVE(ps->e, ps->cap, ps->n + 1, w->path)) < 0) {
        free(k);
        return rc;
      }
      st_entry *e = &ps->e[ps->n++];
      memset(e, 0, sizeof *e);
      e->name = k;
      e->key_off = koff;
      e->t.name = k;
      if ((rc = parse_entry(ps, e)) < 0) return rc;
    }
    int c = peek(w);
    w->pos++;
    if (c == '}') break;
    if (c != ',')
      return cp_error_set(CP_EST_HEADER_JSON, "%s: header offset %zu: expected ',' or '}'", w->path, w->pos - 1);
  }
  if (peek(w) != -1)
    return cp_error_set(CP_EST_HEADER_JSON, "%s: header offset %zu: text after the header object", w->path, w->pos);
  return 0;
}

/* Which object a duplicate key reported by the scan sits in: the top level (a tensor name), the
 * __metadata__ object, or a tensor entry. Walks the (well-formed up to `off`) text once. */
static int duplicate_code(const char *s, size_t off) {
  int depth = 0;
  bool in_str = false, esc = false;
  char prev = 0;             /* last significant character outside strings */
  size_t key_start = 0;      /* start of the last key seen at depth 1 */
  bool in_meta = false;
  for (size_t i = 0; i < off; i++) {
    char c = s[i];
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') {
        in_str = false;
        if (depth == 1 && (prev == '{' || prev == ','))
          in_meta = i - key_start == 13 && memcmp(s + key_start, "\"__metadata__", 13) == 0;
        prev = '"';
      }
      continue;
    }
    if (c == '"') {
      in_str = true;
      key_start = i;
    } else if (c == '{' || c == '[') {
      depth++;
      prev = c;
    } else if (c == '}' || c == ']') {
      depth--;
      prev = c;
    } else if (c == ',' || c == ':') {
      prev = c;
    }
  }
  if (depth <= 1) return CP_EST_DUPLICATE_NAME;
  return in_meta ? CP_EST_METADATA : CP_EST_ENTRY;
}

/* ---------------------------------------------------------------------------------------------
 * Open
 * ------------------------------------------------------------------------------------------- */

static int cmp_offsets(const void *a, const void *b) {
  const st_entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(((const name_ix *)a)->name, ((const name_ix *)b)->name);
}

static void index_names(cp_st_file *f) {
  for (size_t i = 0; i < f->n; i++) f->by_name[i] = (name_ix){f->e[i].name, i};
  if (f->n) qsort(f->by_name, f->n, sizeof *f->by_name, cmp_names);
}

static int cmp_meta(const void *a, const void *b) {
  return strcmp(**(char *const *const *)a, **(char *const *const *)b);
}

void cp_st_free(cp_st_file *f) {
  if (!f) return;
  if (f->map) munmap(f->map, (size_t)f->size);
  for (size_t i = 0; i < f->n; i++) free(f->e[i].name);
  free(f->e);
  free(f->by_name);
  for (size_t i = 0; i < f->n_meta; i++) {
    free(f->meta_key[i]);
    free(f->meta_val[i]);
  }
  free(f->meta_key);
  free(f->meta_val);
  free(f->path);
  free(f);
}

/* Sorts metadata by key (keeping key/value pairs together) and checks the keys are distinct. */
static int sort_metadata(cp_st_file *f) {
  size_t m = f->n_meta;
  if (m == 0) return 0;
  char ***pairs = malloc(m * sizeof *pairs);
  char **k = malloc(m * sizeof *k), **v = malloc(m * sizeof *v);
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(pairs, f->path);
  CP_CHECK_ALLOC_GOTO(k, f->path);
  CP_CHECK_ALLOC_GOTO(v, f->path);
  /* pairs[i] points at meta_key[i]; its value sits at the same index of meta_val. */
  for (size_t i = 0; i < m; i++) pairs[i] = &f->meta_key[i];
  qsort(pairs, m, sizeof *pairs, cmp_meta);
  for (size_t i = 0; i < m; i++) {
    size_t j = (size_t)(pairs[i] - f->meta_key);
    k[i] = f->meta_key[j];
    v[i] = f->meta_val[j];
  }
  for (size_t i = 0; i + 1 < m; i++) {
    if (strcmp(k[i], k[i + 1]) == 0) {
      char sb[CP_QUOTE_MASKED_CAP];
      rc = cp_error_set(CP_EST_METADATA, "%s: __metadata__ repeats key '%s'", f->path, cp_quote_masked(sb, k[i], strlen(k[i])));
      break;
    }
  }
  memcpy(f->meta_key, k, m * sizeof *k);
  memcpy(f->meta_val, v, m * sizeof *v);
done:
  free(pairs);
  free(k);
  free(v);
  return rc;
}

static int validate(cp_st_file *f, const char *hdr, size_t hlen) {
  cp_json_check chk;
  memset(&chk, 0, sizeof chk);
  size_t bad = 0;
  char sb[CP_QUOTE_MASKED_CAP];
  if (!cp_st_utf8_valid(hdr, hlen, &bad))
    return cp_error_set(CP_EST_HEADER_UTF8, "%s: header offset %zu: invalid UTF-8 byte 0x%02x", f->path, bad,
                        (unsigned char)hdr[bad]);
  if (hlen == 0 || hdr[0] != '{')
    return cp_error_set(CP_EST_HEADER_NOT_OBJECT, "%s: header offset 0: header starts with %s, not '{'", f->path,
                        hlen == 0 ? "nothing (length 0)" : cp_quote_masked(sb, hdr, hlen < 8 ? hlen : 8));
  switch (cp_json_scan(&chk, hdr, hlen, ST_MAX_DEPTH)) {
  case CP_JSON_OK:
    break;
  case CP_JSON_UTF8:
    return cp_error_set(CP_EST_HEADER_UTF8, "%s: header offset %zu: invalid UTF-8", f->path, chk.offset);
  case CP_JSON_DUPLICATE: {
    int code = duplicate_code(hdr, chk.offset < hlen ? chk.offset : hlen);
    const char *what = code == CP_EST_DUPLICATE_NAME ? "duplicate tensor name"
                       : code == CP_EST_METADATA    ? "duplicate __metadata__ key"
                                                    : "duplicate key in a tensor entry";
    chk.key[sizeof chk.key - 1] = '\0';
    return cp_error_set(code, "%s: header offset %zu: %s '%s'", f->path, chk.offset, what,
                        cp_quote_masked(sb, chk.key, strlen(chk.key)));
  }
  case CP_JSON_DEPTH:
    return cp_error_set(CP_EST_HEADER_JSON, "%s: header offset %zu: JSON nested deeper than %d", f->path,
                        chk.offset, ST_MAX_DEPTH);
  default:
    return cp_error_set(CP_EST_HEADER_JSON, "%s: header offset %zu: invalid JSON", f->path, chk.offset);
  }

  parse_state ps;
  memset(&ps, 0, sizeof ps);
  ps.w = (walker){hdr, hlen, 0, f->path};
  int rc = parse_header(&ps);
  /* Hand everything parsed so far to f so cp_st_free releases it on any path. */
  f->e = ps.e;
  f->n = ps.n;
  f->meta_key = ps.mk;
  f->meta_val = ps.mv;
  f->n_meta = ps.n_meta;
  if (rc < 0) return rc;
  if ((rc = sort_metadata(f)) < 0) return rc;

  size_t n = f->n;
  if (n) CP_CHECK_ALLOC(f->by_name = malloc(n * sizeof *f->by_name), f->path);
  /* Names again after unescaping: "a" and "\u0061" are the same tensor. */
  index_names(f);
  for (size_t i = 0; i + 1 < n; i++) {
    const st_entry *a = &f->e[f->by_name[i].i], *b = &f->e[f->by_name[i + 1].i];
    if (strcmp(a->name, b->name) == 0)
      return cp_error_set(CP_EST_DUPLICATE_NAME, "%s: header offset %zu: duplicate tensor name '%s'", f->path,
                          a->key_off > b->key_off ? a->key_off : b->key_off, cp_quote_masked(sb, a->name, strlen(a->name)));
  }

  if (n) qsort(f->e, n, sizeof *f->e, cmp_offsets);
  uint64_t pos = 0;
  for (size_t i = 0; i < n; i++) {
    const st_entry *e = &f->e[i];
    char nb[CP_QUOTE_MASKED_CAP];
    if (e->begin > pos) {
      char pb[CP_QUOTE_MASKED_CAP];
      if (i == 0)
        return cp_error_set(CP_EST_HOLE, "%s: tensor '%s' (header offset %zu): data begins at %llu, not 0", f->path,
                            cp_quote_masked(nb, e->name, strlen(e->name)), e->key_off, (unsigned long long)e->begin);
      return cp_error_set(CP_EST_HOLE, "%s: tensor '%s' (header offset %zu): data begins at %llu, leaving %llu unused bytes after '%s'",
                          f->path, cp_quote_masked(nb, e->name, strlen(e->name)), e->key_off, (unsigned long long)e->begin,
                          (unsigned long long)(e->begin - pos), cp_quote_masked(pb, f->e[i - 1].name, strlen(f->e[i - 1].name)));
    }
    if (e->begin < pos) {
      char pb[CP_QUOTE_MASKED_CAP];
      return cp_error_set(CP_EST_OVERLAP, "%s: tensor '%s' (header offset %zu): data [%llu, %llu) overlaps '%s' which ends at %llu",
                          f->path, cp_quote_masked(nb, e->name, strlen(e->name)), e->key_off, (unsigned long long)e->begin,
                          (unsigned long long)e->end, cp_quote_masked(pb, f->e[i - 1].name, strlen(f->e[i - 1].name)),
                          (unsigned long long)pos);
    }
    pos = e->end;
  }
  uint64_t data_start = 8 + f->header_len, data_len = f->size - data_start;
  if (pos > data_len) {
    char nb[CP_QUOTE_MASKED_CAP];
    const st_entry *e = &f->e[n - 1];
    return cp_error_set(CP_EST_TRUNCATED, "%s: tensor '%s' (header offset %zu): data ends at file offset %llu, past the end of the %llu-byte file",
                        f->path, cp_quote_masked(nb, e->name, strlen(e->name)), e->key_off,
                        (unsigned long long)(data_start + pos < data_start ? UINT64_MAX : data_start + pos),
                        (unsigned long long)f->size);
  }
  if (pos < data_len)
    return cp_error_set(CP_EST_TRAILING, "%s: file offset %llu: %llu bytes after the last tensor", f->path,
                        (unsigned long long)(data_start + pos), (unsigned long long)(data_len - pos));

  /* Indices moved with the sort: rebuild the name order on the final positions. */
  for (size_t i = 0; i < n; i++) {
    f->e[i].t.name = f->e[i].name;
    f->e[i].t.data = f->map + data_start + f->e[i].begin;
  }
  index_names(f);
  return 0;
}

int cp_st_open(cp_st_file **out, const char *path) {
  *out = NULL;
  int rc = 0, fd = -1;
  cp_st_file *f = calloc(1, sizeof *f);
  CP_CHECK_ALLOC(f, path);
  CP_CHECK_ALLOC_GOTO(f->path = strdup(path), path);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    rc = cp_error_set(errno == ENOENT ? CP_ENOTFOUND : CP_EIO, "%s: cannot open: %s", path, strerror(errno));
    goto done;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    rc = cp_error_set(CP_EIO, "%s: not a regular file", path);
    goto done;
  }
  f->size = (uint64_t)st.st_size;
  if (f->size < 8) {
    rc = cp_error_set(CP_EST_TOO_SMALL, "%s: file offset 0: file is %llu bytes, shorter than the 8-byte header length",
                      path, (unsigned long long)f->size);
    goto done;
  }
  if (f->size > SIZE_MAX) {
    rc = cp_error_set(CP_EOVERFLOW, "%s: file too large to map", path);
    goto done;
  }
  void *m = mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (m == MAP_FAILED) {
    rc = cp_error_set(CP_EIO, "%s: mmap failed: %s", path, strerror(errno));
    goto done;
  }
  f->map = m;
  uint64_t hl = cp_le64(f->map);
  if (hl > CP_ST_MAX_HEADER) {
    rc = cp_error_set(CP_EST_HEADER_TOO_LARGE, "%s: file offset 0: header length %llu is over the 100000000-byte limit",
                      path, (unsigned long long)hl);
    goto done;
  }
  if (hl > f->size - 8) {
    rc = cp_error_set(CP_EST_HEADER_PAST_EOF, "%s: file offset 0: header length %llu runs past the end of the %llu-byte file",
                      path, (unsigned long long)hl, (unsigned long long)f->size);
    goto done;
  }
  f->header_len = hl;
  rc = validate(f, (const char *)f->map + 8, (size_t)hl);
done:
  if (fd >= 0) close(fd);
  if (rc < 0) {
    cp_st_free(f);
    return rc;
  }
  *out = f;
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Accessors
 * ------------------------------------------------------------------------------------------- */

const char *cp_st_path(const cp_st_file *f) { return f->path; }
size_t cp_st_count(const cp_st_file *f) { return f->n; }

const cp_tensor *cp_st_tensor(const cp_st_file *f, size_t i) { return i < f->n ? &f->e[i].t : NULL; }

long long cp_st_find_index(const cp_st_file *f, const char *name) {
  size_t lo = 0, hi = f->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(f->by_name[mid].name, name);
    if (c == 0) return (long long)f->by_name[mid].i;
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return -1;
}

const cp_tensor *cp_st_find(const cp_st_file *f, const char *name) {
  long long i = cp_st_find_index(f, name);
  return i < 0 ? NULL : &f->e[i].t;
}

size_t cp_st_meta_count(const cp_st_file *f) { return f->n_meta; }
const char *cp_st_meta_key(const cp_st_file *f, size_t i) { return i < f->n_meta ? f->meta_key[i] : NULL; }
const char *cp_st_meta_value(const cp_st_file *f, size_t i) { return i < f->n_meta ? f->meta_val[i] : NULL; }

const char *cp_st_meta_get(const cp_st_file *f, const char *key) {
  size_t lo = 0, hi = f->n_meta;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(f->meta_key[mid], key);
    if (c == 0) return f->meta_val[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

const void *cp_st_map_base(const cp_st_file *f) { return f->map; }
uint64_t cp_st_file_size(const cp_st_file *f) { return f->size; }
uint64_t cp_st_header_len(const cp_st_file *f) { return f->header_len; }

uint64_t cp_st_tensor_file_offset(const cp_st_file *f, size_t i) {
  return i < f->n ? 8 + f->header_len + f->e[i].begin : 0;
}

void cp_st_release(const cp_st_file *f, size_t i) {
  if (i >= f->n || f->e[i].t.nbytes == 0) return;
  /* Pages of a read-only private file mapping are never dirty, so dropping the boundary pages a
   * neighbour shares is safe: they are simply read again from the file if touched. */
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t a = (uintptr_t)f->e[i].t.data & ~(page - 1);
  uintptr_t b = (uintptr_t)f->e[i].t.data + (uintptr_t)f->e[i].t.nbytes;
  b = (b + page - 1) & ~(page - 1);
  uintptr_t lo = (uintptr_t)f->map, hi = ((uintptr_t)f->map + (uintptr_t)f->size + page - 1) & ~(page - 1);
  if (a < lo) a = lo;
  if (b > hi) b = hi;
  if (b > a) (void)madvise((void *)a, (size_t)(b - a), MADV_DONTNEED);
}
