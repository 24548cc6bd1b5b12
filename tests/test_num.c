/* base/num.c: rounding to significant digits. Expected values
 * are written out by hand (decimal literals, which C parses to the nearest double). */
#include <math.h>

#include "ctxpatch/base/num.h"
#include "test.h"

int main(void) {
  /* representation noise disappears: 1 - 0.2 - ... computed values read as their decimal */
  volatile double a = 0.1, b = 0.7;
  double noisy = a + b; /* 0.79999999999999993 */
  CHECK(noisy != 0.8);
  CHECK(cp_num_round(noisy, 6) == 0.8);
  CHECK(cp_num_round(1.0 / 3, 6) == 0.333333);
  CHECK(cp_num_round(2.0 / 3, 3) == 0.667);
  CHECK(cp_num_round(123456789.0, 3) == 123456789.0); /* integers are exact */
  CHECK(cp_num_round(1234.5678, 6) == 1234.57);
  CHECK(cp_num_round(-0.000123456789, 4) == -0.0001235);
  CHECK(cp_num_round(6.02214076e23, 3) == 6.02e23); /* past 2^53 integral doubles round too */
  CHECK(cp_num_round(1.23456789e-10, 2) == 1.2e-10);
  CHECK(isnan(cp_num_round(NAN, 6)) && cp_num_round(INFINITY, 6) == INFINITY);
  CHECK(cp_num_round(0.123456789, 0) == 0.1 && cp_num_round(0.123456789, 99) == 0.123456789);
  return test_finish();
}
