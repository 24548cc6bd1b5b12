/* Private to tokenizers/hf_*.c: reading tokenizer.json nodes, shared by the component loaders
 * (limits, typed lookups, Metaspace's prepend_scheme). */
#ifndef CTXPATCH_TOKENIZERS_HF_JSON_H
#define CTXPATCH_TOKENIZERS_HF_JSON_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <cjson/cJSON.h>

#define TK_MAX_ID (1 << 24) /* ids beyond 16M are refused: no real vocabulary is near */
#define TK_MAX_STEPS 64     /* normalizer / pre-tokenizer / decoder steps after flattening */
#define TK_MAX_NESTING 4    /* Sequence inside Sequence */

static inline const cJSON *jget(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static inline const char *jstr(const cJSON *o, const char *k) {
  const cJSON *v = jget(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}
static inline bool jbool(const cJSON *o, const char *k, bool dflt) {
  const cJSON *v = jget(o, k);
  return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}
/* A token id: an integral number in [0, TK_MAX_ID). */
static inline bool jid(const cJSON *v, int32_t *out) {
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble >= TK_MAX_ID || v->valuedouble != floor(v->valuedouble))
    return false;
  *out = (int32_t)v->valuedouble;
  return true;
}

/* The head of a normalizer / pre-tokenizer / decoder node: TK_NODE_NONE for null or absent,
 * TK_NODE_SEQUENCE once a "Sequence" has had each member of its `list_key` array loaded through
 * `load(l, member, p, depth + 1)`, TK_NODE_ONE with *type set for a single component, or a
 * negative error (`what` names the component kind in the message). One copy of the Sequence rule
 * for the three chains. */
enum { TK_NODE_NONE, TK_NODE_SEQUENCE, TK_NODE_ONE };
typedef int (*tk_node_loader)(void *l, const cJSON *n, const char *p, int depth);
int tk_node_head(const char **type, const cJSON *n, const char *list_key, const char *what, const char *p,
                 int depth, tk_node_loader load, void *l);

/* Metaspace (pre-tokenizer and decoder): where the replacement is prepended. */
enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };
static inline int parse_prepend(const cJSON *o, int *out) {
  const char *ps = jstr(o, "prepend_scheme");
  if (!ps) *out = jbool(o, "add_prefix_space", true) ? PREPEND_ALWAYS : PREPEND_NEVER;
  else if (!strcmp(ps, "always")) *out = PREPEND_ALWAYS;
  else if (!strcmp(ps, "first")) *out = PREPEND_FIRST;
  else if (!strcmp(ps, "never")) *out = PREPEND_NEVER;
  else return -1;
  return 0;
}

#endif
