/* Attention statistics against input length (include/ctxpatch/engine/profile.h): one engine for
 * every length, a forward pass with statistics at each, mean P_max and entropy per module. */
#include "ctxpatch/engine/profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"

void cp_profile_params_init(cp_profile_params *p) { memset(p, 0, sizeof *p); }

void cp_random_ids(int64_t *out, int64_t n, int vocab, uint64_t seed) {
  uint64_t s = seed;
  for (int64_t i = 0; i < n; i++) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    out[i] = (int64_t)(z % (uint64_t)vocab);
  }
}

void cp_profile_point_free(cp_profile_point *p) {
  if (!p) return;
  free(p->kind);
  free(p->layer);
  free(p->pmax);
  free(p->entropy);
  memset(p, 0, sizeof *p);
}

static int copy_stats(cp_profile_point *out, const cp_engine_stats *st, int64_t length) {
  size_t cells = (size_t)st->n_modules * (size_t)st->n_heads;
  out->length = length;
  out->n_modules = st->n_modules;
  out->n_heads = st->n_heads;
  out->kind = malloc((size_t)st->n_modules * sizeof *out->kind);
  out->layer = malloc((size_t)st->n_modules * sizeof *out->layer);
  out->pmax = malloc(cells * sizeof *out->pmax);
  out->entropy = malloc(cells * sizeof *out->entropy);
  if (!out->kind || !out->layer || !out->pmax || !out->entropy) {
    cp_profile_point_free(out);
    return cp_nomem("attention statistics");
  }
  memcpy(out->kind, st->kind, (size_t)st->n_modules * sizeof *out->kind);
  memcpy(out->layer, st->layer, (size_t)st->n_modules * sizeof *out->layer);
  memcpy(out->pmax, st->pmax, cells * sizeof *out->pmax);
  memcpy(out->entropy, st->entropy, cells * sizeof *out->entropy);
  return 0;
}

int cp_attention_profile(cp_profile_point *out, const cp_model *model, const cp_rule *rule, const int64_t *lengths,
                         int n_lengths, const cp_profile_params *params) {
  cp_profile_params defaults;
  if (!params) {
    cp_profile_params_init(&defaults);
    params = &defaults;
  }
  memset(out, 0, (size_t)n_lengths * sizeof *out);
  cp_engine_params ep;
  cp_engine_params_init(&ep);
  ep.threads = params->threads;
  ep.stats = true;
  cp_engine *engine = NULL;
  int64_t *ids = NULL;
  int rc = cp_engine_create(&engine, model, rule, &ep);
  for (int k = 0; rc == 0 && k < n_lengths; k++) {
    int64_t len = lengths[k];
    if (len <= 0) {
      rc = cp_error_set(CP_EARG, "length %lld is not positive", (long long)len);
      break;
    }
    free(ids);
    if (!(ids = malloc((size_t)len * sizeof *ids))) {
      rc = cp_nomem("%lld ids", (long long)len);
      break;
    }
    if (params->ids && params->n_ids > 0)
      for (int64_t i = 0; i < len; i++) ids[i] = params->ids[i % params->n_ids];
    else
      cp_random_ids(ids, len, model->vocab, params->seed + (uint64_t)k);
    if ((rc = cp_engine_forward(engine, NULL, ids, len, NULL, 0)) < 0) break;
    cp_engine_stats st;
    cp_engine_get_stats(&st, engine);
    rc = copy_stats(&out[k], &st, len);
  }
  if (rc < 0)
    for (int k = 0; k < n_lengths; k++) cp_profile_point_free(&out[k]);
  free(ids);
  cp_engine_free(engine);
  return rc;
}

double cp_profile_mean(const cp_profile_point *p, cp_attn_kind kind, int want_entropy) {
  cp_engine_stats st = {.n_modules = p->n_modules, .n_heads = p->n_heads, .kind = p->kind, .layer = p->layer,
                        .pmax = p->pmax, .entropy = p->entropy};
  return cp_engine_stats_mean(&st, kind, want_entropy);
}
