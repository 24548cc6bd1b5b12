/* ctxpatch patch --method auto: run the library's candidate search (cp_patch_auto_run), print the
 * comparison table (timings on stderr only), then the winner as `patch` prints an outcome. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/model/rule.h"
#include "ctxpatch/patchers/patch_auto.h"

/* Progress on stderr, with the candidate's wall time (never written into a file). */
static void on_candidate(void *ctx, int index, const cp_auto_candidate *c) {
  (void)ctx;
  fprintf(stderr, "auto: candidate %d/%d %s: %s (%.1f s)\n", index + 1, CP_AUTO_MAX_CANDIDATES, c->options,
          cp_auto_status_name(c->status), c->seconds);
}

static void print_num(double v, const char *fmt) {
  if (isnan(v)) printf(" %8s", "-");
  else printf(fmt, v);
}

/* The comparison table: the original's row (the shared baseline run), then one row per
 * candidate in the fixed order; labelled columns; "ship the original" when no candidate helps. */
static void print_table(const cp_auto_outcome *a) {
  printf("auto: %d candidates, target length%s", a->n_candidates, a->n_target_lengths > 1 ? "s" : "");
  for (int i = 0; i < a->n_target_lengths; i++) printf("%s%lld", i ? "," : " ", (long long)a->target_lengths[i]);
  printf(", budget %g s\n", a->budget);
  printf("auto: criterion: %s\n", CP_AUTO_CRITERION);
  printf("auto: columns: accuracy = mean accuracy over the retrieval probes at the target lengths; ppl = mean ppl "
         "NLL there (- not measured); helps: %s\n", CP_AUTO_HELPS);
  int w = 20;
  for (int i = 0; i < a->n_candidates; i++) w = strlen(a->candidates[i].options) > (size_t)w ? (int)strlen(a->candidates[i].options) : w;
  printf("  %2s  %-*s %8s %8s %5s  %s\n", "#", w, "candidate", "accuracy", "ppl", "helps",
         "status [what was certified]: reason");
  printf("  %2s  %-*s", "-", w, "original (unpatched)");
  print_num(a->original_scored ? a->original_accuracy : NAN, " %8.4f");
  print_num(a->original_scored ? a->original_nll : NAN, " %8.4f");
  printf(" %5s  the baseline every candidate is compared with\n", "-");
  for (int i = 0; i < a->n_candidates; i++) {
    const cp_auto_candidate *c = &a->candidates[i];
    printf("  %2d  %-*s", i + 1, w, c->options);
    print_num(c->ran ? c->accuracy : NAN, " %8.4f");
    print_num(c->ran ? c->nll : NAN, " %8.4f");
    printf(" %5s  %s%s", c->status != CP_AUTO_PASS ? "-" : c->helps ? "yes" : "no", cp_auto_status_name(c->status),
           i == a->best ? " (winner)" : "");
    if (c->ran) {
      char *rule = cp_rule_to_string(&c->patch.rule);
      if (c->patch.rope_factor > 0) printf(" [rope_scaling linear %g]", c->patch.rope_factor);
      else if (rule) printf(" [%s]", rule);
      free(rule);
    }
    if (c->reason[0]) printf(": %s", c->reason);
    printf("\n");
  }
  for (int i = 0; i < a->n_runtime_rows; i++) {
    const cp_auto_runtime_row *r = &a->runtime_rows[i];
    printf("  r%d  %s\n      %-*s", i + 1, r->name, w, "");
    print_num(r->ran ? r->accuracy : NAN, " %8.4f");
    print_num(r->ran ? r->nll : NAN, " %8.4f");
    printf(" %5s  %s [llama.cpp flags: %s]", !r->ran || r->verdict != CP_VERDICT_PASS ? "-" : r->helps ? "yes" : "no",
           r->ran ? cp_verdict_name(r->verdict) : "not run", r->flags);
    if (r->reason[0]) printf(": %s", r->reason);
    printf("\n");
  }
  for (int i = 0; i < a->n_runtime_rows; i++)
    if (a->runtime_rows[i].as_good)
      printf("auto: llama.cpp's own %s does as well as every writable candidate: ship the original and pass these "
             "flags\n", a->runtime_rows[i].flags);
  if (a->ship_original)
    printf("auto: no candidate helps over the original: ship the original (the winner is written, as certified, "
           "for comparison)\n");
  if (a->best >= 0) printf("auto: winner #%d: %s; its certification:\n", a->best + 1, a->candidates[a->best].options);
}

static int print_json(const cp_auto_outcome *a, const char *out_dir) {
  cJSON *o = cli_patch_outcome_json(&a->outcome, out_dir), *block = a->auto_json ? cJSON_Parse(a->auto_json) : NULL;
  int status = CLI_FAIL;
  if (!o || !block) {
    cJSON_Delete(o);
    cJSON_Delete(block);
    return cli_report(cp_nomem("patch --json"));
  }
  if (a->best < 0) {
    cJSON_ReplaceItemInObjectCaseSensitive(o, "verdict", cJSON_CreateString("no candidate passed"));
    cJSON_ReplaceItemInObjectCaseSensitive(o, "method", cJSON_CreateNull());
    cJSON_ReplaceItemInObjectCaseSensitive(o, "fidelity", cJSON_CreateNull());
    cJSON_ReplaceItemInObjectCaseSensitive(o, "note", cJSON_CreateNull());
  }
  cJSON_AddItemToObject(o, "auto", block);
  status = cli_print_json(o);
  if (status == CLI_OK && !a->outcome.pass) status = CLI_FAIL;
  cJSON_Delete(o);
  return status;
}

int cli_patch_auto(const char *in, const char *out_dir, const cp_patch_options *po, const cp_patch_params *pp,
                   const cp_verify_params *vp, const cp_verify_thresholds *th, double budget, bool json) {
  cp_auto_outcome *a = calloc(1, sizeof *a); /* each candidate holds a rule: tens of KiB */
  if (!a) return cli_report(cp_nomem("patch --method auto"));
  cp_patch_params p = *pp;
  p.on_plan = NULL; /* the table says what each candidate was */
  int status, rc = cp_patch_auto_run(a, in, out_dir, po, &p, budget, on_candidate);
  if (rc) status = a->outcome.bad_options ? cli_usage_error("patch", "%s", cp_error_message()) : cli_report(rc);
  else if (json) status = print_json(a, out_dir);
  else {
    cli_patch_print_selection(&a->outcome, vp);
    print_table(a);
    int inert = 0;
    for (int i = 0; i < a->n_candidates; i++) inert += a->candidates[i].status == CP_AUTO_SKIPPED_RUNTIME;
    if (inert)
      printf("auto: %d candidate%s skipped: %s rule would live only in ctxpatch metadata, which the target format's "
             "runtimes ignore (--for ctxpatch runs %s; patch --method M --to onnx carries any rule)\n",
             inert, inert == 1 ? "" : "s", inert == 1 ? "its" : "their", inert == 1 ? "it" : "them");
    if (a->best < 0) {
      cli_printf(stdout, "no candidate passed certification: nothing written to %s\n", out_dir);
      status = CLI_FAIL;
    } else {
      cli_print_verify_result(a->outcome.result, th, "original [95% CI]");
      printf("verdict: pass\nwrote %s (certified, certificate sha256 %s)\n", out_dir, a->outcome.certificate_sha256);
      status = CLI_OK;
    }
  }
  cp_auto_outcome_free(a);
  free(a);
  return status;
}
