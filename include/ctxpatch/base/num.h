/* Floor: base. Numbers as people read them: every measured number ctxpatch writes into a JSON
 * document (certificates, every command's --json) goes through cp_num_round, so a value computed
 * as 0.79999999999999993 reads 0.8 and a confidence bound does not carry 17 digits of noise.
 * Rule values (and taus, which go into rules) are not rounded: a rule is applied exactly as
 * written. */
#ifndef CTXPATCH_BASE_NUM_H
#define CTXPATCH_BASE_NUM_H

/* Significant digits of every non-integer number in the JSON documents ctxpatch writes
 * (statistics, accuracies, NLL, attention statistics, timings). */
#define CP_NUM_JSON_DIGITS 6

/* x rounded to `digits` significant decimal digits (1..17), as the double nearest that decimal,
 * so that a shortest-round-trip printer (cJSON's) prints it short. Integers up to 2^53, NaN and
 * infinities come back unchanged. (Tables print with fixed printf precisions: %.3f accuracies,
 * %.4f NLL, %.2g p-values.) */
double cp_num_round(double x, int digits);

#endif
