/* Floor: engine. Attention statistics against input length: the "dispersed attention" picture of the T5 seed
 * (mean P_max falls and entropy rises as the input grows past the training length), and the
 * quantity the temperature calibration aligns. */
#ifndef CTXPATCH_PROFILE_H
#define CTXPATCH_PROFILE_H

#include <stdint.h>

#include "ctxpatch/engine/engine.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/model/rule.h"

typedef struct {
  int64_t length;
  int n_modules, n_heads;
  cp_attn_kind *kind; /* [n_modules] */
  int *layer;         /* [n_modules] */
  float *pmax;        /* [n_modules, n_heads] */
  float *entropy;     /* [n_modules, n_heads] */
} cp_profile_point;

typedef struct {
  const int64_t *ids; /* ids to tile up to each length; NULL: uniform random ids */
  int64_t n_ids;
  uint64_t seed;      /* for random ids (default 0) */
  int threads;        /* engine threads (0: every CPU) */
} cp_profile_params;

void cp_profile_params_init(cp_profile_params *p);

/* Runs one forward pass per length (T5: encoder input of that length, decoder input
 * [decoder_start]) under `rule` (NULL: identity) and records the statistics.
 * out[0..n_lengths) are filled; free each with cp_profile_point_free. */
int cp_attention_profile(cp_profile_point *out /* [n_lengths] */, const cp_model *model, const cp_rule *rule,
                         const int64_t *lengths, int n_lengths, const cp_profile_params *params);
void cp_profile_point_free(cp_profile_point *p);

/* Mean over the modules of one kind and all their heads; NaN when there are none. */
double cp_profile_mean(const cp_profile_point *p, cp_attn_kind kind, int want_entropy);

/* Deterministic pseudo-random ids in [0, vocab): splitmix64 from `seed`. */
void cp_random_ids(int64_t *out /* [n] */, int64_t n, int vocab, uint64_t seed);

#endif
