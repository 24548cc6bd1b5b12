/* ctxpatch verify: long retrieval probes, baseline side by side, certificate and report. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "base/json_strict.h"
#include "ctxpatch/base/cpus.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/model.h"
#include "verify/certificate_json.h"
#include "ctxpatch/model/rule.h"
#include "import/describe.h"
#include "ctxpatch/import/gguf_model.h"
#include "ctxpatch/tokenizers/tokenizer.h"
#include "ctxpatch/verify/verify.h"

static const char verify_help[] =
    "usage: ctxpatch verify MODEL [--rule RULE.json] [--baseline] --probe passkey,lines,needle,multikey,ppl\n"
    "                       --lengths 256,512,1024 [--depths 0:1:10] [--samples N] [--seed S]\n"
    "                       [--device cpu|cuda] [--threads T] [--min-accuracy A] [--no-regression-at LEN,...]\n"
    "                       [--margin D] [--corpus FILE] [--corpus-delimiter TEXT] [--ppl-windows N]\n"
    "                       [--ppl-buckets B] [--ppl-margin X] [--ppl-flat X] [--accept-no-gain]\n"
    "                       [--max-detectable-drop D] [--accept-underpowered]\n"
    "                       [--json] [--certificate FILE] [--report FILE.html] [--no-stats]\n"
    "                       [--on-top] [--train-len N] [--work-budget N] [--no-shared-prefix]\n"
    "                       [--sequential [--looks K]] [--baseline-cache DIR]\n"
    "                       [--context-shift N_CTX [--shift-keep N] [--shift-batch B]]\n\n"
    "Runs long retrieval probes (sized in tokens of MODEL's own tokenizer, answer at each depth)\n"
    "through the engine (CPU, or --device cuda) with the attention rule (and, with --baseline,\n"
    "without it, on the same prompts), prints the accuracy per probe and length with its 95%\n"
    "Wilson interval, and writes the certificate (docs/certificate.md) and a self-contained HTML\n"
    "report. Exit status 1 when a criterion fails; without any criterion the verdict is \"none\"\n"
    "(no criterion given), exit 0.\n\n"
    "  --probe LIST         probes to run (--verify is the same option)\n"
    "  --baseline           also run MODEL without any rule on the same prompts (an artifact's\n"
    "                       metadata rule is left out on that side)\n"
    "  --baseline-cache DIR with --baseline: take the baseline side from DIR/<key>.json, written by\n"
    "                       an earlier run with the same model files, tokenizer, probes, engine and\n"
    "                       threads, instead of running it (the same certificate, which records it\n"
    "                       in run.baseline_from_cache); otherwise run it and write that file. A bad\n"
    "                       file is a warning and ignored (docs/certificate.md, \"Baseline cache\")\n"
    "  --depths A:B:N       N depths evenly from A to B (default 0:1:10), or a list 0,0.5,1\n"
    "  --samples N          samples per probe x length x depth cell (default: 40 prompts per probe\n"
    "                       and length over the depths, 4 at 10 depths)\n"
    "  --device cpu|cuda    where the engines run (default cpu); cuda needs a -DCTXPATCH_CUDA=ON build\n"
    "                       and a device (else exit 2); the certificate's run.device names it\n"
    "  --min-accuracy A     each probe's patched accuracy at each length must reach A\n"
    "  --no-regression-at   at these lengths no probe may regress: Tango's paired score test must not\n"
    "                       find a drop beyond --margin (default 0.05) at one-sided level 0.05, and\n"
    "                       the ppl NLL may not exceed the baseline's by more than --ppl-margin;\n"
    "                       and the patch must help and the design see a harm (docs/certificate.md,\n"
    "                       \"Verdicts\"): past the training length more prompts gained than lost\n"
    "                       (exact sign test at 0.05) or ppl NLL lower by more than --ppl-margin,\n"
    "                       else the verdict is \"no effect\"; the prompts per cell detect a drop of\n"
    "                       --max-detectable-drop (default 0.2) with 80% power, else \"inconclusive\"\n"
    "  --accept-no-gain     leave the gain out of the verdict (a patch that only breaks nothing passes)\n"
    "  --accept-underpowered  leave the power out of the verdict (few prompts may pass)\n"
    "  --sequential         sequential verdicts: each probe and length looks at its pairs every K\n"
    "                       prompts (--looks K, default 8) and stops once its verdict is decided, at\n"
    "                       most --samples x depths prompts (docs/certificate.md, \"Sequential verdicts\")\n"
    "  --corpus FILE        text for the ppl probe (NLL per token by position bucket; decoder-only\n"
    "                       models); 'ppl' in --probe needs it, and --corpus alone adds ppl\n"
    "  --corpus-delimiter T documents are split at T (default <|endoftext|>; \\n\\n: blank lines)\n"
    "  --ppl-windows N      windows per length (default 4); --ppl-buckets B position buckets (8)\n"
    "  --ppl-margin X       nats per token (default 0.05); --ppl-flat X: the patched NLL at the\n"
    "                       longest length may exceed its NLL at the training length by at most X\n"
    "  --certificate FILE   write the certificate JSON there\n"
    "  --json               print the certificate JSON on stdout instead of the table (as every\n"
    "                       command's --json: one JSON document on stdout, nothing else)\n"
    "  --no-stats           skip the P_max / entropy measurement per length\n"
    "  --work-budget N      the most work the run may plan, in attention pairs: each pass over n\n"
    "                       tokens counts n(n+1)/2 (default 1e10; docs/reliability.md); a plan over\n"
    "                       it is refused before anything runs\n"
    "  --no-shared-prefix   run every prompt alone: the prompts of one length normally continue from\n"
    "                       the cached rows they share with the previous one (the same answers and\n"
    "                       logits bit for bit, fewer tokens processed; for timing the saving)\n"
    "  --on-top             apply a --rule temperature although MODEL is an artifact whose weights\n"
    "                       already carry one (refused otherwise: the logits would be divided twice)\n"
    "  --train-len N        the length the model was trained at, in place of its config's (the\n"
    "                       certificate records it as model.train_len, source \"option --train-len\")\n"
    "  --context-shift N_CTX run the model (not the baseline side) as llama.cpp runs it past its\n"
    "                       context: a KV cache of N_CTX cells that, when full, keeps the first\n"
    "                       --shift-keep tokens (default 1: the BOS; llama-cli's --keep N is N + 1),\n"
    "                       drops half of the rest and shifts the others down (docs/gguf.md); tokens\n"
    "                       are fed --shift-batch at a time (default 1, as llama-cli generates).\n"
    "                       A measurement: no certificate, report, --json or statistics\n"
    "A patched artifact's own rule (config.json ctxpatch.rule) applies when no --rule is given; the\n"
    "certificate's \"rule\" records it and its \"artifact\" object the artifact's ctxpatch block.\n"
    "A progress bar is drawn on a terminal; otherwise the command is quiet until the table.\n";

/* The certificate's "artifact" object: the ctxpatch block of a patched artifact's config.json
 * (docs/certificate.md), so that a re-verification says what the artifact carries. */
static int add_artifact(cJSON *cert, const cp_model *model) {
  const cp_hf_config *cfg = cp_model_config(model);
  if (!cfg->has_ctxpatch) return 0;
  cJSON *a = cp_describe_ctxpatch(cfg);
  if (a && cJSON_AddItemToObject(cert, "artifact", a)) return 0;
  cJSON_Delete(a);
  return cp_nomem("verify: the certificate's artifact object");
}

/* The table, the verdict and its reasons. */
static void print_verdict(const cp_verify_result *result, const cp_verify_thresholds *th, cp_verdict verdict,
                          char **reasons, int n_reasons) {
  cli_print_verify_result(result, th, "baseline [95% CI]");
  printf("verdict: %s (%.1f s, %.0f tokens/s)\n", verdict == CP_VERDICT_NONE ? "none, no criterion given (--min-accuracy, "
         "--no-regression-at or --ppl-flat)" : cp_verdict_name(verdict), result->seconds,
         result->seconds > 0 ? (double)result->tokens / result->seconds : 0.0);
  for (int i = 0; i < n_reasons; i++) printf("  %s\n", reasons[i]);
}

/* One line: the rule the patched side ran and where it came from; what the weights carry; with
 * a baseline on an artifact, that the baseline side runs without its metadata rule. */
static void print_rule(const cp_model *model, const cp_rule *applied, bool baseline) {
  const cp_hf_config *cfg = cp_model_config(model);
  char *text = applied ? cp_rule_to_string(applied) : NULL;
  printf("rule: %s%s\n", text ? text : "none",
         !applied ? "" : applied == &model->metadata_rule ? " (from the artifact's config.json ctxpatch.rule)" : " (--rule)");
  free(text);
  if (cfg->has_ctxpatch && !cp_rule_is_identity(&cfg->ctxpatch_baked_rule)) {
    text = cp_rule_to_string(&cfg->ctxpatch_baked_rule);
    cli_printf(stdout, "baked into the weights: %s (%s)\n", text ? text : "?", cfg->ctxpatch_fidelity);
    free(text);
  }
  if (baseline && model->has_metadata_rule) printf("baseline: the same weights without the metadata rule\n");
  if (baseline && cfg->has_ctxpatch && !cp_rule_is_identity(&cfg->ctxpatch_baked_rule))
    printf("baseline: these weights still carry the baked rule (verify the original checkpoint to compare)\n");
}

int cmd_verify(int argc, char **argv) {
  const char *model_path = NULL, *rule_path = NULL;
  const char *cert_path = NULL, *report_path = NULL;
  unsigned long long train_len = 0;
  cli_verify_opts o;
  cli_verify_opts_init(&o, "0:1:10");
  bool baseline = false, stats = true, on_top = false, json = false;
  unsigned long long shift_ctx = 0, shift_keep = 1, shift_batch = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (cli_is_help(a)) {
      fputs(verify_help, stdout);
      return CLI_OK;
    }
    if (!strcmp(a, "--baseline")) {
      baseline = true;
      continue;
    }
    if (!strcmp(a, "--no-stats")) {
      stats = false;
      continue;
    }
    if (!strcmp(a, "--on-top")) {
      on_top = true;
      continue;
    }
    if (cli_verify_flag(&o, a)) continue;
    if (!strcmp(a, "--json")) {
      json = true;
      continue;
    }
    if (a[0] == '-' && a[1]) {
      if (!v) return cli_usage_error("verify", "%s needs a value", a);
      i++;
      int taken = cli_verify_opt(&o, "verify", a, v);
      if (taken < 0) return CLI_USAGE;
      if (taken) continue;
      if (!strcmp(a, "--rule")) rule_path = v;
      else if (!strcmp(a, "--certificate")) cert_path = v;
      else if (!strcmp(a, "--report")) report_path = v;
      else if (!strcmp(a, "--context-shift") || !strcmp(a, "--shift-keep") || !strcmp(a, "--shift-batch")) {
        unsigned long long *dst = a[2] == 'c' ? &shift_ctx : a[8] == 'k' ? &shift_keep : &shift_batch;
        if (!cli_parse_u64_in("verify", a, v, a[8] == 'k' ? 0 : 1, CLI_MAX_TOKENS, dst)) {
          cli_verify_opts_free(&o);
          return CLI_USAGE;
        }
      } else if (!strcmp(a, "--train-len")) {
        if (!cli_parse_u64_in("verify", a, v, 1, CLI_MAX_TOKENS, &train_len)) {
          cli_verify_opts_free(&o);
          return CLI_USAGE;
        }
      } else return cli_usage_error("verify", "unknown option '%s'", a);
      continue;
    }
    if (model_path) return cli_usage_error("verify", "unexpected argument '%s'", a);
    model_path = a;
  }
  if (!model_path) return cli_usage_error("verify", "missing MODEL");
  if (!o.probes_text) return cli_usage_error("verify", "missing --probe");
  if (!o.lengths_text) return cli_usage_error("verify", "missing --lengths");
  if (!cli_verify_opts_parse(&o, "verify")) {
    cli_verify_opts_free(&o);
    return CLI_USAGE;
  }
  if (o.baseline_cache && !baseline) {
    cli_verify_opts_free(&o);
    return cli_usage_error("verify", "--baseline-cache needs --baseline");
  }
  if (shift_ctx && (cert_path || report_path || json)) {
    cli_verify_opts_free(&o);
    return cli_usage_error("verify", "--context-shift measures a runtime option: it writes no certificate, report "
                                     "or --json");
  }

  int n_probes = 0;
  cp_probe_kind *probes = NULL;
  bool ppl = false;

  cp_rule rule;
  cp_rule_init(&rule);
  cp_model *model = NULL;
  cp_tokenizer *tok = NULL;
  cp_verify_result *result = NULL;
  cJSON *cert = NULL;
  char **reasons = NULL;
  int n_reasons = 0, status = CLI_FAIL;
  cp_verdict verdict = CP_VERDICT_NONE;
  const char *ins[] = {model_path, rule_path, o.corpus}, *outs[] = {cert_path, report_path};
  int rc = cli_check_outputs(ins, 3, outs, 2, false);
  if (rc == 0) rc = cli_parse_probe_set(&probes, &n_probes, &ppl, o.probes_text);
  if (rc == 0 && ppl && !o.corpus) {
    status = cli_usage_error("verify", "the ppl probe needs --corpus FILE");
    goto report;
  }
  if (rc == 0 && rule_path) rc = cp_rule_load(&rule, rule_path);
  if (rc == 0) rc = cp_model_open_stored(&model, model_path);
  if (rc == 0 && train_len) rc = cp_model_set_train_len(model, (int64_t)train_len, CP_TRAIN_LEN_OPTION);
  if (rc == 0) rc = cp_model_check_rule_on_top(model, &rule, on_top);
  if (rc == 0) rc = cp_model_tokenizer_open(&tok, model_path);
  /* Every file the model and tokenizer were read from is known now. */
  if (rc == 0) rc = cli_check_outputs(ins, 3, outs, 2, false);
  if (rc < 0) goto report;
  const cp_rule *applied = cp_model_applied_rule(model, &rule);

  cp_verify_params vp;
  cp_verify_params_init(&vp);
  cp_verify_thresholds th;
  cp_verify_thresholds_init(&th);
  cli_verify_opts_apply(&o, probes, n_probes, &vp, &th);
  vp.baseline = baseline;
  vp.stats = stats && !shift_ctx;
  vp.shift = (cp_engine_shift){(int64_t)shift_ctx, (int64_t)shift_keep, (int64_t)shift_batch};
  if (cli_progress_wanted()) vp.progress = cli_progress_bar;
  vp.baseline_path = model_path; /* the baseline side's files, for a --baseline-cache key */
  if (o.n_no_reg > 0 && !baseline) {
    rc = cp_error_set(CP_EVERIFY_THRESHOLD, "--no-regression-at needs --baseline (nothing to compare against)");
    goto report;
  }
  th.flat_train_len = model->train_len;
  th.gain_after = model->train_len; /* a gain is sought past the training length */
  if (th.ppl_flat >= 0 && model->train_len <= 0) {
    rc = cp_error_set(CP_EVERIFY_THRESHOLD, "--ppl-flat: the model has no training length to compare with");
    goto report;
  }
  if ((rc = cp_verify_run(&result, model, tok, &rule, &vp)) < 0) goto report;
  cli_print_baseline_cache(result, !json);
  if ((rc = cp_verify_judge(&verdict, &reasons, &n_reasons, result, &th)) < 0) goto report;
  cp_certificate_info info = {model_path, o.device_desc, o.threads ? (int)o.threads : cp_cpu_count(),
                              applied, o.seed, vp.max_new_tokens};
  if ((rc = cp_certificate_build(&cert, model, result, &th, verdict, reasons, n_reasons, &info)) < 0) goto report;
  if ((rc = add_artifact(cert, model)) < 0) goto report;
  if (cert_path && (rc = cp_write_json_atomic(NULL, cert_path, cert)) < 0) goto report;
  if (report_path && (rc = cp_report_write(report_path, cert)) < 0) goto report;
  if (json) {
    if ((status = cli_print_json(cert)) == CLI_OK) status = verdict == CP_VERDICT_PASS || verdict == CP_VERDICT_NONE ? CLI_OK : CLI_FAIL;
    goto report;
  }
  print_rule(model, applied, baseline);
  print_verdict(result, &th, verdict, reasons, n_reasons);
  for (int l = 0; shift_ctx && result->has_ppl && l < result->n_lengths; l++) /* the full figure, for comparisons */
    printf("context shift: n_ctx %llu, keep %llu, batch %llu: ppl NLL at %lld = %.9f\n", shift_ctx, shift_keep,
           shift_batch, (long long)result->lengths[l], result->ppl_mean[CP_SIDE_PATCHED][l]);
  status = verdict == CP_VERDICT_PASS || verdict == CP_VERDICT_NONE ? CLI_OK : CLI_FAIL;
report:
  if (rc < 0) status = cli_report(rc);
  for (int i = 0; i < n_reasons; i++) free(reasons[i]);
  free(reasons);
  cJSON_Delete(cert);
  cp_verify_result_free(result);
  cp_tokenizer_free(tok);
  cp_model_free(model);
  free(probes);
  cli_verify_opts_free(&o);
  return status;
}
