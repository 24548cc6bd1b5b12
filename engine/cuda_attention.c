/* Host side of the CUDA attention backend (include/ctxpatch/engine/cuda.h): takes the call and its
 * tables (cp_attn_tables_build), adds the visible ranges of the kernel's row tiles, converts all
 * to the device struct and types, moves them and the tensors to the device and runs the fused
 * kernel of engine/cuda/attention.cu (or a test's host emulation of it, cp_cuda_attention_on).
 * Compiled in every build; without CTXPATCH_WITH_CUDA the public functions refuse with a reason. */
#include "engine/cuda_attention.h"

#include <assert.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/formats/tensor.h"
#include "engine/backend.h"

bool cp_cuda_built(void) {
#ifdef CTXPATCH_WITH_CUDA
  return true;
#else
  return false;
#endif
}

#ifndef CTXPATCH_WITH_CUDA

bool cp_cuda_available(char *why, size_t n) {
  if (why && n) snprintf(why, n, "ctxpatch was built without CUDA (no nvcc at configure time, or -DCTXPATCH_CUDA=OFF)");
  return false;
}

int cp_cuda_attention(const cp_attn_call *c, const cp_cuda_opts *opts) {
  (void)c, (void)opts;
  return cp_error_set(CP_EUNSUPPORTED, "cuda: ctxpatch was built without CUDA (reconfigure with nvcc on PATH)");
}

#else

static const cpcu_backend CUDA_RUNTIME = {cpcu_tile_rows,  cpcu_attention, cpcu_malloc,         cpcu_free,
                                          cpcu_upload,     cpcu_download,  cpcu_host_alloc,     cpcu_host_free,
                                          cpcu_download_async, cpcu_sync};

int cp_cuda_attention(const cp_attn_call *c, const cp_cuda_opts *opts) {
  return cp_cuda_attention_on(&CUDA_RUNTIME, c, opts);
}

const cpcu_backend *cp_cuda_runtime_backend(void) { return &CUDA_RUNTIME; }

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
  int drv = 0, rt = 0;
  if (cpcu_versions(&drv, &rt, r, sizeof r)) {
    if (why && n) snprintf(why, n, "%s", r);
    return false;
  }
  if (why && n)
    snprintf(why, n, "%s (compute capability %d.%d), driver %d.%d, runtime %d.%d", name, ma, mi, drv / 1000,
             drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
  return true;
}

#endif

typedef struct {
  const cpcu_backend *be;
  void *stream; /* the copies' and the kernel's (cudaStream_t; NULL: the legacy default stream) */
  /* NULL: each buffer its own allocation, freed after the call. Else every buffer is a slice of
   * bufs->dev, `used` bytes so far; with `measure`, nothing is copied and the slices are only
   * counted (the first of attention_on's two passes). */
  cp_cuda_attn_bufs *bufs;
  bool measure;
  size_t used;
  void *p[32]; /* without bufs: every device buffer of one call (28 at most) */
  int n;
} dev_list;

typedef enum {
  PUT_RAW,  /* as stored */
  PUT_BF16, /* floats as bfloat16 */
  PUT_I32,  /* int64 as int (check_call bounds every index and distance) */
} put_as;

enum { SLICE_ALIGN = 256 }; /* cudaMalloc's own alignment, for every slice of bufs->dev */

static size_t slice_bytes(size_t bytes) { return (bytes + SLICE_ALIGN - 1) / SLICE_ALIGN * SLICE_ALIGN; }

/* A device buffer of `bytes` into *d: a new allocation, a slice of bufs->dev, or (measuring) a
 * placeholder that is never dereferenced. */
static int dev_take(dev_list *dl, void **d, size_t bytes) {
  char why[256] = "";
  *d = NULL;
  if (dl->bufs) {
    *d = dl->measure ? (void *)(uintptr_t)SLICE_ALIGN : (char *)dl->bufs->dev + dl->used;
    dl->used += slice_bytes(bytes ? bytes : 1);
    assert(dl->measure || dl->used <= dl->bufs->dev_cap);
    return 0;
  }
  assert(dl->n < (int)(sizeof dl->p / sizeof *dl->p));
  if (dl->be->alloc(d, bytes, why, sizeof why)) return cp_error_set(CP_ECUDA, "cuda: %s", why);
  dl->p[dl->n++] = *d;
  return 0;
}

/* Copies bytes from host memory into a new device buffer *out, converted on the way as `as` says
 * (bytes counts the source). NULL src: *out = NULL. */
static int dev_put(dev_list *dl, const void **out, const void *src, size_t bytes, put_as as) {
  char why[256] = "";
  void *d = NULL, *tmp = NULL;
  const void *from = src;
  *out = NULL;
  if (!src) return 0;
  const size_t count = as == PUT_BF16 ? bytes / sizeof(float) : as == PUT_I32 ? bytes / sizeof(int64_t) : bytes;
  const size_t dbytes = as == PUT_BF16 ? count * sizeof(uint16_t) : as == PUT_I32 ? count * sizeof(int) : bytes;
  int rc = dev_take(dl, &d, dbytes);
  if (rc || dl->measure) {
    *out = d;
    return rc;
  }
  if (as == PUT_BF16) {
    uint16_t *b = malloc(count ? count * sizeof *b : 1);
    CP_CHECK_ALLOC(b, "cuda: converting to bfloat16");
    for (size_t x = 0; x < count; x++) b[x] = cp_f32_to_bf16(((const float *)src)[x]); /* as the bake rounds */
    tmp = b, from = b;
  } else if (as == PUT_I32) {
    int *w = malloc(count ? count * sizeof *w : 1);
    CP_CHECK_ALLOC(w, "cuda: int tables");
    for (size_t x = 0; x < count; x++) w[x] = (int)((const int64_t *)src)[x];
    tmp = w, from = w;
  }
  if (dl->be->upload(d, from, dbytes, dl->stream, why, sizeof why)) rc = cp_error_set(CP_ECUDA, "cuda: %s", why);
  else *out = d;
  free(tmp);
  return rc;
}

static int dev_out(dev_list *dl, float **out, const float *want, size_t bytes) {
  void *d = NULL;
  *out = NULL;
  if (!want) return 0;
  int rc = dev_take(dl, &d, bytes);
  if (!rc) *out = d;
  return rc;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int check_call(const cp_attn_call *c) {
  const cp_attn_plan *p = c->plan;
  const cp_attn_tables *t = &c->tab;
  if (!p || c->H < 1 || c->Hkv < 1 || c->H % c->Hkv || c->n_q < 0 || c->n_keys < 0 || c->q_off < 0 || !c->out ||
      (c->n_q > 0 && (!c->q || !c->k || !c->v)))
    return cp_error_set(CP_EARG, "cuda: inconsistent attention call (H %d, Hkv %d, n_q %lld, n_keys %lld)", c->H,
                        c->Hkv, (long long)c->n_q, (long long)c->n_keys);
  if (c->dh < 1 || c->dh > CPCU_MAX_DH)
    return cp_error_set(CP_EUNSUPPORTED, "cuda: head dim %d outside 1..%d", c->dh, CPCU_MAX_DH);
  if (c->n_keys > INT_MAX / 4 || c->q_off + c->n_q > INT_MAX / 4 || c->H > 65535)
    return cp_error_set(CP_EUNSUPPORTED, "cuda: %lld keys or %d heads exceed the kernel's int indexing",
                        (long long)c->n_keys, c->H);
  if (!p->causal && (c->pos == CP_ATTN_POS_ALIBI || c->pos == CP_ATTN_POS_FIRE || c->q_far))
    return cp_error_set(CP_EARG, "cuda: ALiBi, FIRE and a RoPE ceiling need a causal call");
  if ((c->q_far || c->q_topk) && (c->pos != CP_ATTN_POS_ROPE || !c->k_raw))
    return cp_error_set(CP_EARG, "cuda: q_far and q_topk need pos RoPE and k_raw");
  if (!p->causal && c->n_q > 0 && (c->q_off != 0 || c->n_q != c->n_keys) && c->pos == CP_ATTN_POS_T5)
    return cp_error_set(CP_EARG, "cuda: bidirectional T5 call must cover every key as a query");
  if (c->pos == CP_ATTN_POS_T5 &&
      (!c->t5_table || c->t5_num_buckets < 1 || c->t5_num_buckets > CPCU_T5_MAX_BUCKETS))
    return cp_error_set(CP_EUNSUPPORTED, "cuda: T5 table of %d buckets (1..%d supported)", c->t5_num_buckets,
                        CPCU_T5_MAX_BUCKETS);
  if (c->pos == CP_ATTN_POS_ALIBI && !c->slopes) return cp_error_set(CP_EARG, "cuda: ALiBi call without slopes");
  if (c->pos == CP_ATTN_POS_FIRE && (!c->fire || c->fire->width < 1 || c->fire->width > CPCU_FIRE_MAX_WIDTH))
    return cp_error_set(CP_EUNSUPPORTED, "cuda: FIRE MLP width %d (1..%d supported)", c->fire ? c->fire->width : 0,
                        CPCU_FIRE_MAX_WIDTH);
  if (c->pos == CP_ATTN_POS_FIRE && c->fire->layers == 2 && (!c->fire->wm || !c->fire->bm))
    return cp_error_set(CP_EARG, "cuda: FIRE MLP of two hidden layers without its middle layer");
  if (p->top_k && p->k > CPCU_TOPK_MAX)
    return cp_error_set(CP_EUNSUPPORTED, "cuda: top_k k %d (at most %d on cuda)", p->k, CPCU_TOPK_MAX);
  if ((p->causal && !t->dprime) || (c->pos == CP_ATTN_POS_T5 && !t->t5_bucket) ||
      (c->pos == CP_ATTN_POS_ALIBI && !t->alibi_div) || (p->top_k && !t->topk_range) ||
      (p->sched.n > 0 && !t->inv_tau))
    return cp_error_set(CP_EARG, "cuda: attention call without its tables (cp_attn_tables_build)");
  return 0;
}

/* What the kernel's tile height bm decides on the host: each row's visible ranges, per tile
 * their union (a superset is safe: rows re-check), and per tile the union of its rows' top-k
 * ranges. */
typedef struct {
  int64_t n_tiles;
  int *rows; /* [n_q, 4] lo0, hi0, lo1, hi1 (empty: lo = hi) */
  int *tr;   /* [n_tiles, 2 * CPCU_MAX_TILE_RANGES] lo, hi pairs */
  int *tn;   /* [n_tiles] */
  int *tkt;  /* [n_tiles, 2] with top-k rows (tab.topk_any), else NULL */
} tile_plan;

static void tile_plan_free(tile_plan *tp) {
  free(tp->rows), free(tp->tr), free(tp->tn), free(tp->tkt);
  memset(tp, 0, sizeof *tp);
}

/* Tile t's rows' visible ranges into tp->rows, and their merged union into tp->tr / tp->tn;
 * ulo, uhi: scratch [2 bm]. */
static void tile_ranges(tile_plan *tp, const cp_attn_call *c, int bm, int64_t t, int64_t *ulo, int64_t *uhi) {
  int nu = 0;
  for (int64_t r = t * bm; r < min64((t + 1) * bm, c->n_q); r++) {
    int64_t lo[2] = {0, 0}, hi[2] = {0, 0};
    int nr = cp_plan_visible_ranges(c->plan, c->q_off + r, c->n_keys, lo, hi);
    for (int x = 0; x < 2; x++) {
      tp->rows[r * 4 + 2 * x] = x < nr ? (int)lo[x] : 0;
      tp->rows[r * 4 + 2 * x + 1] = x < nr ? (int)hi[x] : 0;
    }
    for (int x = 0; x < nr; x++) ulo[nu] = lo[x], uhi[nu++] = hi[x];
  }
  nu = cp_ranges_merge(ulo, uhi, nu);
  if (nu > CPCU_MAX_TILE_RANGES) { /* fold the tail into one covering range */
    uhi[CPCU_MAX_TILE_RANGES - 1] = uhi[nu - 1];
    nu = CPCU_MAX_TILE_RANGES;
  }
  int *tr = tp->tr + t * 2 * CPCU_MAX_TILE_RANGES;
  tp->tn[t] = nu;
  for (int x = 0; x < nu; x++) tr[2 * x] = (int)ulo[x], tr[2 * x + 1] = (int)uhi[x];
}

static int tile_plan_build(tile_plan *tp, const cp_attn_call *c, int bm) {
  const int64_t n_tiles = (c->n_q + bm - 1) / bm;
  int64_t *ulo = NULL, *uhi = NULL;
  int rc = 0;
  memset(tp, 0, sizeof *tp);
  tp->n_tiles = n_tiles;
  tp->rows = malloc((size_t)c->n_q * 4 * sizeof *tp->rows);
  tp->tr = malloc((size_t)n_tiles * 2 * CPCU_MAX_TILE_RANGES * sizeof *tp->tr);
  tp->tn = malloc((size_t)n_tiles * sizeof *tp->tn);
  ulo = malloc((size_t)2 * bm * sizeof *ulo);
  uhi = malloc((size_t)2 * bm * sizeof *uhi);
  CP_CHECK_ALLOC_GOTO(tp->rows && tp->tr && tp->tn && ulo && uhi, "cuda: attention plan");
  for (int64_t t = 0; t < n_tiles; t++) tile_ranges(tp, c, bm, t, ulo, uhi);
  if (c->tab.topk_any) {
    tp->tkt = calloc((size_t)n_tiles * 2, sizeof *tp->tkt);
    CP_CHECK_ALLOC_GOTO(tp->tkt, "cuda: attention plan");
    for (int64_t r = 0; r < c->n_q; r++) {
      const int lo = (int)c->tab.topk_range[2 * r], hi = (int)c->tab.topk_range[2 * r + 1];
      int *tt = tp->tkt + 2 * (r / bm);
      if (lo >= hi) continue;
      if (tt[0] >= tt[1]) tt[0] = lo, tt[1] = hi;
      if (lo < tt[0]) tt[0] = lo;
      if (hi > tt[1]) tt[1] = hi;
    }
  }
done:
  if (rc) tile_plan_free(tp);
  free(ulo);
  free(uhi);
  return rc;
}

/* q, k, v and the RoPE variants, as float or bfloat16; `resident`: they are device pointers
 * already (the CUDA engine), taken as they are. */
static int upload_tensors(dev_list *dl, cpcu_attn_args *a, const cp_attn_call *c, bool bf16, bool resident) {
  const size_t qn = (size_t)c->n_q * c->H * c->dh, kn = (size_t)c->n_keys * c->Hkv * c->dh;
  const put_as as = bf16 ? PUT_BF16 : PUT_RAW;
  const bool topk = c->tab.topk_any;
  int rc;
  if (resident) {
    a->q = c->q, a->q_far = c->q_far, a->k = c->k, a->v = c->v;
    a->k_raw = c->q_far || (topk && c->q_topk) ? c->k_raw : NULL;
    a->q_topk = topk ? c->q_topk : NULL;
    return 0;
  }
  if ((rc = dev_put(dl, &a->q, c->q, qn * sizeof(float), as)) ||
      (rc = dev_put(dl, &a->q_far, c->q_far, qn * sizeof(float), as)) ||
      (rc = dev_put(dl, &a->k, c->k, kn * sizeof(float), as)) ||
      (rc = dev_put(dl, &a->v, c->v, kn * sizeof(float), as)) ||
      (rc = dev_put(dl, &a->k_raw, c->q_far || (topk && c->q_topk) ? c->k_raw : NULL, kn * sizeof(float), as)) ||
      (rc = dev_put(dl, &a->q_topk, topk ? c->q_topk : NULL, qn * sizeof(float), as)))
    return rc;
  return 0;
}

/* The row and tile ranges, the clamped distances, the rows' 1/tau under a schedule and the top-k
 * rows. */
static int upload_ranges(dev_list *dl, cpcu_attn_args *a, const cp_attn_call *c, const tile_plan *tp) {
  const int64_t n_q = c->n_q;
  const void *p;
  int rc;
  if ((rc = dev_put(dl, &p, tp->rows, (size_t)n_q * 4 * sizeof *tp->rows, PUT_RAW))) return rc;
  a->row_ranges = p;
  if ((rc = dev_put(dl, &p, tp->tr, (size_t)tp->n_tiles * 2 * CPCU_MAX_TILE_RANGES * sizeof *tp->tr, PUT_RAW)))
    return rc;
  a->tile_ranges = p;
  if ((rc = dev_put(dl, &p, tp->tn, (size_t)tp->n_tiles * sizeof *tp->tn, PUT_RAW))) return rc;
  a->tile_nranges = p;
  if ((rc = dev_put(dl, &p, c->tab.dprime, (size_t)c->n_keys * sizeof(int64_t), PUT_I32))) return rc;
  a->dprime = p;
  if ((rc = dev_put(dl, &p, c->tab.inv_tau, (size_t)n_q * sizeof(float), PUT_RAW))) return rc;
  a->row_inv_tau = p;
  if (!c->tab.topk_any) return 0;
  a->topk_k = c->plan->k;
  if ((rc = dev_put(dl, &p, c->tab.topk_range, (size_t)n_q * 2 * sizeof(int64_t), PUT_I32))) return rc;
  a->topk_rows = p;
  if ((rc = dev_put(dl, &p, tp->tkt, (size_t)tp->n_tiles * 2 * sizeof *tp->tkt, PUT_RAW))) return rc;
  a->topk_tile = p;
  if ((rc = dev_put(dl, &p, c->tab.topk_bias, (size_t)c->H * n_q * sizeof(float), PUT_RAW))) return rc;
  a->topk_bias = p;
  return 0;
}

/* The positional term's tables: T5 buckets and bias table, ALiBi slopes and divisors, FIRE MLP. */
static int upload_pos(dev_list *dl, cpcu_attn_args *a, const cp_attn_call *c) {
  const void *p;
  int rc;
  if (c->pos == CP_ATTN_POS_T5) {
    const size_t nbucket = c->plan->causal ? (size_t)c->n_keys : (size_t)(2 * c->n_keys - 1);
    if ((rc = dev_put(dl, &p, c->tab.t5_bucket, nbucket * sizeof(int), PUT_RAW))) return rc;
    a->t5_bucket = p;
    if ((rc = dev_put(dl, &p, c->t5_table, (size_t)c->t5_num_buckets * c->H * sizeof(float), PUT_RAW))) return rc;
    a->t5_table = p;
    a->t5_nb = c->t5_num_buckets;
  }
  if (c->pos == CP_ATTN_POS_ALIBI) {
    if ((rc = dev_put(dl, &p, c->slopes, (size_t)c->H * sizeof(double), PUT_RAW))) return rc;
    a->slopes = p;
    if ((rc = dev_put(dl, &p, c->tab.alibi_div, (size_t)c->n_q * sizeof(double), PUT_RAW))) return rc;
    a->alibi_div = p;
  }
  if (c->pos == CP_ATTN_POS_FIRE) {
    const cp_fire_mlp *f = c->fire;
    const size_t W = (size_t)f->width;
    if ((rc = dev_put(dl, &p, f->w1, W * sizeof(float), PUT_RAW))) return rc;
    a->fire_w1 = p;
    if ((rc = dev_put(dl, &p, f->b1, W * sizeof(float), PUT_RAW))) return rc;
    a->fire_b1 = p;
    if (f->layers == 2) {
      if ((rc = dev_put(dl, &p, f->wm, W * W * sizeof(float), PUT_RAW))) return rc;
      a->fire_wm = p;
      if ((rc = dev_put(dl, &p, f->bm, W * sizeof(float), PUT_RAW))) return rc;
      a->fire_bm = p;
    }
    if ((rc = dev_put(dl, &p, f->w2, (size_t)c->H * W * sizeof(float), PUT_RAW))) return rc;
    a->fire_w2 = p;
    if ((rc = dev_put(dl, &p, f->b2, (size_t)c->H * sizeof(float), PUT_RAW))) return rc;
    a->fire_b2 = p;
    a->fire_width = f->width, a->fire_layers = f->layers == 2 ? 2 : 1, a->fire_c = f->c, a->fire_L = c->tab.fire_L;
  }
  return 0;
}

/* The outputs' device buffers: out (unless resident: c->out is the engine's device array) and the
 * row statistics the call asks for. */
static int take_outputs(dev_list *dl, cpcu_attn_args *a, const cp_attn_call *c, bool resident) {
  const size_t qn = (size_t)c->n_q * c->H * c->dh, sn = (size_t)c->H * c->n_q;
  int rc;
  if (resident) a->out = c->out;
  if ((!resident && (rc = dev_out(dl, &a->out, c->out, qn * sizeof(float)))) ||
      (rc = dev_out(dl, &a->row_pmax, c->row_pmax, sn * sizeof(float))) ||
      (rc = dev_out(dl, &a->row_ent, c->row_ent, sn * sizeof(float))) ||
      (rc = dev_out(dl, &a->row_lstd, c->row_lstd, sn * sizeof(float))))
    return rc;
  return 0;
}

/* Runs the kernel on the uploaded call and copies the outputs back into c's host arrays, each
 * download waiting for the stream (the per-call path of cp_cuda_attention). */
static int run_kernel(dev_list *dl, cpcu_attn_args *a, const cp_attn_call *c, const cp_cuda_opts *o) {
  const cpcu_backend *be = dl->be;
  const size_t qn = (size_t)c->n_q * c->H * c->dh, sn = (size_t)c->H * c->n_q;
  char why[256] = "";
  if (be->attention(a, o ? o->bench_reps : 0, o ? o->bench_ms : NULL, why, sizeof why))
    return cp_error_set(CP_ECUDA, "cuda: %s", why);
  void *s = dl->stream;
  if (be->download(c->out, a->out, qn * sizeof(float), s, why, sizeof why) ||
      (c->row_pmax && be->download(c->row_pmax, a->row_pmax, sn * sizeof(float), s, why, sizeof why)) ||
      (c->row_ent && be->download(c->row_ent, a->row_ent, sn * sizeof(float), s, why, sizeof why)) ||
      (c->row_lstd && be->download(c->row_lstd, a->row_lstd, sn * sizeof(float), s, why, sizeof why)))
    return cp_error_set(CP_ECUDA, "cuda: %s", why);
  return 0;
}

/* The resident call's kernel, queued; the statistics it asks for come back through bufs' pinned
 * host memory with copies queued behind it and one wait, and no wait at all without statistics
 * (the engine's next wait reports a failure). */
static int run_resident(dev_list *dl, cpcu_attn_args *a, const cp_attn_call *c) {
  const cpcu_backend *be = dl->be;
  const size_t sn = (size_t)c->H * c->n_q;
  float *const dst[3] = {c->row_pmax, c->row_ent, c->row_lstd};
  const float *const src[3] = {a->row_pmax, a->row_ent, a->row_lstd};
  float *pinned = dl->bufs->host;
  char why[256] = "";
  int n = 0;
  if (be->attention(a, 0, NULL, why, sizeof why)) return cp_error_set(CP_ECUDA, "cuda: %s", why);
  for (int x = 0; x < 3; x++)
    if (dst[x] && be->download_async(pinned + (size_t)n++ * sn, src[x], sn * sizeof(float), dl->stream, why, sizeof why))
      return cp_error_set(CP_ECUDA, "cuda: %s", why);
  if (n == 0) return 0;
  if (be->sync(dl->stream, why, sizeof why)) return cp_error_set(CP_ECUDA, "cuda: %s", why);
  for (int x = 0, k = 0; x < 3; x++)
    if (dst[x]) memcpy(dst[x], pinned + (size_t)k++ * sn, sn * sizeof(float));
  return 0;
}

/* Grows one buffer to at least `need` bytes; a buffer that grows at least doubles, so a generation
 * (one key more each step) regrows it a logarithmic number of times. The old buffer is freed
 * first: its last user is on this stream, and cudaFree waits for the device. */
static int buf_reserve(void **p, size_t *cap, long *grows, size_t need, int (*alloc)(void **, size_t, char *, size_t),
                       void (*release)(void *)) {
  char why[256] = "";
  if (need <= *cap) return 0;
  const size_t want = need > 2 * *cap ? need : 2 * *cap;
  release(*p);
  *p = NULL, *cap = 0;
  if (alloc(p, want, why, sizeof why)) return cp_error_set(CP_ECUDA, "cuda: %s", why);
  *cap = want;
  (*grows)++;
  return 0;
}

/* Device and pinned host buffers of at least `dev` and `host` bytes. */
static int bufs_reserve(const cpcu_backend *be, cp_cuda_attn_bufs *b, size_t dev, size_t host) {
  int rc = buf_reserve(&b->dev, &b->dev_cap, &b->grows, dev, be->alloc, be->release);
  return rc ? rc : buf_reserve(&b->host, &b->host_cap, &b->grows, host, be->host_alloc, be->host_release);
}

void cp_cuda_attn_bufs_free(const cpcu_backend *be, cp_cuda_attn_bufs *b) {
  if (!b) return;
  be->release(b->dev);
  be->host_release(b->host);
  memset(b, 0, sizeof *b);
}

/* Every device buffer of the call (uploads, outputs) through dl. */
static int place_call(dev_list *dl, cpcu_attn_args *a, const cp_attn_call *c, const tile_plan *tp, bool bf16,
                      bool resident) {
  int rc;
  if ((rc = upload_tensors(dl, a, c, bf16, resident)) || (rc = upload_ranges(dl, a, c, tp)) ||
      (rc = upload_pos(dl, a, c)) || (rc = take_outputs(dl, a, c, resident)))
    return rc;
  return 0;
}

static int attention_on(const cpcu_backend *be, const cp_attn_call *c, const cp_cuda_opts *opts, bool resident,
                        void *stream, cp_cuda_attn_bufs *bufs) {
  int rc = check_call(c);
  if (rc || c->n_q == 0) return rc;
  const bool bf16 = !resident && opts && opts->bf16;
  dev_list dl = {be, stream, bufs, bufs != NULL, 0, {0}, 0};
  tile_plan tp;
  cpcu_attn_args a;
  memset(&a, 0, sizeof a);
  a.H = c->H, a.Hkv = c->Hkv, a.dh = c->dh;
  a.n_q = (int)c->n_q, a.n_keys = (int)c->n_keys, a.q_off = (int)c->q_off;
  a.causal = c->plan->causal;
  a.bf16 = bf16;
  a.pos = c->pos;
  a.scale = c->scale, a.inv_tau = c->plan->inv_tau, a.softcap = c->softcap;
  a.stream = stream;
  assert(CP_CUDA_ROW_ALIGN % be->tile_rows(c->dh) == 0); /* a shared prefix starts on a tile (cp_engine_cache) */
  if ((rc = tile_plan_build(&tp, c, be->tile_rows(c->dh)))) return rc;
  if (bufs) { /* measure, make room, then place the call for real */
    const size_t stats = (size_t)3 * c->H * c->n_q * sizeof(float);
    if (!(rc = place_call(&dl, &a, c, &tp, bf16, resident)) &&
        !(rc = bufs_reserve(be, bufs, dl.used, c->row_pmax || c->row_ent || c->row_lstd ? stats : 0))) {
      dl.measure = false, dl.used = 0;
      if (!(rc = place_call(&dl, &a, c, &tp, bf16, resident))) rc = run_resident(&dl, &a, c);
    }
  } else if (!(rc = place_call(&dl, &a, c, &tp, bf16, resident))) {
    rc = run_kernel(&dl, &a, c, opts);
  }
  for (int x = 0; x < dl.n; x++) be->release(dl.p[x]);
  tile_plan_free(&tp);
  return rc;
}

int cp_cuda_attention_on(const cpcu_backend *be, const cp_attn_call *c, const cp_cuda_opts *opts) {
  return attention_on(be, c, opts, false, NULL, NULL);
}

int cp_cuda_attention_resident(const cpcu_backend *be, const cp_attn_call *c, void *stream,
                               cp_cuda_attn_bufs *bufs) {
  return attention_on(be, c, NULL, true, stream, bufs);
}
