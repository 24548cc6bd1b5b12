/* Floor: verify. The verify stage: long retrieval probes run through the CPU engine, accuracy per
 * probe x length x depth for the patched model and (optionally) the unpatched baseline, the
 * certificate that records it, and the verdict against thresholds.
 *
 * Probes are deterministic from a seed and sized in tokens of the model's own tokenizer;
 * their text follows python/ctxpatch_ref/data.py (the probe models' training data):
 *   passkey   Mohtashami and Jaggi's recipe: task line, filler, key line at the chosen depth,
 *             "What is the pass key? The pass key is"; keys 1..50000; correct when the first
 *             integer of the generated text equals the key.
 *   lines     LongEval line retrieval; correct when the last integer of the output equals the
 *             asked line's value.
 *   needle    needle in a haystack: "The special magic number is K." in the filler; first
 *             integer; meant for the lengths x depths heatmap.
 *   multikey  RULER's harder passkey: three named keys (two distractors), the question names
 *             one; first integer.
 * Each prompt fills the length minus 8 tokens (room for the answer, as the probe models'
 * evaluation does). Greedy decoding, at most max_new_tokens (10) new tokens, stop at eos.
 *   ppl       not a retrieval probe: NLL per token by position bucket on windows of a text
 *             corpus (ctxpatch/verify/ppl.h), requested with cp_verify_params.corpus.
 * Verdicts are statistical (ctxpatch/verify/stats.h): both sides answer the same prompts, and a
 * regression is declared by Tango's paired score test against a non-inferiority margin.
 * The certificate as a cJSON tree and the HTML report drawn from it are declared in the private
 * verify/certificate_json.h (public headers carry no third-party type).
 */
#ifndef CTXPATCH_VERIFY_H
#define CTXPATCH_VERIFY_H

#include <stdbool.h>
#include <stdint.h>

#include "ctxpatch/import/model.h"
#include "ctxpatch/model/rule.h"
#include "ctxpatch/engine/engine.h"
#include "ctxpatch/tokenizers/tokenizer.h"
#include "ctxpatch/verify/ppl.h"

typedef enum { CP_PROBE_PASSKEY, CP_PROBE_LINES, CP_PROBE_NEEDLE, CP_PROBE_MULTIKEY, CP_PROBE_COUNT } cp_probe_kind;

const char *cp_probe_name(cp_probe_kind kind);
/* Parses "passkey", "lines", "needle", "multikey"; CP_EVERIFY_PROBE otherwise. */
int cp_probe_from_name(cp_probe_kind *out, const char *name);

typedef struct {
  char *prompt;    /* NUL-terminated UTF-8, owned */
  int64_t *ids;    /* prompt tokens (tokenizer's post-processor applied), owned */
  size_t n_ids;
  int64_t answer;  /* the integer the model must produce */
  double depth;    /* where the answer sits, 0 = start, 1 = end */
} cp_probe_sample;

/* Builds one sample of `kind` fitting `n_tokens` tokens (see above), deterministic in `seed`. */
int cp_probe_make(cp_probe_sample *out, const cp_tokenizer *tok, cp_probe_kind kind, int64_t n_tokens, double depth,
                  uint64_t seed);
void cp_probe_sample_free(cp_probe_sample *s);
/* Scores generated text against the answer with the probe's rule (first or last integer). */
bool cp_probe_correct(cp_probe_kind kind, const char *generated, int64_t answer);

typedef struct {
  const cp_probe_kind *probes;
  int n_probes;       /* may be 0 when a corpus is given (ppl only) */
  const int64_t *lengths;
  int n_lengths;
  const double *depths;
  int n_depths;
  int samples;        /* per (probe, length, depth) cell; default 1 */
  uint64_t seed;      /* default 0 */
  int threads;        /* engine threads; 0 = every CPU */
  cp_device device;   /* where the engines run (default CP_DEVICE_CPU; --device cuda) */
  /* How the two sides (patched, baseline) run each prompt: 0 = on two host threads with CUDA
   * (each engine on its own stream, so the GPU overlaps them) and one after the other on the CPU
   * (whose engine already uses every core; docs/cuda.md); 1 = one after the other; 2 = two threads.
   * The results are the same bytes either way (collected by side, not by finishing order). */
  int side_threads;
  bool baseline;      /* also run the unpatched model */
  /* Baseline side's model (borrowed; NULL = the same model with the identity rule). `ctxpatch
   * patch` certifies the baked artifact against the original checkpoint this way. */
  const cp_model *baseline_model;
  /* With baseline: the baseline side is not run again but taken from this earlier run (borrowed),
   * whose PATCHED side ran the baseline model with no rule and the same probes, lengths, depths,
   * samples, seed, threads, device, max_new_tokens, corpus and stats as these params (the shape
   * is checked, CP_EARG; the rest is the caller's promise). The result is the same as running it:
   * `patch --method auto` certifies every candidate against one run of the original. */
  const struct cp_verify_result *baseline_from;
  /* With baseline (and no baseline_from): a folder of the baseline side's outcomes from earlier
   * runs (docs/certificate.md, "Baseline cache"; NULL = none). A run whose key (a SHA-256 over
   * everything that determines that side) names a good file there takes the side from it and does
   * not run the original; otherwise it runs the original and writes the file. baseline_path: the
   * file or folder the baseline model was read from (its files are hashed into the key, as the
   * certificate's model.files lists them; NULL: the cache is not used, with a warning);
   * baseline_widened: its matrices were widened to float32 when opened (not cp_model_open_stored). */
  const char *baseline_cache, *baseline_path;
  bool baseline_widened;
  bool stats;         /* P_max / entropy per length (one extra forward per length and side) */
  /* Run every prompt alone instead of continuing each from the rows it shares with the previous
   * prompt of its length (cp_engine_cache; same results bit for bit, more tokens processed). */
  bool unshared;
  int max_new_tokens; /* default 10 */
  /* The ppl probe: windows of the text file corpus_path (NULL = no ppl) split at
   * corpus_delimiter (NULL = CP_PPL_DEFAULT_DELIMITER), ppl_windows per length (default 4), NLL
   * by ppl_buckets position buckets (default 8). */
  const char *corpus_path, *corpus_delimiter;
  int ppl_windows, ppl_buckets;
  /* Called after each sample with the number done and the total (may be NULL). */
  void (*progress)(void *ctx, int64_t done, int64_t total);
  void *progress_ctx;
  /* The most work the run may plan, in attention pairs (cp_work_pass); 0 = CP_WORK_DEFAULT_BUDGET.
   * A plan over it is refused before anything runs (CP_EVERIFY_WORK). */
  uint64_t work_budget;
  /* Sequential verdicts (docs/certificate.md, "Sequential verdicts"; ctxpatch/verify/sequential.h):
   * looks > 0 runs each (probe, length) in rounds (every depth once per sample, depths in
   * increasing order), looks at its pairs every `looks` prompts and stops the cell once its part of
   * the verdict under `judge` (borrowed; required) is decided. 0 = the fixed design: every prompt.
   * With `replay` (borrowed, [n_probes * n_lengths]; `check --rerun`) each cell runs exactly that
   * many prompts in the same order and nothing is decided (judge may be NULL). */
  int looks;
  const struct cp_verify_thresholds *judge;
  const int *replay;
  /* The patched side's engine runs through llama.cpp's context shift (cp_engine_shift; n_ctx 0:
   * off): a runtime option measured as a row beside the candidates (`patch --method auto --to
   * gguf`, `verify --context-shift`). The baseline side never shifts. */
  cp_engine_shift shift;
} cp_verify_params;

void cp_verify_params_init(cp_verify_params *p);

/* Work, counted before a run starts (docs/reliability.md, "Work budget"): every pass of the
 * engine over n tokens (a prompt and the tokens generated after it, a ppl window, a calibration
 * forward) costs the query-key pairs its causal attention computes, n (n + 1) / 2 (n^2 for an
 * encoder-decoder, whose encoder sees both ways): at least the tokens processed, and the
 * quadratic term that makes long contexts slow. Sums and products saturate at UINT64_MAX.
 * Untrusted lengths (a config's max_position_embeddings, an edited certificate) bound memory
 * through the lengths check; this bounds time. */
#define CP_WORK_DEFAULT_BUDGET 10000000000ull /* 1e10 pairs */
uint64_t cp_work_pass(int64_t n_tokens, bool bidirectional);
uint64_t cp_work_add(uint64_t a, uint64_t b);
uint64_t cp_work_mul(uint64_t a, uint64_t b);
/* The budget in force: `budget`, or CP_WORK_DEFAULT_BUDGET when 0. */
uint64_t cp_work_budget(uint64_t budget);
/* 0 when `work` fits `budget` (0 = the default); else CP_EVERIFY_WORK with one line naming `what`,
 * the work, the budget and the option that raises it (--work-budget). */
int cp_work_check(uint64_t work, uint64_t budget, const char *what);
/* The work cp_verify_run(model, params) plans: every probe x length x depth x sample on each
 * side that runs, the ppl windows, the statistics passes. */
uint64_t cp_verify_plan_work(const cp_verify_params *p, const cp_model *model);

typedef enum { CP_SIDE_PATCHED = 0, CP_SIDE_BASELINE = 1 } cp_verify_side;

typedef struct cp_verify_result {
  int n_probes, n_lengths, n_depths, samples;
  cp_probe_kind *probes; /* [n_probes] */
  int64_t *lengths;      /* [n_lengths] */
  double *depths;        /* [n_depths] */
  bool has_baseline;
  /* correct[side][((p * n_lengths) + l) * n_depths + d]: samples answered correctly */
  int *correct[2];
  /* With a baseline, the paired outcomes: only[side][cell] = samples that side answered and the
   * other did not (only[CP_SIDE_BASELINE] are the losses, only[CP_SIDE_PATCHED] the gains). */
  int *only[2];
  /* ppl (has_ppl): mean NLL per token (nats) of bucket b at length l over the windows,
   * ppl_nll[side][l * ppl_buckets + b], and over every scored position, ppl_mean[side][l] */
  bool has_ppl;
  cp_ppl_corpus corpus; /* with has_ppl: the corpus read, owned */
  int ppl_windows, ppl_buckets;
  double *ppl_nll[2], *ppl_mean[2];
  /* mean P_max / entropy of the self-attention softmaxes per length (NaN if not measured) */
  double *pmax[2], *entropy[2]; /* [n_lengths] */
  /* answered[cell * samples + k]: the patched side answered sample k of that cell (0/1) */
  unsigned char *answered;
  /* With a baseline, the same for the baseline side (run here or taken from baseline_from): 0 not
   * asked (a sequential cell stopped first), 1 wrong, 2 right */
  unsigned char *baseline_answered;
  /* A result read from a baseline cache file, as baseline_from: the prompts whose answer it holds
   * ([cells * samples], 0/1; NULL: every one). A prompt it lacks runs on the baseline side as
   * without it (a file a sequential run wrote holds only the prompts that run asked). */
  unsigned char *answered_known;
  /* baseline_from's answers this run took instead of running the prompt on the baseline side */
  int64_t prompts_from;
  /* With cp_verify_params.baseline_cache: the cache key; whether the baseline side was taken from
   * the cache file (nothing of that side ran here, and none of its tokens are counted below) and
   * that file's SHA-256; the lines (owned, '\n'-separated; NULL: none) saying why a cache file was
   * ignored or not written, for the caller to print as warnings */
  char cache_key[65], cache_file_sha256[65];
  bool baseline_cached;
  char *cache_warnings;
  int64_t tokens;        /* prompt + generated tokens processed (both sides; a cached side: none) */
  int64_t side_tokens[2]; /* the same per side */
  /* prompt tokens not processed but taken from a shared prefix's cache (cp_engine_cache: the
   * probes of one length run in order of depth), both sides and per side; tokens + tokens_reused
   * is what the prompts and answers hold */
  int64_t tokens_reused, side_reused[2];
  /* the same two counts per length, both sides summed, [n_lengths]: what each length costs */
  int64_t *length_tokens, *length_reused;
  double seconds;        /* wall time of the run */
  /* Sequential design (params.looks > 0; else 0 and NULL): prompts between looks, looks of a full
   * cell, and per (probe, length) cell [p * n_lengths + l]: prompts run, looks taken, why it
   * stopped (cp_seq_stop), whether its own gain boundary was crossed, and the lost and gained pairs
   * at each look taken, look_pairs[(cell * n_looks + j) * 2 + {0, 1}]. */
  int looks_every, n_looks;
  int *used, *looks_taken, *look_pairs;
  unsigned char *stop, *gain_crossed;
} cp_verify_result;

/* Why a cell of a sequential run stopped: its last look; a regression declared; no regression
 * established by the futility boundary; nothing the remaining prompts could give would change
 * its part of the verdict (curtailment); or, in a gain cell whose other parts were decided, the
 * gain-futility rule declared the pooled gain not shown. */
typedef enum {
  CP_SEQ_LAST_LOOK,
  CP_SEQ_REGRESSION,
  CP_SEQ_FUTILITY,
  CP_SEQ_CURTAILED,
  CP_SEQ_GAIN_FUTILITY,
  CP_SEQ_STOP_COUNT
} cp_seq_stop;
/* "last look", "regression", "futility", "curtailed", "gain-futility" */
const char *cp_seq_stop_name(cp_seq_stop s);

/* Runs every probe x length x depth x sample through the engine with `rule` (patched side)
 * and, with params->baseline, with the identity rule. Caller frees *out. */
int cp_verify_run(cp_verify_result **out, const cp_model *model, const cp_tokenizer *tok, const cp_rule *rule,
                  const cp_verify_params *params);
void cp_verify_result_free(cp_verify_result *r);

/* Accuracy of one cell, of one (probe, length) over depths, or NaN without that side. */
double cp_verify_accuracy(const cp_verify_result *r, cp_verify_side side, int probe, int length, int depth);
double cp_verify_accuracy_at(const cp_verify_result *r, cp_verify_side side, int probe, int length);
/* Correct answers of one side at (probe, length) over depths and samples, and the number of
 * prompts of the design (samples x depths). */
int64_t cp_verify_correct_at(const cp_verify_result *r, cp_verify_side side, int probe, int length);
int64_t cp_verify_prompts_at(const cp_verify_result *r);
/* Prompts run at (probe, length): cp_verify_prompts_at, or fewer where a sequential cell stopped;
 * and of those, the prompts at depth index `depth` (samples, or a sequential cell's share of its
 * rounds: the depths in increasing order, samples-major). */
int64_t cp_verify_prompts_in(const cp_verify_result *r, int probe, int length);
int64_t cp_verify_prompts_at_depth(const cp_verify_result *r, int probe, int length, int depth);
/* The paired comparison at (probe, length), with a baseline: the prompts run there, `lost` answered by the
 * baseline only, `gained` by the patched model only; its one-sided p-value of a drop beyond
 * `margin` (cp_tango_p_value). */
double cp_verify_pair_test(const cp_verify_result *r, int probe, int length, double margin, int64_t *lost,
                           int64_t *gained);

typedef struct cp_verify_thresholds {
  double min_accuracy;      /* each (probe, length) patched accuracy >= this; < 0 = none */
  /* Lengths where no probe may regress: for accuracy, Tango's test must not declare a drop
   * beyond `margin` at level `alpha` (defaults CP_STATS_MARGIN, CP_STATS_ALPHA); for ppl, the
   * patched mean NLL may exceed the baseline's by at most ppl_margin nats (default 0.05). */
  const int64_t *no_regression_at;
  int n_no_regression;
  double margin, alpha, ppl_margin;
  /* ppl "flat": patched NLL at the longest length at most ppl_flat nats above its NLL at
   * flat_train_len (which must be a measured length); ppl_flat < 0 = not asked */
  double ppl_flat;
  int64_t flat_train_len;
  /* With no_regression_at (a paired comparison), the default criterion also asks (docs/certificate.md,
   * "Verdicts"):
   *   gain: at the no-regression lengths past gain_after (the training length; 0 = unknown: all of
   *     them) the patch is better: the exact sign test finds more retrieval pairs gained than lost
   *     at level alpha (pooled over probes and those lengths), or the patched ppl NLL is below the
   *     original's by more than ppl_margin (mean over those lengths). Else "no effect".
   *   power: the retrieval design detects a drop of max_detectable_drop (default
   *     CP_STATS_MAX_DETECTABLE_DROP) with power CP_STATS_POWER (cp_tango_detectable_drop). Else
   *     "inconclusive".
   * accept_no_gain / accept_underpowered drop the criterion (the old behaviour, asked explicitly). */
  int64_t gain_after;
  bool accept_no_gain, accept_underpowered;
  double max_detectable_drop;
} cp_verify_thresholds;

void cp_verify_thresholds_init(cp_verify_thresholds *t);
/* Whether `t` asks anything at all; a verdict without a criterion is "none", never "pass". */
bool cp_verify_has_criterion(const cp_verify_thresholds *t);
/* Whether the verdict on `r` under `t` includes the gain criterion / the power criterion. */
bool cp_verify_gain_judged(const cp_verify_result *r, const cp_verify_thresholds *t);
bool cp_verify_power_judged(const cp_verify_result *r, const cp_verify_thresholds *t);

/* The gain test's numbers (cp_verify_gain): the lengths it pooled (lengths past gain_after among
 * no_regression_at; n_lengths 0 = none was compared), the discordant pairs there over every
 * retrieval probe, the sign test's p-value (1 without pairs), the mean ppl NLL the patch saves
 * there (NaN without ppl), and whether that is a gain. */
typedef struct {
  int n_lengths;
  int64_t lost, gained;
  double p_value, ppl_saved;
  bool found;
  /* the level the pooled sign test was judged at (alpha; less in a sequential design), whether
   * a sequential cell crossed its own gain boundary (which shows the gain by itself), and whether
   * the gain-futility rule stopped the pooled test (it then shows no gain; futile_cell: that
   * cell, p * n_lengths + l) */
  double level;
  bool boundary, futile;
  int64_t futile_cell;
} cp_verify_gain_test;
void cp_verify_gain(cp_verify_gain_test *g, const cp_verify_result *r, const cp_verify_thresholds *t);
/* Whether r->lengths[l] is one of the gain test's lengths (its first occurrence). */
bool cp_verify_gain_length(const cp_verify_result *r, const cp_verify_thresholds *t, int l);
/* The sequential design of a sequential result `r` judged under `t` (ctxpatch/verify/sequential.h);
 * CP_EARG when r is not sequential or the design is out of range. */
struct cp_seq_design;
int cp_verify_seq_design(struct cp_seq_design *d, const cp_verify_result *r, const cp_verify_thresholds *t);
/* The detectable drop the verdict's power criterion judges: the fixed design's
 * (cp_tango_detectable_drop) or the sequential design's (cp_seq_detectable_drop). */
double cp_verify_detectable_drop(const cp_verify_result *r, const cp_verify_thresholds *t);

/* Verdicts, strongest first: a failed threshold; an underpowered design; no gain; pass. */
typedef enum {
  CP_VERDICT_NONE,
  CP_VERDICT_PASS,
  CP_VERDICT_FAIL,
  CP_VERDICT_NO_EFFECT,
  CP_VERDICT_INCONCLUSIVE
} cp_verdict;
/* "none", "pass", "fail", "no effect", "inconclusive" (the certificate's verdict.result). */
const char *cp_verdict_name(cp_verdict v);

/* Applies the thresholds; *verdict (CP_VERDICT_NONE without a criterion) and a heap array of
 * one-line reasons for each failed threshold, missing gain or missing power (caller frees each
 * and the array). A threshold that cannot be judged (no baseline, a length not run) is
 * CP_EVERIFY_THRESHOLD. */
int cp_verify_judge(cp_verdict *verdict, char ***reasons, int *n_reasons, const cp_verify_result *r,
                    const cp_verify_thresholds *t);

typedef struct {
  const char *model_path;
  const char *device;       /* "cpu", or "cuda: GPU NAME (compute capability X.Y), driver A.B" */
  int threads;
  const cp_rule *rule;      /* patched rule */
  uint64_t seed;
  int max_new_tokens;
} cp_certificate_info;

#endif
