/* Floor: patchers. `ctxpatch patch`: choose a length-extrapolation patch, bake what the weights can carry, certify
 * the baked artifact on long probes against the original checkpoint, and only then write it.
 * docs/patching.md has the fidelity table (method x family) and the artifact layout.
 *
 * Artifact (an HF-layout folder, created atomically: it appears whole or not at all):
 *   config.json        the input's config, every untouched key byte for byte (only the members
 *                      below are spliced in); rope-pi multiplies rope_scaling's linear factor,
 *                      fire-threshold updates the informational fire_threshold, and a
 *                      "ctxpatch" block is added:
 *                        {"tool_version": "...", "method": "...", "fidelity": "exact-weights" |
 *                         "native-config" | "ctxpatch-metadata", "note": "<how>",
 *                         "rule": <rule JSON of what is NOT baked: the engine applies it>,
 *                         "baked_rule": <rule JSON of what the weights carry>,
 *                         "rope_scaling": {...} (rope-pi only), "calibration": {...} (optional),
 *                         "certified": true | false, "certificate_sha256": "<hex>" | null}
 *   model.safetensors  every input tensor in its stored dtype; the modified ones (query
 *                      projections, T5 bias tables, FIRE output layers, FIRE L, stored ALiBi
 *                      slopes) recomputed in float32 and stored back in that dtype;
 *                      __metadata__ {"format": "pt", "ctxpatch": <the block above, compact>};
 *                      with a shard size, model-0000k-of-0000N.safetensors (each with that
 *                      __metadata__) + model.safetensors.index.json, as `ctxpatch convert` writes
 *   tokenizer and other auxiliary files, copied unchanged
 *   certificate.json   the verify certificate (docs/certificate.md), unless --no-verify
 *   report.html        its HTML report, unless --no-verify
 *   SHA256SUMS         sha256sum manifest of every other file
 * With params->onnx (`patch --to onnx`) the folder is the ONNX layout of docs/onnx.md instead:
 *   config.json (as above, rope_scaling included, block "fidelity": "graph", "rule": the whole
 *   rule, "baked_rule": {}), the auxiliary files, onnx/model.onnx (+ onnx/model.onnx.data) of
 *   the ORIGINAL weights with the whole rule as graph nodes and metadata_props ctxpatch.rule,
 *   ctxpatch.fidelity = "graph", ctxpatch.version, ctxpatch.certificate_sha256, then
 *   certificate.json, report.html and SHA256SUMS. Certification runs the C engine on the
 *   original model with the whole rule (what the graph computes); the certificate lists the
 *   onnx/ files; the digest placeholder is in config.json and in model.onnx's metadata.
 * The certificate hashes the files it certified: config.json and model.safetensors as they are
 * except that "certificate_sha256" still holds 64 zeros (a digest cannot cover itself); the
 * digest then goes where the writers recorded the placeholder (in place in each safetensors
 * header; config.json is written again with it).
 */
#ifndef CTXPATCH_PATCH_H
#define CTXPATCH_PATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "ctxpatch/import/checkpoint.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/export/onnx_export.h"
#include "ctxpatch/model/rule.h"
#include "ctxpatch/model/runtimes.h"
#include "ctxpatch/tokenizers/tokenizer.h"
#include "ctxpatch/verify/runtime.h"
#include "ctxpatch/verify/verify.h"

typedef enum {
  CP_PATCH_TEMPERATURE,
  CP_PATCH_ALIBI_PI,
  CP_PATCH_LM_INFINITE,
  CP_PATCH_ROPE_PI,
  CP_PATCH_FIRE_THRESHOLD,
  CP_PATCH_RULE, /* `patch --rule FILE` whose rule mixes mechanisms: all of it as ctxpatch metadata */
  CP_PATCH_METHOD_COUNT
} cp_patch_method;

/* "temperature", "alibi-pi", "lm-infinite", "rope-pi", "fire-threshold", "rule". */
const char *cp_patch_method_name(cp_patch_method m);
int cp_patch_method_from_name(cp_patch_method *out, const char *name); /* CP_EARG otherwise */

/* CP_FIDELITY_GRAPH: an ONNX artifact (`patch --to onnx`) whose graph computes the whole rule. */
typedef enum { CP_FIDELITY_EXACT_WEIGHTS, CP_FIDELITY_NATIVE_CONFIG, CP_FIDELITY_METADATA, CP_FIDELITY_GRAPH } cp_fidelity;
/* "exact-weights", "native-config", "ctxpatch-metadata", "graph". */
const char *cp_fidelity_name(cp_fidelity f);

/* What a patch changes: an attention rule, or (rope-pi) RoPE's linear interpolation factor. */
typedef struct {
  cp_patch_method method;
  cp_rule rule;        /* identity for rope-pi */
  double rope_factor;  /* rope-pi: F > 0; else 0 */
} cp_patch;

/* Refuses (CP_EPATCH_FAMILY, one line naming the family and the scheme) a method that does not
 * fit the model: alibi-pi without ALiBi, rope-pi without RoPE, fire-threshold without FIRE. */
int cp_patch_method_fits(const cp_model *m, cp_patch_method method);
/* Refuses (CP_EARG, one line naming `dir`/config.json's key) rope-pi on a model whose config cannot
 * carry a linear rope_scaling: another scaling type already there (llama3, yarn), or Phi-3. */
int cp_patch_rope_pi_fits(const cp_model *m, const char *dir);
/* cp_patch_method_fits, then checks the rule against the model (cp_rule_check_model). */
int cp_patch_check(const cp_model *m, const cp_patch *patch);

/* How an artifact carries a patch. */
typedef struct {
  cp_fidelity fidelity;
  cp_rule baked;       /* carried by the weights */
  cp_rule residual;    /* left to the ctxpatch metadata (identity when everything is baked) */
  double rope_factor;  /* rope-pi: the config's new linear factor (existing * F); else 0 */
  bool stored_slopes;  /* the checkpoint stores ALiBi slopes (`*relative_pe.slopes`) */
  char note[320];      /* one line: how the patch is carried and why */
} cp_bake_plan;

/* Decides the fidelity of `patch` on this checkpoint (docs/patching.md). `ck` is the checkpoint
 * `m` was opened from (its tensor names tell whether slopes are stored). */
int cp_bake_plan_make(cp_bake_plan *out, const cp_model *m, const cp_checkpoint *ck, const cp_patch *patch);

/* The options of `ctxpatch patch` that build a patch (the CLI's flags, parsed). */
typedef struct {
  cp_patch_method method;
  double tau;              /* temperature: given tau; 0: calibrate */
  const char *calibrate;   /* temperature: calibration method name (default "pmax") */
  bool per_layer;          /* temperature: per-layer calibration */
  const char *scope;       /* temperature (T5): "encoder", "self" or "all"; NULL: the rule's default */
  int64_t target_len;      /* calibration / verify length; 0: twice the training length */
  int64_t train_len;       /* 0: the model's */
  double factor;           /* alibi-pi static or rope-pi factor; 0: none */
  bool dynamic, progressive; /* alibi-pi modes */
  int64_t n_global;        /* lm-infinite (default 10) */
  bool have_n_global;      /* --n-global was given */
  int64_t n_local, ceiling; /* lm-infinite; 0: the training length, n_local */
  int top_k;               /* lm-infinite; 0: none */
  double threshold;        /* fire-threshold L; 0: none */
  uint64_t seed;           /* calibration */
  int threads;             /* calibration; 0: all cores */
  cp_device device;        /* calibration's engine (default CP_DEVICE_CPU) */
  /* temperature: calibrate a temperature_schedule (cp_calib_schedule_rule, [L_tr, 1] first)
   * instead of one tau, at the schedule_lengths longer than the training length (borrowed;
   * none: at target_len alone). Exclusive with tau. */
  bool schedule;
  const int64_t *schedule_lengths; /* [n_schedule_lengths] */
  int n_schedule_lengths;
  int calibration_samples; /* temperature calibration: sequences per length; 0: the default (4) */
  /* `patch --rule FILE`: the rule itself (borrowed; any rule of the spec), instead of one the
   * method options build. method_given false: the method is the rule's (cp_patch_rule_method). */
  const cp_rule *rule;
  bool method_given;
  /* The most work the whole patch may plan (calibration, probe screening, certification), in
   * attention pairs (verify.h, "Work"); 0: CP_WORK_DEFAULT_BUDGET. Checked before any of it runs. */
  uint64_t work_budget;
} cp_patch_options;

/* The method a rule file is: one mechanism alone names its method (temperature or schedule,
 * alibi_scale, fire_threshold; lambda_mask / distance_ceiling / top_k are lm-infinite), so its
 * fidelity is planned as that method's; a mix is CP_PATCH_RULE (all of it as metadata). */
cp_patch_method cp_patch_rule_method(const cp_rule *r);

void cp_patch_options_init(cp_patch_options *o);
/* Refuses (CP_EARG, one line) options that belong to another method; needs no model. */
int cp_patch_options_check(const cp_patch_options *o);
/* Once the method fits the model: refuses (CP_EARG) missing or contradictory method options, and
 * fills the defaults that come from the model: target_len (twice the training length) and
 * lm-infinite's n_local, refusing when the model has no training length to give them. */
int cp_patch_options_resolve(cp_patch_options *o, const cp_model *m);
/* Builds the patch `o` (checked and resolved, as cp_patch_run does) asks for on model `m`: a temperature without tau is calibrated at
 * o->target_len (with `tok`'s probe text, random ids when NULL). *calibration_json (may be NULL)
 * gets the calibration table as owned JSON text (free()), or NULL when none was made. */
int cp_patch_from_options(cp_patch *out, char **calibration_json, const cp_model *m, const cp_tokenizer *tok,
                          const cp_patch_options *o);

/* patch IN.onnx OUT.onnx's runtime checks (patchers/patch_onnx.c; docs/certificate.md, "Runtime
 * check"), made by the --to onnx certification in place of the check of its hidden re-export, with
 * onnxruntime when it is installed (cp_patch_params.runtime):
 *   - before the certification's probe runs: onnxruntime on `input_graph` (IN, untouched) against
 *     the engine on the model recovered from it with no rule, on the runtime-check prompts: the
 *     certificate's "input_equivalence"; beyond the tolerance, CP_EVERIFY_RUNTIME naming IN, the
 *     difference and its position (nothing written);
 *   - after a passing verdict: onnxruntime on the graph write_graph writes (the rewrite under the
 *     certified rule, as OUT will hold it but for the certificate metadata) against the engine
 *     running the recovered model under that rule: the certificate's "runtime_check" ("graph":
 *     "the written graph"); differing fails the verdict. */
typedef struct cp_patch_inplace {
  const char *input_graph;
  const char *weights; /* how the graphs store their matrices ("f32", "f16", "bf16"): the tolerance */
  /* Writes the rewrite under `rule` (the certified one; train_len the certified model's) beside
   * OUT and gives its path in *path (the callee's, valid until drop_graph, which removes it). */
  int (*write_graph)(void *ctx, const char **path, const cp_rule *rule, int64_t train_len);
  void (*drop_graph)(void *ctx);
  void *ctx;
} cp_patch_inplace;

typedef struct {
  /* NULL: --no-verify (artifact marked uncertified). No lengths: the training length and
   * target_len (cp_patch_run). */
  const cp_verify_params *verify;
  /* With verify. No no_regression_at: every verified length (the patch may not lose). */
  const cp_verify_thresholds *thresholds;
  const cp_tokenizer *tok;                /* cp_patch_write with verify: the probe tokenizer */
  const char *tokenizer_path;             /* cp_patch_run: the tokenizer (NULL: IN's) */
  bool require_exact;                     /* refuse anything below exact-weights */
  bool replace;                           /* replace an existing OUT */
  uint64_t shard_size;                    /* max tensor bytes per safetensors shard; 0: one file */
  /* Non-NULL: write the ONNX layout instead of safetensors (`--to onnx`, below); its
   * certificate_sha256 and replace fields are ignored (the pass sets them). */
  const cp_onnx_export_params *onnx;
  const char *device;                     /* certificate's device (default "cpu"; as cp_certificate_info) */
  /* A tokenizer.json to copy into OUT when IN has none (the probe models share one file), so
   * that the artifact is self-contained and `ctxpatch verify OUT` finds it. NULL: none. */
  const char *tokenizer_file;
  /* Called once with the hidden temporary folder's path right after it is created (may be NULL):
   * the CLI starts a watchdog process there that removes the folder if this process dies, so
   * that even kill -9 leaves neither OUT nor a temporary folder. */
  void (*on_tmp_dir)(void *ctx, const char *path);
  void *on_tmp_ctx;
  /* Called (may be NULL) before a calibration starts (target_len 0: a schedule, at several
   * lengths), and once the plan is made (before the
   * long bake and verify stages; not when require_exact refuses it), both with on_tmp_ctx. */
  void (*on_calibrate)(void *ctx, const char *method, int64_t target_len);
  void (*on_plan)(void *ctx, const cp_patch *patch, const cp_bake_plan *plan);
  /* `patch --to gguf`: OUT is one GGUF file (ctxpatch/export/gguf_export.h) written from the baked,
   * certified folder (which is then removed): llama.rope.scaling.* for rope-pi, q weights
   * already divided by tau, and ctxpatch.method / fidelity / note / rule / baked_rule /
   * certified / certificate_sha256 / certificate (the certificate.json text) keys; certified,
   * its report beside it as OUT + CP_REPORT_SUFFIX (ctxpatch/verify/check.h). */
  bool to_gguf;
  uint32_t gguf_type;                     /* CP_GGML_F32 (0), F16, BF16, Q8_0 */
  /* With verify and no probes in it: certify on the default probe set, every retrieval probe
   * the ORIGINAL model answers above CP_PATCH_PROBE_FLOOR at its training length (screened with
   * CP_PATCH_SCREEN_PROMPTS prompts each, same seed), plus ppl when verify has a corpus. The
   * screening is in the outcome and in the certificate's probes.selection. */
  bool default_probes;
  /* cp_patch_run with onnx: IN already opened (cp_checkpoint_open_onnx), read instead of opening
   * IN again; cp_patch_run takes it (freed once the artifact no longer needs it, also on error).
   * NULL: opened from IN (always so for cp_patch_write). */
  cp_checkpoint *checkpoint;
  /* With verify and --to gguf / --to onnx: where the runtime check finds llama.cpp / onnxruntime
   * (ctxpatch/verify/runtime.h). NULL or no node_modules: the certificate's runtime_check says
   * "not checked". A runtime that computes other logits than the engine fails the verdict. */
  const cp_runtime_params *runtime;
  /* `patch --for ctxpatch`: write an artifact whose rule (part of it) lives only in ctxpatch
   * metadata, which its format's runtimes ignore (cp_patch_effective_check); its block and
   * certificate say "effective_in": ["ctxpatch"]. false: such an artifact is refused. */
  bool for_ctxpatch;
  /* With verify and onnx: patch IN.onnx OUT.onnx's checks on the graphs themselves (above);
   * NULL for every other patch. */
  const cp_patch_inplace *inplace;
} cp_patch_params;

/* The default probe set's floor (accuracy of the original at its training length) and the
 * screening sample (prompts per probe: enough to tell a model that retrieves from one that
 * guesses, far fewer than certification runs). */
#define CP_PATCH_PROBE_FLOOR 0.5
#define CP_PATCH_SCREEN_PROMPTS 10

void cp_patch_params_init(cp_patch_params *p);

/* ---- runtimes (patchers/patch_runtime.c, ctxpatch/model/runtimes.h) ---- */

/* The name an artifact effective in no third-party runtime lists in "effective_in". */
#define CP_PATCH_CTXPATCH_ONLY "ctxpatch"
#define CP_PATCH_MAX_RUNTIMES 8
/* The format `p` writes: onnx, gguf (to_gguf) or safetensors. */
cp_artifact_format cp_patch_format(const cp_patch_params *p);
/* The carriers (CP_CARRY_BIT) a plan uses in format f: weights for a baked rule, rope-linear for
 * a rope-pi factor, metadata for a residual rule; graph for ONNX. */
unsigned cp_patch_carriers(const cp_bake_plan *plan, cp_artifact_format f);
/* The runtimes (static names) of format f that load `family` and execute the whole plan, into
 * names[max]; none: one entry, CP_PATCH_CTXPATCH_ONLY. Returns the count. */
int cp_patch_effective_in(const char **names, int max, const cp_bake_plan *plan, cp_artifact_format f,
                          cp_family family);
/* CP_EPATCH_FIDELITY, one line naming OUT, the rule parts, where they would live and the
 * runtimes that ignore them, and the ways out (--to onnx, a method that travels, --for ctxpatch),
 * when the plan leaves a rule part to ctxpatch metadata in a format whose runtimes load the
 * family but do not read that metadata. 0 otherwise (ONNX always: the graph computes the rule). */
int cp_patch_effective_check(const cp_bake_plan *plan, const cp_patch *patch, cp_artifact_format f, const cp_model *m,
                           const char *out);
/* cp_patch_effective_check before any work (calibration, probe screening): the plan of a stand-in
 * patch with the same rule parts as options `o` (checked and resolved) ask for on m (ck: its
 * checkpoint), into *plan. Options the real pass would refuse give 0 here (it reports them). */
int cp_patch_effective_precheck(cp_bake_plan *plan, const cp_model *m, const cp_checkpoint *ck, const cp_patch_options *o,
                              cp_artifact_format f, const char *out);

typedef struct {
  cp_bake_plan plan;
  bool verified;              /* the verify stage ran */
  bool pass;                  /* verdict == CP_VERDICT_PASS (true with --no-verify) */
  cp_verdict verdict;         /* with verified: pass, fail, no effect, inconclusive (verify.h) */
  bool written;               /* OUT was committed */
  cp_verify_result *result;   /* owned; NULL without verify */
  char **reasons;             /* owned, [n_reasons] */
  int n_reasons;
  char certificate_sha256[65];
  cp_patch patch;             /* the patch that was applied */
  /* With verified: the certificate as JSON text (owned), also for a failed verdict (then
   * written nowhere); NULL otherwise. */
  char *certificate_json;
  /* The default probe set (verify params without probes, cp_patch_params.default_probes): the
   * screening on the original at the training length, one entry per retrieval probe. */
  int n_screened;
  cp_probe_kind screened[CP_PROBE_COUNT];
  double screened_accuracy[CP_PROBE_COUNT];
  bool screened_used[CP_PROBE_COUNT];
  int64_t screen_length;      /* the training length it ran at */
  int64_t screen_prompts;     /* prompts per probe */
  bool bad_options;           /* the error came from the options (the CLI reports a usage error) */
  /* Once planned: the runtimes (static names) that execute the artifact, or the one entry
   * CP_PATCH_CTXPATCH_ONLY (cp_patch_effective_in); the block and certificate list them. */
  const char *effective_in[CP_PATCH_MAX_RUNTIMES];
  int n_effective_in;
} cp_patch_outcome;

/* The whole `ctxpatch patch` in one pass: opens IN once (model, then checkpoint), refuses a
 * method that does not fit the family before any other work, builds the patch from `o`
 * (calibrating when asked), then as cp_patch_write. Free *out with cp_patch_outcome_free. */
int cp_patch_run(cp_patch_outcome *out, const char *in, const char *out_dir, const cp_patch_options *o,
                 const cp_patch_params *params);

/* A patch already built: check, plan (CP_EPATCH_FIDELITY when require_exact and the plan is not
 * exact-weights), bake into the hidden temporary folder of OUT, certify the baked artifact
 * (opened from that folder, so its metadata rule applies) with `original` as the baseline side,
 * and commit only on a passing verdict. A failing verdict returns 0 with out->pass false and
 * nothing written. `original` is the model opened from `in`. On error nothing is written.
 * Free *out with cp_patch_outcome_free (also after an error). */
int cp_patch_write(cp_patch_outcome *out, const char *in, const char *out_dir, const cp_model *original,
                   const cp_patch *patch, const cp_patch_params *params);
void cp_patch_outcome_free(cp_patch_outcome *o);

#endif
