/* Internal to engine/: the seam between the engine interface (include/ctxpatch/engine/engine.h,
 * engine/engine_cpu.c) and an engine on another device (engine/cuda/engine_cuda.c). cp_engine keeps
 * the rule, the input checks and the statistics tables; with params.device CUDA it hands every
 * forward and generation, inputs already checked (T5's default decoder input resolved), to the
 * device engine, which reports each attention module's per-row statistics back through
 * cp_engine_record_device_stats. The device engine borrows the model, the rule and the rule
 * model of its owner (cp_engine_set_rule changes what it sees). */
#ifndef CTXPATCH_ENGINE_DEVICE_ENGINE_H
#define CTXPATCH_ENGINE_DEVICE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/import/model.h"
#include "ctxpatch/model/rule.h"
#include "ctxpatch/engine/engine.h"

typedef struct cp_device_engine cp_device_engine;

typedef struct {
  /* logit_stats: the owner keeps logit standard deviations too. */
  int (*create)(cp_device_engine **out, cp_engine *owner, const cp_model *m, const cp_rule *rule,
                const cp_rule_model *rm, bool logit_stats);
  void (*destroy)(cp_device_engine *d);
  /* As cp_engine_forward / cp_engine_generate; `collect`: report statistics (forward only). */
  int (*forward)(cp_device_engine *d, float *logits /* [rows, vocab] or NULL */, const int64_t *ids, int64_t n_ids,
                 const int64_t *dec_ids, int64_t n_dec, bool collect);
  int (*generate)(cp_device_engine *d, int64_t *out /* [n_new] */, int64_t *n_out,
                  float *step_logits /* [n_new, vocab] or NULL */, const int64_t *ids, int64_t n_ids,
                  const int64_t *dec_ids, int64_t n_dec, int n_new, bool stop_at_eos);
  /* "cuda: NAME (compute capability X.Y), driver A.B, runtime C.D": borrowed from d. */
  const char *(*describe)(const cp_device_engine *d);
} cp_device_ops;

/* The CUDA engine (engine/cuda/engine_cuda.c): linked into libctxpatch with CTXPATCH_WITH_CUDA, and
 * into tests/test_cuda_engine_emulated against the host shim of tests/cuda_shim/. */
extern const cp_device_ops cp_cuda_engine_ops;

/* cp_engine_create with the given device engine (the CUDA build passes cp_cuda_engine_ops when
 * params->device is CP_DEVICE_CUDA; the emulation test passes its own build of it). */
int cp_engine_create_on(cp_engine **out, const cp_model *model, const cp_rule *rule, const cp_engine_params *params,
                        const cp_device_ops *dev);

/* Per-row statistics of one attention module of the running forward: row_pmax, row_ent and
 * (when the owner keeps them) row_lstd are host arrays [H, n_q]. */
void cp_engine_record_device_stats(cp_engine *owner, cp_attn_kind kind, int layer, const float *row_pmax,
                                   const float *row_ent, const float *row_lstd, int64_t n_q);
/* Whether the owner keeps logit standard deviations (row_lstd is needed). */
bool cp_engine_wants_logit_std(const cp_engine *owner);

/* Every weight array the CUDA engine uploads, in upload order: fn(ctx, host array, its dtype,
 * elements). Matrices may be F16/BF16 as stored (cp_model_open_stored); the engine widens them to
 * F32 on upload. A tensor shared by two uses (tied embeddings) is passed each time; callers keep
 * it once. */
typedef void (*cp_cuda_weight_fn)(void *ctx, const void *w, cp_dtype dtype, size_t count);
void cp_cuda_for_each_weight(const cp_model *m, cp_cuda_weight_fn fn, void *ctx);
/* The CUDA engine's pass sizes, one definition for the engine and cp_cuda_engine_bytes. */
enum { CP_CUDA_FFN_CHUNK = 256 }; /* FFN hidden rows held at once (as CP_OPS_FFN_CHUNK) */

#endif
