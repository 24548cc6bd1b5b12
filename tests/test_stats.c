/* verify/stats.c against values computed independently: tests/goldens/stats/stats.json (written by
 * tests/reference/make_stats_golden.py from Python's math/statistics/fractions), published Wilson
 * intervals (Newcombe 1998, Stat. Med. 17:857, Table I, method 3) and the identities the
 * definitions imply (margin 0 = McNemar's score statistic). */
#include <stdbool.h>

#include <cjson/cJSON.h>

#include "ctxpatch/base/io.h"
#include "ctxpatch/verify/stats.h"
#include "test.h"

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void published(void) {
  /* Newcombe (1998) Table I, Wilson score interval without continuity correction (4 decimals). */
  static const struct { int k, n; double lo, hi; } t[] = {
      {81, 263, 0.2553, 0.3662}, {15, 148, 0.0624, 0.1605}, {0, 20, 0.0, 0.1611}, {1, 29, 0.0061, 0.1718}};
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
  CHECK(n_w > 40 && n_t > 40 && n_d > 15);
  cJSON_Delete(g);
  free(text);
  published();
  identities();
  return test_finish();
}
