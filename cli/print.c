/* The CLI's text output of names from files and paths: each line made safe for a terminal with
 * cp_quote_text (see cli/cli.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "ctxpatch/base/quote.h"

void cli_printf(FILE *f, const char *fmt, ...) {
  char small[1024], *text = small, *safe = NULL;
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  size_t len = n < 0 ? 0 : (size_t)n; /* under 2^31: 4 * len + 4 does not overflow */
  if (len >= sizeof small && (text = malloc(len + 1))) vsnprintf(text, len + 1, fmt, again);
  va_end(again);
  if (!text) { /* out of memory: the line is cut */
    text = small;
    len = sizeof small - 1;
  }
  if ((safe = malloc(4 * len + 4))) {
    cp_quote_text(safe, 4 * len + 4, text, len, CP_QUOTE_LINES);
    fputs(safe, f);
  }
  if (text != small) free(text);
  free(safe);
}

void cli_json_printable(cJSON *v) {
  for (; v; v = v->next) {
    if (cJSON_IsString(v) && v->valuestring && !(v->type & cJSON_IsReference)) {
      size_t len = strlen(v->valuestring);
      char *safe = malloc(4 * len + 4);
      if (safe) cp_quote_text(safe, 4 * len + 4, v->valuestring, len, 0);
      if (!safe || (strcmp(safe, v->valuestring) && !cJSON_SetValuestring(v, safe)))
        v->valuestring[0] = '\0'; /* out of memory: nothing shown rather than raw bytes */
      free(safe);
    }
    cli_json_printable(v->child);
  }
}
