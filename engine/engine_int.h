/* Internal to engine/: the cp_engine object, shared by engine/engine.c (creation, rule, statistics)
 * and engine/engine_run.c (the passes over the backend, engine/backend.h). */
#ifndef CTXPATCH_ENGINE_ENGINE_INT_H
#define CTXPATCH_ENGINE_ENGINE_INT_H

#include "ctxpatch/engine/engine.h"
#include "engine/backend.h"

struct cp_engine {
  const cp_model *m;
  cp_rule rule;
  cp_rule_model rm;
  cp_engine_params p;
  /* Statistics of the last forward with params.stats, one slot per attention module. */
  int n_modules;
  cp_attn_kind *st_kind;
  int *st_layer;
  float *st_pmax, *st_ent;
  float *st_lstd; /* NULL unless params.logit_stats */
  const cp_backend_ops *ops;
  void *be;            /* the backend's own state */
  unsigned rule_epoch; /* counts rule changes: a cp_engine_cache filled under another rule is stale */
};

#endif
