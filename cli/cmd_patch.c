/* ctxpatch patch: parse the options, run the library's single pass (cp_patch_run), print the plan,
 * the accuracy table and the verdict. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/runtime_opts.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/export/gguf_export.h"
#include "ctxpatch/patchers/patch.h"
#include "ctxpatch/patchers/patch_auto.h"
#include "ctxpatch/patchers/patch_onnx.h"
#include "ctxpatch/model/rule.h"
#include "ctxpatch/verify/verify.h"

static const char patch_help[] =
    "usage: ctxpatch patch IN OUT --method temperature|alibi-pi|lm-infinite|rope-pi|fire-threshold\n"
    "                      [method options] | --rule RULE.json\n"
    "                      [--target-len N] [--verify PROBES] [--lengths L,...] [--json]\n"
    "                      [--depths A:B:N] [--samples N] [--seed S] [--threads T]\n"
    "                      [--device cpu|cuda] [--work-budget N]\n"
    "                      [--min-accuracy A] [--no-regression-at L,...] [--tokenizer PATH]\n"
    "                      [--require exact] [--shard-size BYTES] [--no-verify] [--force]\n"
    "                      [--to safetensors|onnx|gguf] [--for ctxpatch] [--dtype TYPE]\n"
    "                      [--external-threshold BYTES] [--train-len N] [--runtime-dir NODE_MODULES]\n"
    "       ctxpatch patch IN OUT --method auto [--target-len N] [--lengths L,...] [--budget SECONDS]\n"
    "                      [--calibrate M] [--calibration-samples N] [verify options] [--json]\n"
    "       ctxpatch patch IN.onnx OUT.onnx [--no-verify] [--force] [verify options] --rule RULE.json |\n"
    "                      --method temperature [--tau X] | --method lm-infinite --n-local N [--n-global G] |\n"
    "                      --method alibi-pi --factor F | --dynamic|--progressive [--train-len N]\n\n"
    "Builds a length-extrapolation patch, bakes what the weights can carry into an HF folder OUT,\n"
    "runs the verify probes on the baked artifact with the original checkpoint side by side, and\n"
    "writes OUT (atomically) only when the verdict passes; otherwise prints the accuracy table,\n"
    "writes nothing and exits 1. The fidelity (exact-weights, native-config, ctxpatch-metadata)\n"
    "is printed and stored in OUT's metadata; docs/patching.md has the table. A rule (part) that\n"
    "would live only in ctxpatch metadata, which the format's runtimes ignore, is refused before\n"
    "any work unless --for ctxpatch; the runtimes that execute OUT are printed and recorded\n"
    "(\"effective_in\").\n\n"
    "  --rule FILE       the patch is this rule file (any rule of ../shared/spec/attention-rules.md,\n"
    "                    e.g. top_k with from_layer/distance/rows), certified like the methods; no\n"
    "                    method options; --method may be left out: one mechanism alone names its\n"
    "                    method (its fidelity is planned as that method's), a mix is method \"rule\"\n"
    "                    (all of it as ctxpatch metadata)\n"
    "  --json            print the outcome as one JSON document on stdout (output, written,\n"
    "                    verdict, method, fidelity, probe selection and the whole certificate),\n"
    "                    nothing else on stdout (as every command's --json)\n"
    "method options:\n"
    "  temperature     --tau X (1e-6..1000) | --calibrate pmax|entropy|log|prop1|prop2 (default pmax)\n"
    "                  at --target-len N (default the longest --lengths); --per-layer;\n"
    "                  --calibration-samples N sequences per length (default 4);\n"
    "                  --schedule: a temperature_schedule calibrated at each --lengths past the\n"
    "                  training length (target length when none is), [L_tr, 1] first; kept as\n"
    "                  ctxpatch metadata (safetensors) or graph nodes (--to onnx)\n"
    "                  --scope encoder|self|all (T5; default encoder)\n"
    "  alibi-pi        --factor F (static) | --dynamic | --progressive; --train-len N (default\n"
    "                  the model's config; an in-place ONNX rewrite with --no-verify needs it)\n"
    "  lm-infinite     --n-global G (10) --n-local N (training length) --ceiling D (n-local)\n"
    "                  [--top-k K]\n"
    "  rope-pi         --factor F >= 1 (config.json rope_scaling linear, times any existing factor)\n"
    "  fire-threshold  --threshold L\n"
    "  auto            certify every candidate of a fixed grid that fits the model (and whose rule the\n"
    "                  target format's runtimes execute, unless --for ctxpatch) on the same probes\n"
    "                  (temperature calibrated and as a schedule; alibi-pi --factor T/L, --dynamic,\n"
    "                  --progressive; lm-infinite --n-local L/2 and L; fire-threshold L and T; rope-pi\n"
    "                  --factor T/L; L the training length, T the target), keep the passing one with\n"
    "                  the best mean accuracy at the lengths past L (ties: lower ppl, then the earlier),\n"
    "                  print the comparison and store it in the certificate (\"auto\"); no pass: nothing\n"
    "                  written, exit 1. --budget SECONDS (default 900, at most 604800): a candidate\n"
    "                  starts only while the time spent is below it (the first always runs; 0: one)\n"
    "verify options (as 'ctxpatch verify'): --verify PROBES (--probe is the same option; 'ppl'\n"
    "  needs --corpus); --lengths (default the training length and --target-len); --depths (default\n"
    "  0:1:5); --samples; --device cpu|cuda (calibration and verify engines; the certificate names the\n"
    "  device); --min-accuracy A (default none); --no-regression-at (default every length:\n"
    "  the patch may not lose to the original); --margin; --corpus FILE and the --ppl-* options;\n"
    "  the patch must also help past the training length and the design see a harm, else the verdict\n"
    "  is \"no effect\" or \"inconclusive\" and nothing is written (--accept-no-gain,\n"
    "  --max-detectable-drop D, --accept-underpowered; docs/certificate.md \"Verdicts\").\n"
    "  --sequential [--looks K]: each probe and length stops drawing prompts once its verdict is\n"
    "  decided, looking every K prompts (default 8; docs/certificate.md \"Sequential verdicts\").\n"
    "  --no-shared-prefix: every prompt alone (the same certificate but its run block; for timing).\n"
    "  --baseline-cache DIR: take the original's side from DIR/<key>.json, written by an earlier run\n"
    "  on the same original, tokenizer, probes, engine and threads (the patches of one base model in\n"
    "  CI), instead of running it; otherwise run it and write that file (docs/certificate.md,\n"
    "  \"Baseline cache\"; the certificate records it in run.baseline_from_cache).\n"
    "  Without --verify the default probe set certifies: every retrieval probe the ORIGINAL model\n"
    "  answers with accuracy above 0.5 at its training length (screened first on 10 prompts each),\n"
    "  plus ppl when --corpus is given; the probes used and skipped are printed and recorded in the\n"
    "  certificate (probes.selection).\n"
    "  --require exact   refuse a patch the weights alone cannot carry\n"
    "  --shard-size BYTES  split model.safetensors into shards of at most BYTES (K/M/G suffixes),\n"
    "                    with model.safetensors.index.json (default: one file)\n"
    "  --to onnx         write the ONNX layout (docs/onnx.md): onnx/model.onnx of the original weights\n"
    "                    with the whole rule as graph nodes (fidelity \"graph\"), certified on the C\n"
    "                    engine under that rule (default: safetensors)\n"
    "  --dtype TYPE      (onnx) weight storage: fp32 (default), fp16 or bf16 (computed in fp32);\n"
    "                    (gguf) f32 (default), f16, bf16 or q8_0\n"
    "  --runtime-dir DIR (gguf, onnx) a node_modules folder with node-llama-cpp or onnxruntime-node\n"
    "                    (default $CTXPATCH_RUNTIMES): the probe prompts also run in llama.cpp /\n"
    "                    onnxruntime on the written file, and their logits must equal the engine's\n"
    "                    within the format's tolerance, else the certification fails; without it the\n"
    "                    certificate says the runtime equivalence was not checked (docs/certificate.md)\n"
    "  --external-threshold BYTES  (onnx) initializers this large go to onnx/model.onnx.data\n"
    "                    (K/M/G suffixes; default 1024, onnx's own; past 1 GiB inline, all go there)\n"
    "  --for ctxpatch    write an artifact whose rule (or part of it) lives only in ctxpatch metadata,\n"
    "                    which its format's runtimes ignore (transformers, vLLM and TGI for safetensors,\n"
    "                    llama.cpp for gguf): refused by default; its block and certificate then say\n"
    "                    \"effective_in\": [\"ctxpatch\"] (docs/patching.md, \"Runtimes\")\n"
    "  --train-len N     the training length the model was trained at (default: the config's\n"
    "                    max_position_embeddings or the GGUF's context_length); recorded in the\n"
    "                    certificate with its source, and a GGUF written gets it as context_length\n"
    "  --work-budget N   the most work the whole patch may plan (calibration, probe screening,\n"
    "                    certification), in attention pairs: each pass over n tokens counts\n"
    "                    n(n+1)/2 (default 1e10; docs/reliability.md); checked before any of it runs,\n"
    "                    and with --method auto before each candidate (skipped: budget)\n"
    "  --no-verify       skip certification; OUT is marked \"certified\": false\n"
    "  --force           replace an existing OUT (only once the new one is certified)\n"
    "  --to gguf         write OUT as one llama.cpp GGUF file (llama, gpt_neox, bloom, mpt, gpt2, t5):\n"
    "                    rope-pi as {arch}.rope.scaling.*, a temperature baked into the q weights;\n"
    "                    other rules would be ctxpatch.* keys llama.cpp ignores: refused unless\n"
    "                    --for ctxpatch (docs/gguf.md)\n\n"
    "In-place ONNX rewrite (IN a .onnx file or a folder holding model.onnx or onnx/model.onnx, OUT ending\n"
    "in .onnx): the rule is spliced into the graph's own attention (a temperature before each attention\n"
    "Softmax or in the scale of com.microsoft Attention / MultiHeadAttention / GroupQueryAttention; a\n"
    "temperature_schedule or the Lambda mask as nodes before each Softmax; a static ALiBi factor in the\n"
    "slopes constant), every other byte kept;\n"
    "external data files are copied beside OUT. When ctxpatch recovers the graph's model, it is certified\n"
    "on the C engine under the rule first (as --to onnx; a temperature without --tau is calibrated) and\n"
    "the certificate goes into the graph's metadata_props; otherwise no certificate can be produced and\n"
    "--no-verify is required. Rules the graph cannot express are refused in one line naming the node\n"
    "(docs/onnx.md, \"Patching a third-party graph in place\").\n";

static bool parse_double(const char *opt, const char *v, double *out, double lo, double hi) {
  char *end;
  *out = strtod(v, &end);
  if (*end || end == v || !(*out >= lo && *out <= hi) || !isfinite(*out)) {
    if (isfinite(hi)) cli_usage_error("patch", "%s must be in [%.10g, %.10g], got '%s'", opt, lo, hi, v);
    else cli_usage_error("patch", "%s expects a number >= %g, got '%s'", opt, lo, v);
    return false;
  }
  return true;
}
/* Removes the temporary folder once this process is gone, however it ends (kill -9 included):
 * the child blocks on a pipe whose only write end this process holds, and at EOF runs rm -rf.
 * After a commit the folder has been renamed into place, so the rm finds nothing. The child
 * only calls async-signal-safe functions (the engine's threads may exist by then). */
static void start_watchdog(void *ctx, const char *tmp) {
  (void)ctx;
  int fds[2];
  if (pipe(fds) != 0) return;
  char *const argv[] = {"rm", "-rf", "--", (char *)tmp, NULL};
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return;
  }
  if (pid == 0) {
    close(fds[1]);
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    int nul = open("/dev/null", O_RDWR);
    if (nul >= 0) {
      dup2(nul, 0);
      dup2(nul, 1);
      dup2(nul, 2);
    }
    char c;
    for (;;) {
      ssize_t r = read(fds[0], &c, 1);
      if (r == 0 || (r < 0 && errno != EINTR)) break;
    }
    execv("/bin/rm", argv);
    _exit(127);
  }
  close(fds[0]);
  fcntl(fds[1], F_SETFD, FD_CLOEXEC); /* held open until this process exits */
}

/* Printed from inside the pass, before the (long) bake and verify stages. */
static void print_plan(void *ctx, const cp_patch *patch, const cp_bake_plan *plan) {
  (void)ctx;
  char *rule_text = cp_rule_to_string(&patch->rule);
  printf("patch: %s %s\n", cp_patch_method_name(patch->method), rule_text ? rule_text : "");
  if (patch->method == CP_PATCH_ROPE_PI) printf("patch: rope_scaling linear factor %g\n", plan->rope_factor);
  printf("fidelity: %s (%s)\n", cp_fidelity_name(plan->fidelity), plan->note);
  free(rule_text);
  fflush(stdout);
}

static void print_calibrating(void *ctx, const char *method, int64_t target_len) {
  (void)ctx;
  if (target_len) fprintf(stderr, "calibrating tau (%s) at length %lld...\n", method, (long long)target_len);
  else fprintf(stderr, "calibrating a tau schedule (%s) at the --lengths past the training length...\n", method);
}

/* Everything the command line says. */
typedef struct {
  const char *in, *out_dir, *method_text, *tok_path, *require, *to, *dtype, *rule_path, *runtime_dir, *for_text;
  bool no_verify, force, json, auto_mode, have_budget;
  double budget; /* --method auto: seconds */
  cp_rule rule; /* --rule */
  unsigned long long shard_size, external_threshold;
  cp_patch_options po;
  cli_verify_opts vo;
} patch_args;

/* A method option with a value: 1 taken, 0 not one, -1 bad value (usage error printed). */
static int method_opt(cp_patch_options *po, const char *a, const char *v) {
  unsigned long long u = 0;
  bool ok = true;
  if (!strcmp(a, "--calibrate")) po->calibrate = v;
  else if (!strcmp(a, "--scope")) po->scope = v;
  /* A tau past 1000 flattens attention to uniform (1e308 zeroed every query weight); a factor below
   * 1 is no interpolation (alibi-pi and rope-pi both stretch positions by it). */
  else if (!strcmp(a, "--tau")) ok = parse_double(a, v, &po->tau, 1e-6, 1000);
  else if (!strcmp(a, "--factor")) ok = parse_double(a, v, &po->factor, 1, CLI_MAX_TOKENS);
  else if (!strcmp(a, "--threshold")) ok = parse_double(a, v, &po->threshold, 1e-6, INFINITY);
  /* Token counts: an explicit 0 would read as "unset" (the default) downstream, so it is
   * refused; --n-global 0 (no global tokens) is a real choice. */
  else if (!strcmp(a, "--target-len")) ok = cli_parse_u64_in("patch", a, v, 1, CLI_MAX_TOKENS, &u), po->target_len = (int64_t)u;
  else if (!strcmp(a, "--train-len")) ok = cli_parse_u64_in("patch", a, v, 1, CLI_MAX_TOKENS, &u), po->train_len = (int64_t)u;
  else if (!strcmp(a, "--n-global")) ok = cli_parse_u64_in("patch", a, v, 0, CLI_MAX_TOKENS, &u), po->n_global = (int64_t)u, po->have_n_global = true;
  else if (!strcmp(a, "--n-local")) ok = cli_parse_u64_in("patch", a, v, 1, CLI_MAX_TOKENS, &u), po->n_local = (int64_t)u;
  else if (!strcmp(a, "--ceiling")) ok = cli_parse_u64_in("patch", a, v, 1, CLI_MAX_TOKENS, &u), po->ceiling = (int64_t)u;
  else if (!strcmp(a, "--top-k")) ok = cli_parse_u64_in("patch", a, v, 1, CLI_MAX_TOKENS, &u), po->top_k = (int)u;
  else if (!strcmp(a, "--calibration-samples"))
    ok = cli_parse_u64_in("patch", a, v, 1, 1000, &u), po->calibration_samples = (int)u;
  else return 0;
  return ok ? 1 : -1;
}

/* Parses argv into *pa; CLI_OK, or the status to exit with (help printed, usage error). */
static int parse_args(patch_args *pa, int argc, char **argv, bool *help) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (cli_is_help(a)) {
      *help = true;
      return CLI_OK;
    }
    if (!strcmp(a, "--per-layer")) pa->po.per_layer = true;
    else if (!strcmp(a, "--schedule")) pa->po.schedule = true;
    else if (!strcmp(a, "--dynamic")) pa->po.dynamic = true;
    else if (!strcmp(a, "--progressive")) pa->po.progressive = true;
    else if (!strcmp(a, "--no-verify")) pa->no_verify = true;
    else if (!strcmp(a, "--force")) pa->force = true;
    else if (!strcmp(a, "--json")) pa->json = true;
    else if (cli_verify_flag(&pa->vo, a)) continue;
    else if (a[0] == '-' && a[1]) {
      if (!v) return cli_usage_error("patch", "%s needs a value", a);
      i++;
      int taken = cli_verify_opt(&pa->vo, "patch", a, v);
      if (!taken) taken = method_opt(&pa->po, a, v);
      if (taken < 0) return CLI_USAGE;
      if (taken) continue;
      if (!strcmp(a, "--method")) pa->method_text = v;
      else if (!strcmp(a, "--rule")) pa->rule_path = v;
      else if (!strcmp(a, "--budget")) {
        unsigned long long u = 0;
        if (!cli_parse_u64_in("patch", a, v, 0, (unsigned long long)CP_AUTO_MAX_BUDGET, &u)) return CLI_USAGE;
        pa->budget = (double)u, pa->have_budget = true;
      }
      else if (!strcmp(a, "--tokenizer")) pa->tok_path = v;
      else if (!strcmp(a, "--require")) pa->require = v;
      else if (!strcmp(a, "--to")) pa->to = v;
      else if (!strcmp(a, "--runtime-dir")) pa->runtime_dir = v;
      else if (!strcmp(a, "--for")) pa->for_text = v;
      else if (!strcmp(a, "--dtype")) pa->dtype = v;
      else if (!strcmp(a, "--shard-size")) {
        if (!cli_parse_size("patch", a, v, &pa->shard_size)) return CLI_USAGE;
      } else if (!strcmp(a, "--external-threshold")) {
        if (!cli_parse_size("patch", a, v, &pa->external_threshold)) return CLI_USAGE;
      } else return cli_usage_error("patch", "unknown option '%s'", a);
    } else if (!pa->in) pa->in = a;
    else if (!pa->out_dir) pa->out_dir = a;
    else return cli_usage_error("patch", "unexpected argument '%s'", a);
  }
  if (!pa->in || !pa->out_dir) return cli_usage_error("patch", "needs IN and OUT");
  if (cli_check_output_name("patch", pa->out_dir) != CLI_OK) return CLI_USAGE;
  if (!pa->method_text && !pa->rule_path) return cli_usage_error("patch", "missing --method (or --rule FILE)");
  if (pa->no_verify && pa->vo.probes_text) return cli_usage_error("patch", "--no-verify and --verify exclude each other");
  if (pa->require && strcmp(pa->require, "exact") != 0)
    return cli_usage_error("patch", "--require accepts only 'exact', got '%s'", pa->require);
  if (pa->to && strcmp(pa->to, "safetensors") != 0 && strcmp(pa->to, "onnx") != 0 && strcmp(pa->to, "gguf") != 0)
    return cli_usage_error("patch", "unsupported --to '%s' (supported: safetensors, onnx, gguf)", pa->to);
  if (pa->for_text && strcmp(pa->for_text, "ctxpatch") != 0)
    return cli_usage_error("patch", "--for accepts only 'ctxpatch' (an artifact for ctxpatch's engine alone), got '%s'",
                           pa->for_text);
  bool onnx = pa->to && !strcmp(pa->to, "onnx"), gguf = pa->to && !strcmp(pa->to, "gguf");
  if (!onnx && pa->external_threshold)
    return cli_usage_error("patch", "--external-threshold applies to --to onnx only");
  if (!onnx && !gguf && pa->dtype) return cli_usage_error("patch", "--dtype goes with --to onnx or gguf");
  if (onnx && (pa->require || pa->shard_size))
    return cli_usage_error("patch", "--require and --shard-size apply to --to safetensors only");
  if (gguf && pa->shard_size) return cli_usage_error("patch", "--shard-size does not apply to --to gguf");
  if (pa->rule_path) {
    int rc = cp_rule_load(&pa->rule, pa->rule_path);
    if (rc) return cli_report(rc);
    pa->po.rule = &pa->rule;
    pa->po.method = cp_patch_rule_method(&pa->rule);
  }
  pa->po.method_given = pa->method_text != NULL;
  pa->auto_mode = pa->method_text && !strcmp(pa->method_text, "auto");
  if (pa->have_budget && !pa->auto_mode) return cli_usage_error("patch", "--budget goes with --method auto");
  if (!pa->have_budget) pa->budget = CP_AUTO_DEFAULT_BUDGET;
  /* auto: the library refuses the method options it chooses itself (cp_patch_auto_run) */
  if (!pa->auto_mode &&
      ((pa->method_text && cp_patch_method_from_name(&pa->po.method, pa->method_text)) || cp_patch_options_check(&pa->po)))
    return cli_usage_error("patch", "%s", cp_error_message());
  if (!cli_verify_opts_parse(&pa->vo, "patch")) return CLI_USAGE;
  if (pa->vo.baseline_cache && (pa->no_verify || pa->auto_mode))
    return cli_usage_error("patch", "--baseline-cache goes with a certified patch of one method (--method auto "
                                    "already runs the original once for all its candidates)");
  /* The longest verified length is the default target. */
  if (!pa->po.target_len && pa->vo.n_lengths > 0) pa->po.target_len = pa->vo.lengths[pa->vo.n_lengths - 1];
  pa->po.schedule_lengths = pa->vo.lengths; /* borrowed for the whole run */
  pa->po.n_schedule_lengths = pa->vo.n_lengths;
  pa->po.work_budget = pa->vo.work_budget;
  pa->po.seed = pa->vo.seed;
  pa->po.threads = (int)pa->vo.threads;
  pa->po.device = pa->vo.device;
  return CLI_OK;
}

/* Which probes certified and why the others did not (the default probe set). */
void cli_patch_print_selection(const cp_patch_outcome *oc, const cp_verify_params *vp) {
  if (oc->n_screened == 0) return;
  printf("probes: default set, screened on the original at its training length %lld (%lld prompts each, floor "
         "accuracy %g):\n", (long long)oc->screen_length, (long long)oc->screen_prompts, CP_PATCH_PROBE_FLOOR);
  for (int i = 0; i < oc->n_screened; i++)
    printf("  %-9s %5.3f  %s\n", cp_probe_name(oc->screened[i]), oc->screened_accuracy[i],
           oc->screened_used[i] ? "used" : "skipped: the original itself does not do it at its training length");
  printf("  %-9s        %s\n", "ppl", vp->corpus_path ? "used (--corpus)" : "skipped: no --corpus");
}

/* Which runtimes execute the artifact (cp_patch_outcome.effective_in). */
void cli_patch_print_effective_in(const cp_patch_outcome *oc) {
  if (oc->n_effective_in == 1 && !strcmp(oc->effective_in[0], CP_PATCH_CTXPATCH_ONLY)) {
    printf("effective in ctxpatch only: no runtime of this format executes the patch (%s)\n", oc->plan.note);
    return;
  }
  printf("effective in:");
  for (int i = 0; i < oc->n_effective_in; i++) printf("%s %s", i ? "," : "", oc->effective_in[i]);
  printf("\n");
}

/* The verdict and where the artifact went; the exit status. */
static int print_outcome(const cp_patch_outcome *oc, const char *out_dir, const cp_verify_thresholds *th) {
  if (oc->verified) {
    cli_print_baseline_cache(oc->result, true);
    cli_print_verify_result(oc->result, th, "original [95% CI]");
    /* Timings are printed only: the certificate stays reproducible (docs/certificate.md). */
    printf("verdict: %s (%.1f s, %.0f tokens/s)\n", cp_verdict_name(oc->verdict), oc->result->seconds,
           oc->result->seconds > 0 ? (double)oc->result->tokens / oc->result->seconds : 0.0);
    for (int i = 0; i < oc->n_reasons; i++) printf("  %s\n", oc->reasons[i]);
    cli_print_runtime_check(oc->certificate_json);
  }
  if (!oc->pass) {
    cli_printf(stdout, "certification failed: nothing written to %s\n", out_dir);
    return CLI_FAIL;
  }
  cli_patch_print_effective_in(oc);
  if (oc->verified) cli_printf(stdout, "wrote %s (certified, certificate sha256 %s)\n", out_dir, oc->certificate_sha256);
  else cli_printf(stdout, "wrote %s (NOT certified: --no-verify)\n", out_dir);
  return CLI_OK;
}

/* patch --json: the outcome as one document (NULL: out of memory). */
cJSON *cli_patch_outcome_json(const cp_patch_outcome *oc, const char *out_dir) {
  cJSON *o = cJSON_CreateObject(), *cert = oc->certificate_json ? cJSON_Parse(oc->certificate_json) : NULL;
  if (!o || (oc->certificate_json && !cert)) {
    cJSON_Delete(o);
    cJSON_Delete(cert);
    return NULL;
  }
  cJSON_AddStringToObject(o, "output", out_dir);
  cJSON_AddBoolToObject(o, "written", oc->written);
  cJSON_AddBoolToObject(o, "certified", oc->verified && oc->pass);
  cJSON_AddStringToObject(o, "verdict", !oc->verified ? "not verified (--no-verify)" : cp_verdict_name(oc->verdict));
  cJSON_AddStringToObject(o, "method", cp_patch_method_name(oc->patch.method));
  cJSON_AddStringToObject(o, "fidelity", cp_fidelity_name(oc->plan.fidelity));
  cJSON_AddStringToObject(o, "note", oc->plan.note);
  if (oc->n_effective_in > 0)
    cJSON_AddItemToObject(o, "effective_in", cJSON_CreateStringArray(oc->effective_in, oc->n_effective_in));
  else cJSON_AddNullToObject(o, "effective_in");
  if (oc->verified && oc->pass) cJSON_AddStringToObject(o, "certificate_sha256", oc->certificate_sha256);
  else cJSON_AddNullToObject(o, "certificate_sha256");
  if (cert) cJSON_AddItemToObject(o, "certificate", cert);
  else cJSON_AddNullToObject(o, "certificate");
  return o;
}

/* patch --json: the outcome as one document on stdout; the exit status. */
static int print_outcome_json(const cp_patch_outcome *oc, const char *out_dir) {
  cJSON *o = cli_patch_outcome_json(oc, out_dir);
  if (!o) return cli_report(cp_nomem("patch --json"));
  int status = cli_print_json(o);
  if (status == CLI_OK && !oc->pass) status = CLI_FAIL;
  cJSON_Delete(o);
  return status;
}

/* patch IN.onnx OUT.onnx (cp_patch_onnx): options of the other paths are usage errors;
 * methods the rewriter cannot express are refused before any work; *rule gets the rule the
 * options name when it needs no model (--rule, --tau, lm-infinite), for a dry run that refuses
 * what the graph cannot carry before a certification runs. CLI_OK or the exit status. */
static int rewrite_args(patch_args *pa, cp_rule *rule, bool *have_rule) {
  if (pa->to || pa->dtype || pa->external_threshold || pa->shard_size || pa->require)
    return cli_usage_error("patch", "an in-place ONNX rewrite (OUT ending in .onnx) takes no --to, --dtype, "
                           "--external-threshold, --shard-size or --require");
  const cp_patch_options *o = &pa->po;
  if (o->method != CP_PATCH_TEMPERATURE && o->method != CP_PATCH_LM_INFINITE && o->method != CP_PATCH_ALIBI_PI &&
      o->method != CP_PATCH_RULE && !pa->rule_path)
    return cli_usage_error("patch", "an in-place ONNX rewrite takes --method temperature, lm-infinite, alibi-pi or --rule FILE "
                           "(%s changes what the graph computes before its attention)", cp_patch_method_name(o->method));
  cp_rule_init(rule);
  *have_rule = true;
  if (pa->rule_path) *rule = pa->rule;
  else if (o->method == CP_PATCH_TEMPERATURE && o->tau > 0 && !o->per_layer && !o->schedule)
    rule->n_temperature = 1, rule->temperature[0] = o->tau;
  else if (o->method == CP_PATCH_ALIBI_PI && o->factor > 0 && !o->dynamic && !o->progressive)
    rule->alibi_mode = CP_ALIBI_STATIC, rule->alibi_factor = o->factor;
  else if (o->method == CP_PATCH_ALIBI_PI && o->dynamic + o->progressive == 1 && o->factor <= 0 && o->train_len)
    rule->alibi_mode = o->dynamic ? CP_ALIBI_DYNAMIC : CP_ALIBI_PROGRESSIVE, rule->train_len = o->train_len;
  else if (o->method == CP_PATCH_LM_INFINITE && o->n_local > 0 && !o->ceiling && !o->top_k)
    rule->has_lambda = true, rule->n_global = o->have_n_global ? o->n_global : 10, rule->n_local = o->n_local;
  else *have_rule = false;
  /* dynamic / progressive without train_len take the model's: only a certification knows it */
  if (*have_rule && (rule->alibi_mode == CP_ALIBI_DYNAMIC || rule->alibi_mode == CP_ALIBI_PROGRESSIVE) &&
      !rule->train_len && !pa->no_verify)
    *have_rule = false;
  if (!*have_rule && pa->no_verify)
    return cli_usage_error("patch", "with --no-verify an in-place ONNX rewrite takes --rule FILE, --method temperature "
                           "--tau X, --method lm-infinite --n-local N [--n-global G] or --method alibi-pi --factor F | --dynamic "
                           "--train-len N | --progressive --train-len N "
                           "(no model is run to calibrate or resolve defaults)");
  return CLI_OK;
}

int cmd_patch(int argc, char **argv) {
  static patch_args pa; /* holds a cp_rule (tens of KiB): not on the stack */
  memset(&pa, 0, sizeof pa);
  cp_patch_options_init(&pa.po);
  cli_verify_opts_init(&pa.vo, "0:1:5");
  cp_probe_kind *probes = NULL;
  int n_probes = 0, rc = 0;
  bool help = false, pp_gguf = false, ppl = false;
  uint32_t pp_gguf_type = 0;
  cp_patch_outcome oc;
  cp_patch_onnx_result rw; /* patch IN.onnx OUT.onnx */
  memset(&oc, 0, sizeof oc);
  memset(&rw, 0, sizeof rw);
  int status = parse_args(&pa, argc, argv, &help);
  if (help) fputs(patch_help, stdout);
  if (help || status != CLI_OK) goto done;
  static cp_rule rw_rule; /* tens of KiB: not on the stack */
  char rw_model[CLI_PATH_MAX];
  bool rewrite = cli_patch_rewrite_model(rw_model, pa.in, pa.out_dir), have_rule = false;
  if (rewrite && pa.auto_mode) {
    status = cli_usage_error("patch", "--method auto writes a folder or a GGUF file, not an in-place ONNX rewrite");
    goto done;
  }
  if (rewrite) {
    const char *rins[] = {pa.in, pa.rule_path, pa.tok_path, pa.vo.corpus};
    if ((status = rewrite_args(&pa, &rw_rule, &have_rule)) != CLI_OK) goto done;
    if ((rc = cli_check_outputs(rins, 4, &pa.out_dir, 1, false))) {
      status = cli_report(rc);
      goto done;
    }
  }
  const char *ins[] = {pa.in, pa.tok_path, pa.rule_path, pa.vo.corpus};
  pp_gguf = pa.to && !strcmp(pa.to, "gguf");
  if (pp_gguf && pa.dtype && cp_gguf_dtype_from_name(&pp_gguf_type, pa.dtype)) {
    status = cli_usage_error("patch", "%s", cp_error_message());
    goto done;
  }
  if ((!rewrite && (rc = cli_check_outputs(ins, 4, &pa.out_dir, 1, !pp_gguf))) ||
      (pa.vo.probes_text && (rc = cli_parse_probe_set(&probes, &n_probes, &ppl, pa.vo.probes_text)))) {
    status = cli_report(rc);
    goto done;
  }
  if (ppl && !pa.vo.corpus) {
    status = cli_usage_error("patch", "the ppl probe needs --corpus FILE");
    goto done;
  }
  cp_verify_params vp;
  cp_verify_thresholds th;
  cp_verify_params_init(&vp);
  cp_verify_thresholds_init(&th);
  cli_verify_opts_apply(&pa.vo, probes, n_probes, &vp, &th);
  vp.stats = true;
  if (cli_progress_wanted()) vp.progress = cli_progress_bar;
  cp_patch_params pp;
  cp_patch_params_init(&pp);
  pp.verify = pa.no_verify ? NULL : &vp;
  pp.default_probes = !pa.vo.probes_text;
  pp.thresholds = &th;
  pp.tokenizer_path = pa.tok_path;
  pp.device = pa.vo.device_desc;
  pp.require_exact = pa.require != NULL;
  pp.replace = pa.force;
  pp.shard_size = pa.shard_size;
  pp.to_gguf = pp_gguf;
  pp.for_ctxpatch = pa.for_text != NULL;
  pp.gguf_type = pp_gguf_type;
  pp.on_tmp_dir = start_watchdog;
  pp.on_calibrate = print_calibrating;
  if (!pa.json) pp.on_plan = print_plan; /* --json: nothing but the document on stdout */
  cp_runtime_params rt;
  char rt_script[4096];
  cli_runtime_params(&rt, pa.runtime_dir, rt_script);
  pp.runtime = &rt;
  cp_onnx_export_params ep;
  cp_onnx_export_params_init(&ep);
  if (pa.to && !strcmp(pa.to, "onnx")) {
    if (!cli_parse_onnx_dtype(&ep.weight_dtype, pa.dtype)) {
      status = cli_usage_error("patch", "--dtype expects fp32, fp16 or bf16, not '%s'", pa.dtype);
      goto done;
    }
    ep.external_threshold = pa.external_threshold;
    pp.onnx = &ep;
  }
  /* A tokenizer given as a file travels with the artifact when IN has none of its own. */
  size_t tl = pa.tok_path ? strlen(pa.tok_path) : 0;
  if (tl >= 5 && !strcmp(pa.tok_path + tl - 5, ".json")) pp.tokenizer_file = pa.tok_path;
  if (pa.auto_mode) {
    status = cli_patch_auto(pa.in, pa.out_dir, &pa.po, &pp, &vp, &th, pa.budget, pa.json);
    goto done;
  }
  cp_patch_outcome *o = &oc;
  if (rewrite) {
    cp_patch_onnx_params rp = {have_rule ? &rw_rule : NULL, &pa.po, &pp};
    rc = cp_patch_onnx(&rw, rw_model, pa.out_dir, &rp);
    o = &rw.outcome;
    if (o->written) cli_patch_rewrite_print(&rw.rewrite);
    if (rc == 0 && pa.no_verify) { /* nothing was run: no verdict to print (not even with --json) */
      cli_printf(stdout, "wrote %s (NOT certified: --no-verify)\n", pa.out_dir);
      goto done;
    }
  } else rc = cp_patch_run(&oc, pa.in, pa.out_dir, &pa.po, &pp);
  if (rc) status = o->bad_options ? cli_usage_error("patch", "%s", cp_error_message()) : cli_report(rc);
  else if (pa.json) {
    if (o->result) cli_print_baseline_cache(o->result, false);
    status = print_outcome_json(o, pa.out_dir);
  }
  else {
    cli_patch_print_selection(o, &vp);
    status = print_outcome(o, pa.out_dir, &th);
  }
done:
  cp_patch_outcome_free(&oc);
  cp_patch_onnx_result_free(&rw);
  free(probes);
  cli_verify_opts_free(&pa.vo);
  return status;
}
