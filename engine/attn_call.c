/* The per-call tables of an attention call (include/ctxpatch/engine/attn_call.h): every rule
 * decision the backends need for this call's rows and distances, resolved once through rule.h. */
#include "ctxpatch/engine/attn_call.h"

#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"

void *cp_attn_scratch(const cp_attn_call *c, size_t count, size_t elem) {
  size_t bytes;
  if (!cp_size_mul(&bytes, count, elem)) return NULL;
  return c->work ? cp_arena_alloc(c->work, bytes) : calloc(bytes ? bytes : 1, 1);
}

static void *alloc_n(const cp_attn_call *c, int64_t n, size_t elem) {
  return n < 0 ? NULL : cp_attn_scratch(c, (size_t)n, elem);
}

/* Clamped distances, and for RoPE the one value they are clamped to: pairs whose distance the
 * ceiling changes score q^T R(d') k (decision 6), which with a single D is R(D) q against the
 * unrotated key, so more than one clamped value has no kernel. */
static int build_distances(cp_attn_call *c) {
  cp_attn_tables *t = &c->tab;
  t->dprime = alloc_n(c, c->n_keys, sizeof *t->dprime);
  CP_CHECK_ALLOC(t->dprime, "attention tables");
  for (int64_t d = 0; d < c->n_keys; d++) t->dprime[d] = cp_plan_distance(c->plan, d);
  if (c->pos != CP_ATTN_POS_ROPE) return 0;
  for (int64_t d = 0; d < c->n_keys; d++) {
    if (t->dprime[d] == d) continue;
    if (t->rope_far >= 0 && t->dprime[d] != t->rope_far)
      return cp_error_set(CP_EUNSUPPORTED, "engine: RoPE with more than one clamped distance");
    t->rope_far = t->dprime[d];
  }
  return 0;
}

/* T5 bucket of every (clamped) relative position the call meets. */
static int build_t5_buckets(cp_attn_call *c) {
  cp_attn_tables *t = &c->tab;
  const int nb = c->t5_num_buckets, md = c->t5_max_distance;
  const int64_t n = c->n_keys;
  t->t5_bucket = alloc_n(c, c->plan->causal || n == 0 ? n : 2 * n - 1, sizeof *t->t5_bucket);
  CP_CHECK_ALLOC(t->t5_bucket, "attention tables");
  if (c->plan->causal)
    for (int64_t d = 0; d < n; d++) t->t5_bucket[d] = cp_t5_bucket(-t->dprime[d], false, nb, md);
  else
    for (int64_t r = -(n - 1); r <= n - 1; r++)
      t->t5_bucket[r + n - 1] = cp_t5_bucket(cp_plan_distance(c->plan, r), true, nb, md);
  return 0;
}

/* Per-row tables: the ALiBi divisor (cp_plan_alibi_divisor) and, under a temperature schedule,
 * 1/tau (cp_plan_row_inv_tau, T the row's length). */
static int build_rows(cp_attn_call *c, bool alibi, bool sched) {
  cp_attn_tables *t = &c->tab;
  if (alibi) t->alibi_div = alloc_n(c, c->n_q, sizeof *t->alibi_div);
  if (sched) t->inv_tau = alloc_n(c, c->n_q, sizeof *t->inv_tau);
  CP_CHECK_ALLOC((!alibi || t->alibi_div) && (!sched || t->inv_tau), "attention tables");
  for (int64_t r = 0; r < c->n_q; r++) {
    const int64_t i = c->q_off + r;
    if (alibi) t->alibi_div[r] = cp_plan_alibi_divisor(c->plan, i, c->n_keys);
    if (sched) t->inv_tau[r] = cp_plan_row_inv_tau(c->plan, i, c->n_keys);
  }
  return 0;
}

/* Positional term of head h for a top-k candidate of row r: every hidden key sits at the
 * top-k distance. */
static float topk_bias(const cp_attn_call *c, int h, int64_t r) {
  const int64_t dist = c->plan->top_k_distance, i = c->q_off + r;
  switch (c->pos) {
    case CP_ATTN_POS_NONE:
    case CP_ATTN_POS_ROPE:
      return 0.0f;
    case CP_ATTN_POS_T5:
      return c->t5_table[(size_t)cp_t5_bucket(-dist, false, c->t5_num_buckets, c->t5_max_distance) * c->H + h];
    case CP_ATTN_POS_ALIBI:
      return (float)(-(c->slopes[h] / c->tab.alibi_div[r]) * (double)dist);
    case CP_ATTN_POS_FIRE:
      return (float)cp_fire_mlp_bias(c->fire, h, cp_fire_input(dist, i, c->fire->c, c->tab.fire_L));
  }
  return 0.0f;
}

/* Top-k rows (cp_plan_topk_row with a non-empty hidden range) and their positional terms. */
static int build_topk(cp_attn_call *c) {
  cp_attn_tables *t = &c->tab;
  t->topk_range = cp_attn_scratch(c, (size_t)c->n_q * 2 + 1, sizeof *t->topk_range);
  CP_CHECK_ALLOC(t->topk_range, "attention tables");
  t->topk_bias = cp_attn_scratch(c, (size_t)c->H * c->n_q + 1, sizeof *t->topk_bias);
  CP_CHECK_ALLOC(t->topk_bias, "attention tables");
  for (int64_t r = 0; r < c->n_q; r++) {
    int64_t i = c->q_off + r, lo, hi;
    if (!cp_plan_topk_row(c->plan, i, c->last_prompt_row)) continue;
    cp_plan_hidden_range(c->plan, i, c->n_keys, &lo, &hi);
    if (lo >= hi) continue;
    t->topk_any = true;
    t->topk_range[2 * r] = lo, t->topk_range[2 * r + 1] = hi;
    for (int h = 0; h < c->H; h++) t->topk_bias[(size_t)h * c->n_q + r] = topk_bias(c, h, r);
  }
  return 0;
}

int cp_attn_tables_build(cp_attn_call *c) {
  const cp_attn_plan *p = c->plan;
  cp_attn_tables *t = &c->tab;
  memset(t, 0, sizeof *t);
  t->rope_far = -1;
  t->in_arena = c->work != NULL;
  if (c->pos == CP_ATTN_POS_FIRE) t->fire_L = p->fire_threshold > 0 ? p->fire_threshold : c->fire->L;
  int rc = 0;
  const bool alibi = c->pos == CP_ATTN_POS_ALIBI, sched = p->sched.n > 0;
  if ((p->causal && (rc = build_distances(c))) || (c->pos == CP_ATTN_POS_T5 && (rc = build_t5_buckets(c))) ||
      ((alibi || sched) && (rc = build_rows(c, alibi, sched))) || (p->top_k && (rc = build_topk(c))))
    cp_attn_tables_free(t);
  return rc;
}

void cp_attn_tables_free(cp_attn_tables *t) {
  if (t->in_arena) goto done;
  free(t->dprime);
  free(t->t5_bucket);
  free(t->alibi_div);
  free(t->topk_range);
  free(t->topk_bias);
  free(t->inv_tau);
done:
  memset(t, 0, sizeof *t);
  t->rope_far = -1;
}

/* The positional term of the module: the model's, except cross-attention and learned absolute
 * positions, which have none. */
static void model_pos(cp_attn_call *c, const cp_model *m, const cp_stack *st, const cp_attn_plan *plan) {
  c->pos = CP_ATTN_POS_NONE;
  if (plan->kind == CP_ATTN_CROSS) return;
  switch (m->pos) {
    case CP_POS_ROPE:
      c->pos = CP_ATTN_POS_ROPE;
      break;
    case CP_POS_ALIBI:
      c->pos = CP_ATTN_POS_ALIBI, c->slopes = m->alibi_slopes;
      break;
    case CP_POS_FIRE:
      c->pos = CP_ATTN_POS_FIRE, c->fire = st->layers[plan->layer].fire;
      break;
    case CP_POS_LEARNED: /* added to the input (the backend's embed): nothing in attention */
      break;
    case CP_POS_T5_BUCKETS:
      c->pos = CP_ATTN_POS_T5, c->t5_table = st->rel_bias; /* [nb, H] */
      c->t5_num_buckets = m->t5_num_buckets, c->t5_max_distance = m->t5_max_distance;
      break;
  }
}

int cp_attn_call_for_model(cp_attn_call *c, const cp_model *m, const cp_stack *st, const cp_attn_plan *plan,
                           int64_t q_off, int64_t n_q, int64_t n_keys, int64_t last_prompt_row, cp_arena *work) {
  memset(c, 0, sizeof *c);
  c->work = work;
  c->plan = plan;
  c->H = m->n_heads, c->Hkv = m->n_kv_heads, c->dh = m->d_head;
  c->q_off = q_off, c->n_q = n_q, c->n_keys = n_keys, c->last_prompt_row = last_prompt_row;
  c->scale = cp_model_attn_scale(m, plan->layer);
  c->softcap = plan->kind == CP_ATTN_CROSS ? 0.0f : m->attn_softcap;
  model_pos(c, m, st, plan);
  return cp_attn_tables_build(c);
}
