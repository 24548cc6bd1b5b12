/* The result table `verify` and `patch` print: accuracy with its 95% Wilson interval per probe and
 * length, the paired comparison (drop, Tango p-value) with the baseline, the ppl NLL, and what
 * the paired test can detect with this many prompts. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "ctxpatch/verify/stats.h"

static void acc_ci(const cp_verify_result *r, cp_verify_side side, int p, int l) {
  int64_t k = cp_verify_correct_at(r, side, p, l), n = cp_verify_prompts_in(r, p, l);
  double lo, hi;
  cp_wilson_interval(&lo, &hi, k, n, CP_STATS_Z95);
  printf("  %5.3f [%4.2f, %4.2f]", (double)k / (double)n, lo, hi);
}

static void print_ppl(const cp_verify_result *r) {
  printf("%-10s %8s %12s", "ppl", "length", "patched NLL");
  if (r->has_baseline) printf(" %12s %9s", "original NLL", "diff");
  printf("   (nats per token, %d windows)\n", r->ppl_windows);
  for (int l = 0; l < r->n_lengths; l++) {
    printf("%-10s %8lld %12.4f", "ppl", (long long)r->lengths[l], r->ppl_mean[CP_SIDE_PATCHED][l]);
    if (r->has_baseline)
      printf(" %12.4f %+9.4f", r->ppl_mean[CP_SIDE_BASELINE][l],
             r->ppl_mean[CP_SIDE_PATCHED][l] - r->ppl_mean[CP_SIDE_BASELINE][l]);
    printf("\n");
  }
}

void cli_print_verify_result(const cp_verify_result *r, const cp_verify_thresholds *th, const char *base_label) {
  if (r->n_probes > 0) {
    printf("%-10s %8s  %-20s", "probe", "length", "patched [95% CI]");
    if (r->has_baseline) printf("  %-20s %7s %9s", base_label, "drop", "p(drop>margin)");
    printf("\n");
  }
  for (int p = 0; p < r->n_probes; p++)
    for (int l = 0; l < r->n_lengths; l++) {
      printf("%-10s %8lld", cp_probe_name(r->probes[p]), (long long)r->lengths[l]);
      acc_ci(r, CP_SIDE_PATCHED, p, l);
      if (r->has_baseline) {
        int64_t lost, gained;
        double pv = cp_verify_pair_test(r, p, l, th->margin, &lost, &gained);
        acc_ci(r, CP_SIDE_BASELINE, p, l);
        printf(" %+7.3f %9.2g", (double)(lost - gained) / (double)cp_verify_prompts_in(r, p, l), pv);
        if (r->looks_every > 0) /* where and why the sequential cell stopped */
          printf("  %lld prompts, %s", (long long)cp_verify_prompts_in(r, p, l),
                 cp_seq_stop_name((cp_seq_stop)r->stop[(size_t)p * (size_t)r->n_lengths + (size_t)l]));
      }
      printf("\n");
    }
  if (r->has_ppl) print_ppl(r);
  if (r->n_probes == 0) return;
  int64_t n = cp_verify_prompts_at(r);
  double drop = cp_verify_detectable_drop(r, th);
  printf("intervals: Wilson score, 95%%; %lld prompts per probe and length%s", (long long)n,
         r->looks_every > 0 ? " at most (sequential)" : "");
  if (!r->has_baseline) {
    printf("\n");
    return;
  }
  printf(", the same on both sides\npaired test: Tango's score test of a drop beyond the margin %.3g (one-sided, "
         "alpha %.3g); ", th->margin, th->alpha);
  if (r->looks_every > 0) printf("sequential design: a look every %d prompts; ", r->looks_every);
  if (isnan(drop)) printf("too few prompts to detect any drop (use more --samples)\n");
  else printf("it detects a drop of %.3f with %.0f%% power\n", drop, CP_STATS_POWER * 100);
}

void cli_print_baseline_cache(const cp_verify_result *r, bool table) {
  for (const char *w = r->cache_warnings; w && *w;) {
    const char *nl = strchr(w, '\n');
    int n = nl ? (int)(nl - w) : (int)strlen(w);
    cli_printf(stderr, "ctxpatch: warning: %.*s\n", n, w);
    w += n + (nl != NULL);
  }
  if (!table || !r->cache_key[0]) return;
  if (r->baseline_cached && r->side_tokens[CP_SIDE_BASELINE] == 0)
    printf("baseline: taken from the baseline cache (key %.16s..., file sha256 %.16s...): the original did not run\n",
           r->cache_key, r->cache_file_sha256);
  else if (r->baseline_cached) /* a file a sequential run wrote: the prompts it did not ask ran here */
    printf("baseline: taken from the baseline cache (key %.16s..., file sha256 %.16s...) for %lld prompts; the "
           "others ran here and the file is completed\n",
           r->cache_key, r->cache_file_sha256, (long long)r->prompts_from);
  else printf("baseline: computed (baseline cache key %.16s...)\n", r->cache_key);
}
