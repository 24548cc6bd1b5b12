/* Floor: base. Numbers as people read them: every number ctxpatch prints for people or writes
 * into a JSON document it produces (certificates, --json outputs) goes through here, so a value
 * computed as 0.79999999999999993 reads 0.8 and a confidence bound does not carry 17 digits of
 * noise. Rule values are not rounded (a rule is applied exactly as written). Nothing allocates. */
#ifndef CTXPATCH_BASE_NUM_H
#define CTXPATCH_BASE_NUM_H

#include <stddef.h>

/* Significant digits of every non-integer number in the JSON documents ctxpatch writes
 * (statistics, accuracies, NLL, attention statistics, timings). */
#define CP_NUM_JSON_DIGITS 6

/* x rounded to `digits` significant decimal digits (1..17), as the double nearest that decimal,
 * so that a shortest-round-trip printer (cJSON's, cp_num_format's) prints it short. Integers
 * up to 2^53, NaN and infinities come back unchanged. */
double cp_num_round(double x, int digits);

/* Room for cp_num_format's text. */
#define CP_NUM_BUF 32

/* x as the shortest text of at most `digits` significant digits that reads back as
 * cp_num_round(x, digits): "0.8", "12", "1.5e-07", "nan", "inf". Returns buf. */
const char *cp_num_format(char buf[CP_NUM_BUF], double x, int digits);

#endif
