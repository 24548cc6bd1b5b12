/* Floor: verify. Where the runtime check finds the runtimes an artifact ships to (docs/certificate.md,
 * "Runtime check"): after `patch --to gguf` or `--to onnx` has certified an artifact on the ctxpatch
 * engine, the probe prompts run through llama.cpp (node-llama-cpp's prebuilt library) or
 * onnxruntime (onnxruntime-node) on the written file, and through the engine on the same model and
 * rule; the logits must agree within the format's tolerance.
 *
 * The runtimes are node packages in a node_modules folder the user names (`--runtime-dir`,
 * CTXPATCH_RUNTIMES); nothing is downloaded. They are driven by the node script
 * scripts/runtime/ctxpatch_runtime.mjs (installed as share/ctxpatch/ctxpatch_runtime.mjs), run
 * without a shell (ctxpatch/base/spawn.h). Without a folder, or without the package the format
 * needs in it, the certificate says "certified on the ctxpatch engine; runtime equivalence not
 * checked".
 */
#ifndef CTXPATCH_VERIFY_RUNTIME_H
#define CTXPATCH_VERIFY_RUNTIME_H

/* Max |logit difference| between the runtime and the engine that still counts as "equal", by how
 * the artifact stores its weight matrices (docs/certificate.md states the measurements behind
 * them). llama.cpp computes in its own kernels and rounds the activations to the weights' type
 * before an F16, BF16 or Q8_0 product (the engine widens the weights and keeps float32
 * activations); an ONNX graph of F16/BF16 weights is compared with the engine on the original
 * float32 weights. A rule the runtime ignores moves the logits by far more (2.7 to 4 on the probe
 * models and stories260K). */
#define CP_RUNTIME_TOL_F32 1e-3
#define CP_RUNTIME_TOL_F16 5e-2
#define CP_RUNTIME_TOL_BF16 0.25
#define CP_RUNTIME_TOL_QUANT 0.5
/* Default limit of one runtime run (seconds); the subprocess is killed after it. */
#define CP_RUNTIME_TIMEOUT 600.0

typedef struct {
  const char *node_modules; /* the runtimes' node_modules folder; NULL: runtime check not made */
  const char *script;       /* ctxpatch_runtime.mjs (needed with node_modules) */
  const char *node;         /* the node program (default "node", looked up on PATH) */
  double timeout_s;         /* default CP_RUNTIME_TIMEOUT */
  int threads;              /* runtime threads; 0: the engine's */
} cp_runtime_params;

void cp_runtime_params_init(cp_runtime_params *p);

#endif
