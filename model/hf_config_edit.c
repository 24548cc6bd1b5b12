/* Editing config.json by splicing: the new text is the original bytes with only the changed
 * top-level members' values replaced (or new members appended before the closing brace), so
 * every untouched key keeps its exact text. A cJSON round trip would not: it rewrites 2^53 + 1
 * as 9.00719925474099e+15, 1E400 as null and truncates strings at \u0000. The text was
 * validated by the strict scanner when cp_hf_config_parse read it, so the span finder below
 * only has to walk well-formed JSON. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/hf_config_json.h"
#include "base/json_strict.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/strbuf.h"

static size_t skip_ws(const char *t, size_t i, size_t n) {
  while (i < n && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r')) i++;
  return i;
}

/* t[i] is the opening quote; returns the offset after the closing one. */
static size_t skip_string(const char *t, size_t i, size_t n) {
  for (i++; i < n && t[i] != '"'; i++)
    if (t[i] == '\\') i++;
  return i < n ? i + 1 : n;
}

/* Offset after the value starting at t[i]. */
static size_t skip_value(const char *t, size_t i, size_t n) {
  if (i >= n) return n;
  if (t[i] == '"') return skip_string(t, i, n);
  if (t[i] == '{' || t[i] == '[') {
    int depth = 0;
    while (i < n) {
      if (t[i] == '"') {
        i = skip_string(t, i, n);
        continue;
      }
      if (t[i] == '{' || t[i] == '[') depth++;
      if (t[i] == '}' || t[i] == ']') depth--;
      i++;
      if (depth == 0) break;
    }
    return i;
  }
  while (i < n && !strchr(",}] \t\r\n", t[i])) i++; /* number or literal */
  return i;
}

/* Whether the key text t[a..b) (quotes included) decodes to `key`; escaped spellings of a
 * key are decoded through cJSON, as the reader saw them. cJSON stops at a \u0000, so a key
 * spelled with one is never ours (the reader refuses such keys anyway). */
static bool key_is(const char *t, size_t a, size_t b, const char *key) {
  if (!memchr(t + a, '\\', b - a)) return b - a - 2 == strlen(key) && !memcmp(t + a + 1, key, b - a - 2);
  for (size_t i = a; i + 6 <= b; i++)
    if (!memcmp(t + i, "\\u0000", 6)) return false;
  cJSON *s = cJSON_ParseWithLength(t + a, b - a);
  bool same = cJSON_IsString(s) && !strcmp(s->valuestring, key);
  cJSON_Delete(s);
  return same;
}

/* Refuses a non-finite number anywhere in `v` (cJSON would print it as null). */
static int check_finite(const cJSON *v, const char *path, const char *what) {
  if (cJSON_IsNumber(v) && !isfinite(v->valuedouble))
    return cp_error_set(CP_EOVERFLOW, "%s: key '%s': the new value is not a finite number", what, path);
  for (const cJSON *c = v->child; c; c = c->next) {
    char sub[160];
    /* A path too long for the buffer is cut: it only names the key in a message. */
    if (snprintf(sub, sizeof sub, "%s.%s", path, c->string ? c->string : "[]") >= (int)sizeof sub)
      sub[sizeof sub - 1] = '\0';
    int rc = check_finite(c, sub, what);
    if (rc) return rc;
  }
  return 0;
}

/* `v` printed for a member indented by `ind` (the whitespace before the file's first key):
 * compact when the file is on one line, else cJSON's layout with its tab levels turned into
 * repeats of `ind`. Raw tabs only occur as cJSON's layout: strings carry them escaped. */
static void put_value(cp_strbuf *b, const cJSON *v, const char *ind, size_t ind_len, bool pretty) {
  char *text = cp_json_print(v, pretty);
  if (!text) {
    b->oom = true;
    return;
  }
  for (const char *p = text; *p; p++) {
    if (*p == '\n') {
      cp_strbuf_putc(b, '\n');
      cp_strbuf_put(b, ind, ind_len);
      for (; p[1] == '\t'; p++) cp_strbuf_put(b, ind, ind_len);
    } else {
      cp_strbuf_putc(b, *p == '\t' ? ' ' : *p);
    }
  }
  free(text);
}

int cp_hf_config_splice(char **out, size_t *out_len, const cp_hf_config *cfg, const cp_hf_member *set, int n_set,
                        const char *what) {
  *out = NULL;
  *out_len = 0;
  const char *t = cfg->text;
  size_t n = cfg->text_len, i = skip_ws(t, 0, n);
  int rc = 0;
  for (int k = 0; k < n_set; k++)
    if (set[k].value && (rc = check_finite(set[k].value, set[k].key, what))) return rc;
  if (i >= n || t[i] != '{') return cp_error_set(CP_ECFG_JSON, "%s: offset %zu: top level is not a JSON object", what, i);
  bool *done = calloc((size_t)n_set + 1, sizeof *done);
  CP_CHECK_ALLOC(done, what);
  cp_strbuf b = {0};
  /* The layout of the first member decides how new members look: its leading whitespace. */
  size_t first = skip_ws(t, i + 1, n);
  const char *lead = t + i + 1;
  size_t lead_len = first - (i + 1);
  const char *nl = memchr(lead, '\n', lead_len);
  bool pretty = nl != NULL || t[first] == '}';
  const char *ind = nl ? nl + 1 : "  ";
  size_t ind_len = nl ? (size_t)(lead + lead_len - (nl + 1)) : 2;
  size_t copied = 0, last_end = i + 1, p = first;
  while (p < n && t[p] == '"') {
    size_t key_end = skip_string(t, p, n);
    size_t v0 = skip_ws(t, skip_ws(t, key_end, n) + 1, n), v1 = skip_value(t, v0, n);
    for (int k = 0; k < n_set; k++) {
      if (done[k] || !key_is(t, p, key_end, set[k].key)) continue;
      done[k] = true;
      if (!set[k].value) break;
      cp_strbuf_put(&b, t + copied, v0 - copied);
      put_value(&b, set[k].value, ind, ind_len, pretty);
      copied = v1;
      break;
    }
    last_end = v1;
    p = skip_ws(t, v1, n);
    if (p < n && t[p] == ',') p = skip_ws(t, p + 1, n);
  }
  cp_strbuf_put(&b, t + copied, last_end - copied);
  bool any = last_end > i + 1; /* the object had members before the new ones */
  for (int k = 0; k < n_set; k++) {
    if (done[k] || !set[k].value || set[k].only_if_present) continue;
    cp_strbuf_str(&b, any ? "," : "");
    if (pretty) {
      cp_strbuf_putc(&b, '\n');
      cp_strbuf_put(&b, ind, ind_len);
    } else if (any) {
      cp_strbuf_putc(&b, ' ');
    }
    cp_strbuf_printf(&b, "\"%s\": ", set[k].key);
    put_value(&b, set[k].value, ind, ind_len, pretty);
    any = true;
  }
  if (pretty && any && last_end == i + 1) cp_strbuf_putc(&b, '\n'); /* was "{}" */
  cp_strbuf_put(&b, t + last_end, n - last_end);
  free(done);
  if (b.oom) {
    cp_strbuf_free(&b);
    return cp_nomem("%s", what);
  }
  *out = b.s;
  *out_len = b.len;
  return 0;
}
