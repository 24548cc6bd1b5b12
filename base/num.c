/* Numbers at a readable precision: see include/ctxpatch/base/num.h. */
#include "ctxpatch/base/num.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int clamp_digits(int digits) { return digits < 1 ? 1 : digits > 17 ? 17 : digits; }

double cp_num_round(double x, int digits) {
  if (!isfinite(x) || (x == floor(x) && fabs(x) <= 9007199254740992.0)) return x;
  char buf[32];
  snprintf(buf, sizeof buf, "%.*g", clamp_digits(digits), x);
  return strtod(buf, NULL);
}
