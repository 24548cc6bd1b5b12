/* The engine object (include/ctxpatch/engine/engine.h): the rule it runs, the backend it runs on
 * (engine/backend.h: the CPU of engine_cpu.c or the CUDA engine of engine/cuda/) and the attention
 * statistics tables the backends fill. The passes themselves are engine_run.c. */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "engine/engine_int.h"

void cp_engine_params_init(cp_engine_params *p) {
  memset(p, 0, sizeof *p);
  p->threads = 0;
  p->stats = false;
}

const char *cp_attn_kind_name(cp_attn_kind kind) {
  switch (kind) {
    case CP_ATTN_ENCODER_SELF: return "encoder_self";
    case CP_ATTN_DECODER_SELF: return "decoder_self";
    case CP_ATTN_CROSS: return "cross";
  }
  return "?";
}

bool cp_engine_rope_needs_raw(const cp_model *m, const cp_rule *rule, const cp_rule_model *rm, cp_attn_kind kind,
                              int layer) {
  if (m->pos != CP_POS_ROPE || kind == CP_ATTN_CROSS) return false;
  cp_attn_plan plan;
  cp_rule_plan(&plan, rule, rm, kind, layer);
  return plan.ceiling != INT64_MAX || plan.top_k;
}

/* ---------------------------------------------------------------- statistics */

static int stats_module(const cp_engine *e, cp_attn_kind kind, int layer) {
  int nE = e->m->encoder.n_layers, nD = e->m->decoder.n_layers;
  switch (kind) {
    case CP_ATTN_ENCODER_SELF: return layer;
    case CP_ATTN_DECODER_SELF: return nE + layer;
    case CP_ATTN_CROSS: return nE + nD + layer;
  }
  return 0;
}

int cp_engine_stats_rows(const cp_engine *e, cp_attn_call *a) {
  const size_t Hn = (size_t)a->H * (size_t)a->n_q;
  float *stats = cp_attn_scratch(a, (e->st_lstd ? 3 : 2) * (Hn ? Hn : 1), sizeof *stats); /* pmax, entropy, std */
  CP_CHECK_ALLOC(stats, "engine: attention statistics");
  a->row_pmax = stats, a->row_ent = stats + Hn, a->row_lstd = e->st_lstd ? stats + 2 * Hn : NULL;
  return 0;
}

void cp_engine_record_stats(cp_engine *e, const cp_attn_call *a) {
  const int H = e->m->n_heads, module = stats_module(e, a->plan->kind, a->plan->layer);
  const int64_t n_q = a->n_q;
  const float *rp = a->row_pmax, *re = a->row_ent, *rs = e->st_lstd ? a->row_lstd : NULL;
  for (int h = 0; h < H; h++) {
    double sp = 0, se = 0, ss = 0;
    for (int64_t r = 0; r < n_q; r++) sp += rp[(size_t)h * n_q + r], se += re[(size_t)h * n_q + r];
    e->st_pmax[(size_t)module * H + h] = (float)(sp / (double)n_q);
    e->st_ent[(size_t)module * H + h] = (float)(se / (double)n_q);
    if (rs) {
      for (int64_t r = 0; r < n_q; r++) ss += rs[(size_t)h * n_q + r];
      e->st_lstd[(size_t)module * H + h] = (float)(ss / (double)n_q);
    }
  }
}

/* The statistics tables: one slot per attention module, in stats_module order. */
static int alloc_stats(cp_engine *e) {
  const cp_model *model = e->m;
  int nmod =
      model->encoder.n_layers + model->decoder.n_layers + (model->family == CP_FAMILY_T5 ? model->decoder.n_layers : 0);
  size_t cells = (size_t)nmod * (size_t)model->n_heads + 1;
  CP_CHECK_ALLOC(e->st_kind = calloc((size_t)nmod + 1, sizeof *e->st_kind), "engine: statistics");
  CP_CHECK_ALLOC(e->st_layer = calloc((size_t)nmod + 1, sizeof *e->st_layer), "engine: statistics");
  CP_CHECK_ALLOC(e->st_pmax = calloc(cells, sizeof *e->st_pmax), "engine: statistics");
  CP_CHECK_ALLOC(e->st_ent = calloc(cells, sizeof *e->st_ent), "engine: statistics");
  if (e->p.stats && e->p.logit_stats)
    CP_CHECK_ALLOC(e->st_lstd = calloc(cells, sizeof *e->st_lstd), "engine: statistics");
  for (int l = 0; l < model->encoder.n_layers; l++)
    e->st_kind[stats_module(e, CP_ATTN_ENCODER_SELF, l)] = CP_ATTN_ENCODER_SELF,
                                                     e->st_layer[stats_module(e, CP_ATTN_ENCODER_SELF, l)] = l;
  for (int l = 0; l < model->decoder.n_layers; l++) {
    e->st_kind[stats_module(e, CP_ATTN_DECODER_SELF, l)] = CP_ATTN_DECODER_SELF;
    e->st_layer[stats_module(e, CP_ATTN_DECODER_SELF, l)] = l;
    if (model->family == CP_FAMILY_T5) {
      e->st_kind[stats_module(e, CP_ATTN_CROSS, l)] = CP_ATTN_CROSS;
      e->st_layer[stats_module(e, CP_ATTN_CROSS, l)] = l;
    }
  }
  return 0;
}

void cp_engine_get_stats(cp_engine_stats *out, const cp_engine *e) {
  out->n_modules = e->n_modules;
  out->n_heads = e->m->n_heads;
  out->kind = e->st_kind;
  out->layer = e->st_layer;
  out->pmax = e->st_pmax;
  out->entropy = e->st_ent;
  out->logit_std = e->st_lstd;
}

double cp_engine_stats_mean(const cp_engine_stats *st, cp_attn_kind kind, int want_entropy) {
  double sum = 0;
  int n = 0;
  for (int m = 0; m < st->n_modules; m++) {
    if (st->kind[m] != kind) continue;
    const float *v = (want_entropy ? st->entropy : st->pmax) + (size_t)m * st->n_heads;
    for (int h = 0; h < st->n_heads; h++) sum += v[h], n++;
  }
  return n ? sum / n : NAN;
}

/* ---------------------------------------------------------------- the object */

/* Under llama.cpp's context shift the cache holds rotated keys only: a rule that keeps unrotated ones
 * (a ceiling, top-k) has none to read there. */
static int shift_rule_check(const cp_engine *e, const cp_rule *rule) {
  for (int l = 0; e->p.shift.n_ctx && l < e->m->decoder.n_layers; l++)
    if (cp_engine_rope_needs_raw(e->m, rule, &e->rm, CP_ATTN_DECODER_SELF, l))
      return cp_error_set(CP_EUNSUPPORTED, "engine: context shift under a rule with a distance ceiling or top-k");
  return 0;
}

int cp_engine_set_rule(cp_engine *e, const cp_rule *rule) {
  assert(e);
  const cp_model *model = e->m;
  /* A patched artifact carries its rule (model.h): it applies unless the caller brings its own;
   * stacking two rules has no defined meaning, so that is refused. */
  bool caller_rule = rule && !cp_rule_is_identity(rule);
  if (caller_rule && model->has_metadata_rule)
    return cp_error_set(CP_ERULE_MODEL,
                        "rule: the model is a patched artifact whose config.json 'ctxpatch.rule' "
                        "already applies a rule; refusing to combine it with another one");
  cp_rule next;
  if (caller_rule) next = *rule;
  else if (model->has_metadata_rule) next = model->metadata_rule;
  else cp_rule_init(&next);
  int rc = cp_rule_check_model(&next, &e->rm, "rule");
  if (rc || (rc = shift_rule_check(e, &next))) return rc;
  /* Every plan is derived from e->rule at each forward (cp_rule_plan), so swapping it is all. */
  e->rule = next;
  e->rule_epoch++;
  return 0;
}

const char *cp_engine_device(const cp_engine *e) { return e->ops->describe(e->be); }

int cp_engine_create(cp_engine **out, const cp_model *model, const cp_rule *rule, const cp_engine_params *params) {
  const cp_backend_ops *backend = NULL;
  if (params && params->device == CP_DEVICE_CUDA) {
#ifdef CTXPATCH_WITH_CUDA
    backend = &cp_cuda_engine_ops;
#else
    *out = NULL;
    return cp_error_set(CP_EUNSUPPORTED, "--device cuda: this build has no CUDA (configure with -DCTXPATCH_CUDA=ON)");
#endif
  }
  return cp_engine_create_on(out, model, rule, params, backend);
}

/* What llama.cpp's context shift (cp_engine_shift) can be emulated on: a cache of rotated keys that
 * a second rotation moves (RoPE without yarn's scaled cos and sin), one stack, no unrotated keys. */
static int check_shift(const cp_engine *e) {
  const cp_engine_shift *s = &e->p.shift;
  const cp_model *m = e->m;
  if (s->n_ctx == 0) return 0;
  if (s->n_ctx < 2 || s->n_ctx > ((int64_t)1 << 28) || s->n_keep < 0 || s->batch < 1 ||
      s->n_keep + s->batch >= s->n_ctx)
    return cp_error_set(CP_EARG,
                        "engine: context shift needs 0 <= keep, 1 <= batch and keep + batch < n_ctx "
                        "(keep %lld, batch %lld, n_ctx %lld)",
                        (long long)s->n_keep, (long long)s->batch, (long long)s->n_ctx);
  if (m->rope_by_length) /* a shift re-rotates cached keys by one table; these change it per call */
    return cp_error_set(CP_EUNSUPPORTED, "engine: llama.cpp's context shift is not emulated under %s RoPE scaling",
                        m->rope_type);
  if (m->rope_local.n > 0)
    return cp_error_set(CP_EUNSUPPORTED,
                        "engine: llama.cpp's context shift is not emulated on a model with two "
                        "RoPE bases (Gemma 3's sliding and full layers)");
  if (m->family == CP_FAMILY_T5 || m->pos != CP_POS_ROPE || m->rope.mscale != 1.0)
    return cp_error_set(CP_EUNSUPPORTED,
                        "engine: llama.cpp's context shift is emulated for decoder-only RoPE "
                        "models without yarn's scaled rotation (this is %s)",
                        cp_family_name(m->family));
  if (!e->ops->kv_shift)
    return cp_error_set(CP_EUNSUPPORTED, "engine: llama.cpp's context shift runs on the CPU engine only");
  return 0;
}

int cp_engine_create_on(cp_engine **out, const cp_model *model, const cp_rule *rule, const cp_engine_params *params,
                        const cp_backend_ops *backend) {
  assert(out && model);
  *out = NULL;
  cp_engine *e = calloc(1, sizeof *e);
  int rc = 0;
  CP_CHECK_ALLOC(e, "engine");
  e->m = model;
  if (params) e->p = *params;
  else cp_engine_params_init(&e->p);
  cp_model_rule_model(&e->rm, model);
  if ((rc = cp_engine_set_rule(e, rule))) goto done;
  if ((rc = alloc_stats(e))) goto done;
  e->ops = backend ? backend : &cp_cpu_engine_ops;
  if ((rc = check_shift(e))) goto done;
  if ((rc = e->ops->create(&e->be, e, model, &e->rule, &e->rm, e->p.threads))) goto done;
  *out = e;
  e = NULL;
done:
  cp_engine_free(e);
  return rc;
}

void cp_engine_free(cp_engine *e) {
  if (!e) return;
  if (e->be) e->ops->destroy(e->be);
  free(e->st_kind);
  free(e->st_layer);
  free(e->st_pmax);
  free(e->st_ent);
  free(e->st_lstd);
  free(e);
}

int64_t cp_engine_output_rows(const cp_engine *e, int64_t n_ids, int64_t n_dec) {
  if (e->m->family == CP_FAMILY_T5) return n_dec > 0 ? n_dec : 1;
  return n_ids;
}
