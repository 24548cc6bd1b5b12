/* Streaming attention for the CPU engine: see engine/attention_cpu.h. Every rule decision
 * (visibility, hidden keys, top-k rows, ALiBi divisor, clamped distances, each row's 1/tau) comes
 * from rule.h, most
 * through the call's tables (cp_attn_tables_build); the positional terms are the model's (T5
 * table, slopes, FIRE MLP) evaluated at the distances those resolved. */
#include "engine/attention_cpu.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "engine/layer_ops.h"

enum { TILE_ROWS = 32, KEY_BLOCK = 128, FIRE_SEG = 256 };
_Static_assert(CP_OPS_ROW_ALIGN % TILE_ROWS == 0, "row tiles must align with a shared prefix");
/* The FIRE table of rows i > L ([rows, H, n_keys] floats) is built and used a chunk of tiles at a
 * time, the chunk as many tiles as fit in this many bytes (at least one; cp_attn_call's
 * fire_table_bytes overrides it). */
static const size_t FIRE_FAR_BYTES = (size_t)32 << 20;

typedef struct {
  float *S, *Sf, *P;     /* [TILE_ROWS, KEY_BLOCK] */
  float *acc;            /* [TILE_ROWS, dh] */
  float *m;              /* [TILE_ROWS] running max */
  double *l, *t;         /* [TILE_ROWS] */
  double *ls, *lq, *ln;  /* [TILE_ROWS] logit sum, sum of squares, count (row_lstd only) */
  double *slope;         /* [TILE_ROWS] ALiBi m_h / F_i */
  int64_t *lo, *hi;      /* [TILE_ROWS, 2] visible ranges */
  int *nrg;              /* [TILE_ROWS] */
  int64_t *ulo, *uhi;    /* [2 * TILE_ROWS] union of the tile's ranges */
  float *hv;             /* [k] top-k heap values */
  int64_t *hj;           /* [k] top-k heap keys */
  float *topv, *topp;    /* [k] selected logits / probabilities */
  float *srow;           /* [KEY_BLOCK] */
} scratch;

typedef struct {
  const cp_attn_call *c;
  scratch *scr;
  /* The call's tables in the layouts the vector loops want: */
  const float *dprime_f; /* ALiBi [n_keys]: tab.dprime as floats */
  const float *t5_bias;  /* T5: causal [H, n_keys] by d; bidirectional [H, 2 n_keys - 1] by r + n_keys - 1 */
  const float *fire_bias; /* FIRE: [H, fire_w] by d, for the rows i <= L (there the input depends on d only) */
  int64_t fire_w;
  float *fire_far;        /* FIRE: [far_rows, H, n_keys] by key j, for the chunk's rows i > L from far_r0 */
  int64_t far_r0, far_rows;
  double *fire_heads;     /* FIRE: [workers, H] the MLP's outputs for one input */
  size_t item0;           /* the first work item of this pool run (tile * H + head) */
} job;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }


/* ---- vector-friendly softmax pieces (GCC vectorizes these only at -O3) ---- */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("O3")
#endif

/* e^x for x <= 0 (softmax arguments) without a libm call, so the loop vectorizes: Cephes expf
 * (range reduction by ln 2, degree-5 polynomial), relative error about 1e-7; 0 below -87. */
static inline uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static inline float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline float exp_nonpos(float x) {
  /* Selections by bit masks: a float ?: would keep GCC from vectorizing (trapping math). */
  uint32_t keep = -(uint32_t)(x > -87.0f); /* also false for -inf */
  float y = u2f((f2u(x) & keep) | (f2u(-87.0f) & ~keep));
  float n = (y * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
  float r = y - n * 0.693359375f + n * 2.12194440e-4f;
  float q = 1.9875691500e-4f;
  q = q * r + 1.3981999507e-3f;
  q = q * r + 8.3334519073e-3f;
  q = q * r + 4.1665795894e-2f;
  q = q * r + 1.6666665459e-1f;
  q = q * r + 5.0000001201e-1f;
  float e = q * r * r + r + 1.0f;
  float scale = u2f((uint32_t)((int32_t)n + 127) << 23); /* 2^n, n in [-126, 0] */
  return u2f(f2u(e * scale) & keep);
}

static float span_max(const float *s, int n, float m) {
  float lane[8] = {m, m, m, m, m, m, m, m};
  int k = 0;
  for (; k + 8 <= n; k += 8)
    for (int u = 0; u < 8; u++) lane[u] = s[k + u] > lane[u] ? s[k + u] : lane[u];
  for (; k < n; k++) lane[0] = s[k] > lane[0] ? s[k] : lane[0];
  for (int u = 1; u < 8; u++) lane[0] = lane[u] > lane[0] ? lane[u] : lane[0];
  return lane[0];
}

/* p[k] = e^(s[k] - m); adds sum p to *sl and sum p (s - m) to *st. */
static void span_exp(float *p, const float *s, int n, float m, float *sl, float *st) {
  for (int k = 0; k < n; k++) p[k] = exp_nonpos(s[k] - m);
  float a[8] = {0}, b[8] = {0};
  int k = 0;
  for (; k + 8 <= n; k += 8)
    for (int u = 0; u < 8; u++) a[u] += p[k + u], b[u] += p[k + u] * (s[k + u] - m);
  for (; k < n; k++) a[0] += p[k], b[0] += p[k] * (s[k] - m);
  for (int u = 0; u < 8; u++) *sl += a[u], *st += b[u];
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

/* Folds the (already tau-divided) logits s[k] of the spans [k0[a], k1[a]) into row state
 * (m, l, t); writes the probabilities e^(s - m_new) to p (0 outside the spans, p[0..n)) and
 * returns the factor the old accumulator must be scaled by. */
static float online_update(float *m, double *l, double *t, const float *s, float *p, int n, const int *k0,
                           const int *k1, int ns) {
  memset(p, 0, (size_t)n * sizeof *p);
  float mb = -INFINITY;
  for (int a = 0; a < ns; a++) mb = span_max(s + k0[a], k1[a] - k0[a], mb);
  if (mb == -INFINITY) return 1.0f;
  float m_new = mb > *m ? mb : *m;
  float alpha = 1.0f;
  if (*l > 0) {
    /* e^(s-m') = e^(s-m) a and (s-m') = (s-m) + (m-m'), so t' = a (t + (m-m') l). */
    alpha = expf(*m - m_new);
    *t = (double)alpha * (*t + (double)(*m - m_new) * *l);
    *l *= alpha;
  } else {
    *t = 0;
    *l = 0;
  }
  *m = m_new;
  float sl = 0, st = 0; /* at most KEY_BLOCK terms in float, then added in double */
  for (int a = 0; a < ns; a++) span_exp(p + k0[a], s + k0[a], k1[a] - k0[a], m_new, &sl, &st);
  *l += sl;
  *t += st;
  return alpha;
}

/* Gemma 2's soft-cap of logits [k0, k1): c tanh(x / c) (eager_attention_forward). */
static void softcap_span(float *S, int k0, int k1, float cap) {
  for (int k = k0; k < k1; k++) S[k] = cap * tanhf(S[k] / cap);
}

/* Final logits (c q.k + positional term) / tau of row r (query i) for block keys
 * kb + [k0, k1), in place in Sr (which holds q.k), soft-capped where the model caps them. */
static void row_logits(const job *jb, const scratch *s, int h, int r, int64_t i, int64_t kb, int k0, int k1,
                       bool far, float *Sr) {
  const cp_attn_call *c = jb->c;
  const int64_t *dprime = c->tab.dprime;
  const float sc = c->scale, it = cp_attn_row_inv_tau(c, i - c->q_off);
  switch (c->pos) {
    case CP_ATTN_POS_NONE:
    case CP_ATTN_POS_ROPE:
      if (far) {
        const float *Sf = s->Sf + (size_t)r * KEY_BLOCK;
        for (int k = k0; k < k1; k++) {
          int64_t d = i - (kb + k);
          Sr[k] = sc * (dprime[d] != d ? Sf[k] : Sr[k]) * it;
        }
      } else {
        for (int k = k0; k < k1; k++) Sr[k] = sc * Sr[k] * it;
      }
      if (c->softcap > 0) softcap_span(Sr, k0, k1, c->softcap);
      return;
    case CP_ATTN_POS_ALIBI: {
      const float sl = (float)s->slope[r];
      const float *dp = jb->dprime_f + (i - kb); /* distance of key kb + k is dp[-k] */
      for (int k = k0; k < k1; k++) Sr[k] = (sc * Sr[k] - sl * dp[-k]) * it;
      return;
    }
    case CP_ATTN_POS_T5:
      if (c->plan->causal) {
        const float *tb = jb->t5_bias + (size_t)h * c->n_keys + (size_t)(i - kb);
        for (int k = k0; k < k1; k++) Sr[k] = (sc * Sr[k] + tb[-k]) * it;
      } else {
        const float *tb = jb->t5_bias + (size_t)h * (2 * c->n_keys - 1) + (size_t)(kb - i + c->n_keys - 1);
        for (int k = k0; k < k1; k++) Sr[k] = (sc * Sr[k] + tb[k]) * it;
      }
      return;
    case CP_ATTN_POS_FIRE:
      if ((double)i <= c->tab.fire_L) {
        const float *fb = jb->fire_bias + (size_t)h * jb->fire_w + (size_t)(i - kb); /* d = i - kb - k */
        for (int k = k0; k < k1; k++) Sr[k] = (sc * Sr[k] + fb[-k]) * it;
      } else {
        const int64_t fr = i - c->q_off - jb->far_r0;
        assert(jb->fire_far && fr >= 0 && fr < jb->far_rows);
        const float *fb = jb->fire_far + ((size_t)fr * c->H + (size_t)h) * (size_t)c->n_keys + (size_t)kb;
        for (int k = k0; k < k1; k++) Sr[k] = (sc * Sr[k] + fb[k]) * it;
      }
      return;
  }
}

/* Adds the logits s[k] of the spans [k0[a], k1[a]) to row r's moments (for row_lstd). Offset by
 * the first logit seen would be more stable; the logits of attention are O(10), so double sums
 * of squares lose nothing that matters for a standard deviation. */
static void logit_moments(scratch *s, int r, const float *sv, const int *k0, const int *k1, int ns) {
  double a = 0, b = 0;
  int cnt = 0;
  for (int x = 0; x < ns; x++)
    for (int k = k0[x]; k < k1[x]; k++) a += sv[k], b += (double)sv[k] * sv[k], cnt++;
  s->ls[r] += a, s->lq[r] += b, s->ln[r] += cnt;
}

/* Top-k heap: the root is the worst kept candidate (smallest value; on ties the larger j). */
static bool worse(float av, int64_t aj, float bv, int64_t bj) { return av < bv || (av == bv && aj > bj); }

static void heap_sift_down(float *hv, int64_t *hj, int n, int i) {
  for (;;) {
    int w = i, a = 2 * i + 1, b = a + 1;
    if (a < n && worse(hv[a], hj[a], hv[w], hj[w])) w = a;
    if (b < n && worse(hv[b], hj[b], hv[w], hj[w])) w = b;
    if (w == i) return;
    float tv = hv[i];
    int64_t tj = hj[i];
    hv[i] = hv[w], hj[i] = hj[w];
    hv[w] = tv, hj[w] = tj;
    i = w;
  }
}

static void heap_push(float *hv, int64_t *hj, int *n, int k, float v, int64_t j) {
  if (*n < k) {
    int i = (*n)++;
    hv[i] = v, hj[i] = j;
    while (i > 0) {
      int p = (i - 1) / 2;
      if (!worse(hv[i], hj[i], hv[p], hj[p])) break;
      float tv = hv[i];
      int64_t tj = hj[i];
      hv[i] = hv[p], hj[i] = hj[p];
      hv[p] = tv, hj[p] = tj;
      i = p;
    }
  } else if (worse(hv[0], hj[0], v, j)) {
    hv[0] = v, hj[0] = j;
    heap_sift_down(hv, hj, *n, 0);
  }
}


/* Whether any visible pair of rows [i0, i0+nr) x keys [kb, kb+nk) is at a distance the ceiling
 * changes (RoPE: such pairs use the far query against unrotated keys). */
static bool block_has_far(const cp_attn_call *c, int64_t i0, int nr, int64_t kb, int nk) {
  int64_t dmin = i0 - (kb + nk - 1), dmax = i0 + nr - 1 - kb;
  if (dmin < 0) dmin = 0;
  for (int64_t d = dmin; d <= dmax; d++)
    if (c->tab.dprime[d] != d) return true;
  return false;
}

/* One work item: head h over rows r0 .. r0+nr-1 of the call. */
typedef struct {
  int h, g, nr;
  int64_t r0, i0;
  const float *qh, *kh, *vh, *krh; /* head slices of q, k, v, k_raw (row strides ldq, ldk) */
  int ldq, ldk;
} tile_t;

/* Resets the tile's row state and gathers its rows' visible ranges; returns how many merged
 * ranges (the union of the rows') the tile's key blocks come from, in s->ulo / s->uhi. */
static int tile_init(const cp_attn_call *c, scratch *s, const tile_t *t) {
  int nu = 0;
  for (int r = 0; r < t->nr; r++) {
    int64_t i = t->i0 + r;
    s->m[r] = -INFINITY;
    s->l[r] = s->t[r] = 0;
    s->ls[r] = s->lq[r] = s->ln[r] = 0;
    s->slope[r] = c->pos == CP_ATTN_POS_ALIBI ? c->slopes[t->h] / c->tab.alibi_div[t->r0 + r] : 0;
    s->nrg[r] = cp_plan_visible_ranges(c->plan, i, c->n_keys, s->lo + 2 * r, s->hi + 2 * r);
    for (int a = 0; a < s->nrg[r]; a++) s->ulo[nu] = s->lo[2 * r + a], s->uhi[nu++] = s->hi[2 * r + a];
  }
  memset(s->acc, 0, (size_t)t->nr * c->dh * sizeof *s->acc);
  return cp_ranges_merge(s->ulo, s->uhi, nu);
}

/* The visible keys: for each key block of the tile's ranges, q.k by BLAS, each row's logits
 * over its own ranges in the block, the online softmax, then P V into the accumulators. */
static void visible_pass(const job *jb, scratch *s, const tile_t *t, int nu) {
  const cp_attn_call *c = jb->c;
  const int nr = t->nr, dh = c->dh, ldq = t->ldq, ldk = t->ldk;
  for (int u = 0; u < nu; u++) {
    for (int64_t kb = s->ulo[u]; kb < s->uhi[u]; kb += KEY_BLOCK) {
      int nk = (int)min64(KEY_BLOCK, s->uhi[u] - kb);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, dh, 1.0f, t->qh, ldq,
                  t->kh + (size_t)kb * ldk, ldk, 0.0f, s->S, KEY_BLOCK);
      bool far = c->q_far && block_has_far(c, t->i0, nr, kb, nk);
      if (far)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, dh, 1.0f,
                    c->q_far + (size_t)t->r0 * ldq + (size_t)t->h * dh, ldq, t->krh + (size_t)kb * ldk, ldk,
                    0.0f, s->Sf, KEY_BLOCK);
      for (int r = 0; r < nr; r++) {
        int64_t i = t->i0 + r;
        float *Sr = s->S + (size_t)r * KEY_BLOCK;
        int k0[2], k1[2], ns = 0;
        for (int a = 0; a < s->nrg[r]; a++) { /* the row's visible ranges within this block */
          int64_t lo = s->lo[2 * r + a] > kb ? s->lo[2 * r + a] : kb;
          int64_t hi = min64(s->hi[2 * r + a], kb + nk);
          if (lo < hi) k0[ns] = (int)(lo - kb), k1[ns++] = (int)(hi - kb);
        }
        for (int a = 0; a < ns; a++) row_logits(jb, s, t->h, r, i, kb, k0[a], k1[a], far, Sr);
        if (c->row_lstd) logit_moments(s, r, Sr, k0, k1, ns);
        float alpha = online_update(&s->m[r], &s->l[r], &s->t[r], Sr, s->P + (size_t)r * KEY_BLOCK, nk, k0, k1, ns);
        if (alpha != 1.0f)
          for (int e = 0; e < dh; e++) s->acc[(size_t)r * dh + e] *= alpha;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, dh, nk, 1.0f, s->P, KEY_BLOCK,
                  t->vh + (size_t)kb * ldk, ldk, 1.0f, s->acc, dh);
    }
  }
}

/* Top-k middle keys (decision 7) of row r: logits at the top-k distance over the row's
 * Lambda-hidden keys (tab.topk_range), the k largest kept (ties to the smaller j), then folded
 * into the softmax. */
static void topk_row(const cp_attn_call *c, scratch *s, const tile_t *t, int r) {
  const int dh = c->dh, ldq = t->ldq, ldk = t->ldk;
  const int64_t row = t->r0 + r, hlo = c->tab.topk_range[2 * row], hhi = c->tab.topk_range[2 * row + 1];
  if (hlo >= hhi) return;
  const float *qrow = c->q_topk ? c->q_topk + (size_t)row * ldq + (size_t)t->h * dh : t->qh + (size_t)r * ldq;
  const float *keys = c->q_topk ? t->krh : t->kh;
  const float bias = c->tab.topk_bias[(size_t)t->h * c->n_q + row];
  int n = 0;
  for (int64_t kb = hlo; kb < hhi; kb += KEY_BLOCK) {
    int nk = (int)min64(KEY_BLOCK, hhi - kb);
    cblas_sgemv(CblasRowMajor, CblasNoTrans, nk, dh, 1.0f, keys + (size_t)kb * ldk, ldk, qrow, 1, 0.0f, s->srow, 1);
    for (int k = 0; k < nk; k++) heap_push(s->hv, s->hj, &n, c->plan->k, c->scale * s->srow[k] + bias, kb + k);
  }
  const float it = cp_attn_row_inv_tau(c, row);
  for (int a = 0; a < n; a++) s->topv[a] = s->hv[a] * it;
  if (c->softcap > 0) softcap_span(s->topv, 0, n, c->softcap);
  int z = 0;
  if (c->row_lstd) logit_moments(s, r, s->topv, &z, &n, 1);
  float *p = s->topp, *acc = s->acc + (size_t)r * dh;
  float alpha = online_update(&s->m[r], &s->l[r], &s->t[r], s->topv, p, n, &z, &n, 1);
  if (alpha != 1.0f)
    for (int e = 0; e < dh; e++) acc[e] *= alpha;
  for (int a = 0; a < n; a++) {
    const float *vr = t->vh + (size_t)s->hj[a] * ldk;
    for (int e = 0; e < dh; e++) acc[e] += p[a] * vr[e];
  }
}

/* Normalised outputs and the per-row statistics of the tile. */
static void tile_finish(const cp_attn_call *c, const scratch *s, const tile_t *t) {
  const int dh = c->dh;
  for (int r = 0; r < t->nr; r++) {
    const size_t row = (size_t)(t->r0 + r), si = (size_t)t->h * c->n_q + row;
    float *o = c->out + row * t->ldq + (size_t)t->h * dh;
    double l = s->l[r];
    float inv = l > 0 ? (float)(1.0 / l) : 0.0f;
    for (int e = 0; e < dh; e++) o[e] = s->acc[(size_t)r * dh + e] * inv;
    if (c->row_pmax) {
      /* The largest probability is e^(m - m) / l; H = log l - t / l. */
      c->row_pmax[si] = l > 0 ? (float)(1.0 / l) : 0.0f;
      c->row_ent[si] = l > 0 ? (float)(log(l) - s->t[r] / l) : 0.0f;
    }
    if (c->row_lstd) {
      double cnt = s->ln[r], mean = cnt > 0 ? s->ls[r] / cnt : 0, var = cnt > 0 ? s->lq[r] / cnt - mean * mean : 0;
      c->row_lstd[si] = var > 0 ? (float)sqrt(var) : 0.0f;
    }
  }
}

static void att_item(void *ctx, size_t item, int worker) {
  const job *jb = ctx;
  const cp_attn_call *c = jb->c;
  scratch *s = &jb->scr[worker];
  tile_t t;
  item += jb->item0;
  t.h = (int)(item % (size_t)c->H);
  t.g = t.h / (c->H / c->Hkv);
  t.r0 = (int64_t)(item / (size_t)c->H) * TILE_ROWS;
  t.nr = (int)min64(TILE_ROWS, c->n_q - t.r0);
  t.i0 = c->q_off + t.r0;
  t.ldq = c->H * c->dh, t.ldk = c->Hkv * c->dh;
  t.qh = c->q + (size_t)t.r0 * t.ldq + (size_t)t.h * c->dh;
  t.kh = c->k + (size_t)t.g * c->dh, t.vh = c->v + (size_t)t.g * c->dh;
  t.krh = c->k_raw ? c->k_raw + (size_t)t.g * c->dh : NULL;

  visible_pass(jb, s, &t, tile_init(c, s, &t));
  if (c->tab.topk_any)
    for (int r = 0; r < t.nr; r++) topk_row(c, s, &t, r);
  tile_finish(c, s, &t);
}

/* Per-worker scratch: one float, double, int64 and int buffer each, carved into `scratch`s. */
typedef struct {
  scratch *scr;
  float *f;
  double *d;
  int64_t *i;
  int *n;
} scratch_bufs;

/* Scratch from the call's work arena is the arena owner's to reuse; heap scratch is freed here. */
static void scratch_free(const cp_attn_call *c, scratch_bufs *b) {
  if (c->work) return;
  free(b->scr), free(b->f), free(b->d), free(b->i), free(b->n);
}

static int scratch_alloc(const cp_attn_call *c, scratch_bufs *b, int nw, size_t k, size_t dh) {
  const size_t R = TILE_ROWS, KB = KEY_BLOCK;
  const size_t nf = 3 * R * KB + R * dh + R + KB + 3 * k; /* S Sf P acc m srow | hv topv topp */
  const size_t nd = 6 * R;
  const size_t ni = 8 * R + k; /* lo hi [2R] each | ulo uhi [2R] each | hj */
  int rc = 0;
  memset(b, 0, sizeof *b);
  b->scr = cp_attn_scratch(c, (size_t)nw, sizeof *b->scr);
  b->f = cp_attn_scratch(c, (size_t)nw * nf, sizeof *b->f);
  b->d = cp_attn_scratch(c, (size_t)nw * nd, sizeof *b->d);
  b->i = cp_attn_scratch(c, (size_t)nw * ni, sizeof *b->i);
  b->n = cp_attn_scratch(c, (size_t)nw * R, sizeof *b->n);
  CP_CHECK_ALLOC_GOTO(b->scr && b->f && b->d && b->i && b->n, "engine: attention scratch");
  for (int w = 0; w < nw; w++) {
    float *f = b->f + (size_t)w * nf;
    double *d = b->d + (size_t)w * nd;
    int64_t *iv = b->i + (size_t)w * ni;
    scratch *s = &b->scr[w];
    s->S = f, f += R * KB;
    s->Sf = f, f += R * KB;
    s->P = f, f += R * KB;
    s->acc = f, f += R * dh;
    s->m = f, f += R;
    s->srow = f, f += KB;
    s->hv = f, f += k;
    s->topv = f, f += k;
    s->topp = f;
    s->l = d, s->t = d + R, s->slope = d + 2 * R;
    s->ls = d + 3 * R, s->lq = d + 4 * R, s->ln = d + 5 * R;
    s->lo = iv, s->hi = iv + 2 * R, s->ulo = iv + 4 * R, s->uhi = iv + 6 * R, s->hj = iv + 8 * R;
    s->nrg = b->n + (size_t)w * R;
  }
done:
  if (rc) scratch_free(c, b);
  return rc;
}

/* The kernel's layouts of the call's tables (jb->dprime_f, jb->t5_bias, jb->fire_bias); free()
 * them unless they come from the call's work arena. */
static int kernel_tables(job *jb, float **dpf, float **t5, float **fire) {
  const cp_attn_call *c = jb->c;
  const int H = c->H;
  *dpf = *t5 = *fire = NULL;
  jb->fire_w = 0;
  if (c->pos == CP_ATTN_POS_FIRE && (double)c->q_off <= c->tab.fire_L) {
    /* Rows i <= L normalise by psi(L), so their bias is a function of the distance alone: one MLP
     * evaluation per head and distance instead of per head, row and key (the same doubles,
     * rounded to float as row_logits does). Distances of such rows are at most min(L, last row). */
    const int64_t last = c->q_off + c->n_q - 1;
    const int64_t top = (double)last <= c->tab.fire_L ? last : (int64_t)floor(c->tab.fire_L);
    const int64_t w = min64(c->n_keys, top + 1);
    *fire = cp_attn_scratch(c, (size_t)H * (size_t)(w > 0 ? w : 1), sizeof **fire);
    CP_CHECK_ALLOC(*fire, "engine: attention scratch");
    double *b = jb->fire_heads; /* worker 0's row: the pool is not running yet */
    for (int64_t d = 0; d < w; d++) {
      cp_fire_mlp_bias_heads(b, c->fire, H, cp_fire_input(c->tab.dprime[d], c->q_off, c->fire->c, c->tab.fire_L));
      for (int h = 0; h < H; h++) (*fire)[(size_t)h * (size_t)w + (size_t)d] = (float)b[h];
    }
    jb->fire_w = w;
  }
  if (c->pos == CP_ATTN_POS_ALIBI) {
    *dpf = cp_attn_scratch(c, (size_t)(c->n_keys ? c->n_keys : 1), sizeof **dpf);
    CP_CHECK_ALLOC(*dpf, "engine: attention scratch");
    for (int64_t d = 0; d < c->n_keys; d++) (*dpf)[d] = (float)c->tab.dprime[d];
  }
  if (c->pos == CP_ATTN_POS_T5) {
    /* Per head, contiguous in the distance, so the logit loop reads it as a vector. */
    assert(c->plan->causal || (c->q_off == 0 && c->n_q == c->n_keys)); /* bidirectional: every row */
    const int64_t w = c->plan->causal ? c->n_keys : 2 * c->n_keys - 1;
    *t5 = cp_attn_scratch(c, (size_t)H * (size_t)(w > 0 ? w : 1), sizeof **t5);
    CP_CHECK_ALLOC(*t5, "engine: attention scratch");
    for (int64_t x = 0; x < w; x++)
      for (int h = 0; h < H; h++) (*t5)[(size_t)h * w + (size_t)x] = c->t5_table[(size_t)c->tab.t5_bucket[x] * H + h];
  }
  jb->dprime_f = *dpf, jb->t5_bias = *t5, jb->fire_bias = *fire;
  return 0;
}

/* FIRE rows i > L normalise by psi(i), so their bias depends on the row as well as the distance.
 * One item: row far_r0 + item / nseg of the chunk, keys [FIRE_SEG * seg, + FIRE_SEG) of its visible
 * ranges; each entry one evaluation of the hidden layers shared by the H heads (the same doubles
 * as cp_fire_mlp_bias per head, so the same bits). */
static void fire_far_item(void *ctx, size_t item, int worker) {
  const job *jb = ctx;
  const cp_attn_call *c = jb->c;
  const int H = c->H;
  const int64_t nseg = (c->n_keys + FIRE_SEG - 1) / FIRE_SEG;
  const int64_t fr = (int64_t)item / nseg, a = ((int64_t)item % nseg) * FIRE_SEG, b = min64(a + FIRE_SEG, c->n_keys);
  const int64_t i = c->q_off + jb->far_r0 + fr;
  if ((double)i <= c->tab.fire_L) return; /* the distance table's row */
  int64_t lo[2], hi[2];
  const int nrg = cp_plan_visible_ranges(c->plan, i, c->n_keys, lo, hi);
  double *out = jb->fire_heads + (size_t)worker * (size_t)H;
  float *row = jb->fire_far + (size_t)fr * (size_t)H * (size_t)c->n_keys;
  for (int g = 0; g < nrg; g++)
    for (int64_t j = lo[g] > a ? lo[g] : a; j < min64(hi[g], b); j++) {
      assert(j <= i); /* FIRE is causal */
      cp_fire_mlp_bias_heads(out, c->fire, H, cp_fire_input(c->tab.dprime[i - j], i, c->fire->c, c->tab.fire_L));
      for (int h = 0; h < H; h++) row[(size_t)h * (size_t)c->n_keys + (size_t)j] = (float)out[h];
    }
}

/* The attention items in chunks of tiles: FIRE with rows i > L builds each chunk's table of those
 * rows first (bounded by FIRE_FAR_BYTES); every other call is one chunk without a table. */
static int run_chunks(cp_pool *pool, job *jb) {
  const cp_attn_call *c = jb->c;
  const size_t H = (size_t)c->H, tiles = (size_t)((c->n_q + TILE_ROWS - 1) / TILE_ROWS);
  const bool far = c->pos == CP_ATTN_POS_FIRE && (double)(c->q_off + c->n_q - 1) > c->tab.fire_L;
  if (!far) {
    jb->item0 = 0;
    cp_pool_run(pool, tiles * H, att_item, jb);
    return 0;
  }
  size_t row_bytes, tile_bytes;
  if (!cp_size_mul(&row_bytes, H * sizeof(float), (size_t)c->n_keys) || !cp_size_mul(&tile_bytes, row_bytes, TILE_ROWS))
    return cp_nomem("engine: FIRE table of %lld keys x %d heads (size overflows)", (long long)c->n_keys, c->H);
  const size_t cap = c->fire_table_bytes ? c->fire_table_bytes : FIRE_FAR_BYTES;
  const size_t per = cap / tile_bytes > 0 ? cap / tile_bytes : 1; /* tiles a chunk */
  const size_t rows = (size_t)min64((int64_t)((per < tiles ? per : tiles) * TILE_ROWS), c->n_q);
  jb->fire_far = cp_attn_scratch(c, rows, row_bytes);
  CP_CHECK_ALLOC(jb->fire_far, "engine: FIRE table");
  const size_t nseg = (size_t)((c->n_keys + FIRE_SEG - 1) / FIRE_SEG);
  for (size_t t0 = 0; t0 < tiles; t0 += per) {
    const size_t nt = tiles - t0 < per ? tiles - t0 : per;
    jb->far_r0 = (int64_t)(t0 * TILE_ROWS);
    jb->far_rows = min64((int64_t)(nt * TILE_ROWS), c->n_q - jb->far_r0);
    cp_pool_run(pool, (size_t)jb->far_rows * nseg, fire_far_item, jb);
    jb->item0 = t0 * H;
    cp_pool_run(pool, nt * H, att_item, jb);
  }
  return 0;
}

int cp_cpu_attention(cp_pool *pool, const cp_attn_call *c) {
  assert(c->H % c->Hkv == 0 && c->n_q >= 0);
  if (c->n_q == 0) return 0;
  const int nw = cp_pool_size(pool);
  scratch_bufs b;
  float *dpf = NULL, *t5 = NULL, *fire = NULL;
  /* A row keeps at most as many top-k keys as there are keys: size the heaps by that. */
  int64_t k = c->tab.topk_any ? min64(c->plan->k, c->n_keys) : 1;
  int rc = scratch_alloc(c, &b, nw, (size_t)(k > 0 ? k : 1), (size_t)c->dh);
  if (rc) return rc;
  job jb = {.c = c, .scr = b.scr};
  if (c->pos == CP_ATTN_POS_FIRE) {
    jb.fire_heads = cp_attn_scratch(c, (size_t)nw * (size_t)c->H, sizeof *jb.fire_heads);
    CP_CHECK_ALLOC_GOTO(jb.fire_heads, "engine: attention scratch");
  }
  if ((rc = kernel_tables(&jb, &dpf, &t5, &fire))) goto done;
  rc = run_chunks(pool, &jb);
done:
  scratch_free(c, &b);
  if (!c->work) free(dpf), free(t5), free(fire), free(jb.fire_far), free(jb.fire_heads);
  return rc;
}
