/* Floor: base. Strict JSON pre-scan used before cJSON parses untrusted text (safetensors headers,
 * config.json, index files, rules). cJSON accepts duplicate keys silently and has no
 * UTF-8 check; this scan finds those problems with their byte offsets. The scan-then-parse
 * helper that hands back a cJSON tree is private: base/json_strict.h. */
#ifndef CTXPATCH_JSON_H
#define CTXPATCH_JSON_H

#include <stddef.h>

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

#endif
