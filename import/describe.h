/* Floor: import (private). The description `ctxpatch inspect` prints, as a cJSON tree (keys in
 * docs/inspect-json.md); private because its result is a third-party type and only the CLI reads it. */
#ifndef CTXPATCH_IMPORT_DESCRIBE_H
#define CTXPATCH_IMPORT_DESCRIBE_H

#include <cjson/cJSON.h>

#include "ctxpatch/import/checkpoint.h"
#include "ctxpatch/model/hf_config.h"

/* Builds the description of an open checkpoint; `cfg` may be NULL (weights without config).
 * The caller owns *out (cJSON_Delete). */
int cp_describe_checkpoint(cJSON **out, const char *path, const cp_checkpoint *ck, const cp_hf_config *cfg);

/* A patched artifact's ctxpatch block as config.json gives it (cp_hf_config): {"method",
 * "fidelity", "rule", "baked_rule", "certified" (bool or null), "certificate_sha256" (or null)};
 * NULL when out of memory. inspect's "ctxpatch" and a re-verify certificate's "artifact". */
cJSON *cp_describe_ctxpatch(const cp_hf_config *cfg);

/* One entry of a description's "tensors": {"name", "dtype", "shape", "bytes"}. */
cJSON *cp_describe_tensor(const char *name, cp_dtype dtype, int ndim, const int64_t *shape, uint64_t nbytes);
/* The model file of an ONNX export: PATH itself when it names a regular file ending in ".onnx",
 * else the export folder's graph (cp_onnx_export_graph: PATH/onnx/model.onnx, a T5 export's
 * onnx/decoder_model_merged.onnx, ...); NULL otherwise (caller frees). */
char *cp_onnx_model_path(const char *path);
/* The description of an ONNX export (model file `model_path`; `path` as the user gave it): format
 * "onnx", opset, IR version, producer, node count, inputs, outputs, metadata, the rule (parsed),
 * fidelity and certificate digest, and every initializer (name, dtype, shape, bytes, external).
 * The caller owns *out. */
int cp_describe_onnx(cJSON **out, const char *path, const char *model_path);

#endif
