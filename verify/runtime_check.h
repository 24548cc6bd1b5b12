/* Private to verify/, patchers/, cli/ and tests: the runtime check (include/ctxpatch/verify/runtime.h,
 * docs/certificate.md "Runtime check") as the certificate's "runtime_check" object, a cJSON tree. */
#ifndef CTXPATCH_VERIFY_RUNTIME_CHECK_H
#define CTXPATCH_VERIFY_RUNTIME_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "ctxpatch/verify/runtime.h"
#include "ctxpatch/verify/verify.h"

typedef enum { CP_RUNTIME_LLAMACPP, CP_RUNTIME_ONNXRUNTIME } cp_runtime_kind;

/* "llama.cpp", "onnxruntime"; from a name: CP_EARG otherwise. */
const char *cp_runtime_name(cp_runtime_kind k);
int cp_runtime_from_name(cp_runtime_kind *out, const char *name);
/* The tolerance for weights stored as `weights` ("f32", "f16", "bf16"; anything else is a
 * quantized type): CP_RUNTIME_TOL_*. */
double cp_runtime_tolerance(const char *weights);

/* The prompts compared: one per (probe, length), the probe's text at depth 0.5 from `seed` (no
 * retrieval probe: passkey's), with the logits at four positions spread over it, the last included. */
typedef struct {
  const cp_probe_kind *probes;
  int n_probes;
  const int64_t *lengths;
  int n_lengths;
  uint64_t seed;
  int threads; /* engine threads (0: every CPU) */
} cp_runtime_prompts;

/* The runtime check of `artifact` (the written .gguf file, the ONNX folder, or a .onnx graph file)
 * against the engine running `m` under `rule` (NULL: its metadata rule): *out is the
 * "runtime_check" object, result "equal", "differs" (*differs set; max_diff_at names the prompt
 * and position of the largest difference) or, without params->node_modules or the runtime's
 * package in it, or for a .onnx graph file whose output is not logits, "not checked" with the
 * reason. A runtime that is there but fails (refuses the file, crashes, passes the timeout or the
 * output bound) is CP_EVERIFY_RUNTIME with its one-line reason; the engine's errors pass through.
 * `weights`: how the artifact stores its matrices (the tolerance); NULL: a GGUF's
 * general.file_type, else "f32". Caller owns *out. */
int cp_runtime_check(cJSON **out, bool *differs, const cp_runtime_params *params, cp_runtime_kind kind,
                     const char *artifact, const cp_model *m, const cp_rule *rule, const cp_tokenizer *tok,
                     const cp_runtime_prompts *pr, const char *weights);

/* Whether params name a folder holding the package `kind` needs (false for NULL params). */
bool cp_runtime_installed(const cp_runtime_params *params, cp_runtime_kind kind);

/* The sentence a certificate carries when the runtime was not run. */
#define CP_RUNTIME_NOT_CHECKED "certified on the ctxpatch engine; runtime equivalence not checked"
/* What a certificate's input_equivalence says when onnxruntime was not run on the input graph
 * (patch IN.onnx OUT.onnx, patchers/patch_runtime.h). */
#define CP_INPUT_NOT_COMPARED "the model recovered from the input graph was not compared with the graph in onnxruntime"

#endif
