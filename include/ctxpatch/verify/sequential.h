/* Floor: verify. The sequential verdict design (docs/certificate.md, "Sequential verdicts"): each
 * (probe, length) cell of a paired comparison looks at its outcomes every `every` prompts, at most
 * n_max (the fixed design's count, which is the last look), and stops once its part of the verdict
 * is decided.
 *   - Looks: n_j = min((j + 1) every, n_max), j = 0 .. n_looks - 1.
 *   - Regression (fail): Tango's test (stats.h) at look j rejects at the nominal level a_j.
 *     Haybittle-Peto-type spending: the interim looks share CP_SEQ_INTERIM_SHARE of alpha equally,
 *     the last look keeps the rest; by Bonferroni the chance of any false rejection is at most
 *     the sum, alpha, whatever the nuisance (the "gained" rate) is.
 *   - Futility ("no regression" established): at an interim look, the lower tail of Tango's test
 *     of a drop of futility_drop (the largest detectable drop the verdict accepts) is below
 *     CP_SEQ_FUTILITY_BETA / (n_looks - 1). Such stops cost power, which the design's detectable
 *     drop (cp_seq_detectable_drop) counts exactly.
 *   - Gain: at an interim look, a gain cell whose own exact sign test is below
 *     alpha CP_SEQ_INTERIM_SHARE / (gain_cells (n_looks - 1)) shows the gain; otherwise the pooled
 *     sign test of the fixed design decides at alpha (1 - CP_SEQ_INTERIM_SHARE).
 *   - Gain futility (non-binding): at an interim look, the conditional power of the pooled gain
 *     test, P(it rejects at cp_seq_gain_final_alpha | the pairs so far) when each remaining prompt
 *     of the gain cells is gained with probability gain_target and none is lost, is below
 *     gain_gamma: the gain is declared not shown for the run. gain_target is the gain the fixed
 *     pooled test over gain_cells x n_max prompts detects with power CP_STATS_POWER
 *     (cp_sign_test_detectable_gain): the alternative the design is sized for.
 * With one look (n_max <= every) the design is the fixed one: levels alpha, no interim stop.
 * Pure functions of their arguments; only cp_seq_power allocates (a scratch array, freed).
 */
#ifndef CTXPATCH_VERIFY_SEQUENTIAL_H
#define CTXPATCH_VERIFY_SEQUENTIAL_H

#include <stdbool.h>
#include <stdint.h>

/* Default prompts between looks (`--looks K`). */
#define CP_SEQ_DEFAULT_EVERY 8
/* Share of each test's alpha the interim looks spend, equally; the last look keeps the rest. */
#define CP_SEQ_INTERIM_SHARE 0.1
/* Chance, at a true drop of futility_drop, that the interim looks stop for "no regression". */
#define CP_SEQ_FUTILITY_BETA 0.1
/* Conditional power below which the pooled gain test stops for futility (chosen by simulation,
 * lab/sequential_oc.py; docs/certificate.md, "Sequential verdicts"). */
#define CP_SEQ_GAIN_GAMMA 0.1
/* Above this many prompts in the gain cells together (gain_cells x n_max) the design has no
 * gain-futility rule: each look's conditional power costs about that many terms. */
#define CP_SEQ_GAIN_MAX_PROMPTS 100000
/* At most this many prompts a cell: the power recursion costs about n_max^2 / 2 steps. */
#define CP_SEQ_MAX_PROMPTS 2000

typedef struct cp_seq_design {
  int64_t n_max;        /* prompts of a cell in the fixed design: the last look */
  int64_t every;        /* prompts between looks */
  int n_looks;          /* ceil(n_max / every) */
  double alpha, margin; /* the fixed design's one-sided level and Tango margin */
  double futility_drop; /* the drop the futility test is stated against */
  int gain_cells;       /* cells the gain test pools (>= 1) */
  double gain_target;   /* the gain-futility rule's alternative: rate of gained prompts, none lost */
  double gain_gamma;    /* its conditional-power threshold; 0: no gain-futility rule */
} cp_seq_design;

/* Fills *d (gain_gamma CP_SEQ_GAIN_GAMMA, or 0 past CP_SEQ_GAIN_MAX_PROMPTS); CP_EARG (one line)
 * when n_max is not in [1, CP_SEQ_MAX_PROMPTS] or every < 1. */
int cp_seq_design_init(cp_seq_design *d, int64_t n_max, int64_t every, double alpha, double margin,
                       double futility_drop, int gain_cells);
/* Prompts seen at look j. */
int64_t cp_seq_look_prompts(const cp_seq_design *d, int j);
/* Nominal levels at look j: regression, futility (0 at the last look), a gain cell's own sign test
 * (0 at the last look), and the pooled gain test's level at the end. */
double cp_seq_fail_level(const cp_seq_design *d, int j);
double cp_seq_futility_level(const cp_seq_design *d, int j);
double cp_seq_gain_level(const cp_seq_design *d, int j);
double cp_seq_gain_final_alpha(const cp_seq_design *d);
/* Decisions at look j on the cell's b lost and c gained pairs. */
bool cp_seq_fails(const cp_seq_design *d, int j, int64_t b, int64_t c);
bool cp_seq_futile(const cp_seq_design *d, int j, int64_t b, int64_t c);
bool cp_seq_gain_crossed(const cp_seq_design *d, int j, int64_t lost, int64_t gained);
/* Curtailment: no outcome of the prompts after look j makes a later look reject (the worst case,
 * every remaining prompt lost, does not). */
bool cp_seq_cannot_fail(const cp_seq_design *d, int j, int64_t b, int64_t c);
/* Conditional power of the pooled gain test with `lost` and `gained` pairs so far and `rest`
 * prompts of the gain cells to come, each gained with probability gain_target, none lost: the
 * exact binomial tail of the gains it needs. */
double cp_seq_gain_power(const cp_seq_design *d, int64_t lost, int64_t gained, int64_t rest);
/* The gain-futility rule: gain_gamma > 0 and the conditional power below it. */
bool cp_seq_gain_futile(const cp_seq_design *d, int64_t lost, int64_t gained, int64_t rest);
/* P(the design declares a regression) when the original answers every prompt and the patch loses
 * each with probability `drop`: exact recursion over the lost count at the looks; NaN when out of
 * memory. */
double cp_seq_power(const cp_seq_design *d, double drop);
/* Smallest drop detected with probability `power` (bisection to 1e-9); NaN when none is (or out
 * of memory). */
double cp_seq_detectable_drop(const cp_seq_design *d, double power);

#endif
