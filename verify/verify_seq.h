/* Private to verify/: the sequential run's decisions at each look (verify/verify_seq.c), called by
 * the probe loop of verify/verify_run.c. */
#ifndef CTXPATCH_VERIFY_VERIFY_SEQ_H
#define CTXPATCH_VERIFY_VERIFY_SEQ_H

#include <stdbool.h>
#include <stdint.h>

#include "ctxpatch/verify/sequential.h"
#include "ctxpatch/verify/verify.h"

/* What the looks of later cells need from earlier ones: the gain test pools the cells. */
typedef struct {
  cp_seq_design design;
  int64_t gain_lost, gain_gained; /* pairs of the gain cells already finished */
  bool gain_declared;             /* a gain cell crossed its own boundary */
  bool gain_futile;               /* the gain-futility rule declared the gain not shown */
  bool failed;                    /* a cell failed: the verdict is "fail" whatever the rest give */
} verify_seq_state;

/* The result's per-cell arrays for p->looks > 0 (r->looks_every, r->n_looks set). */
int verify_seq_alloc(cp_verify_result *r, const cp_verify_params *p);
/* The design of the run (p->judge set, no replay): CP_EARG when out of range. */
int verify_seq_start(verify_seq_state *st, const cp_verify_result *r, const cp_verify_params *p);
/* Look j of cell (pi, l): records the pairs, and returns true (with r->stop set) when the cell's
 * part of the verdict is decided: b lost and c gained pairs, k_ok patched answers right. */
bool verify_seq_look(verify_seq_state *st, cp_verify_result *r, const cp_verify_thresholds *t, int pi, int l, int j,
                     int64_t b, int64_t c, int64_t k_ok);
/* A cell has stopped with b lost and c gained pairs: a gain cell adds them to the pool. */
void verify_seq_cell_done(verify_seq_state *st, const cp_verify_result *r, const cp_verify_thresholds *t, int l,
                          int64_t b, int64_t c);

#endif
