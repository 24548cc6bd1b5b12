/* Floor: converters (private). The description `ctxpatch inspect` prints, as a cJSON tree (keys in
 * docs/inspect-json.md); private because its result is a third-party type and only the CLI reads it. */
#ifndef CTXPATCH_CONVERTERS_DESCRIBE_H
#define CTXPATCH_CONVERTERS_DESCRIBE_H

#include <cjson/cJSON.h>

#include "ctxpatch/converters/checkpoint.h"
#include "ctxpatch/converters/hf_config.h"

/* Builds the description of an open checkpoint; `cfg` may be NULL (weights without config).
 * The caller owns *out (cJSON_Delete). */
int cp_describe_checkpoint(cJSON **out, const char *path, const cp_checkpoint *ck, const cp_hf_config *cfg);

#endif
