/* verify/stats.c against values computed independently: tests/goldens/stats/stats.json (written by
 * tests/reference/make_stats_golden.py from Python's math/statistics/fractions), published Wilson
 * intervals (Newcombe 1998, Stat. Med. 17:857, Table I, method 3) and the identities the
 * definitions imply (margin 0 = McNemar's score statistic); and the verdicts cp_verify_judge draws
 * from them (pass, fail, no effect, inconclusive) on hand-made paired outcomes. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ctxpatch/base/io.h"
#include "ctxpatch/verify/sequential.h"
#include "ctxpatch/verify/stats.h"
#include "ctxpatch/verify/verify.h"
#include "test.h"

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void published(void) {
  /* Newcombe (1998) Table I, Wilson score interval without continuity correction (4 decimals). */
  static const struct {
    int k, n;
    double lo, hi;
  } t[] = {{81, 263, 0.2553, 0.3662}, {15, 148, 0.0624, 0.1605}, {0, 20, 0.0, 0.1611}, {1, 29, 0.0061, 0.1718}};
  for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
    double lo, hi;
    cp_wilson_interval(&lo, &hi, t[i].k, t[i].n, CP_STATS_Z95);
    CHECK_MSG(fabs(lo - t[i].lo) < 6e-5 && fabs(hi - t[i].hi) < 6e-5, "%d/%d: [%.5f, %.5f]", t[i].k, t[i].n, lo, hi);
  }
}

static void identities(void) {
  /* margin 0: z = (b - c) / sqrt(b + c), McNemar's score statistic */
  double z;
  cp_tango_statistic(&z, 40, 9, 4, 0.0);
  CHECK(fabs(z - 5.0 / sqrt(13.0)) < 1e-12);
  cp_tango_statistic(&z, 7, 0, 0, 0.0);
  CHECK(isnan(z));
  CHECK(cp_tango_p_value(7, 0, 0, 0.0) == 1.0);
  /* a larger drop is stronger evidence; a larger margin is weaker */
  CHECK(cp_tango_p_value(40, 10, 0, 0.05) < cp_tango_p_value(40, 6, 0, 0.05));
  CHECK(cp_tango_p_value(40, 10, 0, 0.10) > cp_tango_p_value(40, 10, 0, 0.05));
  double lo, hi;
  cp_wilson_interval(&lo, &hi, 1, 1, CP_STATS_Z95);
  CHECK(hi == 1.0 && lo > 0.2 && lo < 0.21); /* 1/(1 + z^2) = 0.2066 */
  cp_wilson_interval(&lo, &hi, 0, 0, CP_STATS_Z95);
  CHECK(lo == 0.0 && hi == 1.0);
  CHECK(fabs(cp_normal_sf(CP_STATS_Z95) - 0.025) < 1e-12);
  CHECK(isnan(cp_tango_detectable_drop(1, 0.05, 0.05, 0.8)));
}

/* One passkey probe at lengths 256 (the training length) and 512, one depth, n pairs per cell:
 * lost[l] / gained[l] discordant pairs, the rest answered by both sides. */
typedef struct {
  cp_verify_result r;
  cp_probe_kind probe;
  int64_t lengths[2];
  double depth, ppl[2][2];
  int correct[2][2], only[2][2];
  int used[2], looks_taken[2]; /* a sequential run (seq_fake) */
  unsigned char stop[2], gain_crossed[2];
} fake_run;

static void fake(fake_run *f, int n, const int lost[2], const int gained[2]) {
  memset(f, 0, sizeof *f);
  f->probe = CP_PROBE_PASSKEY;
  f->lengths[0] = 256;
  f->lengths[1] = 512;
  f->depth = 0.5;
  f->r.n_probes = 1;
  f->r.n_lengths = 2;
  f->r.n_depths = 1;
  f->r.samples = n;
  f->r.probes = &f->probe;
  f->r.lengths = f->lengths;
  f->r.depths = &f->depth;
  f->r.has_baseline = true;
  for (int l = 0; l < 2; l++) {
    int both = n - lost[l] - gained[l];
    f->correct[CP_SIDE_PATCHED][l] = both + gained[l];
    f->correct[CP_SIDE_BASELINE][l] = both + lost[l];
    f->only[CP_SIDE_PATCHED][l] = gained[l];
    f->only[CP_SIDE_BASELINE][l] = lost[l];
  }
  for (int s = 0; s < 2; s++) {
    f->r.correct[s] = f->correct[s];
    f->r.only[s] = f->only[s];
    f->r.ppl_mean[s] = f->ppl[s];
  }
}

static cp_verdict judge(const fake_run *f, const cp_verify_thresholds *t, const char *first_reason) {
  cp_verdict v = CP_VERDICT_NONE;
  char **reasons = NULL;
  int n = 0;
  CHECK_RC(0, cp_verify_judge(&v, &reasons, &n, &f->r, t));
  if (first_reason)
    CHECK_MSG(n > 0 && !strncmp(reasons[0], first_reason, strlen(first_reason)), "first reason '%s', want '%s...'",
              n ? reasons[0] : "", first_reason);
  else CHECK_MSG(n == 0, "unexpected reason '%s'", reasons[0]);
  for (int i = 0; i < n; i++) free(reasons[i]);
  free(reasons);
  return v;
}

/* Makes f a sequential run of a 40-prompt design looking every 8 whose two cells stopped after
 * used[l] prompts (fake() gave their pairs over that many). */
static void seq_fake(fake_run *f, int used0, int used1) {
  f->r.samples = 40;
  f->r.looks_every = 8;
  f->r.n_looks = 5;
  f->used[0] = used0, f->used[1] = used1;
  f->looks_taken[0] = used0 / 8, f->looks_taken[1] = used1 / 8;
  f->r.used = f->used;
  f->r.looks_taken = f->looks_taken;
  f->r.stop = f->stop;
  f->r.gain_crossed = f->gain_crossed;
  /* a cell that stopped ran only its used prompts: fake()'s concordant correct ones beyond them
   * were never run (cp_verify_judge's Wilson interval asserts correct <= prompts) */
  for (int l = 0; l < 2; l++)
    for (int s = 0; s < 2; s++)
      if (f->correct[s][l] > f->used[l]) f->correct[s][l] = f->used[l];
}

/* Sequential verdicts (docs/certificate.md, "Sequential verdicts"): a regression at the level of the
 * look the cell stopped at; the gain by a cell's own boundary or the pooled test at 0.045; the
 * power of the sequential design (0.193 at 40 prompts, looks every 8). */
static void sequential_verdicts(const cp_verify_thresholds *t) {
  fake_run f;
  /* 11 of 16 lost: Tango p below the second look's 0.00125 */
  fake(&f, 16, (int[]){11, 0}, (int[]){0, 0});
  seq_fake(&f, 16, 16);
  CHECK(judge(&f, t, "passkey at 256: regression") == CP_VERDICT_FAIL);
  /* 10 of 16 lost: a regression for the fixed test at 0.05, not at the look's level */
  fake(&f, 16, (int[]){10, 0}, (int[]){0, 0});
  CHECK(cp_verify_pair_test(&f.r, 0, 0, 0.05, &(int64_t){0}, &(int64_t){0}) < 0.05);
  seq_fake(&f, 16, 16);
  CHECK(judge(&f, t, "no effect:") == CP_VERDICT_NO_EFFECT);
  /* 10 gained of 16 at 512 crossed the cell's own boundary: a pass although the cell stopped */
  fake(&f, 16, (int[]){0, 0}, (int[]){0, 10});
  seq_fake(&f, 16, 16);
  f.gain_crossed[1] = 1;
  CHECK(judge(&f, t, NULL) == CP_VERDICT_PASS);
  /* the pooled test at the 0.045 left: 5 gained (1/32) is a gain, 4 (1/16) is not */
  fake(&f, 40, (int[]){0, 0}, (int[]){0, 5});
  seq_fake(&f, 16, 40);
  CHECK(judge(&f, t, NULL) == CP_VERDICT_PASS);
  fake(&f, 40, (int[]){0, 0}, (int[]){0, 4});
  seq_fake(&f, 16, 40);
  CHECK(judge(&f, t,
              "no effect: past the training length 256 the patch shows no gain: 4 prompts gained and 0 lost "
              "(sign test p = 0.062, not < 0.045)") == CP_VERDICT_NO_EFFECT);
  /* the gain-futility rule ended the pooled test at 512: 5 gained (1/32 < 0.045) no longer shows the
   * gain (the cells after it stopped without it); a cell's own boundary still does */
  fake(&f, 40, (int[]){0, 0}, (int[]){0, 5});
  seq_fake(&f, 16, 32);
  f.stop[1] = CP_SEQ_GAIN_FUTILITY;
  CHECK(judge(&f, t,
              "no effect: past the training length 256 the patch shows no gain: 5 prompts gained and 0 lost, and gain "
              "futility ended the pooled sign test at passkey 512 after 32 prompts") == CP_VERDICT_NO_EFFECT);
  cp_verify_gain_test gt;
  cp_verify_gain(&gt, &f.r, t);
  CHECK(gt.futile && gt.futile_cell == 1 && !gt.found && gt.p_value < gt.level);
  f.gain_crossed[1] = 1;
  CHECK(judge(&f, t, NULL) == CP_VERDICT_PASS);
  /* the design's detectable drop: 0.193 passes 0.2 but not 0.19, which the fixed 40 (0.162) would */
  cp_verify_thresholds strict = *t;
  strict.max_detectable_drop = 0.19;
  fake(&f, 40, (int[]){0, 0}, (int[]){0, 8});
  CHECK(judge(&f, &strict, NULL) == CP_VERDICT_PASS);
  seq_fake(&f, 16, 40);
  CHECK(judge(&f, &strict, "inconclusive:") == CP_VERDICT_INCONCLUSIVE);
  CHECK(fabs(cp_verify_detectable_drop(&f.r, t) - 0.192822) < 1e-6);
}

/* The default criterion: no regression, a gain past the training length, and the power to see a
 * harm (docs/certificate.md, "Verdicts"). */
static void verdicts(void) {
  static const int64_t both[2] = {256, 512};
  cp_verify_thresholds t;
  cp_verify_thresholds_init(&t);
  t.no_regression_at = both;
  t.n_no_regression = 2;
  t.gain_after = 256;
  fake_run f;
  /* 40 pairs, 8 gained and none lost at 512: sign test p = 2^-8 */
  fake(&f, 40, (int[]){0, 0}, (int[]){0, 8});
  CHECK(judge(&f, &t, NULL) == CP_VERDICT_PASS);
  /* a no-op: nothing discordant */
  fake(&f, 40, (int[]){0, 0}, (int[]){0, 0});
  CHECK(judge(&f, &t, "no effect:") == CP_VERDICT_NO_EFFECT);
  /* 4 gained, 0 lost: p = 1/16, not a gain at 0.05; 5 gained: 1/32 is */
  fake(&f, 40, (int[]){0, 0}, (int[]){0, 4});
  CHECK(judge(&f, &t, "no effect:") == CP_VERDICT_NO_EFFECT);
  fake(&f, 40, (int[]){0, 0}, (int[]){0, 5});
  CHECK(judge(&f, &t, NULL) == CP_VERDICT_PASS);
  /* 4 gained at 512 listed twice (the same prompts run twice) is still 4, not 8 */
  static const int64_t at512[1] = {512};
  cp_verify_thresholds twice = t;
  twice.no_regression_at = at512;
  twice.n_no_regression = 1;
  fake(&f, 40, (int[]){0, 0}, (int[]){4, 4});
  f.lengths[0] = 512;
  CHECK(judge(&f, &twice, "no effect:") == CP_VERDICT_NO_EFFECT);
  /* a gain at the training length only is not a gain past it */
  fake(&f, 40, (int[]){0, 0}, (int[]){8, 0});
  CHECK(judge(&f, &t, "no effect:") == CP_VERDICT_NO_EFFECT);
  t.accept_no_gain = true;
  CHECK(judge(&f, &t, NULL) == CP_VERDICT_PASS);
  t.accept_no_gain = false;
  /* 6 pairs detect only a drop of 0.731: inconclusive, even with a gain (6 of 6, p = 1/64) */
  fake(&f, 6, (int[]){0, 0}, (int[]){0, 6});
  CHECK(judge(&f, &t, "inconclusive:") == CP_VERDICT_INCONCLUSIVE);
  t.accept_underpowered = true;
  CHECK(judge(&f, &t, NULL) == CP_VERDICT_PASS);
  t.accept_underpowered = false;
  /* 40 pairs detect 0.162: above a stricter --max-detectable-drop 0.1 */
  fake(&f, 40, (int[]){0, 0}, (int[]){0, 8});
  t.max_detectable_drop = 0.1;
  CHECK(judge(&f, &t, "inconclusive:") == CP_VERDICT_INCONCLUSIVE);
  t.max_detectable_drop = CP_STATS_MAX_DETECTABLE_DROP;
  /* a regression outranks the rest: 12 of 40 lost at 256 */
  fake(&f, 40, (int[]){12, 0}, (int[]){0, 0});
  CHECK(judge(&f, &t, "passkey at 256: regression") == CP_VERDICT_FAIL);
  fake(&f, 6, (int[]){6, 0}, (int[]){0, 0});
  CHECK(judge(&f, &t, "passkey at 256: regression") == CP_VERDICT_FAIL);
  /* ppl alone: a gain is an NLL lower by more than ppl_margin past the training length; the
   * power criterion needs a retrieval probe */
  fake(&f, 1, (int[]){0, 0}, (int[]){0, 0});
  f.r.n_probes = 0;
  f.r.has_ppl = true;
  f.ppl[CP_SIDE_BASELINE][0] = f.ppl[CP_SIDE_PATCHED][0] = 2.0;
  f.ppl[CP_SIDE_BASELINE][1] = 3.0;
  f.ppl[CP_SIDE_PATCHED][1] = 2.9;
  CHECK(judge(&f, &t, NULL) == CP_VERDICT_PASS);
  f.ppl[CP_SIDE_PATCHED][1] = 2.96;
  CHECK(judge(&f, &t, "no effect:") == CP_VERDICT_NO_EFFECT);
  cp_verify_gain_test g;
  cp_verify_gain(&g, &f.r, &t);
  CHECK(g.n_lengths == 1 && fabs(g.ppl_saved - 0.04) < 1e-12 && !g.found);
  /* no criterion: "none", whatever the pairs */
  cp_verify_thresholds none;
  cp_verify_thresholds_init(&none);
  fake(&f, 40, (int[]){0, 0}, (int[]){0, 0});
  CHECK(judge(&f, &none, NULL) == CP_VERDICT_NONE);
  CHECK(!strcmp(cp_verdict_name(CP_VERDICT_NO_EFFECT), "no effect") &&
        !strcmp(cp_verdict_name(CP_VERDICT_INCONCLUSIVE), "inconclusive"));
  sequential_verdicts(&t);
}

/* verify/sequential.c against tests/goldens/stats/sequential.json (tests/reference/
 * make_sequential_golden.py: python/ctxpatch_ref/seqdesign.py, written apart from the C code):
 * levels, boundaries in counts, curtailment, the gain boundary, power and detectable drop. */
static int first_b(const cp_seq_design *d, int j, int64_t c, bool fail) {
  int64_t nj = cp_seq_look_prompts(d, j), found = -1;
  for (int64_t b = 0; b + c <= nj; b++) {
    if (fail && cp_seq_fails(d, j, b, c)) return (int)b;
    if (!fail && cp_seq_futile(d, j, b, c)) found = b;
  }
  return (int)found;
}

static void sequential(const char *src) {
  char path[4096], *text = NULL;
  size_t len = 0;
  snprintf(path, sizeof path, "%s/tests/goldens/stats/sequential.json", src);
  CHECK_RC(0, cp_read_file(&text, &len, path, 1 << 24));
  cJSON *g = text ? cJSON_Parse(text) : NULL;
  CHECK(g != NULL);
  CHECK(num(g, "interim_share") == CP_SEQ_INTERIM_SHARE && num(g, "futility_beta") == CP_SEQ_FUTILITY_BETA);
  const cJSON *e, *lk, *kv;
  int n_designs = 0, n_bounds = 0, n_gain = 0;
  CHECK(num(g, "gain_gamma") == CP_SEQ_GAIN_GAMMA);
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(g, "designs")) {
    cp_seq_design d;
    CHECK_RC(0, cp_seq_design_init(&d, (int64_t)num(e, "prompts"), (int64_t)num(e, "every"), num(e, "alpha"),
                                   num(e, "margin"), num(e, "futility_drop"), (int)num(e, "gain_cells")));
    CHECK(d.n_looks == cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(e, "looks")));
    CHECK(fabs(cp_seq_gain_final_alpha(&d) - num(e, "gain_final_alpha")) < 1e-15);
    int j = 0;
    cJSON_ArrayForEach(lk, cJSON_GetObjectItemCaseSensitive(e, "looks")) {
      CHECK(cp_seq_look_prompts(&d, j) == (int64_t)num(lk, "prompts"));
      CHECK(fabs(cp_seq_fail_level(&d, j) - num(lk, "fail_level")) < 1e-15);
      CHECK(fabs(cp_seq_futility_level(&d, j) - num(lk, "futility_level")) < 1e-15);
      CHECK(fabs(cp_seq_gain_level(&d, j) - num(lk, "gain_level")) < 1e-15);
      cJSON_ArrayForEach(kv, cJSON_GetObjectItemCaseSensitive(lk, "fail_min_b")) {
        int got = first_b(&d, j, atoi(kv->string), true);
        CHECK_MSG(got == (int)kv->valuedouble, "n=%g look %d c=%s: fails from b=%d, want %g", num(e, "prompts"), j,
                  kv->string, got, kv->valuedouble);
        n_bounds++;
      }
      cJSON_ArrayForEach(kv, cJSON_GetObjectItemCaseSensitive(lk, "futility_max_b")) {
        int got = first_b(&d, j, atoi(kv->string), false);
        CHECK_MSG(got == (int)kv->valuedouble, "n=%g look %d c=%s: futile up to b=%d, want %g", num(e, "prompts"), j,
                  kv->string, got, kv->valuedouble);
        n_bounds++;
      }
      cJSON_ArrayForEach(kv, cJSON_GetObjectItemCaseSensitive(lk, "gain_min_c")) {
        int64_t b = atoi(kv->string), nj = cp_seq_look_prompts(&d, j), c = 0;
        while (c + b <= nj && !cp_seq_gain_crossed(&d, j, b, c)) c++;
        CHECK_MSG((c + b > nj ? -1 : c) == (int64_t)kv->valuedouble, "n=%g look %d b=%s: gain from c=%lld",
                  num(e, "prompts"), j, kv->string, (long long)c);
      }
      cJSON_ArrayForEach(kv, cJSON_GetObjectItemCaseSensitive(lk, "cannot_fail")) {
        int64_t b = (int64_t)cJSON_GetArrayItem(kv, 0)->valuedouble,
                c = (int64_t)cJSON_GetArrayItem(kv, 1)->valuedouble;
        CHECK(cp_seq_cannot_fail(&d, j, b, c) == cJSON_IsTrue(cJSON_GetArrayItem(kv, 2)));
      }
      j++;
    }
    cJSON_ArrayForEach(kv, cJSON_GetObjectItemCaseSensitive(e, "power")) {
      double q = cJSON_GetArrayItem(kv, 0)->valuedouble, want = cJSON_GetArrayItem(kv, 1)->valuedouble;
      CHECK_MSG(fabs(cp_seq_power(&d, q) - want) < 1e-10, "n=%g power(%g) %.12g want %.12g", num(e, "prompts"), q,
                cp_seq_power(&d, q), want);
    }
    double want = num(e, "detectable_drop"), drop = cp_seq_detectable_drop(&d, 0.8);
    CHECK_MSG(isnan(want) ? isnan(drop) : fabs(drop - want) < 1e-8, "n=%g detectable %.10g want %.10g",
              num(e, "prompts"), drop, want);
    /* gain futility: the target gain, the threshold and the conditional power */
    want = num(e, "gain_target");
    CHECK_MSG(isnan(want) ? isnan(d.gain_target) : fabs(d.gain_target - want) < 1e-8,
              "n=%g gain target %.10g want %.10g", num(e, "prompts"), d.gain_target, want);
    CHECK(d.gain_gamma == num(e, "gain_gamma"));
    cJSON_ArrayForEach(kv, cJSON_GetObjectItemCaseSensitive(e, "gain_power")) {
      int64_t lost = (int64_t)cJSON_GetArrayItem(kv, 0)->valuedouble,
              gained = (int64_t)cJSON_GetArrayItem(kv, 1)->valuedouble,
              rest = (int64_t)cJSON_GetArrayItem(kv, 2)->valuedouble;
      double cp = cp_seq_gain_power(&d, lost, gained, rest), cp_want = cJSON_GetArrayItem(kv, 3)->valuedouble;
      CHECK_MSG(fabs(cp - cp_want) < 1e-10, "n=%g cells %g: conditional power (%lld, %lld, %lld) %.12g want %.12g",
                num(e, "prompts"), num(e, "gain_cells"), (long long)lost, (long long)gained, (long long)rest, cp,
                cp_want);
      CHECK(cp_seq_gain_futile(&d, lost, gained, rest) == cJSON_IsTrue(cJSON_GetArrayItem(kv, 4)));
      n_gain++;
    }
    n_designs++;
  }
  CHECK(n_designs >= 7 && n_bounds > 100 && n_gain > 50);
  /* one look is the fixed design: alpha at the end, no interim stop, the fixed detectable drop */
  cp_seq_design one;
  CHECK_RC(0, cp_seq_design_init(&one, 40, 40, 0.05, 0.05, 0.2, 1));
  CHECK(cp_seq_fail_level(&one, 0) == 0.05 && cp_seq_gain_final_alpha(&one) == 0.05);
  CHECK(fabs(cp_seq_detectable_drop(&one, 0.8) - cp_tango_detectable_drop(40, 0.05, 0.05, 0.8)) < 1e-8);
  /* gain futility applies up to CP_SEQ_GAIN_MAX_PROMPTS prompts in the gain cells together */
  CHECK_RC(0, cp_seq_design_init(&one, 2000, 8, 0.05, 0.05, 0.2, 50));
  CHECK(one.gain_gamma == CP_SEQ_GAIN_GAMMA && one.gain_target > 0 && one.gain_target < 0.001);
  CHECK_RC(0, cp_seq_design_init(&one, 2000, 8, 0.05, 0.05, 0.2, 51));
  CHECK(one.gain_gamma == 0 && !cp_seq_gain_futile(&one, 0, 0, 1000));
  /* out-of-range designs are refused with a message, not asserted */
  CHECK_RC(CP_EARG, cp_seq_design_init(&one, CP_SEQ_MAX_PROMPTS + 1, 8, 0.05, 0.05, 0.2, 1));
  CHECK_RC(CP_EARG, cp_seq_design_init(&one, 40, 0, 0.05, 0.05, 0.2, 1));
  cJSON_Delete(g);
  free(text);
}

int main(void) {
  const char *src = test_env("CTXPATCH_SOURCE_DIR");
  char path[4096], *text = NULL;
  size_t len = 0;
  snprintf(path, sizeof path, "%s/tests/goldens/stats/stats.json", src);
  CHECK_RC(0, cp_read_file(&text, &len, path, 1 << 24));
  cJSON *g = text ? cJSON_Parse(text) : NULL;
  CHECK(g != NULL);
  CHECK(fabs(num(g, "z95") - CP_STATS_Z95) < 1e-15);
  int n_w = 0, n_t = 0, n_d = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(g, "wilson")) {
    double lo, hi;
    cp_wilson_interval(&lo, &hi, (int64_t)num(e, "k"), (int64_t)num(e, "n"), CP_STATS_Z95);
    CHECK_MSG(fabs(lo - num(e, "lo")) < 1e-12 && fabs(hi - num(e, "hi")) < 1e-12, "wilson %g/%g: [%.15g, %.15g]",
              num(e, "k"), num(e, "n"), lo, hi);
    n_w++;
  }
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(g, "tango")) {
    int64_t n = (int64_t)num(e, "n"), b = (int64_t)num(e, "b"), c = (int64_t)num(e, "c");
    double d = num(e, "margin"), z, want_z = num(e, "z");
    cp_tango_statistic(&z, n, b, c, d);
    double p = cp_tango_p_value(n, b, c, d);
    /* the golden's MLE is a numeric maximisation: agreement to 1e-7 */
    bool ok = isnan(want_z) ? isnan(z) : fabs(z - want_z) < 1e-7;
    CHECK_MSG(ok && fabs(p - num(e, "p")) < 1e-7, "tango n=%lld b=%lld c=%lld margin=%g: z %.10g (want %.10g) p %.10g",
              (long long)n, (long long)b, (long long)c, d, z, want_z, p);
    n_t++;
  }
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(g, "detectable")) {
    int64_t n = (int64_t)num(e, "n");
    double d = num(e, "margin"), a = num(e, "alpha"), pw = num(e, "power"), want = num(e, "drop");
    CHECK(cp_tango_min_reject(n, d, a) == (int64_t)num(e, "min_reject"));
    double drop = cp_tango_detectable_drop(n, d, a, pw);
    CHECK_MSG(isnan(want) ? isnan(drop) : fabs(drop - want) < 1e-8, "detectable n=%lld margin=%g: %.10g want %.10g",
              (long long)n, d, drop, want);
    n_d++;
  }
  int n_s = 0;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(g, "sign")) {
    int64_t lost = (int64_t)num(e, "lost"), gained = (int64_t)num(e, "gained");
    double p = cp_sign_test_p_value(lost, gained), want = num(e, "p");
    CHECK_MSG(fabs(p - want) <= 1e-12 + 1e-9 * want, "sign test lost=%lld gained=%lld: %.15g want %.15g",
              (long long)lost, (long long)gained, p, want);
    n_s++;
  }
  CHECK(n_w > 40 && n_t > 40 && n_d > 15 && n_s >= 14);
  cJSON_Delete(g);
  free(text);
  published();
  identities();
  verdicts();
  sequential(src);
  return test_finish();
}
