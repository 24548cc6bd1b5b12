/* Floor: verify. `ctxpatch check ARTIFACT`: decides whether a patched artifact may ship.
 *
 * Checks, each failure one line with a stable kind (docs/ci.md lists them):
 *   1. every file is hashed against SHA256SUMS, and nothing is extra or missing (the batch stamp
 *      ctxpatch-batch.json, written after the artifact, is the one file exempt; docs/batch.md);
 *   2. certificate.json is valid against its schema (docs/certificate.md, including the "patch"
 *      object an artifact's certificate has) and its verdict is a pass;
 *   3. the certificate's file digests (model.files, taken with the certificate digest field as
 *      64 zeros, docs/patching.md) match the artifact's files, and its tool version, method,
 *      fidelity, rule and baked rule match the artifact's metadata, read by one function per
 *      output format (safetensors: config.json's "ctxpatch" block and every shard's
 *      __metadata__.ctxpatch); the metadata's certificate digest is certificate.json's SHA-256;
 *   4. with `rerun`, and only when every check above passed (an edited certificate may ask for any
 *      amount of work; the re-run's is bounded by `work_budget`), the certificate's probes are run
 *      again on the artifact with its seed: every correct_by_depth count and accuracy must be
 *      equal, bit for bit; P_max and entropy, when the certificate has them, within `tolerance`.
 *   5. the certificate's runtime_check (docs/certificate.md, "Runtime check"), when present: a
 *      runtime that "differs" fails (runtime-differs), the tolerance must be the one of its weights
 *      and agree with the result, and a GGUF's comparison must name this file's content digest
 *      (runtime-content); with `rerun` and `runtime` naming a node_modules folder, and no check
 *      failed, the comparison is made again on the artifact (runtime-rerun), also for a
 *      certificate that says "not checked";
 *      prompts that differ from the certified ones (the file's own tokenizer) are reported, not failed;
 *   6. the HTML report, when present (a folder's report.html, a one-file artifact's
 *      FILE.report.html), is byte for byte the page this ctxpatch renders from the certificate
 *      (report-mismatch; docs/certificate.md, "Report").
 *   7. policy flags for CI (each failure kind policy-*): min_prompts (every compared probe and length
 *      had at least that many pairs), require_gain (the verdict included the gain criterion and
 *      found the gain), require_runtime (a runtime_check in that runtime with result "equal"),
 *      fidelity (the certificate's patch.fidelity; "exact" = "exact-weights").
 * One-file artifacts (a patched .gguf; a .onnx graph `patch IN.onnx OUT.onnx` rewrote) have no
 * manifest: the certificate travels in the file's metadata, and 2 and the metadata half of 3 are
 * checked on it (docs/ci.md). A folder holding a .gguf, and --rerun on a GGUF or ONNX artifact without
 * a runtime folder, are refused with CP_EUNSUPPORTED before any check; with one, --rerun on them
 * redoes the runtime comparison only (the probes need the safetensors folder).
 */
#ifndef CTXPATCH_VERIFY_CHECK_H
#define CTXPATCH_VERIFY_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/verify/runtime.h"

/* The file `ctxpatch batch` writes into an artifact after it is complete (docs/batch.md). */
#define CP_BATCH_STAMP_NAME "ctxpatch-batch.json"
/* A one-file artifact's report lies beside it: OUT.gguf -> OUT.gguf.report.html. */
#define CP_REPORT_SUFFIX ".report.html"
/* Default |difference| allowed for re-run P_max and entropy (accuracies: none). */
#define CP_CHECK_DEFAULT_TOLERANCE 1e-4

typedef struct {
  bool rerun;
  int threads;      /* re-run engine threads; 0 = the certificate's run.threads */
  double tolerance; /* re-run P_max / entropy tolerance */
  void (*progress)(void *ctx, int64_t done, int64_t total); /* re-run progress (may be NULL) */
  void *progress_ctx;
  /* With rerun: where the runtime comparison finds llama.cpp / onnxruntime (NULL or no
   * node_modules: not redone). */
  const cp_runtime_params *runtime;
  /* With rerun: the most work the certificate's probes may plan, in attention pairs (verify.h,
   * "Work"); 0: CP_WORK_DEFAULT_BUDGET. Over it, the re-run fails (rerun-error) before it runs. */
  uint64_t work_budget;
  /* Policy (point 7); 0 / false / NULL: not asked. */
  int64_t min_prompts;
  bool require_gain;
  const char *require_runtime; /* "llama.cpp", "onnxruntime" */
  const char *fidelity;        /* "exact" or a fidelity name ("exact-weights", "native-config", ...) */
} cp_check_params;

void cp_check_params_init(cp_check_params *p);

typedef struct {
  char kind[24]; /* stable id, e.g. "sums-mismatch" (docs/ci.md) */
  char *message; /* one line, owned */
} cp_check_failure;

typedef struct {
  const char *format;            /* "safetensors", "onnx", "gguf" (static) */
  size_t n_files;                /* files listed in SHA256SUMS */
  char certificate_sha256[65];   /* of certificate.json; "" when unreadable */
  bool reran;                    /* the probes were run again */
  int rerun_cells;               /* (probe, length) cells compared by the re-run */
  bool runtime_reran;            /* the runtime comparison was made again */
  double runtime_max_diff;       /* its max |logit difference| (NaN: not finite) */
  bool runtime_other_prompts;    /* it ran on other prompts than the certified ones (prompts_sha256) */
  cp_check_failure *failures;    /* [n_failures], in the order found; empty = pass */
  size_t n_failures, cap;
  bool oom;                      /* a failure could not be recorded (the report is incomplete) */
} cp_check_report;

/* Runs every check on the artifact folder `path`. Returns 0 when the checks ran (the artifact
 * passes when out->n_failures == 0), or a negative cp_err when it cannot be judged at all:
 * absent or unreadable path, not an artifact of any known format (CP_EFORMAT), a format check
 * does not support yet (CP_EUNSUPPORTED). The caller frees *out (cp_check_report_free). */
int cp_check_artifact(cp_check_report *out, const char *path, const cp_check_params *params);
void cp_check_report_free(cp_check_report *r);

#endif
