/* Host side of the CUDA attention backend (include/ctxpatch/engine/cuda.h): resolves every rule decision
 * through rule.h into small tables, moves them and the tensors to the device and runs the fused
 * kernel of engine/cuda/attention.cu (or a test's host emulation of it, cp_cuda_attention_on).
 * Compiled in every build; without CTXPATCH_WITH_CUDA the public functions refuse with a reason. */
#include "engine/cuda_attention.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/formats/tensor.h"

#ifndef CTXPATCH_WITH_CUDA

bool cp_cuda_available(char *why, size_t n) {
  if (why && n) snprintf(why, n, "ctxpatch was built without CUDA (no nvcc at configure time, or -DCTXPATCH_CUDA=OFF)");
  return false;
}

int cp_cuda_attention(const cp_cuda_attn_call *c) {
  (void)c;
  return cp_error_set(CP_EUNSUPPORTED, "cuda: ctxpatch was built without CUDA (reconfigure with nvcc on PATH)");
}

#else

static const cpcu_backend CUDA_RUNTIME = {cpcu_tile_rows, cpcu_attention, cpcu_malloc,
                                          cpcu_free,      cpcu_upload,    cpcu_download};

int cp_cuda_attention(const cp_cuda_attn_call *c) { return cp_cuda_attention_on(&CUDA_RUNTIME, c); }

bool cp_cuda_available(char *why, size_t n) {
  char r[256] = "", name[256] = "";
  int count = 0, ma = 0, mi = 0;
  if (cpcu_device_count(&count, r, sizeof r)) {
    if (why && n) snprintf(why, n, "%s", r);
    return false;
  }
  if (count == 0) {
    if (why && n) snprintf(why, n, "the CUDA runtime reports no device");
    return false;
  }
  if (cpcu_device_name(name, sizeof name, &ma, &mi, r, sizeof r)) {
    if (why && n) snprintf(why, n, "%s", r);
    return false;
  }
  if (why && n) snprintf(why, n, "%s (compute capability %d.%d)", name, ma, mi);
  return true;
}

#endif

typedef struct {
  const cpcu_backend *be;
  void *p[32];
  int n;
} dev_list;

/* Copies bytes from host memory into a new device buffer *out, recorded in `dl` for freeing.
 * With as_bf16 the source is `count` floats converted to bfloat16 on the way. */
static int dev_put(dev_list *dl, const void **out, const void *src, size_t bytes, bool as_bf16) {
  char why[256] = "";
  void *d = NULL, *tmp = NULL;
  const void *from = src;
  *out = NULL;
  if (!src) return 0;
  if (as_bf16) {
    size_t count = bytes / sizeof(float);
    uint16_t *b = malloc(count ? count * sizeof *b : 1);
    CP_CHECK_ALLOC(b, "cuda: converting to bfloat16");
    for (size_t x = 0; x < count; x++) b[x] = cp_f32_to_bf16(((const float *)src)[x]); /* as the bake rounds */
    tmp = b, from = b, bytes = count * sizeof *b;
  }
  int rc = 0;
  if (dl->be->alloc(&d, bytes, why, sizeof why) || dl->be->upload(d, from, bytes, why, sizeof why)) {
    dl->be->release(d);
    rc = cp_error_set(CP_ECUDA, "cuda: %s", why);
  } else {
    dl->p[dl->n++] = d;
    *out = d;
  }
  free(tmp);
  return rc;
}

static int dev_out(dev_list *dl, float **out, const float *want, size_t bytes) {
  char why[256] = "";
  void *d = NULL;
  *out = NULL;
  if (!want) return 0;
  if (dl->be->alloc(&d, bytes, why, sizeof why)) return cp_error_set(CP_ECUDA, "cuda: %s", why);
  dl->p[dl->n++] = d;
  *out = d;
  return 0;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }


static int check_call(const cp_cuda_attn_call *c) {
  const cp_attn_plan *p = c->plan;
  if (!p || c->H < 1 || c->Hkv < 1 || c->H % c->Hkv || c->n_q < 0 || c->n_keys < 0 || c->q_off < 0 || !c->out ||
      (c->n_q > 0 && (!c->q || !c->k || !c->v)))
    return cp_error_set(CP_EARG, "cuda: inconsistent attention call (H %d, Hkv %d, n_q %lld, n_keys %lld)", c->H,
                        c->Hkv, (long long)c->n_q, (long long)c->n_keys);
  if (c->dh < 1 || c->dh > CPCU_MAX_DH)
    return cp_error_set(CP_EUNSUPPORTED, "cuda: head dim %d outside 1..%d", c->dh, CPCU_MAX_DH);
  if (c->n_keys > INT_MAX / 4 || c->q_off + c->n_q > INT_MAX / 4 || c->H > 65535)
    return cp_error_set(CP_EUNSUPPORTED, "cuda: %lld keys or %d heads exceed the kernel's int indexing",
                        (long long)c->n_keys, c->H);
  if (!p->causal && (c->pos == CP_CUDA_POS_ALIBI || c->pos == CP_CUDA_POS_FIRE || c->q_far))
    return cp_error_set(CP_EARG, "cuda: ALiBi, FIRE and a RoPE ceiling need a causal call");
  if ((c->q_far || c->q_topk) && (c->pos != CP_CUDA_POS_ROPE || !c->k_raw))
    return cp_error_set(CP_EARG, "cuda: q_far and q_topk need pos RoPE and k_raw");
  if (!p->causal && c->n_q > 0 && (c->q_off != 0 || c->n_q != c->n_keys) && c->pos == CP_CUDA_POS_T5)
    return cp_error_set(CP_EARG, "cuda: bidirectional T5 call must cover every key as a query");
  if (c->pos == CP_CUDA_POS_T5 &&
      (!c->t5_table || c->t5_num_buckets < 1 || c->t5_num_buckets > CPCU_T5_MAX_BUCKETS))
    return cp_error_set(CP_EUNSUPPORTED, "cuda: T5 table of %d buckets (1..%d supported)", c->t5_num_buckets,
                        CPCU_T5_MAX_BUCKETS);
  if (c->pos == CP_CUDA_POS_ALIBI && !c->slopes) return cp_error_set(CP_EARG, "cuda: ALiBi call without slopes");
  if (c->pos == CP_CUDA_POS_FIRE && (!c->fire || c->fire->width < 1 || c->fire->width > CPCU_FIRE_MAX_WIDTH))
    return cp_error_set(CP_EUNSUPPORTED, "cuda: FIRE MLP width %d (1..%d supported)", c->fire ? c->fire->width : 0,
                        CPCU_FIRE_MAX_WIDTH);
  if (p->top_k && p->k > CPCU_TOPK_MAX)
    return cp_error_set(CP_EUNSUPPORTED, "cuda: top_k k %d (at most %d on cuda)", p->k, CPCU_TOPK_MAX);
  return 0;
}


int cp_cuda_attention_on(const cpcu_backend *be, const cp_cuda_attn_call *c) {
  int rc = check_call(c);
  if (rc || c->n_q == 0) return rc;
  const cp_attn_plan *plan = c->plan;
  const int64_t n_q = c->n_q, n_keys = c->n_keys;
  const int bm = be->tile_rows(c->dh);
  const int64_t n_tiles = (n_q + bm - 1) / bm;
  const size_t qn = (size_t)n_q * c->H * c->dh, kn = (size_t)n_keys * c->Hkv * c->dh, sn = (size_t)c->H * n_q;
  char why[256] = "";
  dev_list dl = {be, {0}, 0};
  int *rows = NULL, *tr = NULL, *tn = NULL, *dprime = NULL;
  int64_t *ulo = NULL, *uhi = NULL;
  int16_t *bucket = NULL;
  double *adiv = NULL;
  int *tkr = NULL, *tkt = NULL;
  float *tkb = NULL;
  bool topk = false;
  size_t nbucket = 0;
  cpcu_attn_args a;
  memset(&a, 0, sizeof a);

  rows = malloc((size_t)n_q * 4 * sizeof *rows);
  tr = malloc((size_t)n_tiles * 2 * CPCU_MAX_TILE_RANGES * sizeof *tr);
  tn = malloc((size_t)n_tiles * sizeof *tn);
  ulo = malloc((size_t)2 * bm * sizeof *ulo);
  uhi = malloc((size_t)2 * bm * sizeof *uhi);
  if (!rows || !tr || !tn || !ulo || !uhi) {
    rc = cp_error_set(CP_ENOMEM, "cuda: out of memory for the attention plan");
    goto done;
  }
  /* Visibility: each row's ranges, and per tile their union (a superset is safe: rows re-check). */
  for (int64_t t = 0; t < n_tiles; t++) {
    int nu = 0;
    for (int64_t r = t * bm; r < min64((t + 1) * bm, n_q); r++) {
      int64_t lo[2] = {0, 0}, hi[2] = {0, 0};
      int nr = cp_plan_visible_ranges(plan, c->q_off + r, n_keys, lo, hi);
      for (int x = 0; x < 2; x++) {
        rows[r * 4 + 2 * x] = x < nr ? (int)lo[x] : 0;
        rows[r * 4 + 2 * x + 1] = x < nr ? (int)hi[x] : 0;
      }
      for (int x = 0; x < nr; x++) ulo[nu] = lo[x], uhi[nu++] = hi[x];
    }
    nu = cp_ranges_merge(ulo, uhi, nu);
    if (nu > CPCU_MAX_TILE_RANGES) { /* fold the tail into one covering range */
      uhi[CPCU_MAX_TILE_RANGES - 1] = uhi[nu - 1];
      nu = CPCU_MAX_TILE_RANGES;
    }
    tn[t] = nu;
    for (int x = 0; x < nu; x++) tr[t * 2 * CPCU_MAX_TILE_RANGES + 2 * x] = (int)ulo[x], tr[t * 2 * CPCU_MAX_TILE_RANGES + 2 * x + 1] = (int)uhi[x];
  }
  if (plan->causal) {
    if (!(dprime = malloc((size_t)(n_keys ? n_keys : 1) * sizeof *dprime))) {
      rc = cp_error_set(CP_ENOMEM, "cuda: out of memory for the attention plan");
      goto done;
    }
    for (int64_t d = 0; d < n_keys; d++) dprime[d] = (int)cp_plan_distance(plan, d);
  }
  if (c->pos == CP_CUDA_POS_T5) {
    const int nb = c->t5_num_buckets, md = c->t5_max_distance;
    nbucket = plan->causal ? (size_t)n_keys : (size_t)(2 * n_keys - 1);
    if (!(bucket = malloc((nbucket ? nbucket : 1) * sizeof *bucket))) {
      rc = cp_error_set(CP_ENOMEM, "cuda: out of memory for the T5 buckets");
      goto done;
    }
    if (plan->causal)
      for (int64_t d = 0; d < n_keys; d++) bucket[d] = (int16_t)cp_t5_bucket(-(int64_t)dprime[d], false, nb, md);
    else
      for (int64_t r = -(n_keys - 1); r <= n_keys - 1; r++)
        bucket[r + n_keys - 1] = (int16_t)cp_t5_bucket(cp_plan_distance(plan, r), true, nb, md);
  }
  if (c->pos == CP_CUDA_POS_ALIBI) {
    if (!(adiv = malloc((size_t)n_q * sizeof *adiv))) {
      rc = cp_error_set(CP_ENOMEM, "cuda: out of memory for the ALiBi divisors");
      goto done;
    }
    for (int64_t r = 0; r < n_q; r++) adiv[r] = cp_plan_alibi_divisor(plan, c->q_off + r, n_keys);
  }

  /* Top-k rows (cp_plan_topk_row with a non-empty hidden range), per-tile unions, and each
   * head's positional term at the top-k distance (as the CPU engine's topk_bias). */
  if (plan->top_k) {
    tkr = calloc((size_t)n_q * 2, sizeof *tkr);
    tkt = calloc((size_t)n_tiles * 2, sizeof *tkt);
    tkb = calloc((size_t)c->H * n_q, sizeof *tkb);
    if (!tkr || !tkt || !tkb) {
      rc = cp_error_set(CP_ENOMEM, "cuda: out of memory for the top-k plan");
      goto done;
    }
    const int64_t dist = plan->top_k_distance;
    for (int64_t r = 0; r < n_q; r++) {
      int64_t i = c->q_off + r, lo, hi;
      if (!cp_plan_topk_row(plan, i, c->last_prompt_row)) continue;
      cp_plan_hidden_range(plan, i, n_keys, &lo, &hi);
      if (lo >= hi) continue;
      topk = true;
      tkr[2 * r] = (int)lo, tkr[2 * r + 1] = (int)hi;
      int *tt = tkt + 2 * (r / bm);
      if (tt[0] >= tt[1]) tt[0] = (int)lo, tt[1] = (int)hi;
      if (lo < tt[0]) tt[0] = (int)lo;
      if (hi > tt[1]) tt[1] = (int)hi;
      for (int h = 0; h < c->H; h++) {
        float b = 0.0f;
        if (c->pos == CP_CUDA_POS_T5)
          b = c->t5_table[(size_t)cp_t5_bucket(-dist, false, c->t5_num_buckets, c->t5_max_distance) * c->H + h];
        else if (c->pos == CP_CUDA_POS_ALIBI)
          b = (float)(-(c->slopes[h] / adiv[r]) * (double)dist);
        else if (c->pos == CP_CUDA_POS_FIRE)
          b = (float)cp_fire_mlp_bias(c->fire, h, cp_fire_input(dist, i, c->fire->c, c->fire_L));
        tkb[(size_t)h * n_q + r] = b;
      }
    }
  }

  a.H = c->H, a.Hkv = c->Hkv, a.dh = c->dh;
  a.n_q = (int)n_q, a.n_keys = (int)n_keys, a.q_off = (int)c->q_off;
  a.causal = plan->causal;
  a.bf16 = c->bf16;
  a.scale = c->scale, a.inv_tau = plan->inv_tau;
  switch (c->pos) {
    case CP_CUDA_POS_NONE: a.pos = CPCU_POS_NONE; break;
    case CP_CUDA_POS_T5: a.pos = CPCU_POS_T5; break;
    case CP_CUDA_POS_ALIBI: a.pos = CPCU_POS_ALIBI; break;
    case CP_CUDA_POS_ROPE: a.pos = CPCU_POS_ROPE; break;
    case CP_CUDA_POS_FIRE: a.pos = CPCU_POS_FIRE; break;
  }
  const void *p;
  if ((rc = dev_put(&dl, &a.q, c->q, qn * sizeof(float), c->bf16)) ||
      (rc = dev_put(&dl, &a.q_far, c->q_far, qn * sizeof(float), c->bf16)) ||
      (rc = dev_put(&dl, &a.k, c->k, kn * sizeof(float), c->bf16)) ||
      (rc = dev_put(&dl, &a.v, c->v, kn * sizeof(float), c->bf16)) ||
      (rc = dev_put(&dl, &a.k_raw, c->q_far || (topk && c->q_topk) ? c->k_raw : NULL, kn * sizeof(float), c->bf16)))
    goto done;
  if (topk) {
    a.topk_k = plan->k;
    if ((rc = dev_put(&dl, &a.q_topk, c->q_topk, qn * sizeof(float), c->bf16))) goto done;
    if ((rc = dev_put(&dl, &p, tkr, (size_t)n_q * 2 * sizeof *tkr, false))) goto done;
    a.topk_rows = p;
    if ((rc = dev_put(&dl, &p, tkt, (size_t)n_tiles * 2 * sizeof *tkt, false))) goto done;
    a.topk_tile = p;
    if ((rc = dev_put(&dl, &p, tkb, (size_t)c->H * n_q * sizeof *tkb, false))) goto done;
    a.topk_bias = p;
  }
  if ((rc = dev_put(&dl, &p, rows, (size_t)n_q * 4 * sizeof *rows, false))) goto done;
  a.row_ranges = p;
  if ((rc = dev_put(&dl, &p, tr, (size_t)n_tiles * 2 * CPCU_MAX_TILE_RANGES * sizeof *tr, false))) goto done;
  a.tile_ranges = p;
  if ((rc = dev_put(&dl, &p, tn, (size_t)n_tiles * sizeof *tn, false))) goto done;
  a.tile_nranges = p;
  if ((rc = dev_put(&dl, &p, dprime, (size_t)n_keys * sizeof(int), false))) goto done;
  a.dprime = p;
  if (c->pos == CP_CUDA_POS_T5) {
    if ((rc = dev_put(&dl, &p, bucket, nbucket * sizeof *bucket, false))) goto done;
    a.t5_bucket = p;
    if ((rc = dev_put(&dl, &p, c->t5_table, (size_t)c->t5_num_buckets * c->H * sizeof(float), false))) goto done;
    a.t5_table = p;
    a.t5_nb = c->t5_num_buckets;
  }
  if (c->pos == CP_CUDA_POS_ALIBI) {
    if ((rc = dev_put(&dl, &p, c->slopes, (size_t)c->H * sizeof(double), false))) goto done;
    a.slopes = p;
    if ((rc = dev_put(&dl, &p, adiv, (size_t)n_q * sizeof *adiv, false))) goto done;
    a.alibi_div = p;
  }
  if (c->pos == CP_CUDA_POS_FIRE) {
    const cp_fire_mlp *f = c->fire;
    const size_t W = (size_t)f->width;
    if ((rc = dev_put(&dl, &p, f->w1, W * sizeof(float), false))) goto done;
    a.fire_w1 = p;
    if ((rc = dev_put(&dl, &p, f->b1, W * sizeof(float), false))) goto done;
    a.fire_b1 = p;
    if ((rc = dev_put(&dl, &p, f->w2, (size_t)c->H * W * sizeof(float), false))) goto done;
    a.fire_w2 = p;
    if ((rc = dev_put(&dl, &p, f->b2, (size_t)c->H * sizeof(float), false))) goto done;
    a.fire_b2 = p;
    a.fire_width = f->width, a.fire_c = f->c, a.fire_L = c->fire_L;
  }
  if ((rc = dev_out(&dl, &a.out, c->out, qn * sizeof(float))) ||
      (rc = dev_out(&dl, &a.row_pmax, c->row_pmax, sn * sizeof(float))) ||
      (rc = dev_out(&dl, &a.row_ent, c->row_ent, sn * sizeof(float))) ||
      (rc = dev_out(&dl, &a.row_lstd, c->row_lstd, sn * sizeof(float))))
    goto done;

  if (be->attention(&a, c->bench_reps, c->bench_ms, why, sizeof why)) {
    rc = cp_error_set(CP_ECUDA, "cuda: %s", why);
    goto done;
  }
  if (be->download(c->out, a.out, qn * sizeof(float), why, sizeof why) ||
      (c->row_pmax && be->download(c->row_pmax, a.row_pmax, sn * sizeof(float), why, sizeof why)) ||
      (c->row_ent && be->download(c->row_ent, a.row_ent, sn * sizeof(float), why, sizeof why)) ||
      (c->row_lstd && be->download(c->row_lstd, a.row_lstd, sn * sizeof(float), why, sizeof why)))
    rc = cp_error_set(CP_ECUDA, "cuda: %s", why);
done:
  for (int x = 0; x < dl.n; x++) be->release(dl.p[x]);
  free(rows);
  free(tr);
  free(tn);
  free(ulo);
  free(uhi);
  free(dprime);
  free(bucket);
  free(adiv);
  free(tkr);
  free(tkt);
  free(tkb);
  return rc;
}
