/* Floor: patchers (private). The write pass of `ctxpatch patch` in two steps, so that a caller
 * can certify several patches and commit only the one it chooses (`patch --method auto`,
 * patchers/patch_auto.c), plus the verify set-up cp_patch_run and auto share. */
#ifndef CTXPATCH_PATCHERS_PATCH_STAGE_H
#define CTXPATCH_PATCHERS_PATCH_STAGE_H

#include <cjson/cJSON.h>

#include "ctxpatch/patchers/calibrate.h"
#include "ctxpatch/patchers/patch.h"

/* A baked and certified (or, without verify, baked) folder waiting to be committed: the hidden
 * temporary folder of OUT, its certificate (not yet written) and the ctxpatch block. */
typedef struct cp_patch_pending cp_patch_pending;

/* cp_patch_write up to the verdict (safetensors or --to gguf; not --to onnx): check, plan, bake
 * into a new hidden temporary folder of `out_dir`, certify. On a pass (or without verify)
 * *pending holds the folder; on a failing verdict *pending is NULL and the folder is gone.
 * `original`, `in`, `out_dir` and what `params` points to are borrowed until the pending folder
 * is finished or freed. out->screened* are kept (the caller's default probe set). */
int cp_patch_stage(cp_patch_pending **pending, cp_patch_outcome *out, const char *in, const char *out_dir,
                   const cp_model *original, const cp_patch *patch, const cJSON *calibration,
                   const cp_patch_params *params);
/* Adds `extra` (taken, may be NULL) to the certificate under `key`, writes certificate.json and
 * report.html, places the digest and commits OUT (one rename, or the GGUF file). Frees
 * `pending` in every case. */
int cp_patch_finish(cp_patch_pending *pending, cp_patch_outcome *out, const char *key, cJSON *extra);
/* Removes the temporary folder (nothing is written); NULL is a no-op. */
void cp_patch_pending_free(cp_patch_pending *pending);

/* The verify parameters of a pass, built once: lengths (default the training length and the
 * target), no_regression_at (default every length) and the default probe set (screened on the
 * original into `screen`'s screened* fields). `vp.lengths` and `vp.probes` point into this struct. */
typedef struct {
  cp_verify_params vp;
  cp_verify_thresholds th;
  int64_t lengths[2];
  cp_probe_kind used[CP_PROBE_COUNT];
} cp_patch_verify_setup;

/* Fills *s from params->verify / thresholds (which must be set) for model `m` and resolved
 * options `o`; *bad_options is set when the error is a usage error. */
int cp_patch_verify_prepare(cp_patch_verify_setup *s, cp_patch_outcome *screen, bool *bad_options, const cp_model *m,
                            const cp_tokenizer *tok, const cp_patch_options *o, const cp_patch_params *params);
/* The work a patch plans (ctxpatch/verify/verify.h, "Work"), counted before it runs: the
 * temperature calibration the options ask for, the default probe set's screening, and one side
 * of the certification (every probe the screening could keep; the original's side costs the
 * same). Lengths or probes that cannot be resolved count 0 (the run reports them). */
typedef struct {
  uint64_t calibration, screening, side;
} cp_patch_work;
void cp_patch_plan_work(cp_patch_work *w, const cp_model *m, const cp_patch_options *o, const cp_patch_params *params);
/* The calibration work of a temperature patch with calibration method `cm` (patch_options.c). */
uint64_t cp_patch_calibration_work(const cp_model *m, cp_cal_method cm, const cp_patch_options *o);
/* The probe tokenizer, when verifying or calibrating (`calibrates`); calibration alone falls back
 * to random ids (*tok NULL). */
int cp_patch_tokenizer_open(cp_tokenizer **tok, const char *in, bool calibrates, const cp_patch_params *p);
/* Refuses an input that is already a ctxpatch artifact. */
int cp_patch_refuse_artifact(const cp_model *m, const char *in);

#endif
