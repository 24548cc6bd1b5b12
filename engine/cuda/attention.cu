/* Fused rule-aware attention on CUDA: see engine/cuda/attention_cuda.h.
 *
 * One thread block per (tile of query rows, head). TPR adjacent threads share one query row and
 * own every TPR-th element of its head dimension (q slice and output accumulator in registers);
 * a q.k dot product is their partial sums joined by warp shuffles, after which each of the TPR
 * threads holds the row's logits for the whole key tile and keeps the row's online softmax
 * (running max m, l = sum e^(s-m), t = sum e^(s-m) (s-m)), so the row entropy is log l - t/l
 * and P_max is 1/l without any second pass, and no L x L matrix ever exists.
 *
 * Keys are visited in tiles of BN from the query tile's key ranges only (the union of its rows'
 * cp_plan_visible_ranges, computed on the host), so a Lambda-masked tile touches its global
 * prefix and its local window and skips every hidden key tile. Per key the row's own ranges
 * decide visibility. The positional term is evaluated on the fly from small tables the host
 * resolved with rule.h: clamped distance d' per distance, T5 bucket per clamped relative
 * position (the head's bucket table staged in shared memory), the ALiBi slope divided by the
 * row's divisor, FIRE's MLP on psi(d') / psi(max(L, i)) (psi of the block's distances staged
 * in shared memory, the head's MLP in shared memory). RoPE under a ceiling scores far pairs
 * with the query rotated to the clamped distance against the unrotated key (decision 6).
 * Top-k middle tokens (decision 7) are a second pass over the tile's Lambda-hidden keys after the
 * visible ones, keeping each row's k best in shared memory, then folded into the same softmax.
 *
 * Arithmetic is fp32 FMA on the SIMT cores (inputs float or bfloat16, fp32 accumulation). It is
 * the correctness baseline of the backend; a tensor-core (wgmma) version is future work. */
#include "engine/cuda/attention_cuda.h"

#ifndef CPCU_EMULATE /* tests/cuda_emulate.cpp compiles the kernel for the host with its own shim */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#define CPCU_SMEM_DECL extern __shared__ __align__(16) unsigned char smem[];
#define CPCU_UNROLL _Pragma("unroll")
#endif

#include <math.h>
#include <stdio.h>

namespace {

constexpr int NT = 128; /* threads per block */
constexpr int BN = 32;  /* keys per tile */
constexpr unsigned FULL = 0xffffffffu;

__device__ __forceinline__ float ldv(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float ldv(const __nv_bfloat16 *p, size_t i) { return __bfloat162float(p[i]); }

struct smem_layout {
  size_t psi, ks, vs, kr, t5, fw1, fb1, fwm, fbm, fw2, tkv, tkj, tkn, total; /* byte offsets */
};

__host__ __device__ inline size_t align16(size_t x) { return (x + 15) & ~(size_t)15; }

/* fw: FIRE MLP width (0 unless FIRE), fl: its hidden layers (the W x W middle layer when 2). */
__host__ __device__ inline smem_layout make_layout(int maxd, int bm, bool far, int nb, int fw, int fl, int topk) {
  smem_layout L;
  size_t o = 0;
  L.psi = o, o = align16(o + (size_t)(bm + BN) * sizeof(double));
  L.ks = o, o = align16(o + (size_t)BN * maxd * sizeof(float));
  L.vs = o, o = align16(o + (size_t)BN * maxd * sizeof(float));
  L.kr = o;
  if (far) o = align16(o + (size_t)BN * maxd * sizeof(float));
  L.t5 = o, o = align16(o + (size_t)nb * sizeof(float));
  L.fw1 = o, o = align16(o + (size_t)fw * sizeof(float));
  L.fb1 = o, o = align16(o + (size_t)fw * sizeof(float));
  L.fwm = o, o = align16(o + (size_t)(fl == 2 ? fw * fw : 0) * sizeof(float));
  L.fbm = o, o = align16(o + (size_t)(fl == 2 ? fw : 0) * sizeof(float));
  L.fw2 = o, o = align16(o + (size_t)fw * sizeof(float));
  L.tkv = o, o = align16(o + (size_t)bm * topk * sizeof(float));
  L.tkj = o, o = align16(o + (size_t)bm * topk * sizeof(int));
  L.tkn = o, o = align16(o + (size_t)(topk ? bm : 0) * sizeof(int));
  L.total = o;
  return L;
}

/* psi(x) = log(c x + 1), as cp_fire_input (model/rule.c) computes it, in double. */
__device__ __forceinline__ double fire_psi(double c, double x) { return log(c * x + 1.0); }

/* The head's FIRE bias at input x from the MLP staged in shared memory, in double and in the
 * order of cp_fire_mlp_bias (import/model_load.c): b2 + w2 . relu(h), h = w1 x + b1 (one hidden
 * layer) or h = wm relu(w1 x + b1) + bm (two; the first layer is recomputed per middle unit
 * rather than held in W registers per thread). */
__device__ __forceinline__ double fire_bias(double x, double b2, const float *w1, const float *b1, const float *wm,
                                            const float *bm, const float *w2, int fw, int fl) {
  double bias = b2;
  if (fl == 2) {
    for (int u = 0; u < fw; u++) {
      double v = (double)bm[u];
      for (int w = 0; w < fw; w++) {
        const double act = (double)w1[w] * x + (double)b1[w];
        if (act > 0) v += (double)wm[(size_t)u * fw + w] * act;
      }
      if (v > 0) bias += (double)w2[u] * v;
    }
    return bias;
  }
  for (int w = 0; w < fw; w++) {
    const double act = (double)w1[w] * x + (double)b1[w];
    if (act > 0) bias += (double)w2[w] * act;
  }
  return bias;
}

/* A row's online softmax: running max m, l = sum e^(s-m), t = sum e^(s-m) (s-m). */
struct row_softmax {
  float m, l, t;
};

/* Moves the row to the running max max(m, mb) of a batch of logits whose largest is mb (finite),
 * rescaling l, t and the output accumulator: e^(s-m') = e^(s-m) alpha and (s-m') = (s-m) + (m-m'),
 * so t' = alpha (t + (m-m') l). The main and the top-k pass share it. */
template <int SL>
__device__ __forceinline__ void softmax_rescale(row_softmax &st, float mb, float (&acc)[SL]) {
  const float m_new = fmaxf(st.m, mb);
  if (st.l > 0.0f) {
    const float alpha = expf(st.m - m_new);
    st.t = alpha * (st.t + (st.m - m_new) * st.l);
    st.l *= alpha;
CPCU_UNROLL
    for (int x = 0; x < SL; x++) acc[x] *= alpha;
  } else {
    st.t = 0.0f, st.l = 0.0f; /* alpha would be 1: the accumulator is unchanged */
  }
  st.m = m_new;
}

/* Adds logit z (at the current max m) to the row; returns its weight e^(z-m) for the accumulator. */
__device__ __forceinline__ float softmax_add(row_softmax &st, float z) {
  const float pk = expf(z - st.m);
  st.l += pk;
  st.t = fmaf(pk, z - st.m, st.t);
  return pk;
}

template <typename T, int MAXD, int TPR>
__global__ void __launch_bounds__(NT) attn_kernel(const cpcu_attn_args a) {
  constexpr int BM = NT / TPR, SL = MAXD / TPR;
  CPCU_SMEM_DECL
  const bool far = a.q_far != nullptr;
  const int nb = a.pos == CP_ATTN_POS_T5 ? a.t5_nb : 0, fw = a.pos == CP_ATTN_POS_FIRE ? a.fire_width : 0;
  const int fl = a.fire_layers == 2 ? 2 : 1;
  const int topk = a.topk_k;
  const smem_layout L = make_layout(MAXD, BM, far, nb, fw, fl, topk);
  double *psi = reinterpret_cast<double *>(smem + L.psi);
  float *Ks = reinterpret_cast<float *>(smem + L.ks);
  float *Vs = reinterpret_cast<float *>(smem + L.vs);
  float *Kr = reinterpret_cast<float *>(smem + L.kr);
  float *t5s = reinterpret_cast<float *>(smem + L.t5);
  float *fw1 = reinterpret_cast<float *>(smem + L.fw1);
  float *fb1 = reinterpret_cast<float *>(smem + L.fb1);
  float *fwm = reinterpret_cast<float *>(smem + L.fwm);
  float *fbm = reinterpret_cast<float *>(smem + L.fbm);
  float *fw2 = reinterpret_cast<float *>(smem + L.fw2);
  float *tkv = reinterpret_cast<float *>(smem + L.tkv);
  int *tkj = reinterpret_cast<int *>(smem + L.tkj);
  int *tkn = reinterpret_cast<int *>(smem + L.tkn);

  const int tile = blockIdx.x, h = blockIdx.y;
  const int tid = threadIdx.x, r = tid / TPR, tl = tid % TPR;
  const int dh = a.dh, g = h / (a.H / a.Hkv);
  const size_t ldq = (size_t)a.H * dh, ldk = (size_t)a.Hkv * dh;
  const int row = tile * BM + r;
  const bool valid = row < a.n_q;
  const int i = a.q_off + row, i_first = a.q_off + tile * BM;
  const T *q = static_cast<const T *>(a.q), *qfar = static_cast<const T *>(a.q_far);
  const T *k = static_cast<const T *>(a.k), *v = static_cast<const T *>(a.v);
  const T *kraw = static_cast<const T *>(a.k_raw);
  /* 1/tau of the row: per row under a temperature schedule (tau(T), resolved on the host). */
  const float it = valid && a.row_inv_tau ? a.row_inv_tau[row] : a.inv_tau, sc = a.scale;
  const bool stats_lstd = a.row_lstd != nullptr;

  for (int b = tid; b < nb; b += NT) t5s[b] = a.t5_table[(size_t)b * a.H + h];
  for (int w = tid; w < fw; w += NT) {
    fw1[w] = a.fire_w1[w];
    fb1[w] = a.fire_b1[w];
    fw2[w] = a.fire_w2[(size_t)h * fw + w];
    if (fl == 2) fbm[w] = a.fire_bm[w];
  }
  if (fl == 2)
    for (int w = tid; w < fw * fw; w += NT) fwm[w] = a.fire_wm[w];

  float qv[SL], qf[SL], acc[SL];
CPCU_UNROLL
  for (int x = 0; x < SL; x++) {
    const int e = tl + TPR * x;
    const bool in = valid && e < dh;
    qv[x] = in ? ldv(q, (size_t)row * ldq + (size_t)h * dh + e) : 0.0f;
    qf[x] = in && far ? ldv(qfar, (size_t)row * ldq + (size_t)h * dh + e) : 0.0f;
    acc[x] = 0.0f;
  }

  int lo0 = 0, hi0 = 0, lo1 = 0, hi1 = 0;
  float slope = 0.0f, fb2 = 0.0f;
  double fden = 0.0;
  if (valid) {
    const int *rr = a.row_ranges + (size_t)row * 4;
    lo0 = rr[0], hi0 = rr[1], lo1 = rr[2], hi1 = rr[3];
    /* As the CPU engine: the slope over the row's divisor in double, then float. */
    if (a.pos == CP_ATTN_POS_ALIBI) slope = (float)(a.slopes[h] / a.alibi_div[row]);
    if (a.pos == CP_ATTN_POS_FIRE) {
      const double norm_at = (double)i > a.fire_L ? (double)i : a.fire_L;
      fden = fire_psi(a.fire_c, norm_at);
      fb2 = a.fire_b2[h];
    }
  }

  row_softmax sm = {-INFINITY, 0.0f, 0.0f};
  double ls = 0.0, lq = 0.0; /* logit moments (row_lstd), in double as the CPU engine */
  int ln = 0;

  const int nr = a.tile_nranges[tile];
  for (int u = 0; u < nr; u++) {
    const int ulo = a.tile_ranges[(size_t)tile * 2 * CPCU_MAX_TILE_RANGES + 2 * u];
    const int uhi = a.tile_ranges[(size_t)tile * 2 * CPCU_MAX_TILE_RANGES + 2 * u + 1];
    for (int kb = ulo; kb < uhi; kb += BN) {
      const int nk = min(BN, uhi - kb);
      const int dbase = i_first - (kb + BN - 1); /* smallest i - j this block can meet */
      __syncthreads(); /* the previous tile is consumed; the tables above are staged */
      for (int idx = tid; idx < BN * MAXD; idx += NT) {
        const int kk = idx / MAXD, e = idx % MAXD;
        const bool in = kk < nk && e < dh;
        const size_t off = (size_t)(kb + kk) * ldk + (size_t)g * dh + e;
        Ks[idx] = in ? ldv(k, off) : 0.0f;
        Vs[idx] = in ? ldv(v, off) : 0.0f;
        if (far) Kr[idx] = in ? ldv(kraw, off) : 0.0f;
      }
      if (a.pos == CP_ATTN_POS_FIRE)
        for (int x = tid; x < BM + BN - 1; x += NT) {
          const int d = dbase + x;
          psi[x] = d >= 0 && d < a.n_keys ? fire_psi(a.fire_c, (double)a.dprime[d]) : 0.0;
        }
      __syncthreads();

      float s[BN];
CPCU_UNROLL
      for (int kk = 0; kk < BN; kk++) {
        float p = 0.0f, pf = 0.0f;
CPCU_UNROLL
        for (int x = 0; x < SL; x++) p = fmaf(qv[x], Ks[kk * MAXD + tl + TPR * x], p);
        if (far) {
CPCU_UNROLL
          for (int x = 0; x < SL; x++) pf = fmaf(qf[x], Kr[kk * MAXD + tl + TPR * x], pf);
        }
CPCU_UNROLL
        for (int o = TPR / 2; o > 0; o >>= 1) {
          p += __shfl_xor_sync(FULL, p, o);
          if (far) pf += __shfl_xor_sync(FULL, pf, o);
        }
        const int j = kb + kk;
        const bool vis = valid && kk < nk && ((j >= lo0 && j < hi0) || (j >= lo1 && j < hi1));
        float z = -INFINITY;
        if (vis) {
          switch (a.pos) {
            case CP_ATTN_POS_ROPE:
              if (far && a.dprime[i - j] != i - j) p = pf;
              z = sc * p * it;
              if (a.softcap > 0.0f) z = a.softcap * tanhf(z / a.softcap);
              break;
            case CP_ATTN_POS_ALIBI:
              z = (sc * p - slope * (float)a.dprime[i - j]) * it;
              break;
            case CP_ATTN_POS_T5: {
              const int bk = a.causal ? a.t5_bucket[i - j] : a.t5_bucket[j - i + a.n_keys - 1];
              z = (sc * p + t5s[bk]) * it;
              break;
            }
            case CP_ATTN_POS_FIRE: {
              const double xin = fden == 0.0 ? 0.0 : psi[i - j - dbase] / fden;
              const double bias = fire_bias(xin, fb2, fw1, fb1, fwm, fbm, fw2, fw, fl);
              z = (sc * p + (float)bias) * it;
              break;
            }
            default:
              z = sc * p * it;
              break;
          }
          if (stats_lstd) ls += z, lq += (double)z * z, ln++;
        }
        s[kk] = z;
      }

      float mb = -INFINITY;
CPCU_UNROLL
      for (int kk = 0; kk < BN; kk++) mb = fmaxf(mb, s[kk]);
      if (mb != -INFINITY) {
        softmax_rescale(sm, mb, acc);
CPCU_UNROLL
        for (int kk = 0; kk < BN; kk++) {
          if (s[kk] == -INFINITY) continue;
          const float pk = softmax_add(sm, s[kk]);
CPCU_UNROLL
          for (int x = 0; x < SL; x++) acc[x] = fmaf(pk, Vs[kk * MAXD + tl + TPR * x], acc[x]);
        }
      }
    }
  }

  /* Top-k middle keys (decision 7): logits at the top-k distance over the row's Lambda-hidden
   * keys; lane 0 of each row keeps its k best in shared memory, sorted by value descending then
   * key ascending (ties go to the smaller j, and keys arrive in ascending order); then they are
   * folded into the row's online softmax. */
  const int tklo = topk ? a.topk_tile[2 * tile] : 0, tkhi = topk ? a.topk_tile[2 * tile + 1] : 0;
  if (tklo < tkhi) { /* uniform over the block */
    const T *qt = a.q_topk ? static_cast<const T *>(a.q_topk) : q;
    const T *kt = a.q_topk ? kraw : k;
    int hlo = 0, hhi = 0;
    float tb = 0.0f;
    if (valid) hlo = a.topk_rows[2 * row], hhi = a.topk_rows[2 * row + 1], tb = a.topk_bias[(size_t)h * a.n_q + row];
    CPCU_UNROLL
    for (int x = 0; x < SL; x++) {
      const int e = tl + TPR * x;
      qf[x] = valid && e < dh ? ldv(qt, (size_t)row * ldq + (size_t)h * dh + e) : 0.0f;
    }
    if (tl == 0) tkn[r] = 0;
    float *rv = tkv + (size_t)r * topk;
    int *rj = tkj + (size_t)r * topk;
    for (int kb = tklo; kb < tkhi; kb += BN) {
      const int nk = min(BN, tkhi - kb);
      __syncthreads();
      for (int idx = tid; idx < BN * MAXD; idx += NT) {
        const int kk = idx / MAXD, e = idx % MAXD;
        Ks[idx] = kk < nk && e < dh ? ldv(kt, (size_t)(kb + kk) * ldk + (size_t)g * dh + e) : 0.0f;
      }
      __syncthreads();
      CPCU_UNROLL
      for (int kk = 0; kk < BN; kk++) {
        float p = 0.0f;
        CPCU_UNROLL
        for (int x = 0; x < SL; x++) p = fmaf(qf[x], Ks[kk * MAXD + tl + TPR * x], p);
        CPCU_UNROLL
        for (int o = TPR / 2; o > 0; o >>= 1) p += __shfl_xor_sync(FULL, p, o);
        const int j = kb + kk;
        if (tl == 0 && kk < nk && j >= hlo && j < hhi) {
          const float val = sc * p + tb;
          int n = tkn[r];
          if (n < topk || val > rv[n - 1]) { /* better than the worst kept (a tie keeps the older j) */
            int pos = n < topk ? n++ : n - 1;
            while (pos > 0 && val > rv[pos - 1]) rv[pos] = rv[pos - 1], rj[pos] = rj[pos - 1], pos--;
            rv[pos] = val, rj[pos] = j;
            tkn[r] = n;
          }
        }
      }
    }
    __syncthreads(); /* lane 0's lists are visible to the row's other lanes */
    const int n = valid ? tkn[r] : 0;
    if (n > 0) {
      float mb = -INFINITY;
      for (int x = 0; x < n; x++) {
        const float z = a.softcap > 0.0f ? a.softcap * tanhf(rv[x] * it / a.softcap) : rv[x] * it;
        mb = fmaxf(mb, z);
        if (stats_lstd) ls += z, lq += (double)z * z, ln++;
      }
      softmax_rescale(sm, mb, acc);
      for (int y = 0; y < n; y++) {
        const float pk =
            softmax_add(sm, a.softcap > 0.0f ? a.softcap * tanhf(rv[y] * it / a.softcap) : rv[y] * it);
        const size_t vo = (size_t)rj[y] * ldk + (size_t)g * dh;
        CPCU_UNROLL
        for (int x = 0; x < SL; x++) {
          const int e = tl + TPR * x;
          if (e < dh) acc[x] = fmaf(pk, ldv(v, vo + e), acc[x]);
        }
      }
    }
  }

  if (!valid) return;
  const float l = sm.l, inv = l > 0.0f ? 1.0f / l : 0.0f;
CPCU_UNROLL
  for (int x = 0; x < SL; x++) {
    const int e = tl + TPR * x;
    if (e < dh) a.out[(size_t)row * ldq + (size_t)h * dh + e] = acc[x] * inv;
  }
  if (tl == 0) {
    const size_t si = (size_t)h * a.n_q + row;
    if (a.row_pmax) a.row_pmax[si] = l > 0.0f ? 1.0f / l : 0.0f;
    if (a.row_ent) a.row_ent[si] = l > 0.0f ? logf(l) - sm.t / l : 0.0f;
    if (a.row_lstd) {
      const double mean = ln > 0 ? ls / ln : 0.0, var = ln > 0 ? lq / ln - mean * mean : 0.0;
      a.row_lstd[si] = var > 0 ? (float)sqrt(var) : 0.0f;
    }
  }
}

inline int tile_rows_for(int dh) { return dh <= 128 ? NT / 4 : NT / 8; } /* BM of dispatch() */

#ifdef CPCU_EMULATE
} // namespace
#else
int fail(cudaError_t err, const char *what, char *why, size_t n) {
  if (why && n) snprintf(why, n, "%s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
  return -1;
}

template <typename T, int MAXD, int TPR>
int launch(const cpcu_attn_args *a, int reps, double *ms, char *why, size_t n) {
  constexpr int BM = NT / TPR;
  const smem_layout L = make_layout(MAXD, BM, a->q_far != nullptr, a->pos == CP_ATTN_POS_T5 ? a->t5_nb : 0,
                                    a->pos == CP_ATTN_POS_FIRE ? a->fire_width : 0, a->fire_layers == 2 ? 2 : 1,
                                    a->topk_k);
  cudaError_t err = cudaFuncSetAttribute(attn_kernel<T, MAXD, TPR>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)L.total);
  if (err != cudaSuccess) return fail(err, "cuda attention: shared memory limit", why, n);
  const dim3 grid((unsigned)((a->n_q + BM - 1) / BM), (unsigned)a->H);
  const cudaStream_t s = (cudaStream_t)a->stream;
  attn_kernel<T, MAXD, TPR><<<grid, NT, L.total, s>>>(*a);
  if ((err = cudaGetLastError()) != cudaSuccess) return fail(err, "cuda attention: launch", why, n);
  if (reps > 0 && ms) {
    cudaEvent_t e0, e1;
    if ((err = cudaEventCreate(&e0)) != cudaSuccess) return fail(err, "cuda attention: event", why, n);
    if ((err = cudaEventCreate(&e1)) != cudaSuccess) {
      cudaEventDestroy(e0);
      return fail(err, "cuda attention: event", why, n);
    }
    cudaEventRecord(e0, s);
    for (int x = 0; x < reps; x++) attn_kernel<T, MAXD, TPR><<<grid, NT, L.total, s>>>(*a);
    cudaEventRecord(e1, s);
    err = cudaEventSynchronize(e1);
    float t = 0.0f;
    if (err == cudaSuccess) err = cudaEventElapsedTime(&t, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (err != cudaSuccess) return fail(err, "cuda attention: timed runs", why, n);
    *ms = (double)t / reps;
  }
  return 0;
}

template <typename T>
int dispatch(const cpcu_attn_args *a, int reps, double *ms, char *why, size_t n) {
  if (a->dh <= 64) return launch<T, 64, 4>(a, reps, ms, why, n);
  if (a->dh <= 128) return launch<T, 128, 4>(a, reps, ms, why, n);
  return launch<T, 256, 8>(a, reps, ms, why, n);
}

} // namespace

extern "C" int cpcu_device_count(int *count, char *why, size_t n) {
  *count = 0;
  cudaError_t err = cudaGetDeviceCount(count);
  if (err != cudaSuccess) {
    *count = 0;
    return fail(err, "cudaGetDeviceCount", why, n);
  }
  return 0;
}

extern "C" int cpcu_device_name(char *name, size_t name_n, int *cc_major, int *cc_minor, char *why, size_t n) {
  cudaDeviceProp p;
  cudaError_t err = cudaGetDeviceProperties(&p, 0);
  if (err != cudaSuccess) return fail(err, "cudaGetDeviceProperties", why, n);
  snprintf(name, name_n, "%s", p.name);
  *cc_major = p.major, *cc_minor = p.minor;
  return 0;
}

extern "C" int cpcu_versions(int *driver, int *runtime, char *why, size_t n) {
  cudaError_t err = cudaDriverGetVersion(driver);
  if (err == cudaSuccess) err = cudaRuntimeGetVersion(runtime);
  return err == cudaSuccess ? 0 : fail(err, "cudaDriverGetVersion", why, n);
}

extern "C" int cpcu_tile_rows(int dh) { return tile_rows_for(dh); }

extern "C" int cpcu_attention(const cpcu_attn_args *a, int reps, double *ms, char *why, size_t n) {
  if (a->n_q == 0) return 0;
  return a->bf16 ? dispatch<__nv_bfloat16>(a, reps, ms, why, n) : dispatch<float>(a, reps, ms, why, n);
}

extern "C" int cpcu_malloc(void **p, size_t bytes, char *why, size_t n) {
  *p = nullptr;
  cudaError_t err = cudaMalloc(p, bytes ? bytes : 1);
  if (err != cudaSuccess) {
    *p = nullptr;
    return fail(err, "cudaMalloc", why, n);
  }
  return 0;
}

extern "C" void cpcu_free(void *p) {
  if (p) cudaFree(p);
}

/* From pageable host memory, cudaMemcpyAsync returns once the bytes are staged, so the caller may
 * free its buffer at once. */
extern "C" int cpcu_upload(void *dst, const void *src, size_t bytes, void *stream, char *why, size_t n) {
  if (!bytes) return 0;
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream);
  return err == cudaSuccess ? 0 : fail(err, "cudaMemcpyAsync to device", why, n);
}

extern "C" int cpcu_download(void *dst, const void *src, size_t bytes, void *stream, char *why, size_t n) {
  if (!bytes) return 0;
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize((cudaStream_t)stream);
  return err == cudaSuccess ? 0 : fail(err, "cudaMemcpyAsync to host", why, n);
}

/* Page-locked, so that a copy into it runs on the stream while the host goes on. */
extern "C" int cpcu_host_alloc(void **p, size_t bytes, char *why, size_t n) {
  *p = nullptr;
  cudaError_t err = cudaMallocHost(p, bytes ? bytes : 1);
  if (err != cudaSuccess) {
    *p = nullptr;
    return fail(err, "cudaMallocHost", why, n);
  }
  return 0;
}

extern "C" void cpcu_host_free(void *p) {
  if (p) cudaFreeHost(p);
}

extern "C" int cpcu_download_async(void *dst, const void *src, size_t bytes, void *stream, char *why, size_t n) {
  if (!bytes) return 0;
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream);
  return err == cudaSuccess ? 0 : fail(err, "cudaMemcpyAsync to host", why, n);
}

extern "C" int cpcu_sync(void *stream, char *why, size_t n) {
  cudaError_t err = cudaStreamSynchronize((cudaStream_t)stream);
  return err == cudaSuccess ? 0 : fail(err, "cuda attention: kernel", why, n);
}

#endif /* CPCU_EMULATE */
