/* The schema walk over a safetensors header (see formats/safetensors_header.h): a cursor over
 * text that cp_json_scan has already found well-formed, reading strings, exact unsigned integers,
 * tensor entries and __metadata__. */
#include "formats/safetensors_header.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/quote.h"

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

/* Reads an object key and its ':' at the cursor: *k is a new buffer the caller frees (NULL on
 * error), *koff the offset of its opening quote. */
static int read_key(walker *w, char **k, size_t *klen, size_t *koff) {
  *koff = (ws(w), w->pos);
  int rc = read_string(w, k, klen);
  if (rc == 0 && (rc = expect(w, ':')) < 0) {
    free(*k);
    *k = NULL;
  }
  return rc;
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
    size_t koff, klen, vlen;
    char *k = NULL, *v = NULL;
    int rc = read_key(w, &k, &klen, &koff);
    if (rc < 0) return rc;
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
      size_t koff, klen;
      char *k = NULL;
      if ((rc = read_key(w, &k, &klen, &koff)) < 0) return rc;
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
    size_t koff, klen;
    char *k = NULL;
    if ((rc = read_key(w, &k, &klen, &koff)) < 0) return rc;
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

/* The object a duplicate key reported by the scan sits in: walks the (well-formed up to `off`)
 * text once. */
int st_duplicate_code(const char *s, size_t off) {
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

int st_header_parse(st_header *out, const char *path, const char *hdr, size_t len) {
  parse_state ps;
  memset(&ps, 0, sizeof ps);
  ps.w = (walker){hdr, len, 0, path};
  int rc = parse_header(&ps);
  *out = (st_header){ps.e, ps.n, ps.mk, ps.mv, ps.n_meta};
  return rc;
}
