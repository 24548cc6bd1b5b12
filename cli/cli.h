/* Shared helpers for the command-line program. Only the CLI prints errors and picks exit codes. */
#ifndef CTXPATCH_CLI_H
#define CTXPATCH_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/formats/tensor.h"
#include "ctxpatch/engine/engine.h"
#include "ctxpatch/patchers/patch.h"
#include "ctxpatch/patchers/patch_onnx.h"
#include "ctxpatch/verify/verify.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

typedef struct {
  const char *name;
  const char *summary;
  int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
} cli_command;

/* printf to `f` with the text made safe for a terminal (cp_quote_text, keeping newlines): for
 * lines that carry names from files or paths (messages from cp_error_set are safe already). */
void cli_printf(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Every string value of the tree `v` (and its siblings) made safe for a terminal as cli_printf
 * makes text, before a table is printed from it; the tree no longer reads back as the original. */
void cli_json_printable(cJSON *v);
/* Prints "ctxpatch: error CODE_NAME: message" for a library failure and returns CLI_FAIL. */
int cli_report(int rc);
/* Prints "ctxpatch CMD: message" plus a hint to --help and returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool cli_is_help(const char *arg);
/* Parses a non-negative integer option value; returns false (and prints) on junk. */
bool cli_parse_u64(const char *cmd, const char *opt, const char *text, unsigned long long *out);
/* As cli_parse_u64, and refuses a value outside [lo, hi] naming the option and the bound. */
bool cli_parse_u64_in(const char *cmd, const char *opt, const char *text, unsigned long long lo,
                      unsigned long long hi, unsigned long long *out);
/* Token counts (lengths, --target-len, --n-local, ...): past 2^20 the KV cache alone of a small
 * model outgrows a workstation, and int arithmetic on rows x lengths stays far from overflow. */
#define CLI_MAX_TOKENS (1ll << 20)
/* The largest byte count an option takes (--shard-size, --external-threshold): 1 PiB; past it a
 * value only overflowed (2^64 and above read as 2^64-1). */
#define CLI_MAX_BYTES (1ull << 50)
/* An option given twice is refused rather than the last one silently winning; false (and
 * prints) naming it. argv[0] is the subcommand. */
bool cli_no_repeated_options(int argc, char **argv);
/* A positive byte count, optionally with K, M or G (2^10, 2^20, 2^30); false (and prints) on junk. */
bool cli_parse_size(const char *cmd, const char *opt, const char *text, unsigned long long *out);
/* --device cpu|cuda, the one parser of verify, patch, calibrate, forward and batch: false (usage
 * error printed) for anything else. */
bool cli_parse_device(const char *cmd, const char *text, cp_device *out);
/* Before any work: CLI_OK with desc[0..n) naming the device for certificates and output ("cpu",
 * or "cuda: NAME (compute capability X.Y), driver A.B, runtime C.D"); else prints the one-line
 * error "--device cuda: this build has no CUDA (configure with -DCTXPATCH_CUDA=ON)" or
 * "--device cuda: no CUDA device present (REASON)" and returns CLI_USAGE. */
int cli_device_ready(const char *cmd, cp_device d, char *desc, size_t n);
/* ONNX weight storage: "fp32" (also NULL), "fp16" or "bf16"; false for anything else. */
bool cli_parse_onnx_dtype(cp_dtype *out, const char *text);

/* Token ids "3,17,5", or "@FILE" holding them (commas or whitespace): a heap array the caller
 * frees. Junk or an empty list: CP_EMODEL_INPUT naming `opt` or the file and the entry. */
int cli_parse_ids(int64_t **out, int64_t *n_out, const char *opt, const char *text);
/* "256,1024,4096" -> positive lengths; false (after printing a usage error) on junk. */
bool cli_parse_lengths(const char *cmd, const char *text, int64_t **out, int *n_out);

/* Before any work: each output (NULL entries skipped) must be writable as io.h says (no FIFO,
 * symlink, ...) and must not be or contain any input (NULL skipped), nor lie inside one as a folder
 * or an existing file: replacing it would destroy the input; nor be any file a reader has noted so
 * far (cp_input_check_output: a graph's data files, tokenizer, config, the other graph of a pair),
 * so commands call it again once the model is loaded, before the work. 0, or CP_EFILETYPE /
 * CP_EOVERLAP with the message set. */
int cli_check_outputs(const char *const *ins, int n_in, const char *const *outs, int n_out, bool folder);
/* Right after parsing: an output name too long for its temporary (cp_atomic_name_check) is a usage
 * error (printed; CLI_USAGE), not a failure once the work is done. CLI_OK otherwise. */
int cli_check_output_name(const char *cmd, const char *out);

/* "A:B:N" (N depths evenly from A to B) or "0,0.5,1"; -1 on junk (no message). */
int cli_parse_depths(double **out, int *n, const char *text);
/* "passkey,lines" -> probe kinds; CP_EVERIFY_PROBE naming an unknown one. */
int cli_parse_probes(cp_probe_kind **out, int *n, const char *text);
/* As cli_parse_probes, and "ppl" sets *ppl instead (the list may then hold no retrieval probe). */
int cli_parse_probe_set(cp_probe_kind **out, int *n, bool *ppl, const char *text);
/* The probe and threshold options `verify` and `patch` share: --lengths, --depths,
 * --no-regression-at, --samples, --seed, --threads, --device, --min-accuracy, --margin, and the ppl probe's
 * --corpus, --corpus-delimiter, --ppl-windows, --ppl-buckets, --ppl-margin, --ppl-flat, and
 * --work-budget (attention pairs; docs/reliability.md, "Work budget"). The texts
 * point into argv; the parsed arrays are owned by the struct (cli_verify_opts_free). */
typedef struct {
  const char *probes_text; /* --probe, or its alias --verify (one name; both given is refused) */
  const char *lengths_text, *depths_text, *no_reg_text;
  unsigned long long samples, seed, threads; /* samples 0: CLI_DEFAULT_PAIRS / depths, rounded up */
  cp_device device;    /* --device (checked by cli_verify_opts_parse) */
  char device_desc[512]; /* cli_device_ready's description, for the certificate */
  double min_accuracy; /* < 0: none */
  double margin, ppl_margin, ppl_flat; /* ppl_flat < 0: none */
  double max_detectable_drop;          /* --max-detectable-drop */
  bool accept_no_gain, accept_underpowered;
  bool sequential;          /* --sequential: sequential verdicts (docs/certificate.md) */
  bool unshared;            /* --no-shared-prefix: every prompt alone (the same answers; for timing) */
  unsigned long long looks; /* --looks K: prompts between looks (0: CP_SEQ_DEFAULT_EVERY) */
  const char *corpus, *corpus_delimiter_text;
  char *corpus_delimiter; /* the text with \n, \t, \\ unescaped; owned */
  unsigned long long ppl_windows, ppl_buckets;
  unsigned long long work_budget; /* 0: CP_WORK_DEFAULT_BUDGET */
  const char *baseline_cache; /* --baseline-cache DIR (docs/certificate.md, "Baseline cache") */
  int64_t *lengths;    /* [n_lengths], NULL without --lengths (a command may set a default) */
  int64_t *no_reg;     /* [n_no_reg], NULL without --no-regression-at */
  double *depths;      /* [n_depths] */
  int n_lengths, n_no_reg, n_depths;
} cli_verify_opts;

/* Paired prompts per (probe, length) the default sample count aims at: with the default margin
 * Tango's test then detects a drop of 0.16 with 80% power (docs/certificate.md). */
#define CLI_DEFAULT_PAIRS 40
void cli_verify_opts_init(cli_verify_opts *o, const char *default_depths);
/* Option `a` with value `v`: 1 taken, 0 not one of these, -1 bad value (usage error printed). */
int cli_verify_opt(cli_verify_opts *o, const char *cmd, const char *a, const char *v);
/* Flag `a` (no value: --accept-no-gain, --accept-underpowered, --sequential, --no-shared-prefix): true when taken. */
bool cli_verify_flag(cli_verify_opts *o, const char *a);
/* Range checks, then parses the texts; false after printing a usage error. */
bool cli_verify_opts_parse(cli_verify_opts *o, const char *cmd);
/* Fills vp and th from o (they keep pointing into o and probes). */
void cli_verify_opts_apply(const cli_verify_opts *o, const cp_probe_kind *probes, int n_probes,
                           cp_verify_params *vp, cp_verify_thresholds *th);
void cli_verify_opts_free(cli_verify_opts *o);
/* The accuracy table with 95% intervals, the paired comparison with the baseline (labelled
 * base_label) and the ppl NLL, on stdout (cli/verify_print.c). */
void cli_print_verify_result(const cp_verify_result *r, const cp_verify_thresholds *th, const char *base_label);
/* What a run did with its baseline cache: each warning (a cache file ignored or not written) on
 * stderr, and with `table` one line on stdout saying where the baseline side came from. */
void cli_print_baseline_cache(const cp_verify_result *r, bool table);
/* A progress bar on stderr for cp_verify_params.progress (only on a terminal). */
void cli_progress_bar(void *ctx, int64_t done, int64_t total);
/* A one-line progress note on stderr (cp_calib_params.progress; only on a terminal); a NULL
 * `what` ends the line. */
void cli_progress_note(void *ctx, const char *what);
/* Whether progress may be drawn: stderr is a terminal (never into files or pipes). */
bool cli_progress_wanted(void);

/* --json means one thing in every command: the command's result as one JSON document on stdout
 * (nothing else goes to stdout; files are named by their own options). cli_print_json prints
 * `doc` (pretty) and a newline; CLI_OK, or CLI_FAIL after reporting an allocation failure. */
int cli_print_json(const cJSON *doc);
/* Rounds every number of `doc` to CP_NUM_JSON_DIGITS significant digits (base/num.h), except
 * inside members whose key ends in "rule" (a rule is applied exactly as written) or is one of
 * `exact` (NULL-terminated, may be NULL: values a user copies into a rule, such as taus). */
void cli_json_round(cJSON *doc, const char *const *exact);

int cmd_inspect(int argc, char **argv);
/* `inspect --attention-stats`: attention statistics against input length. */
int inspect_attention_stats(const char *path, const int64_t *lengths, int n_lengths, const char *rule_path,
                            const char *ids_text, unsigned long long seed, int threads, bool json);
int cmd_convert(int argc, char **argv);
int cmd_forward(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_patch(int argc, char **argv);
/* patch's printing, shared with `patch --method auto` (cli/patch_auto.c): the default probe
 * selection, and the --json document (NULL: out of memory). */
void cli_patch_print_selection(const cp_patch_outcome *oc, const cp_verify_params *vp);
void cli_patch_print_effective_in(const cp_patch_outcome *oc);
cJSON *cli_patch_outcome_json(const cp_patch_outcome *oc, const char *out_dir);
/* patch --method auto once the options are parsed (cli/patch_auto.c): the exit status. */
int cli_patch_auto(const char *in, const char *out_dir, const cp_patch_options *po, const cp_patch_params *pp,
                   const cp_verify_params *vp, const cp_verify_thresholds *th, double budget, bool json);
/* patch IN OUT.onnx on an ONNX IN (a .onnx file, or a folder holding model.onnx or
 * onnx/model.onnx): the in-place rewrite (cp_patch_onnx). True when IN and OUT ask for it,
 * with IN's model file in model[CLI_PATH_MAX]. */
#define CLI_PATH_MAX 4096
bool cli_patch_rewrite_model(char model[CLI_PATH_MAX], const char *in, const char *out);
/* The one-line report of what the rewrite changed (cp_patch_onnx's result), on stdout. */
void cli_patch_rewrite_print(const cp_onnx_rewrite_report *rep);
int cmd_tokenize(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_batch(int argc, char **argv);

#endif
