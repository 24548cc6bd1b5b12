/* The one printer of JSON documents (see base/json_strict.h): cJSON's text, made valid UTF-8 and
 * safe to show on a terminal. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/json_strict.h"
#include "ctxpatch/base/quote.h"
#include "ctxpatch/base/strbuf.h"
#include "ctxpatch/base/utf8.h"

/* Length of the character at t[0..n) when it may stay as it is, else 0. */
static size_t kept(const char *t, size_t n) {
  uint32_t cp = 0;
  size_t l = cp_utf8_decode(&cp, (const unsigned char *)t, n);
  return l && cp_quote_cp_safe(cp) ? l : 0;
}

char *cp_json_print(const cJSON *doc, bool pretty) {
  char *text = pretty ? cJSON_Print(doc) : cJSON_PrintUnformatted(doc);
  if (!text) return NULL;
  /* cJSON escapes '"', '\' and C0 controls and copies every other byte of a string; outside strings
   * it writes printable ASCII only. So each byte from DEL up lies in a string, where a
   * replacement character or a \u escape keeps the document valid. */
  size_t n = strlen(text), i = 0, l;
  while (i < n && ((unsigned char)text[i] < 0x7f || (l = kept(text + i, n - i)) > 0))
    i += (unsigned char)text[i] < 0x7f ? 1 : l;
  if (i == n) return text;
  cp_strbuf b = {0};
  cp_strbuf_put(&b, text, i);
  while (i < n) {
    uint32_t cp = 0;
    l = cp_utf8_decode(&cp, (const unsigned char *)text + i, n - i);
    if (!l) { /* a byte outside well-formed UTF-8 */
      cp_utf8_put(&b, 0xFFFD);
      l = 1;
    } else if (cp < 0x7f || cp_quote_cp_safe(cp)) {
      cp_strbuf_put(&b, text + i, l);
    } else {
      cp_strbuf_printf(&b, "\\u%04x", (unsigned)cp);
    }
    i += l;
  }
  free(text);
  if (!b.oom) return b.s;
  cp_strbuf_free(&b);
  return NULL;
}
