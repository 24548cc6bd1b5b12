/* Streaming attention for the CPU engine: see engine/attention_cpu.h. Every rule decision
 * (visibility, hidden keys, top-k rows, ALiBi divisor, clamped distances) comes from rule.h;
 * the positional terms are the model's (T5 table, slopes, FIRE MLP) evaluated at the distances
 * the caller resolved. */
#include "engine/attention_cpu.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/error.h"

enum { TILE_ROWS = 32, KEY_BLOCK = 128 };

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
  const att_call *c;
  scratch *scr;
} job;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }


/* Positional term of a top-k candidate: every hidden key sits at the top-k distance. */
static float topk_bias(const att_call *c, int h, int64_t i, double slope) {
  int64_t dist = c->plan->top_k_distance;
  switch (c->pos) {
    case ATT_POS_NONE:
    case ATT_POS_ROPE:
      return 0.0f;
    case ATT_POS_T5:
      return c->t5_topk_bias[h];
    case ATT_POS_ALIBI:
      return (float)(-slope * (double)dist);
    case ATT_POS_FIRE:
      return (float)cp_fire_mlp_bias(c->fire, h, cp_fire_input(dist, i, c->fire->c, c->fire_L));
  }
  return 0.0f;
}

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

/* Final logits (c q.k + positional term) / tau of row r (query i) for block keys
 * kb + [k0, k1), in place in Sr (which holds q.k). */
static void row_logits(const att_call *c, const scratch *s, int h, int r, int64_t i, int64_t kb, int k0, int k1,
                       bool far, float *Sr) {
  const float sc = c->scale, it = c->plan->inv_tau;
  switch (c->pos) {
    case ATT_POS_NONE:
    case ATT_POS_ROPE:
      if (far) {
        const float *Sf = s->Sf + (size_t)r * KEY_BLOCK;
        for (int k = k0; k < k1; k++) {
          int64_t d = i - (kb + k);
          Sr[k] = sc * (c->dprime[d] != d ? Sf[k] : Sr[k]) * it;
        }
      } else {
        for (int k = k0; k < k1; k++) Sr[k] = sc * Sr[k] * it;
      }
      return;
    case ATT_POS_ALIBI: {
      const float sl = (float)s->slope[r];
      const float *dp = c->dprime_f + (i - kb); /* distance of key kb + k is dp[-k] */
      for (int k = k0; k < k1; k++) Sr[k] = (sc * Sr[k] - sl * dp[-k]) * it;
      return;
    }
    case ATT_POS_T5:
      if (c->plan->causal) {
        const float *tb = c->t5_bias + (size_t)h * c->n_keys + (size_t)(i - kb);
        for (int k = k0; k < k1; k++) Sr[k] = (sc * Sr[k] + tb[-k]) * it;
      } else {
        const float *tb = c->t5_bias + (size_t)h * (2 * c->n_keys - 1) + (size_t)(kb - i + c->n_keys - 1);
        for (int k = k0; k < k1; k++) Sr[k] = (sc * Sr[k] + tb[k]) * it;
      }
      return;
    case ATT_POS_FIRE:
      for (int k = k0; k < k1; k++) {
        int64_t d = i - (kb + k);
        double x = cp_fire_input(c->dprime[d], i, c->fire->c, c->fire_L);
        Sr[k] = (sc * Sr[k] + (float)cp_fire_mlp_bias(c->fire, h, x)) * it;
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
static bool block_has_far(const att_call *c, int64_t i0, int nr, int64_t kb, int nk) {
  int64_t dmin = i0 - (kb + nk - 1), dmax = i0 + nr - 1 - kb;
  if (dmin < 0) dmin = 0;
  for (int64_t d = dmin; d <= dmax; d++)
    if (c->dprime[d] != d) return true;
  return false;
}

static void att_item(void *ctx, size_t item, int worker) {
  const job *jb = ctx;
  const att_call *c = jb->c;
  const cp_attn_plan *plan = c->plan;
  scratch *s = &jb->scr[worker];
  const int H = c->H, dh = c->dh, group = c->H / c->Hkv;
  const int h = (int)(item % (size_t)H);
  const int64_t r0 = (int64_t)(item / (size_t)H) * TILE_ROWS;
  const int nr = (int)min64(TILE_ROWS, c->n_q - r0);
  const int g = h / group;
  const int ldq = H * dh, ldk = c->Hkv * dh;
  const float inv_tau = plan->inv_tau;
  const float *qh = c->q + (size_t)r0 * ldq + (size_t)h * dh;
  const float *kh = c->k + (size_t)g * dh, *vh = c->v + (size_t)g * dh;
  const float *krh = c->k_raw ? c->k_raw + (size_t)g * dh : NULL;
  const int64_t i0 = c->q_off + r0;

  int nu = 0;
  for (int r = 0; r < nr; r++) {
    int64_t i = i0 + r;
    s->m[r] = -INFINITY;
    s->l[r] = s->t[r] = 0;
    s->ls[r] = s->lq[r] = s->ln[r] = 0;
    s->slope[r] = c->pos == ATT_POS_ALIBI ? c->slopes[h] / cp_plan_alibi_divisor(plan, i, c->n_keys) : 0;
    s->nrg[r] = cp_plan_visible_ranges(plan, i, c->n_keys, s->lo + 2 * r, s->hi + 2 * r);
    for (int a = 0; a < s->nrg[r]; a++) s->ulo[nu] = s->lo[2 * r + a], s->uhi[nu++] = s->hi[2 * r + a];
  }
  memset(s->acc, 0, (size_t)nr * dh * sizeof *s->acc);
  nu = cp_ranges_merge(s->ulo, s->uhi, nu);

  for (int u = 0; u < nu; u++) {
    for (int64_t kb = s->ulo[u]; kb < s->uhi[u]; kb += KEY_BLOCK) {
      int nk = (int)min64(KEY_BLOCK, s->uhi[u] - kb);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, dh, 1.0f, qh, ldq,
                  kh + (size_t)kb * ldk, ldk, 0.0f, s->S, KEY_BLOCK);
      bool far = c->q_far && block_has_far(c, i0, nr, kb, nk);
      if (far)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, dh, 1.0f,
                    c->q_far + (size_t)r0 * ldq + (size_t)h * dh, ldq, krh + (size_t)kb * ldk, ldk,
                    0.0f, s->Sf, KEY_BLOCK);
      for (int r = 0; r < nr; r++) {
        int64_t i = i0 + r;
        float *Sr = s->S + (size_t)r * KEY_BLOCK;
        int k0[2], k1[2], ns = 0;
        for (int a = 0; a < s->nrg[r]; a++) { /* the row's visible ranges within this block */
          int64_t lo = s->lo[2 * r + a] > kb ? s->lo[2 * r + a] : kb;
          int64_t hi = min64(s->hi[2 * r + a], kb + nk);
          if (lo < hi) k0[ns] = (int)(lo - kb), k1[ns++] = (int)(hi - kb);
        }
        for (int a = 0; a < ns; a++) row_logits(c, s, h, r, i, kb, k0[a], k1[a], far, Sr);
        if (c->row_lstd) logit_moments(s, r, Sr, k0, k1, ns);
        float alpha = online_update(&s->m[r], &s->l[r], &s->t[r], Sr, s->P + (size_t)r * KEY_BLOCK, nk, k0, k1, ns);
        if (alpha != 1.0f)
          for (int e = 0; e < dh; e++) s->acc[(size_t)r * dh + e] *= alpha;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, dh, nk, 1.0f, s->P, KEY_BLOCK,
                  vh + (size_t)kb * ldk, ldk, 1.0f, s->acc, dh);
    }
  }

  /* Top-k middle keys (decision 7): logits at the top-k distance over the Lambda-hidden keys,
   * the k largest per head kept (ties to the smaller j), then folded into the softmax. */
  if (plan->top_k) {
    for (int r = 0; r < nr; r++) {
      int64_t i = i0 + r;
      if (!cp_plan_topk_row(plan, i, c->last_prompt_row)) continue;
      int64_t hlo, hhi;
      cp_plan_hidden_range(plan, i, c->n_keys, &hlo, &hhi);
      if (hlo >= hhi) continue;
      const float *qrow = c->q_topk ? c->q_topk + (size_t)(r0 + r) * ldq + (size_t)h * dh : qh + (size_t)r * ldq;
      const float *keys = c->q_topk ? krh : kh;
      float bias = topk_bias(c, h, i, s->slope[r]);
      int n = 0;
      for (int64_t kb = hlo; kb < hhi; kb += KEY_BLOCK) {
        int nk = (int)min64(KEY_BLOCK, hhi - kb);
        cblas_sgemv(CblasRowMajor, CblasNoTrans, nk, dh, 1.0f, keys + (size_t)kb * ldk, ldk, qrow, 1, 0.0f,
                    s->srow, 1);
        for (int k = 0; k < nk; k++) heap_push(s->hv, s->hj, &n, plan->k, c->scale * s->srow[k] + bias, kb + k);
      }
      for (int a = 0; a < n; a++) s->topv[a] = s->hv[a] * inv_tau;
      if (c->row_lstd) {
        int z0 = 0;
        logit_moments(s, r, s->topv, &z0, &n, 1);
      }
      float *p = s->topp;
      int z = 0;
      float alpha = online_update(&s->m[r], &s->l[r], &s->t[r], s->topv, p, n, &z, &n, 1);
      float *acc = s->acc + (size_t)r * dh;
      if (alpha != 1.0f)
        for (int e = 0; e < dh; e++) acc[e] *= alpha;
      for (int a = 0; a < n; a++) {
        const float *vr = vh + (size_t)s->hj[a] * ldk;
        for (int e = 0; e < dh; e++) acc[e] += p[a] * vr[e];
      }
    }
  }

  for (int r = 0; r < nr; r++) {
    float *o = c->out + (size_t)(r0 + r) * ldq + (size_t)h * dh;
    double l = s->l[r];
    float inv = l > 0 ? (float)(1.0 / l) : 0.0f;
    for (int e = 0; e < dh; e++) o[e] = s->acc[(size_t)r * dh + e] * inv;
    if (c->row_pmax) {
      /* The largest probability is e^(m - m) / l; H = log l - t / l. */
      c->row_pmax[(size_t)h * c->n_q + r0 + r] = l > 0 ? (float)(1.0 / l) : 0.0f;
      c->row_ent[(size_t)h * c->n_q + r0 + r] = l > 0 ? (float)(log(l) - s->t[r] / l) : 0.0f;
    }
    if (c->row_lstd) {
      double cnt = s->ln[r], mean = cnt > 0 ? s->ls[r] / cnt : 0, var = cnt > 0 ? s->lq[r] / cnt - mean * mean : 0;
      c->row_lstd[(size_t)h * c->n_q + r0 + r] = var > 0 ? (float)sqrt(var) : 0.0f;
    }
  }
}

int cp_cpu_attention(cp_pool *pool, const att_call *c) {
  assert(c->H % c->Hkv == 0 && c->n_q >= 0);
  if (c->n_q == 0) return 0;
  int nw = cp_pool_size(pool);
  size_t k = c->plan->top_k ? (size_t)c->plan->k : 1;
  int rc = 0;
  size_t R = TILE_ROWS, KB = KEY_BLOCK, dh = (size_t)c->dh;
  size_t nf = 3 * R * KB + R * dh + R + KB + 3 * k; /* S Sf P acc m srow | hv topv topp */
  size_t nd = 6 * R;
  size_t ni = 8 * R + k; /* lo hi [2R] each | ulo uhi [2R] each | hj */
  scratch *scr = calloc((size_t)nw, sizeof *scr);
  float *fbuf = malloc((size_t)nw * nf * sizeof *fbuf);
  double *dbuf = malloc((size_t)nw * nd * sizeof *dbuf);
  int64_t *ibuf = malloc((size_t)nw * ni * sizeof *ibuf);
  int *nbuf = malloc((size_t)nw * R * sizeof *nbuf);
  float *dpf = NULL;
  if (!scr || !fbuf || !dbuf || !ibuf || !nbuf) {
    rc = cp_error_set(CP_ENOMEM, "engine: out of memory for attention scratch");
    goto done;
  }
  for (int w = 0; w < nw; w++) {
    float *f = fbuf + (size_t)w * nf;
    double *d = dbuf + (size_t)w * nd;
    int64_t *iv = ibuf + (size_t)w * ni;
    scratch *s = &scr[w];
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
    s->nrg = nbuf + (size_t)w * R;
  }
  if (c->pos == ATT_POS_ALIBI) {
    if (!(dpf = malloc((size_t)c->n_keys * sizeof *dpf))) {
      rc = cp_error_set(CP_ENOMEM, "engine: out of memory for attention scratch");
      goto done;
    }
    for (int64_t d = 0; d < c->n_keys; d++) dpf[d] = (float)c->dprime[d];
  }
  att_call cc = *c;
  cc.dprime_f = dpf;
  job jb = {&cc, scr};
  size_t tiles = (size_t)((c->n_q + TILE_ROWS - 1) / TILE_ROWS);
  cp_pool_run(pool, tiles * (size_t)c->H, att_item, &jb);
done:
  free(scr);
  free(fbuf);
  free(dbuf);
  free(ibuf);
  free(nbuf);
  free(dpf);
  return rc;
}
