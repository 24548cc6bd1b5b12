/* Floor: patchers (private). The runtime check of a certified artifact (verify/runtime_check.h)
 * put into its certificate: patch --to gguf and --to onnx. */
#ifndef CTXPATCH_PATCHERS_PATCH_RUNTIME_H
#define CTXPATCH_PATCHERS_PATCH_RUNTIME_H

#include <cjson/cJSON.h>

#include "ctxpatch/patchers/patch.h"
#include "verify/runtime_check.h"

/* Runs the check of `artifact` (engine side: `m` under `rule`, NULL = its metadata rule) on the
 * probes and lengths of out->result, adds "runtime_check" to `cert`; when the runtime differs, the
 * verdict fails (out->pass false, a reason in out and in the certificate, out's text updated). */
int cp_patch_runtime_check(cJSON *cert, cp_patch_outcome *out, cp_runtime_kind kind, const char *artifact,
                           const cp_model *m, const cp_rule *rule, const cp_patch_params *params);

/* patch IN.onnx OUT.onnx, before the certification's probe runs (cp_patch_inplace): onnxruntime on
 * params->inplace->input_graph against the engine on `m` (the recovered model) with no rule, on
 * the prompts of params->verify (resolved: probes and lengths). *obj (the caller's) is the
 * certificate's "input_equivalence": "equal" or "not checked" (CP_INPUT_NOT_COMPARED); a graph
 * that differs is CP_EVERIFY_RUNTIME naming it, the difference and where. */
int cp_patch_input_equivalence(cJSON **obj, const cp_model *m, const cp_patch_params *params);

/* --to gguf: the baked folder `tmp` written as a GGUF file beside it (what llama.cpp will run: the
 * same tensors and hyperparameter keys; only ctxpatch.* keys differ from the final file), checked,
 * then removed. */
int cp_patch_runtime_check_gguf(cJSON *cert, cp_patch_outcome *out, const char *tmp, const char *in, const cJSON *block,
                                uint32_t gguf_type, int64_t train_len, const cp_patch_params *params);

#endif
