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

/* Max |logit difference| between the runtime and the engine that still counts as "equal"
 * (docs/certificate.md states the measurements behind them). llama.cpp computes in its own
 * kernels (ggml's float32 matrix products, its softmax, RoPE tables); onnxruntime runs the graph
 * ctxpatch built, in float32. A rule the runtime ignores moves the logits by far more. */
#define CP_RUNTIME_TOLERANCE_GGUF 1e-2
#define CP_RUNTIME_TOLERANCE_ONNX 1e-3
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
