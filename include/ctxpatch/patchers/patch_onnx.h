/* Floor: patchers. `ctxpatch patch IN.onnx OUT.onnx` as one library call: the rule spliced into a
 * third-party ONNX graph in place (ctxpatch/export/onnx_rewrite.h), certified first on the model
 * the graph describes, the external data files it references placed beside OUT. docs/onnx.md
 * "Patching a third-party graph in place".
 *
 * The pass, in order (a refusal at any step writes nothing):
 *   1. the graph is read once (cp_onnx_model_open): everything below works on those bytes; with
 *      params->rule, OUT is checked (an existing file needs replace) and the graph edited in
 *      memory: every refusal of the rewriter comes before any model is run;
 *   2. without verify (--no-verify): the edit is written to OUT with metadata_props
 *      ctxpatch.certified = "false", ctxpatch.certificate_sha256 = "";
 *   3. with verify: the model is recovered from the graph read in step 1 (cp_checkpoint_open_onnx;
 *      CP_EUNSUPPORTED when it cannot be, or when the graph is one half of a T5 export; without a
 *      rule, also when the graph cannot be read), then certified as `patch --to onnx` certifies
 *      (cp_patch_run into OUT.ctxpatch-certify, a hidden folder removed afterwards: the
 *      certificate lists that artifact's files); on a passing verdict the graph is written under
 *      the certified rule (the edit of step 1 when the rule is the same) with ctxpatch.certified =
 *      "true", ctxpatch.certificate_sha256 and ctxpatch.certificate = the certificate.json text
 *      (out->outcome.certificate_json plus its newline: the bytes the digest covers). The graph
 *      read in step 1 and its edit stay in memory through the certification (about twice the
 *      .onnx file; external data is not read): what is certified is what is rewritten. With
 *      onnxruntime (cp_patch_params.runtime), the certification compares it on IN before its
 *      probes run and on the rewrite under the certified rule after the verdict (patch.h,
 *      cp_patch_inplace): IN differing from the recovered model is CP_EVERIFY_RUNTIME, nothing
 *      written; both comparisons go into the certificate (input_equivalence, runtime_check).
 */
#ifndef CTXPATCH_PATCHERS_PATCH_ONNX_H
#define CTXPATCH_PATCHERS_PATCH_ONNX_H

#include "ctxpatch/export/onnx_rewrite.h"
#include "ctxpatch/patchers/patch.h"

typedef struct {
  /* The rule the options name without a model (borrowed), or NULL: the certification builds it
   * from `options` (a calibrated temperature, dynamic ALiBi at the model's training length).
   * Needed without verify. */
  const cp_rule *rule;
  const cp_patch_options *options; /* the certification's (cp_patch_run); unused without verify */
  /* As cp_patch_run's (borrowed, required): verify NULL is --no-verify; replace replaces an
   * existing OUT; onnx is ignored (the certification is `--to onnx` with the default export);
   * tokenizer_path NULL: tokenizer.json beside the graph or in its parent folder, else IN's. */
  const cp_patch_params *patch;
} cp_patch_onnx_params;

typedef struct {
  /* The certification (verified, pass, certificate, bad_options: as cp_patch_run's); without
   * verify only pass (true) and written. outcome.written: OUT was written. */
  cp_patch_outcome outcome;
  cp_onnx_rewrite_report rewrite; /* what was rewritten; set when outcome.written */
  bool certified;                 /* OUT carries the certificate */
} cp_patch_onnx_result;

/* The pass above on the graph file `in` (a .onnx file) into `out_path`. 0 also for a failing
 * verdict (out->outcome.pass false, nothing written). Free *out with cp_patch_onnx_result_free
 * (also after an error). */
int cp_patch_onnx(cp_patch_onnx_result *out, const char *in, const char *out_path, const cp_patch_onnx_params *p);
void cp_patch_onnx_result_free(cp_patch_onnx_result *r);

#endif
