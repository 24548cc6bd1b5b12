/* Floor: model (private). The cJSON forms of a cp_rule, for code of this source tree that
 * already holds a cJSON tree (config.json's ctxpatch block, certificates, patch metadata); library
 * users parse and print rules as text through include/ctxpatch/model/rule.h. */
#ifndef CTXPATCH_MODEL_RULE_JSON_H
#define CTXPATCH_MODEL_RULE_JSON_H

#include <cjson/cJSON.h>

#include "ctxpatch/model/rule.h"

/* Parses the JSON form. Unknown keys, wrong types and out-of-range values are refused with
 * CP_ERULE_* codes and a message naming `what` and the key. */
int cp_rule_from_json(cp_rule *out, const cJSON *json, const char *what);
/* Canonical JSON (fixed key order, only non-default fields); the caller owns the tree
 * (cJSON_Delete); NULL when out of memory. Parsing the output gives back an equal rule. */
cJSON *cp_rule_to_json(const cp_rule *rule);

#endif
