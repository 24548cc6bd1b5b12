/* Floor: model (private). config.json for the one writer that must rewrite the file
 * (patchers/bake.c): its cJSON tree, and the splice that changes members in place; every reader
 * uses cp_hf_config's typed fields. */
#ifndef CTXPATCH_MODEL_HF_CONFIG_JSON_H
#define CTXPATCH_MODEL_HF_CONFIG_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "ctxpatch/model/hf_config.h"

/* A fresh tree of cfg's config.json text (cfg->text), parsed through the same strict scanner as
 * cp_hf_config_parse. The caller owns *out (cJSON_Delete). */
int cp_hf_config_json(cJSON **out, const cp_hf_config *cfg);

/* One top-level member to set: `value` replaces the member's value where the key exists, else
 * is appended (unless only_if_present); a NULL value leaves the key as it is. */
typedef struct {
  const char *key;
  const cJSON *value;
  bool only_if_present;
} cp_hf_member;

/* cfg's config.json text with the members of `set` changed and every other byte kept
 * (hf_config_edit.c). A non-finite number in a value is refused (CP_EOVERFLOW) naming the key;
 * `what` names the file in messages. The caller owns *out (free), NUL-terminated. */
int cp_hf_config_splice(char **out, size_t *out_len, const cp_hf_config *cfg, const cp_hf_member *set, int n_set,
                        const char *what);

#endif
