/* Floor: patchers. A temperature_schedule rule from a calibration table: one method's taus at the
 * table's lengths, in increasing length order, with the training length as a point of tau 1 in
 * front unless the caller leaves it out (docs/calibration.md, "Schedules"). */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/patchers/calibrate.h"

/* Appends one point (width taus) to the schedule. */
static void add_point(cp_rule *r, int64_t len, const double *tau /* [width] */, int width) {
  int k = r->n_schedule++;
  r->schedule_len[k] = len;
  for (int l = 0; l < width; l++) r->schedule_tau[k * width + l] = tau[l];
}

int cp_calib_schedule_rule(cp_rule *rule, const cp_calib_table *t, cp_cal_method method, bool train_point) {
  cp_rule_init(rule);
  const cp_calib_entry *first = cp_calib_table_get(t, method, t->lengths[0]);
  if (!first) return cp_error_set(CP_EARG, "calibrate: schedule: method %s is not in the table", cp_cal_method_name(method));
  int width = first->n_layer_tau > 0 ? first->n_layer_tau : 1;
  assert(width <= CP_RULE_MAX_LAYERS);
  int n_points = t->n_lengths + (train_point ? 1 : 0);
  if (n_points > CP_RULE_MAX_SCHEDULE_POINTS || (int64_t)n_points * width > CP_RULE_MAX_SCHEDULE_VALUES)
    return cp_error_set(CP_EARG, "calibrate: schedule: %d points of %d taus are over the limit of %d points and %d taus",
                        n_points, width, CP_RULE_MAX_SCHEDULE_POINTS, CP_RULE_MAX_SCHEDULE_VALUES);
  /* The table's lengths in increasing order (the command line may give them in any order). */
  int order[CP_RULE_MAX_SCHEDULE_POINTS];
  for (int i = 0; i < t->n_lengths; i++) {
    int j = i;
    for (; j > 0 && t->lengths[order[j - 1]] > t->lengths[i]; j--) order[j] = order[j - 1];
    order[j] = i;
  }
  rule->schedule_width = width;
  rule->schedule_per_layer = first->n_layer_tau > 0;
  if (train_point) {
    double ones[CP_RULE_MAX_LAYERS];
    for (int l = 0; l < width; l++) ones[l] = 1.0;
    add_point(rule, t->train_len, ones, width);
  }
  for (int i = 0; i < t->n_lengths; i++) {
    int64_t len = t->lengths[order[i]];
    const cp_calib_entry *e = cp_calib_table_get(t, method, len);
    if (rule->n_schedule > 0 && len <= rule->schedule_len[rule->n_schedule - 1])
      return cp_error_set(CP_EARG, "calibrate: schedule: length %lld is given twice (or is the training length)",
                          (long long)len);
    if (e->n_layer_tau > 0) {
      add_point(rule, len, e->layer_tau, width);
      continue;
    }
    if (isnan(e->tau))
      return cp_error_set(CP_EARG, "calibrate: schedule: method %s gives no temperature at length %lld: %s",
                          cp_cal_method_name(method), (long long)len, e->note ? e->note : "no answer");
    add_point(rule, len, &e->tau, 1);
  }
  return 0;
}
