/* Range forms of cp_plan_visible and cp_plan_lambda_hidden (attention_rule.c), for engines that
 * stream over key blocks: a Lambda-masked row visits only its global prefix and local window.
 * tests/test_engine_stream.c checks both against the per-key helpers for every (i, j) of a
 * range of plans, so the two forms cannot drift apart. */
#include "ctxpatch/model/rule.h"

#include <assert.h>

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The ranges of the causal and Lambda masks, before the window. */
static int lambda_ranges(const cp_attn_plan *p, int64_t i, int64_t n_keys, int64_t lo[2], int64_t hi[2]) {
  int64_t end = p->causal ? min64(i + 1, n_keys) : n_keys;
  int n = 0;
  if (!p->lambda) {
    if (end > 0) lo[n] = 0, hi[n++] = end;
    return n;
  }
  /* j < n_global, or i - j < n_local  <=>  j > i - n_local. */
  int64_t g = min64(max64(p->n_global, 0), end);
  int64_t w = i - p->n_local + 1 > 0 ? i - p->n_local + 1 : 0;
  if (g > 0) lo[n] = 0, hi[n++] = g;
  w = max64(w, g);
  if (w < end) {
    if (n && hi[n - 1] == w)
      hi[n - 1] = end; /* prefix and window touch */
    else
      lo[n] = w, hi[n++] = end;
  }
  return n;
}

int cp_plan_visible_ranges(const cp_attn_plan *p, int64_t i, int64_t n_keys, int64_t lo[2],
                           int64_t hi[2]) {
  assert(i >= 0 && n_keys >= 0);
  int n = lambda_ranges(p, i, n_keys, lo, hi);
  if (p->window <= 0) return n;
  /* The layer's window keeps j > i - window: cut every range at that start. */
  const int64_t w0 = i - p->window + 1;
  int m = 0;
  for (int r = 0; r < n; r++) {
    int64_t a = max64(lo[r], w0), b = hi[r];
    if (a < b) lo[m] = a, hi[m++] = b;
  }
  return m;
}

void cp_plan_hidden_range(const cp_attn_plan *p, int64_t i, int64_t n_keys, int64_t *lo,
                          int64_t *hi) {
  assert(i >= 0 && n_keys >= 0);
  *lo = *hi = 0;
  if (!p->lambda) return;
  /* j <= i, j >= n_global, i - j >= n_local, and inside the window. */
  *lo = max64(p->n_global, 0);
  if (p->window > 0) *lo = max64(*lo, i - p->window + 1);
  *hi = min64(min64(i + 1, n_keys), i - p->n_local + 1);
  if (*hi < *lo) *hi = *lo;
}

/* Sorts and merges the intervals [lo, hi) in place; returns the merged count. */
/* Sorts and merges the intervals [lo, hi) in place; returns the merged count. */
int cp_ranges_merge(int64_t *lo, int64_t *hi, int n) {
  for (int a = 1; a < n; a++)
    for (int b = a; b > 0 && lo[b] < lo[b - 1]; b--) {
      int64_t t = lo[b];
      lo[b] = lo[b - 1], lo[b - 1] = t;
      t = hi[b];
      hi[b] = hi[b - 1], hi[b - 1] = t;
    }
  int m = 0;
  for (int a = 0; a < n; a++) {
    if (m && lo[a] <= hi[m - 1]) {
      if (hi[a] > hi[m - 1]) hi[m - 1] = hi[a];
    } else {
      lo[m] = lo[a], hi[m] = hi[a], m++;
    }
  }
  return m;
}
