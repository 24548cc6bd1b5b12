/* Minimal test harness: CHECK macros that count and print the first failures, a closing
 * "N passed, N failed" line, and exit code 77 for a skip (CTest SKIP_RETURN_CODE). */
#ifndef CTXPATCH_TEST_H
#define CTXPATCH_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ctxpatch/base/error.h"

static int test_passed, test_failed;

#define CHECK(cond)                                                                       \
  do {                                                                                    \
    if (cond) {                                                                           \
      test_passed++;                                                                      \
    } else {                                                                              \
      test_failed++;                                                                      \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);           \
    }                                                                                     \
  } while (0)

#define CHECK_MSG(cond, ...)                                                              \
  do {                                                                                    \
    if (cond) {                                                                           \
      test_passed++;                                                                      \
    } else {                                                                              \
      test_failed++;                                                                      \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);           \
      fprintf(stderr, __VA_ARGS__);                                                       \
      fputc('\n', stderr);                                                                \
    }                                                                                     \
  } while (0)

/* Asserts a library call returns `want` (0 or a cp_err); prints the error message if not. */
#define CHECK_RC(want, expr)                                                              \
  do {                                                                                    \
    int rc_ = (expr);                                                                     \
    if (rc_ == (want)) {                                                                  \
      test_passed++;                                                                      \
    } else {                                                                              \
      test_failed++;                                                                      \
      fprintf(stderr, "%s:%d: %s returned %s, want %s (%s)\n", __FILE__, __LINE__, #expr, \
              cp_err_name(rc_), cp_err_name(want), cp_error_message());                   \
    }                                                                                     \
  } while (0)

static inline int test_finish(void) {
  printf("%d passed, %d failed\n", test_passed, test_failed);
  return test_failed ? 1 : 0;
}

static inline void test_skip(const char *why) {
  printf("SKIP: %s\n", why);
  exit(77);
}

static inline const char *test_env(const char *name) {
  const char *v = getenv(name);
  if (!v || !*v) {
    fprintf(stderr, "environment variable %s is not set (run the tests through ctest)\n", name);
    exit(2);
  }
  return v;
}

/* ../shared/fixtures, or a skip with a clear message when it is absent. */
static inline const char *test_fixtures(void) {
  const char *dir = getenv("CTXPATCH_FIXTURES");
  struct stat st;
  if (!dir || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    fprintf(stdout, "SKIP: shared fixtures folder %s is absent (fresh clone outside the workspace)\n",
            dir ? dir : "(unset)");
    exit(77);
  }
  return dir;
}

/* Joins into a static buffer (tests only). */
static inline const char *test_path(const char *dir, const char *name) {
  static char buf[8][4096];
  static int slot;
  char joined[4096];
  /* dir may be an earlier slot; a path over 4 KiB would be a broken test, so it aborts */
  if (snprintf(joined, sizeof joined, "%s/%s", dir, name) >= (int)sizeof joined) abort();
  char *p = buf[slot++ & 7];
  memcpy(p, joined, sizeof joined);
  return p;
}

/* max |a - b| / max |b| (the engine goldens' measure; NaN-safe: a NaN difference wins). */
static inline double test_rel_err(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d > num || d != d) num = d;
    if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
  }
  return den > 0 ? num / den : num;
}

/* Compares float arrays with tol + |ref|*eps; prints the first mismatches and the max diff. */
static inline int test_allclose(const char *what, const float *got, const float *ref, size_t n,
                                double tol, double eps) {
  size_t bad = 0;
  double maxdiff = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)ref[i]);
    if (d > maxdiff || d != d) maxdiff = d;
    if (!(d <= tol + fabs((double)ref[i]) * eps)) {
      if (bad < 5) fprintf(stderr, "%s[%zu]: got %.9g want %.9g\n", what, i, got[i], ref[i]);
      bad++;
    }
  }
  if (bad) fprintf(stderr, "%s: %zu of %zu mismatched, max diff %.3g\n", what, bad, n, maxdiff);
  return bad == 0;
}

#endif
