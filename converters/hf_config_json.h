/* Floor: converters (private). The cJSON tree of a parsed config.json, for the one writer that
 * must rewrite the file (patchers/bake.c): every reader uses cp_hf_config's typed fields. */
#ifndef CTXPATCH_CONVERTERS_HF_CONFIG_JSON_H
#define CTXPATCH_CONVERTERS_HF_CONFIG_JSON_H

#include <cjson/cJSON.h>

#include "ctxpatch/converters/hf_config.h"

/* A fresh tree of cfg's config.json text (cfg->text), parsed through the same strict scanner as
 * cp_hf_config_parse. The caller owns *out (cJSON_Delete). */
int cp_hf_config_json(cJSON **out, const cp_hf_config *cfg);

#endif
