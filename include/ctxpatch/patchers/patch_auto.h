/* Floor: patchers. `ctxpatch patch --method auto`: for a model and its target length(s), certify
 * every candidate patch of a small fixed grid that fits the model on the SAME probes, lengths,
 * prompts and seed, keep the best certified one by the criterion below and write only it (its
 * certificate carries an "auto" block with the comparison). docs/patching.md, "--method auto".
 *
 * Candidates, in this order (L = training length, T = the target length: --target-len, else the
 * longest verified length); the ones whose method does not fit the family are listed as
 * "does not fit" with the reason, never run:
 *   1 temperature, one tau calibrated at T     2 temperature schedule (at the lengths past L)
 *   3 alibi-pi --factor T/L                    4 alibi-pi --dynamic    5 alibi-pi --progressive
 *   6 lm-infinite --n-local L/2                7 lm-infinite --n-local L   (n_global 10, ceiling
 *                                                n_local, no top-k: the method's defaults)
 *   8 fire-threshold --threshold L             9 fire-threshold --threshold T
 *  10 rope-pi --factor T/L
 * Unless params->for_ctxpatch, a candidate whose rule (a part of it) would live only in ctxpatch
 * metadata, which the runtimes of the target format (safetensors or gguf) do not execute, is
 * "skipped: runtime" before any work (the plan of a stand-in patch of the same parts decides).
 * Criterion: among candidates whose verdict passes, the highest mean patched accuracy over the
 * retrieval probes at the target lengths (the verified lengths past L); ties: the lower mean ppl
 * NLL there when ppl was measured, then the earlier candidate. No passing candidate: nothing is
 * written (outcome pass false).
 * Budget: the first candidate that fits always runs; a later one starts only while the seconds
 * since the start are below the budget, else it is "skipped: budget" (a budget of 0 runs exactly
 * one). With --to gguf the table also has llama.cpp's own options as rows (cp_auto_runtime_row:
 * its context shift, and --rope-scaling linear --rope-scale T/L), measured by the engine on the
 * same probes with the same verdict rules, never written: the original file with those flags.
 * The original model is run once on the probe grid and every certification takes its
 * baseline side from that run (cp_verify_params.baseline_from): the same numbers as running it.
 */
#ifndef CTXPATCH_PATCH_AUTO_H
#define CTXPATCH_PATCH_AUTO_H

#include "ctxpatch/patchers/patch.h"

#define CP_AUTO_MAX_CANDIDATES 10
/* The criterion in words, as printed and stored in the "auto" block. */
#define CP_AUTO_CRITERION                                                                                  \
  "among candidates whose verdict passes, the highest mean patched accuracy over the retrieval probes at " \
  "the target lengths (compared at 6 significant digits); ties: the lower mean ppl NLL there when "      \
  "measured, then the earlier candidate"
/* When a candidate helps, in words (stored in the "auto" block): the criterion's comparison made
 * against the original model's own figures (the shared baseline run). When the winner does not
 * help, the table says "ship the original" (the winner is still written, as certified). */
#define CP_AUTO_HELPS                                                                                 \
  "a candidate helps when its verdict passes and it beats the original by the criterion: a higher " \
  "mean accuracy at the target lengths, or the same and a lower mean ppl NLL there"
#define CP_AUTO_DEFAULT_BUDGET 900.0
#define CP_AUTO_MAX_BUDGET 604800.0 /* a week */

typedef enum {
  CP_AUTO_PASS,          /* certified, verdict pass */
  CP_AUTO_FAIL,          /* certified, verdict fail */
  CP_AUTO_NOT_FIT,       /* the method does not fit the model (reason) */
  CP_AUTO_REFUSED,       /* the patch was refused on this model (reason: the error's line) */
  CP_AUTO_SKIPPED_BUDGET, /* not run: the budget was spent */
  CP_AUTO_SKIPPED_RUNTIME, /* not run: its rule would be ctxpatch metadata the target format's runtimes
                             ignore (cp_patch_effective_check; reason names them); never with for_ctxpatch */
  CP_AUTO_NO_EFFECT,     /* certified, verdict "no effect": no gain shown; cannot win */
  CP_AUTO_INCONCLUSIVE   /* certified, verdict "inconclusive": the design could not see a harm; cannot win */
} cp_auto_status;

/* "pass", "fail", "does not fit", "refused", "skipped: budget", "skipped: runtime", "no effect",
 * "inconclusive". */
const char *cp_auto_status_name(cp_auto_status s);

typedef struct {
  cp_patch_method method;
  char options[128];     /* the `patch` options that make this candidate alone, e.g. "--method alibi-pi --factor 4" */
  cp_auto_status status;
  char reason[320];      /* not fit / refused: why; fail, no effect, inconclusive: the first reason; else "" */
  bool ran;              /* a patch was built and certified (pass or fail) */
  cp_patch patch;        /* with ran: what was certified (the calibrated tau included) */
  cp_fidelity fidelity;  /* with ran */
  cp_verdict verdict;    /* with ran: the certification's verdict */
  double accuracy;       /* with ran: the criterion's mean accuracy (NaN: no retrieval probe) */
  double nll;            /* with ran: mean ppl NLL at the target lengths (NaN: not measured) */
  double seconds;        /* wall time (printed only, never written into the artifact) */
  bool helps;            /* passes and beats the original (CP_AUTO_HELPS) */
} cp_auto_candidate;

/* llama.cpp's own options beside the candidates (`--to gguf`; docs/gguf.md): no file carries them,
 * so the row is never the artifact; it is "as good" when it helps (passes and beats the original)
 * and no passing candidate beats it by the criterion (then the table says to ship the original
 * with these flags). */
enum { CP_AUTO_ROW_SHIFT, CP_AUTO_ROW_ROPE_FLAG, CP_AUTO_MAX_RUNTIME_ROWS };
/* The context shift row keeps the first CP_AUTO_SHIFT_KEEP tokens (llama-cli --keep one fewer,
 * after its BOS) of a context of the training length, fed CP_AUTO_SHIFT_BATCH tokens at a time
 * (at most a quarter of the context). */
#define CP_AUTO_SHIFT_KEEP 4
#define CP_AUTO_SHIFT_BATCH 32
typedef struct {
  char name[160];        /* "llama.cpp context shift --keep 3 (runtime option, no file change)" */
  char flags[128];       /* what to pass llama.cpp, e.g. "-c 512 --keep 3" */
  bool ran;
  cp_verdict verdict;    /* with ran */
  char reason[320];      /* not run: why; fail, no effect, inconclusive: the first reason */
  double accuracy, nll;  /* as cp_auto_candidate's (NaN: not measured) */
  bool helps;            /* passes and beats the original */
  bool as_good;          /* helps, and no passing candidate beats it */
} cp_auto_runtime_row;

/* Large (each candidate holds a cp_rule): allocate it on the heap. */
typedef struct {
  cp_auto_candidate candidates[CP_AUTO_MAX_CANDIDATES];
  int n_candidates;
  int best;                     /* index of the winner; -1: none passed */
  int64_t *target_lengths;      /* owned: the lengths the criterion averages over */
  int n_target_lengths;
  double budget;
  /* The original model's figures on the same grid (the shared baseline run; NaN: not measured). */
  double original_accuracy, original_nll;
  bool original_scored;         /* the original was run (false when the run stopped before it) */
  bool ship_original;           /* a winner, and it does not help (CP_AUTO_HELPS) */
  /* The winner's outcome (written, certificate, table), or with no winner the screening only. */
  cp_patch_outcome outcome;
  char *auto_json;              /* owned: the "auto" block as compact JSON (also with no winner) */
  cp_auto_runtime_row runtime_rows[CP_AUTO_MAX_RUNTIME_ROWS];
  int n_runtime_rows;           /* 0 unless --to gguf */
} cp_auto_outcome;

/* Runs `patch --method auto` on IN (o: the base options; method options are refused, only
 * --calibrate, --calibration-samples, --target-len, --train-len and the run settings apply; params->verify
 * required; not --to onnx). `on_candidate` (may be NULL) is called with on_tmp_ctx after each
 * candidate is decided. Free *out with cp_auto_outcome_free (also after an error). */
int cp_patch_auto_run(cp_auto_outcome *out, const char *in, const char *out_dir, const cp_patch_options *o,
                      const cp_patch_params *params, double budget,
                      void (*on_candidate)(void *ctx, int index, const cp_auto_candidate *c));
void cp_auto_outcome_free(cp_auto_outcome *o);

#endif
