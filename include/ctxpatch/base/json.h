/* Strict JSON pre-scan used before cJSON parses untrusted text (safetensors headers,
 * config.json, index files, rules). cJSON accepts duplicate keys silently and has no
 * UTF-8 check; this scan finds those problems with their byte offsets. */
#ifndef CTXPATCH_JSON_H
#define CTXPATCH_JSON_H

#include <stddef.h>

#include <cjson/cJSON.h>

typedef enum {
  CP_JSON_OK = 0,
  CP_JSON_SYNTAX,    /* not well-formed JSON (RFC 8259) */
  CP_JSON_UTF8,      /* invalid UTF-8 anywhere in the text */
  CP_JSON_DUPLICATE, /* an object repeats a key */
  CP_JSON_DEPTH,     /* arrays/objects nested deeper than max_depth */
} cp_json_problem;

typedef struct {
  cp_json_problem problem;
  size_t offset;  /* byte offset of the problem in the text */
  char key[128];  /* the duplicated key (truncated), for CP_JSON_DUPLICATE */
} cp_json_check;

/* Scans `text[0..len)`; fills `out` and returns out->problem. Never allocates more than
 * O(max_depth + keys in one object). */
cp_json_problem cp_json_scan(cp_json_check *out, const char *text, size_t len, int max_depth);

/* Scan, then parse with cJSON. On a problem returns the matching code
 * (syntax -> code_syntax, UTF-8 -> code_utf8, duplicate -> code_dup, depth -> code_depth)
 * with the message "<what>: offset N: ...". The caller owns *out (cJSON_Delete). */
int cp_json_parse_strict(cJSON **out, const char *text, size_t len, const char *what, int max_depth,
                         int code_syntax, int code_utf8, int code_dup, int code_depth);

#endif
