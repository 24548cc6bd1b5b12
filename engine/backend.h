/* Internal to engine/: the seam between the engine's passes, written once, and a backend that
 * supplies the primitives. engine/engine.c holds the cp_engine object (its rule, backend and
 * statistics tables); engine/engine_run.c the passes: input checks, the T5 encoder run, the
 * cross-attention caches, the one-shot forward, the KV-cached generation, each layer's residual
 * layout (cp_layer_run of ctxpatch/model/layer_layout.h over the backend's pieces) and the
 * logits' finite check. A backend supplies memory, the embedding, a layer's norms, attention
 * modules, residual sums and FFN, the final norm and head: the CPU (engine/engine_cpu.c: host
 * buffers and the thread pool) and CUDA (engine/cuda/engine_cuda.c: device buffers, cuBLAS and the
 * kernels) each implement the ops table below, as import/'s formats implement cp_ckpt_ops.
 *
 * A backend borrows the model, the rule and the rule model of its owner (cp_engine_set_rule
 * changes what it sees) and reports each attention module's per-row statistics back through
 * cp_engine_record_stats. Buffers and caches (cp_pass, cp_kv) live in the backend's memory and are
 * allocated by engine_run.c through the backend's alloc and free. */
#ifndef CTXPATCH_ENGINE_BACKEND_H
#define CTXPATCH_ENGINE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/engine/attn_call.h"
#include "ctxpatch/engine/engine.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/model/layer_layout.h"
#include "ctxpatch/model/rule.h"

/* One layer's cache: keys (rotated for RoPE), values, and the unrotated keys where the rule needs
 * them (cp_engine_rope_needs_raw). */
typedef struct {
  float *k, *v, *k_raw; /* [cap, Hkv*dh] */
  int64_t cap;
  bool ready; /* cross-attention caches: filled once per encoder output */
} cp_kv;

/* What T5's decoder attends to across: the encoder's final states and one cache per decoder layer,
 * projected on first use. */
typedef struct {
  const float *enc; /* [n_enc, D] */
  int64_t n_enc;
  cp_kv *kv; /* [decoder layers] */
} cp_cross;

/* One pass's activations for up to n rows. */
typedef struct {
  int64_t n;
  float *x, *h, *tmp;                   /* [n, D] */
  float *q, *qraw, *qfar, *qtopk, *att; /* [n, H*dh]; qraw, qfar, qtopk only where a RoPE layer keeps raw keys */
  float *up, *gate;                     /* [min(n, ffn_chunk), d_ff]; gate only for gated FFNs */
  int64_t *ids;                         /* [n], device backends: the ids the embedding reads */
  int64_t head_rows;
  float *logits; /* [head_rows, V], device backends: the head's output before it is copied out */
} cp_pass;

/* One attention module's call within a pass: which stack, layer and attention, the n rows at
 * positions q_off.., and what they attend to. */
typedef struct {
  const cp_stack *st;
  int layer;
  cp_attn_kind kind;
  int64_t n, q_off, last_prompt_row;
  cp_kv *kv;             /* self-attention: the cache the rows' keys and values are appended to */
  const cp_cross *cross; /* cross-attention: the encoder's states and caches */
  cp_pass *p;
  bool collect; /* report the module's statistics (cp_engine_record_stats) */
} cp_module_call;

/* Each call returns 0 or a negative CP_E* code with the error set; `be` is the backend's own. */
typedef struct {
  /* threads: the CPU's workers (0: every CPU). */
  int (*create)(void **be, cp_engine *owner, const cp_model *m, const cp_rule *rule, const cp_rule_model *rm,
                int threads);
  void (*destroy)(void *be);
  /* "cpu", or "cuda: NAME (compute capability X.Y), driver A.B, runtime C.D": borrowed from be. */
  const char *(*describe)(const void *be);
  /* Refuses a run of these sizes (inputs checked, T5's decoder length resolved, 0 for a forward's
   * n_new) that cannot fit; NULL where every run that the host can allocate fits. */
  int (*reserve)(void *be, int64_t n_ids, int64_t n_dec, int64_t n_new);
  /* a x b elements of elem bytes (product checked), or NULL with the error set; free takes NULL. */
  void *(*alloc)(void *be, int64_t a, int64_t b, size_t elem);
  void (*free)(void *be, void *p);
  /* Waits for the queued work, before its buffers are freed; `what` names it in the error, NULL
   * when cleaning up (wait, keep the error already set). NULL where nothing is queued. */
  int (*sync)(void *be, const char *what);
  bool device;   /* the memory is not the host's: passes carry ids and logits */
  int ffn_chunk; /* FFN hidden rows held at once (cp_pass.up, gate) */
  /* Rows a reused prefix is a multiple of (cp_engine_cache): every row-blocked operation of a
   * pass (GEMM tiles, attention row tiles, FFN chunks) starts its blocks at multiples of it from the
   * pass's first row, so a pass from a multiple computes each row with the operations, operands and
   * shapes of a pass from 0. */
  int row_align;
  /* p->x [n, D] = the embeddings of ids [n] (host, checked) at positions q_off.., times the model's
   * embed_scale (Gemma), through the embedding norm where the model has one. */
  int (*embed)(void *be, cp_pass *p, const int64_t *ids, int64_t n, int64_t q_off);
  /* The pieces of one layer, which engine_run.c runs in the model's residual layout
   * (cp_layer_run) over a pass's x, h and tmp ([n, D] each): layer `layer` of st's norm `which`
   * of x into y (y may be x); one attention module of hin into out; y = a + b and dst = src over
   * `count` floats; dst += the layer's FFN of h (dst = it without `accumulate`), through p->up and p->gate. */
  int (*norm)(void *be, const cp_stack *st, int layer, cp_layer_norm which, const float *x, float *y, int64_t n);
  int (*attention)(void *be, const cp_module_call *c, const float *hin, float *out);
  int (*add)(void *be, float *y, const float *a, const float *b, int64_t count);
  int (*copy)(void *be, float *dst, const float *src, int64_t count);
  int (*ffn_add)(void *be, cp_pass *p, const cp_stack *st, int layer, const float *h, float *dst, int64_t n,
                 bool accumulate);
  /* x[count] *= f (Granite's residual multiplier on a module's output). */
  int (*scale)(void *be, float *x, int64_t count, float f);
  /* dst [n, D] (backend memory) = st's final norm of p->x. */
  int (*final_norm)(void *be, cp_pass *p, const cp_stack *st, float *dst, int64_t n);
  /* logits [n - r0, V] (host) = the output head of st's final norm of rows [r0, n) of p->x. */
  int (*head)(void *be, cp_pass *p, const cp_stack *st, int64_t n, int64_t r0, float *logits);
  /* llama.cpp's context shift on one layer's cache (cp_engine_shift): rows [keep + discard, n_past)
   * move to keep.., their RoPE keys rotated by -discard. NULL where the backend has none. */
  int (*kv_shift)(void *be, cp_kv *kv, int64_t keep, int64_t discard, int64_t n_past);
} cp_backend_ops;

/* The CPU backend (engine/engine_cpu.c). */
extern const cp_backend_ops cp_cpu_engine_ops;
/* The CUDA backend (engine/cuda/engine_cuda.c): linked into libctxpatch with CTXPATCH_WITH_CUDA,
 * and into tests/test_cuda_engine_emulated against the host shim of tests/cuda_shim/. */
extern const cp_backend_ops cp_cuda_engine_ops;

/* cp_engine_create on the given backend (NULL: the CPU; the CUDA build passes cp_cuda_engine_ops
 * when params->device is CP_DEVICE_CUDA; the emulation test passes its own build of it). */
int cp_engine_create_on(cp_engine **out, const cp_model *model, const cp_rule *rule, const cp_engine_params *params,
                        const cp_backend_ops *backend);

/* Statistics of an attention call of a module with cp_module_call.collect: cp_engine_stats_rows
 * points the call's row_pmax, row_ent and (where the owner keeps them) row_lstd at host arrays
 * [H, n_q] in its scratch, for the kernel to fill; cp_engine_record_stats then adds them to the
 * owner's tables as module (plan->kind, plan->layer). */
int cp_engine_stats_rows(const cp_engine *owner, cp_attn_call *a);
void cp_engine_record_stats(cp_engine *owner, const cp_attn_call *a);

/* CP_EMODEL_NONFINITE naming the first row and head of q, k or v (`what`) with a NaN or Inf: the
 * one refusal both backends give (engine_cpu.c). */
int cp_engine_nonfinite_error(int layer, int head, int64_t row, const char *what);

/* Whether a RoPE layer's keys must also be kept unrotated (a ceiling or top-k in its plan). */
bool cp_engine_rope_needs_raw(const cp_model *m, const cp_rule *rule, const cp_rule_model *rm, cp_attn_kind kind,
                              int layer);

/* Every weight array the CUDA engine uploads, in upload order: fn(ctx, host array, its dtype,
 * elements). Matrices may be F16/BF16 or GGUF blocks as stored (cp_model_open_stored). A tensor
 * shared by two uses (tied embeddings) is passed each time; callers keep it once. */
typedef void (*cp_cuda_weight_fn)(void *ctx, const void *w, cp_dtype dtype, size_t count);
void cp_cuda_for_each_weight(const cp_model *m, cp_cuda_weight_fn fn, void *ctx);
/* The dtype a weight stored as `stored` has on the device: F16, BF16 and the GGUF blocks (Q8_0,
 * Q4_0, Q4_K) stay as stored (widened on the device per GEMM), the rest is F32. */
cp_dtype cp_cuda_device_dtype(cp_dtype stored);
/* Floats of the scratch a 16-bit or block matrix's rows are widened into before their GEMM (0 when
 * the device holds none): the largest such layer matrix (or, with none, at most
 * CP_CUDA_WIDEN_HEAD floats of such an LM head), at least D; a larger head runs in blocks of rows
 * that fit. */
uint64_t cp_cuda_widen_floats(const cp_model *m);
enum { CP_CUDA_WIDEN_HEAD = 1 << 22 };
/* The CUDA engine's pass sizes, one definition for the engine and cp_cuda_engine_bytes. */
enum { CP_CUDA_FFN_CHUNK = 256 }; /* FFN hidden rows held at once (as CP_OPS_FFN_CHUNK) */
/* Rows of one cuBLAS GEMM: a longer product runs in blocks of this many, so that a row's product has
 * the same shape (hence the same algorithm and summation order) whichever row a pass starts from at
 * a multiple of CP_CUDA_ROW_ALIGN (the CUDA backend's row_align; attention tiles are 16 or 32 rows). */
enum { CP_CUDA_GEMM_ROWS = 256, CP_CUDA_ROW_ALIGN = 256 };

#endif
