/* Private to the library (floor: base): base's functions that take cJSON types. They stay out of
 * include/ctxpatch/ so no public header carries a third-party type; library code and tests
 * include this as "base/json_strict.h". */
#ifndef CTXPATCH_BASE_JSON_STRICT_H
#define CTXPATCH_BASE_JSON_STRICT_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "ctxpatch/base/json.h"

/* Scan (cp_json_scan), then parse with cJSON. On a problem returns the matching code
 * (syntax -> code_syntax, UTF-8 -> code_utf8, duplicate -> code_dup, depth -> code_depth)
 * with the message "<what>: offset N: ...". The caller owns *out (cJSON_Delete). */
int cp_json_parse_strict(cJSON **out, const char *text, size_t len, const char *what, int max_depth,
                         int code_syntax, int code_utf8, int code_dup, int code_depth);

/* The one printer of a JSON document for output (stdout, files): cJSON's text (indented when
 * `pretty`), made valid UTF-8 and safe on a terminal. Each byte of a string outside well-formed
 * UTF-8 becomes U+FFFD; DEL, C1 controls and bidirectional controls (cp_quote_cp_safe) become \u
 * escapes (cJSON already escapes C0 controls). The caller frees the text; NULL when out of memory. */
char *cp_json_print(const cJSON *doc, bool pretty);

/* Writes `doc` as indented JSON plus a newline, atomically; `sha256_hex` (may be NULL) gets the
 * digest of the bytes written. */
int cp_write_json_atomic(char sha256_hex[65], const char *path, const cJSON *doc);

#endif
