/* Numbers at a readable precision: see include/ctxpatch/base/num.h. */
#include "ctxpatch/base/num.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int clamp_digits(int digits) { return digits < 1 ? 1 : digits > 17 ? 17 : digits; }

double cp_num_round(double x, int digits) {
  if (!isfinite(x) || (x == floor(x) && fabs(x) <= 9007199254740992.0)) return x;
  char buf[CP_NUM_BUF];
  snprintf(buf, sizeof buf, "%.*g", clamp_digits(digits), x);
  return strtod(buf, NULL);
}

const char *cp_num_format(char buf[CP_NUM_BUF], double x, int digits) {
  if (isnan(x)) return snprintf(buf, CP_NUM_BUF, "nan"), buf;
  if (isinf(x)) return snprintf(buf, CP_NUM_BUF, "%sinf", x < 0 ? "-" : ""), buf;
  if (x == floor(x) && fabs(x) <= 9007199254740992.0) return snprintf(buf, CP_NUM_BUF, "%.0f", x), buf;
  double r = cp_num_round(x, digits);
  /* The fewest digits that give back r: "%.*g" drops trailing zeros. */
  for (int d = 1; d <= clamp_digits(digits); d++) {
    snprintf(buf, CP_NUM_BUF, "%.*g", d, r);
    if (strtod(buf, NULL) == r) return buf;
  }
  snprintf(buf, CP_NUM_BUF, "%.*g", clamp_digits(digits), r);
  return buf;
}
