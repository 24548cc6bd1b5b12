/* ctxpatch patch: build a rule, bake it, certify the baked artifact, write it only on a pass. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "ctxpatch/patchers/calibrate.h"
#include "patchers/calibrate_json.h"
#include "ctxpatch/converters/checkpoint.h"
#include "ctxpatch/converters/model.h"
#include "ctxpatch/patchers/patch.h"
#include "ctxpatch/converters/rule.h"
#include "ctxpatch/tokenizers/tokenizer.h"
#include "ctxpatch/verify/verify.h"

static const char patch_help[] =
    "usage: ctxpatch patch IN OUT --method temperature|alibi-pi|lm-infinite|rope-pi|fire-threshold\n"
    "                      [method options] [--target-len N] [--verify PROBES] [--lengths L,...]\n"
    "                      [--depths A:B:N] [--samples N] [--seed S] [--threads T]\n"
    "                      [--min-accuracy A] [--no-regression-at L,...] [--tokenizer PATH]\n"
    "                      [--require exact] [--no-verify] [--force]\n\n"
    "Builds a length-extrapolation patch, bakes what the weights can carry into an HF folder OUT,\n"
    "runs the verify probes on the baked artifact with the original checkpoint side by side, and\n"
    "writes OUT (atomically) only when the verdict passes; otherwise prints the accuracy table,\n"
    "writes nothing and exits 1. The fidelity (exact-weights, native-config, ctxpatch-metadata)\n"
    "is printed and stored in OUT's metadata; docs/patching.md has the table.\n\n"
    "method options:\n"
    "  temperature     --tau X | --calibrate pmax|entropy|log|prop1|prop2 (default pmax) at\n"
    "                  --target-len N (default the longest --lengths); --per-layer;\n"
    "                  --scope encoder|self|all (T5; default encoder)\n"
    "  alibi-pi        --factor F (static) | --dynamic [--train-len N] | --progressive\n"
    "  lm-infinite     --n-global G (10) --n-local N (training length) --ceiling D (n-local)\n"
    "                  [--top-k K]\n"
    "  rope-pi         --factor F (config.json rope_scaling linear, times any existing factor)\n"
    "  fire-threshold  --threshold L\n"
    "verify options (as 'ctxpatch verify'): --verify PROBES (default passkey); --lengths (default\n"
    "  the training length and --target-len); --depths (default 0:1:5); --min-accuracy A (default\n"
    "  none); --no-regression-at (default every length: the patch may not lose to the original).\n"
    "  --require exact   refuse a patch the weights alone cannot carry\n"
    "  --no-verify       skip certification; OUT is marked \"certified\": false\n"
    "  --force           replace an existing OUT (only once the new one is certified)\n";

static bool parse_double(const char *opt, const char *v, double *out, double lo) {
  char *end;
  *out = strtod(v, &end);
  if (*end || !(*out >= lo) || !isfinite(*out)) {
    cli_usage_error("patch", "%s expects a number >= %g, got '%s'", opt, lo, v);
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

static void print_table(const cp_verify_result *r) {
  printf("%-10s %8s %10s %10s\n", "probe", "length", "patched", "original");
  for (int p = 0; p < r->n_probes; p++)
    for (int l = 0; l < r->n_lengths; l++)
      printf("%-10s %8lld %10.3f %10.3f\n", cp_probe_name(r->probes[p]), (long long)r->lengths[l],
             cp_verify_accuracy_at(r, CP_SIDE_PATCHED, p, l), cp_verify_accuracy_at(r, CP_SIDE_BASELINE, p, l));
}

int cmd_patch(int argc, char **argv) {
  const char *in = NULL, *out_dir = NULL, *method_text = NULL, *calib_text = "pmax", *scope = NULL;
  const char *probes_text = "passkey", *tok_path = NULL, *require = NULL;
  double tau = 0, factor = 0, threshold = 0;
  unsigned long long target_len = 0, train_len = 0, n_global = 10, n_local = 0, ceiling = 0, top_k = 0;
  cli_verify_opts o;
  cli_verify_opts_init(&o, "0:1:5");
  bool per_layer = false, dynamic = false, progressive = false, no_verify = false, force = false;
  bool have_n_global = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (cli_is_help(a)) {
      fputs(patch_help, stdout);
      return CLI_OK;
    }
    if (!strcmp(a, "--per-layer")) per_layer = true;
    else if (!strcmp(a, "--dynamic")) dynamic = true;
    else if (!strcmp(a, "--progressive")) progressive = true;
    else if (!strcmp(a, "--no-verify")) no_verify = true;
    else if (!strcmp(a, "--force")) force = true;
    else if (a[0] == '-' && a[1]) {
      if (!v) return cli_usage_error("patch", "%s needs a value", a);
      i++;
      int taken = cli_verify_opt(&o, "patch", a, v);
      if (taken < 0) return CLI_USAGE;
      if (taken) continue;
      bool ok = true;
      if (!strcmp(a, "--method")) method_text = v;
      else if (!strcmp(a, "--calibrate")) calib_text = v;
      else if (!strcmp(a, "--scope")) scope = v;
      else if (!strcmp(a, "--verify")) probes_text = v;
      else if (!strcmp(a, "--tokenizer")) tok_path = v;
      else if (!strcmp(a, "--require")) require = v;
      else if (!strcmp(a, "--tau")) ok = parse_double(a, v, &tau, 1e-6);
      else if (!strcmp(a, "--factor")) ok = parse_double(a, v, &factor, 1e-6);
      else if (!strcmp(a, "--threshold")) ok = parse_double(a, v, &threshold, 1e-6);
      else if (!strcmp(a, "--target-len")) ok = cli_parse_u64("patch", a, v, &target_len);
      else if (!strcmp(a, "--train-len")) ok = cli_parse_u64("patch", a, v, &train_len);
      else if (!strcmp(a, "--n-global")) ok = cli_parse_u64("patch", a, v, &n_global), have_n_global = true;
      else if (!strcmp(a, "--n-local")) ok = cli_parse_u64("patch", a, v, &n_local);
      else if (!strcmp(a, "--ceiling")) ok = cli_parse_u64("patch", a, v, &ceiling);
      else if (!strcmp(a, "--top-k")) ok = cli_parse_u64("patch", a, v, &top_k);
      else return cli_usage_error("patch", "unknown option '%s'", a);
      if (!ok) return CLI_USAGE;
    } else if (!in) in = a;
    else if (!out_dir) out_dir = a;
    else return cli_usage_error("patch", "unexpected argument '%s'", a);
  }
  if (!in || !out_dir) return cli_usage_error("patch", "needs IN and OUT");
  if (!method_text) return cli_usage_error("patch", "missing --method");
  if (require && strcmp(require, "exact") != 0)
    return cli_usage_error("patch", "--require accepts only 'exact', got '%s'", require);
  if (n_global > INT64_MAX / 2 || n_local > INT64_MAX / 2 || ceiling > INT64_MAX / 2 || top_k > 1000000 ||
      target_len > INT64_MAX / 2 || train_len > INT64_MAX / 2)
    return cli_usage_error("patch", "a length option is too large");

  cp_patch patch;
  memset(&patch, 0, sizeof patch);
  cp_rule_init(&patch.rule);
  int rc = cp_patch_method_from_name(&patch.method, method_text);
  if (rc) return cli_usage_error("patch", "%s", cp_error_message());
  /* Options that belong to another method are refused rather than ignored. */
  cp_patch_method m = patch.method;
  if ((tau > 0 || per_layer || scope) && m != CP_PATCH_TEMPERATURE)
    return cli_usage_error("patch", "--tau, --per-layer and --scope belong to --method temperature");
  if ((dynamic || progressive) && m != CP_PATCH_ALIBI_PI)
    return cli_usage_error("patch", "--dynamic and --progressive belong to --method alibi-pi");
  if (factor > 0 && m != CP_PATCH_ALIBI_PI && m != CP_PATCH_ROPE_PI)
    return cli_usage_error("patch", "--factor belongs to --method alibi-pi or rope-pi");
  if ((have_n_global || n_local || ceiling || top_k) && m != CP_PATCH_LM_INFINITE)
    return cli_usage_error("patch", "--n-global, --n-local, --ceiling and --top-k belong to --method lm-infinite");
  if (threshold > 0 && m != CP_PATCH_FIRE_THRESHOLD)
    return cli_usage_error("patch", "--threshold belongs to --method fire-threshold");

  int n_probes = 0;
  cp_probe_kind *probes = NULL;
  cp_model *model = NULL;
  cp_tokenizer *tok = NULL;
  cp_calib_table table;
  bool have_table = false;
  cJSON *calib_json = NULL;
  cp_patch_outcome oc;
  memset(&oc, 0, sizeof oc);
  int status = CLI_FAIL;

  if (!cli_verify_opts_parse(&o, "patch")) {
    status = CLI_USAGE;
    goto done;
  }
  if ((rc = cli_parse_probes(&probes, &n_probes, probes_text))) goto report;
  if ((rc = cp_model_open(&model, in))) goto report;
  {
    /* A method that does not fit the family is refused before any other work. */
    cp_patch fam = patch;
    fam.rope_factor = 1;
    if ((rc = cp_patch_check(model, &fam))) goto report;
  }
  int64_t L_tr = train_len ? (int64_t)train_len : model->train_len;
  if (!target_len && o.n_lengths > 0) target_len = (unsigned long long)o.lengths[o.n_lengths - 1];
  if (!target_len && L_tr > 0) target_len = (unsigned long long)(2 * L_tr);
  bool need_tok = !no_verify || (m == CP_PATCH_TEMPERATURE && tau == 0);
  if (need_tok) {
    rc = cp_tokenizer_open(&tok, tok_path ? tok_path : in);
    if (rc && no_verify) { /* calibration falls back to random ids */
      tok = NULL;
      rc = 0;
    }
    if (rc) goto report;
  }

  switch (m) {
    case CP_PATCH_TEMPERATURE:
      if (tau > 0) {
        patch.rule.n_temperature = 1;
        patch.rule.temperature[0] = tau;
        if (per_layer) {
          status = cli_usage_error("patch", "--per-layer applies to calibration, not to a given --tau");
          goto done;
        }
      } else {
        cp_cal_method cm;
        if ((rc = cp_cal_method_from_name(&cm, calib_text))) goto report;
        if (!target_len) {
          status = cli_usage_error("patch", "calibration needs --target-len (the model has no training length)");
          goto done;
        }
        cp_calib_params cpp;
        cp_calib_params_init(&cpp);
        cpp.train_len = train_len ? (int64_t)train_len : 0;
        cpp.per_layer = per_layer;
        cpp.tokenizer = tok;
        cpp.seed = o.seed;
        cpp.threads = (int)o.threads;
        fprintf(stderr, "calibrating tau (%s) at length %llu...\n", calib_text, target_len);
        if ((rc = cp_calibrate_rule(&patch.rule, &table, model, cm, (int64_t)target_len, &cpp))) goto report;
        have_table = true;
        calib_json = cp_calib_table_to_json(&table);
      }
      if (scope) {
        if (!strcmp(scope, "encoder")) patch.rule.temperature_scope = CP_TEMP_SCOPE_ENCODER;
        else if (!strcmp(scope, "self")) patch.rule.temperature_scope = CP_TEMP_SCOPE_SELF;
        else if (!strcmp(scope, "all")) patch.rule.temperature_scope = CP_TEMP_SCOPE_ALL;
        else {
          status = cli_usage_error("patch", "--scope expects encoder, self or all, got '%s'", scope);
          goto done;
        }
      }
      break;
    case CP_PATCH_ALIBI_PI:
      if ((factor > 0) + dynamic + progressive != 1) {
        status = cli_usage_error("patch", "alibi-pi needs exactly one of --factor F, --dynamic, --progressive");
        goto done;
      }
      patch.rule.alibi_mode = dynamic ? CP_ALIBI_DYNAMIC : progressive ? CP_ALIBI_PROGRESSIVE : CP_ALIBI_STATIC;
      patch.rule.alibi_factor = factor > 0 ? factor : 1;
      if (factor > 0 && factor < 1) {
        status = cli_usage_error("patch", "--factor must be >= 1 for alibi-pi");
        goto done;
      }
      if (train_len) patch.rule.train_len = (int64_t)train_len;
      break;
    case CP_PATCH_LM_INFINITE:
      if (!n_local) n_local = (unsigned long long)L_tr;
      if (!n_local) {
        status = cli_usage_error("patch", "lm-infinite needs --n-local (the model has no training length)");
        goto done;
      }
      patch.rule.has_lambda = true;
      patch.rule.n_global = (int64_t)n_global;
      patch.rule.n_local = (int64_t)n_local;
      patch.rule.distance_ceiling = ceiling ? (int64_t)ceiling : (int64_t)n_local;
      if (top_k) {
        patch.rule.has_top_k = true;
        patch.rule.top_k = (int)top_k;
      }
      break;
    case CP_PATCH_ROPE_PI:
      if (!(factor > 0)) {
        status = cli_usage_error("patch", "rope-pi needs --factor F");
        goto done;
      }
      patch.rope_factor = factor;
      break;
    case CP_PATCH_FIRE_THRESHOLD:
      if (!(threshold > 0)) {
        status = cli_usage_error("patch", "fire-threshold needs --threshold L");
        goto done;
      }
      patch.rule.fire_threshold = threshold;
      break;
    case CP_PATCH_METHOD_COUNT: break;
  }
  if ((rc = cp_patch_check(model, &patch))) goto report;

  cp_verify_params vp;
  cp_verify_params_init(&vp);
  cp_verify_thresholds th;
  cp_verify_thresholds_init(&th);
  cp_patch_params pp;
  cp_patch_params_init(&pp);
  pp.require_exact = require != NULL;
  pp.replace = force;
  pp.calibration = calib_json;
  pp.on_tmp_dir = start_watchdog;
  /* A tokenizer given as a file travels with the artifact when IN has none of its own. */
  size_t tl = tok_path ? strlen(tok_path) : 0;
  if (tl >= 5 && !strcmp(tok_path + tl - 5, ".json")) pp.tokenizer_file = tok_path;
  if (!no_verify) {
    if (!o.lengths) {
      if (L_tr <= 0 || !target_len) {
        status = cli_usage_error("patch", "missing --lengths (the model has no training length to default to)");
        goto done;
      }
      o.n_lengths = (int64_t)target_len > L_tr ? 2 : 1;
      if (!(o.lengths = malloc(2 * sizeof *o.lengths))) {
        rc = cp_error_set(CP_ENOMEM, "out of memory");
        goto report;
      }
      o.lengths[0] = L_tr;
      o.lengths[1] = (int64_t)target_len;
    }
    cli_verify_opts_apply(&o, probes, n_probes, &vp, &th);
    vp.stats = true;
    if (isatty(STDERR_FILENO)) vp.progress = cli_progress_bar;
    if (!o.no_reg) { /* by default the patch may lose to the original at no length */
      th.no_regression_at = o.lengths;
      th.n_no_regression = o.n_lengths;
    }
    pp.verify = &vp;
    pp.thresholds = &th;
    pp.tok = tok;
  }
  {
    /* The plan is printed before the (long) verify stage; cp_patch_write makes it again. */
    cp_checkpoint *ck = NULL;
    cp_bake_plan plan;
    if ((rc = cp_checkpoint_open(&ck, in))) goto report;
    rc = cp_bake_plan_make(&plan, model, ck, &patch);
    cp_checkpoint_free(ck);
    if (rc) goto report;
    if (!pp.require_exact || plan.fidelity == CP_FIDELITY_EXACT_WEIGHTS) {
      char *rule_text = cp_rule_to_string(&patch.rule);
      printf("patch: %s %s\n", cp_patch_method_name(m), rule_text ? rule_text : "");
      if (m == CP_PATCH_ROPE_PI) printf("patch: rope_scaling linear factor %g\n", plan.rope_factor);
      printf("fidelity: %s (%s)\n", cp_fidelity_name(plan.fidelity), plan.note);
      free(rule_text);
      fflush(stdout);
    }
  }
  if ((rc = cp_patch_write(&oc, in, out_dir, model, &patch, &pp))) goto report;
  if (oc.verified) {
    print_table(oc.result);
    printf("verdict: %s (%.1f s)\n", oc.pass ? "pass" : "fail", oc.result->seconds);
    for (int i = 0; i < oc.n_reasons; i++) printf("  %s\n", oc.reasons[i]);
  }
  if (!oc.pass) {
    printf("certification failed: nothing written to %s\n", out_dir);
    status = CLI_FAIL;
    goto done;
  }
  if (oc.verified) printf("wrote %s (certified, certificate sha256 %s)\n", out_dir, oc.certificate_sha256);
  else printf("wrote %s (NOT certified: --no-verify)\n", out_dir);
  status = CLI_OK;
  goto done;
report:
  status = cli_report(rc);
done:
  cp_patch_outcome_free(&oc);
  if (have_table) cp_calib_table_free(&table);
  cJSON_Delete(calib_json);
  cp_tokenizer_free(tok);
  cp_model_free(model);
  free(probes);
  cli_verify_opts_free(&o);
  return status;
}
