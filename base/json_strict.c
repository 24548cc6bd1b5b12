/* Strict JSON scanner (RFC 8259 grammar, UTF-8 validation, duplicate keys, depth bound).
 * Recursion depth is bounded by max_depth, so hostile nesting cannot exhaust the stack. */
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "base/json_strict.h"
#include "ctxpatch/base/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  const unsigned char *s;
  size_t len, pos;
  int max_depth;
  cp_json_check *out;
} scanner;

typedef struct {
  char *bytes; /* decoded key bytes, concatenated */
  size_t used, cap;
  struct key_ref {
    size_t start, len, offset;
  } *keys;
  size_t n, kcap;
} key_list;

static cp_json_problem fail(scanner *sc, cp_json_problem p, size_t offset) {
  sc->out->problem = p;
  sc->out->offset = offset;
  return p;
}

static void skip_ws(scanner *sc) {
  while (sc->pos < sc->len) {
    unsigned char c = sc->s[sc->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    sc->pos++;
  }
}

static int hexval(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Out of memory reads as a syntax problem at that offset (the scan has no code of its own). */
static int append(key_list *kl, const void *data, size_t n) {
  if (!kl) return 0;
  if (CP_ARRAY_RESERVE(kl->bytes, kl->cap, kl->used + n, "JSON scan: object keys") < 0) return -1;
  memcpy(kl->bytes + kl->used, data, n);
  kl->used += n;
  return 0;
}

/* Scans a string at sc->pos (which is '"'); decoded bytes go to `kl` when it is not NULL. */
static cp_json_problem scan_string(scanner *sc, key_list *kl) {
  size_t start = sc->pos++;
  while (sc->pos < sc->len) {
    unsigned char c = sc->s[sc->pos];
    if (c == '"') {
      sc->pos++;
      return CP_JSON_OK;
    }
    if (c < 0x20) return fail(sc, CP_JSON_SYNTAX, sc->pos);
    if (c == '\\') {
      if (sc->pos + 1 >= sc->len) break;
      unsigned char e = sc->s[sc->pos + 1];
      const char *simple = strchr("\"\\/bfnrt", e);
      if (e && simple) {
        static const char map[] = "\"\\/\b\f\n\r\t";
        char d = map[simple - "\"\\/bfnrt"];
        if (append(kl, &d, 1) < 0) return fail(sc, CP_JSON_SYNTAX, sc->pos);
        sc->pos += 2;
        continue;
      }
      if (e != 'u' || sc->pos + 6 > sc->len) return fail(sc, CP_JSON_SYNTAX, sc->pos);
      unsigned char u[4];
      for (int i = 0; i < 4; i++) {
        int h = hexval(sc->s[sc->pos + 2 + i]);
        if (h < 0) return fail(sc, CP_JSON_SYNTAX, sc->pos);
        u[i] = (unsigned char)h;
      }
      /* Keys are compared by their escape-decoded code units; exact UTF-8 re-encoding of
       * surrogate pairs is not needed for equality. */
      if (append(kl, u, 4) < 0) return fail(sc, CP_JSON_SYNTAX, sc->pos);
      sc->pos += 6;
      continue;
    }
    uint32_t cp;
    size_t n = cp_utf8_decode(&cp, sc->s + sc->pos, sc->len - sc->pos);
    if (n == 0) return fail(sc, CP_JSON_UTF8, sc->pos);
    if (append(kl, sc->s + sc->pos, n) < 0) return fail(sc, CP_JSON_SYNTAX, sc->pos);
    sc->pos += n;
  }
  return fail(sc, CP_JSON_SYNTAX, start);
}

static cp_json_problem scan_number(scanner *sc) {
  size_t p = sc->pos, start = p;
  const unsigned char *s = sc->s;
  if (p < sc->len && s[p] == '-') p++;
  if (p >= sc->len) return fail(sc, CP_JSON_SYNTAX, start);
  if (s[p] == '0') {
    p++;
  } else if (s[p] >= '1' && s[p] <= '9') {
    while (p < sc->len && s[p] >= '0' && s[p] <= '9') p++;
  } else {
    return fail(sc, CP_JSON_SYNTAX, start);
  }
  if (p < sc->len && s[p] == '.') {
    p++;
    if (p >= sc->len || s[p] < '0' || s[p] > '9') return fail(sc, CP_JSON_SYNTAX, start);
    while (p < sc->len && s[p] >= '0' && s[p] <= '9') p++;
  }
  if (p < sc->len && (s[p] == 'e' || s[p] == 'E')) {
    p++;
    if (p < sc->len && (s[p] == '+' || s[p] == '-')) p++;
    if (p >= sc->len || s[p] < '0' || s[p] > '9') return fail(sc, CP_JSON_SYNTAX, start);
    while (p < sc->len && s[p] >= '0' && s[p] <= '9') p++;
  }
  sc->pos = p;
  return CP_JSON_OK;
}

/* Keys are sorted once the object is complete, when their bytes no longer move. */
typedef struct {
  const char *p;
  size_t len, offset;
} key_view;

static int cmp_keys(const void *a, const void *b) {
  const key_view *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = memcmp(x->p, y->p, n);
  if (c) return c;
  if (x->len != y->len) return x->len < y->len ? -1 : 1;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static cp_json_problem scan_value(scanner *sc, int depth);

static cp_json_problem check_duplicates(scanner *sc, key_list *kl) {
  if (kl->n < 2) return CP_JSON_OK;
  key_view *v = malloc(kl->n * sizeof *v);
  if (!v) return fail(sc, CP_JSON_SYNTAX, sc->pos);
  /* when every key is empty nothing was ever stored, so bytes is still NULL */
  const char *bytes = kl->bytes ? kl->bytes : "";
  for (size_t i = 0; i < kl->n; i++) v[i] = (key_view){bytes + kl->keys[i].start, kl->keys[i].len, kl->keys[i].offset};
  qsort(v, kl->n, sizeof *v, cmp_keys);
  cp_json_problem p = CP_JSON_OK;
  for (size_t i = 1; i < kl->n && p == CP_JSON_OK; i++) {
    if (v[i - 1].len == v[i].len && memcmp(v[i - 1].p, v[i].p, v[i].len) == 0) {
      size_t n = v[i].len < sizeof sc->out->key - 1 ? v[i].len : sizeof sc->out->key - 1;
      memcpy(sc->out->key, v[i].p, n);
      sc->out->key[n] = '\0';
      /* report the later occurrence: that is where the text repeats itself */
      p = fail(sc, CP_JSON_DUPLICATE, v[i].offset);
    }
  }
  free(v);
  return p;
}

static cp_json_problem scan_object(scanner *sc, int depth) {
  key_list kl = {0};
  cp_json_problem p = CP_JSON_OK;
  sc->pos++; /* '{' */
  skip_ws(sc);
  if (sc->pos < sc->len && sc->s[sc->pos] == '}') {
    sc->pos++;
    goto done;
  }
  for (;;) {
    skip_ws(sc);
    if (sc->pos >= sc->len || sc->s[sc->pos] != '"') {
      p = fail(sc, CP_JSON_SYNTAX, sc->pos);
      goto done;
    }
    size_t key_offset = sc->pos, key_start = kl.used;
    if ((p = scan_string(sc, &kl)) != CP_JSON_OK) goto done;
    if (CP_ARRAY_RESERVE(kl.keys, kl.kcap, kl.n + 1, "JSON scan: object keys") < 0) {
      p = fail(sc, CP_JSON_SYNTAX, key_offset);
      goto done;
    }
    kl.keys[kl.n++] = (struct key_ref){key_start, kl.used - key_start, key_offset};
    skip_ws(sc);
    if (sc->pos >= sc->len || sc->s[sc->pos] != ':') {
      p = fail(sc, CP_JSON_SYNTAX, sc->pos);
      goto done;
    }
    sc->pos++;
    if ((p = scan_value(sc, depth)) != CP_JSON_OK) goto done;
    skip_ws(sc);
    if (sc->pos < sc->len && sc->s[sc->pos] == ',') {
      sc->pos++;
      continue;
    }
    if (sc->pos < sc->len && sc->s[sc->pos] == '}') {
      sc->pos++;
      break;
    }
    p = fail(sc, CP_JSON_SYNTAX, sc->pos);
    goto done;
  }
  p = check_duplicates(sc, &kl);
done:
  free(kl.bytes);
  free(kl.keys);
  return p;
}

static cp_json_problem scan_array(scanner *sc, int depth) {
  sc->pos++; /* '[' */
  skip_ws(sc);
  if (sc->pos < sc->len && sc->s[sc->pos] == ']') {
    sc->pos++;
    return CP_JSON_OK;
  }
  for (;;) {
    cp_json_problem p = scan_value(sc, depth);
    if (p != CP_JSON_OK) return p;
    skip_ws(sc);
    if (sc->pos < sc->len && sc->s[sc->pos] == ',') {
      sc->pos++;
      continue;
    }
    if (sc->pos < sc->len && sc->s[sc->pos] == ']') {
      sc->pos++;
      return CP_JSON_OK;
    }
    return fail(sc, CP_JSON_SYNTAX, sc->pos);
  }
}

static cp_json_problem scan_literal(scanner *sc, const char *word) {
  size_t n = strlen(word);
  if (sc->len - sc->pos < n || memcmp(sc->s + sc->pos, word, n) != 0)
    return fail(sc, CP_JSON_SYNTAX, sc->pos);
  sc->pos += n;
  return CP_JSON_OK;
}

static cp_json_problem scan_value(scanner *sc, int depth) {
  skip_ws(sc);
  if (sc->pos >= sc->len) return fail(sc, CP_JSON_SYNTAX, sc->pos);
  unsigned char c = sc->s[sc->pos];
  switch (c) {
  case '{':
  case '[':
    if (depth + 1 > sc->max_depth) return fail(sc, CP_JSON_DEPTH, sc->pos);
    return c == '{' ? scan_object(sc, depth + 1) : scan_array(sc, depth + 1);
  case '"':
    return scan_string(sc, NULL);
  case 't':
    return scan_literal(sc, "true");
  case 'f':
    return scan_literal(sc, "false");
  case 'n':
    return scan_literal(sc, "null");
  default:
    if (c == '-' || (c >= '0' && c <= '9')) return scan_number(sc);
    uint32_t cp;
    if (c >= 0x80 && cp_utf8_decode(&cp, sc->s + sc->pos, sc->len - sc->pos) == 0)
      return fail(sc, CP_JSON_UTF8, sc->pos);
    return fail(sc, CP_JSON_SYNTAX, sc->pos);
  }
}

cp_json_problem cp_json_scan(cp_json_check *out, const char *text, size_t len, int max_depth) {
  memset(out, 0, sizeof *out);
  scanner sc = {(const unsigned char *)text, len, 0, max_depth, out};
  cp_json_problem p = scan_value(&sc, 0);
  if (p != CP_JSON_OK) return p;
  skip_ws(&sc);
  if (sc.pos != len) return fail(&sc, CP_JSON_SYNTAX, sc.pos);
  return CP_JSON_OK;
}

int cp_json_parse_strict(cJSON **out, const char *text, size_t len, const char *what, int max_depth,
                         int code_syntax, int code_utf8, int code_dup, int code_depth) {
  *out = NULL;
  cp_json_check check;
  switch (cp_json_scan(&check, text, len, max_depth)) {
  case CP_JSON_OK:
    break;
  case CP_JSON_SYNTAX:
    return cp_error_set(code_syntax, "%s: offset %zu: invalid JSON", what, check.offset);
  case CP_JSON_UTF8:
    return cp_error_set(code_utf8, "%s: offset %zu: invalid UTF-8", what, check.offset);
  case CP_JSON_DUPLICATE:
    return cp_error_set(code_dup, "%s: offset %zu: duplicate key '%s'", what, check.offset, check.key);
  case CP_JSON_DEPTH:
    return cp_error_set(code_depth, "%s: offset %zu: nesting deeper than %d", what, check.offset,
                        max_depth);
  }
  cJSON *json = cJSON_ParseWithLength(text, len);
  if (!json) return cp_error_set(code_syntax, "%s: invalid JSON", what);
  *out = json;
  return 0;
}
