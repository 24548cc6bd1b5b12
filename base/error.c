/* The thread's last error (code and one-line message) and the names and texts of the codes:
 * see include/ctxpatch/base/error.h. */
#include "ctxpatch/base/error.h"

#include "ctxpatch/base/quote.h"

#include <stdio.h>
#include <string.h>

static _Thread_local int last_code;
static _Thread_local char last_message[1024];

const char *cp_err_name(int code) {
  switch (code) {
#define CP_ERR_NAME(name, value, text) case value: return #name;
    CP_ERROR_LIST(CP_ERR_NAME)
#undef CP_ERR_NAME
  }
  return "CP_E?";
}

const char *cp_err_text(int code) {
  switch (code) {
#define CP_ERR_TEXT(name, value, text) case value: return text;
    CP_ERROR_LIST(CP_ERR_TEXT)
#undef CP_ERR_TEXT
  }
  return "unknown error";
}

int cp_error_setv(int code, const char *fmt, va_list ap) {
  /* Formatted into a copy first: a caller may wrap the previous message (an argument of
   * cp_error_message()), which vsnprintf into the same buffer would overwrite as it reads. */
  char msg[sizeof last_message];
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  size_t len = n < 0 ? 0 : (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1;
  /* The one point every message passes: names from files cannot reach a terminal as control
   * characters or invalid UTF-8, nor break the line. */
  cp_quote_text(last_message, sizeof last_message, msg, len, 0);
  last_code = code;
  return code;
}

int cp_error_set(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cp_error_setv(code, fmt, ap);
  va_end(ap);
  return code;
}

const char *cp_error_message(void) { return last_message; }
int cp_error_code(void) { return last_code; }
void cp_error_clear(void) {
  last_code = 0;
  last_message[0] = '\0';
}
