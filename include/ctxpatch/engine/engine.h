/* Floor: engine. CPU float32 reference engine: forward passes, greedy decoding with a KV cache, and attention
 * statistics, for every model family and any attention rule (../shared/spec/attention-rules.md,
 * docs/attention-decisions.md; every rule decision comes from ctxpatch/rule.h).
 *
 * Weights are read in the dtype the model holds them in (cp_linear.dtype, model.h): float32, or
 * F16/BF16 or GGUF Q8_0/Q4_0/Q4_K blocks as stored (cp_model_open_stored), widened (decoded)
 * [256 x 512] tile by tile into a per-thread scratch inside each matrix product, so no float32
 * copy of the model exists. Activations, the
 * KV cache, attention and every sum are float32. (Debian's OpenBLAS 0.3.21 exports no
 * cblas_sbgemm; it would also round the activations to BF16.)
 *
 * Attention streams over key blocks with an online softmax, so memory grows with the sequence
 * length L, not L^2; rows under a Lambda mask visit only their global prefix and local window
 * (plus their top-k middle keys). Matrix products use OpenBLAS; the engine's own threads split
 * them and the attention. OpenBLAS itself is set to one thread (openblas_set_num_threads(1),
 * process-wide) so that the two thread pools never compete for cores.
 *
 * An engine borrows its model (which must outlive it) and copies the rule.
 */
#ifndef CTXPATCH_ENGINE_H
#define CTXPATCH_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "ctxpatch/import/model.h"
#include "ctxpatch/model/rule.h"

/* Where the engine runs: the CPU (default), or the CUDA engine (engine/cuda/engine_cuda.c; builds
 * with -DCTXPATCH_CUDA=ON only: elsewhere cp_engine_create refuses it with CP_EUNSUPPORTED, and
 * without a device with CP_ECUDA). Both give the same results within the goldens' tolerance. */
typedef enum { CP_DEVICE_CPU = 0, CP_DEVICE_CUDA = 1 } cp_device;

/* llama.cpp's context shift, emulated (docs/gguf.md "llama.cpp's own options, side by side"):
 * with n_ctx > 0 every pass runs through a KV cache of n_ctx cells, the tokens fed in batches of
 * `batch`; before a batch that would fill it (n_past + batch >= n_ctx, llama.cpp's
 * tools/main/main.cpp) the first n_keep cells stay, the n_discard = (n_past - n_keep) / 2 after
 * them are removed and the rest move down n_discard positions, their cached keys re-rotated by
 * -n_discard (llama_memory_seq_rm, then llama_memory_seq_add). Each row's logits are those of the
 * cache as it stood when its batch ran. Decoder-only RoPE models on the CPU engine, under a rule
 * that keeps no unrotated keys (no ceiling, no top-k); otherwise cp_engine_create refuses with
 * CP_EUNSUPPORTED. n_keep counts every kept token: llama-cli's --keep N keeps N after its BOS. */
typedef struct {
  int64_t n_ctx;  /* 0: off (default) */
  int64_t n_keep; /* 0 <= n_keep; n_keep + batch must leave room after a shift (checked per shift) */
  int64_t batch;  /* tokens per evaluation, >= 1 */
} cp_engine_shift;

typedef struct {
  cp_device device; /* CP_DEVICE_CPU (default) */
  int threads; /* worker threads; 0 = every online CPU (default) */
  bool stats;  /* collect attention statistics in cp_engine_forward (default false) */
  bool logit_stats; /* with stats: also the logit standard deviation (calibration's closed forms) */
  cp_engine_shift shift; /* llama.cpp's context shift (off by default); forward, forward_blocks and
                            generate run through it, and cp_engine_cache_create refuses */
} cp_engine_params;

void cp_engine_params_init(cp_engine_params *p);

typedef struct cp_engine cp_engine;

/* Checks the rule against the model (cp_rule_check_model) and starts the threads.
 * `rule` NULL means the identity. The caller owns *out (cp_engine_free). */
int cp_engine_create(cp_engine **out, const cp_model *model, const cp_rule *rule,
                     const cp_engine_params *params);
void cp_engine_free(cp_engine *e);

/* What the engine runs on: "cpu", or "cuda: NAME (compute capability X.Y), driver A.B, runtime
 * C.D". Borrowed from the engine. */
const char *cp_engine_device(const cp_engine *e);

/* Replaces the engine's rule (NULL: the identity, or the model's metadata rule) with the checks
 * of cp_engine_create: a non-identity rule on a patched artifact is CP_ERULE_MODEL, and the
 * rule is checked against the model. Keeps the threads and statistics tables, so a caller
 * that sweeps rules (calibration) needs one engine. On error the previous rule stays. */
int cp_engine_set_rule(cp_engine *e, const cp_rule *rule);

/* Number of rows cp_engine_forward writes: n_dec for T5 (the decoder's positions), else n_ids. */
int64_t cp_engine_output_rows(const cp_engine *e, int64_t n_ids, int64_t n_dec);

/* One forward pass. `ids` [n_ids]: the prompt (decoder-only) or the encoder input (T5);
 * `dec_ids` [n_dec]: T5's decoder input (ignored otherwise; NULL/0 for T5 means
 * [decoder_start_token_id], or [pad_token_id] when the config has none). Writes the logits of
 * every position of the last stack to `logits` [rows, vocab] (rows = cp_engine_output_rows)
 * unless NULL. Bad ids: CP_EMODEL_INPUT. With params.stats the statistics of this pass replace
 * the previous ones. */
int cp_engine_forward(cp_engine *e, float *logits /* [rows, vocab] */, const int64_t *ids,
                      int64_t n_ids, const int64_t *dec_ids, int64_t n_dec);

/* cp_engine_forward without the [rows, vocab] array: the logits come in blocks of at most
 * CP_ENGINE_LOGIT_BLOCK rows, in row order, each handed to fn(ctx, logits [n_rows, vocab], row0,
 * n_rows) and then overwritten, so memory is one block whatever the length and vocabulary (the
 * ppl probe at 32K tokens x 256K vocabulary would otherwise hold 32 GiB). fn returns 0 or a
 * negative cp_err, which stops the pass and is returned. */
enum { CP_ENGINE_LOGIT_BLOCK = 32 };
typedef int (*cp_engine_logits_fn)(void *ctx, const float *logits /* [n_rows, vocab] */, int64_t row0,
                                   int64_t n_rows);
int cp_engine_forward_blocks(cp_engine *e, cp_engine_logits_fn fn, void *ctx, const int64_t *ids, int64_t n_ids,
                             const int64_t *dec_ids, int64_t n_dec);

/* Greedy continuation (argmax, first index on ties) of the prompt (decoder-only) or of dec_ids
 * given the encoder input ids (T5), computed step by step with the KV cache. Writes up to
 * n_new ids to out[0..*n_out); with stop_at_eos it stops after emitting eos_token_id.
 * step_logits, unless NULL, receives the logits each id was chosen from ([*n_out, vocab]). */
int cp_engine_generate(cp_engine *e, int64_t *out /* [n_new] */, int64_t *n_out,
                       float *step_logits /* [n_new, vocab] or NULL */, const int64_t *ids,
                       int64_t n_ids, const int64_t *dec_ids, int64_t n_dec, int n_new,
                       bool stop_at_eos);

/* A KV cache kept across greedy generations, so that prompts which begin alike (the probes' prompts
 * of one length share their task line and filler up to the insertion point) compute those rows
 * once. cp_engine_generate_cached is cp_engine_generate, except that the rows of the longest common
 * prefix of `ids` with the prompt the cache last held are taken from the cache. Bit-identical
 * logits and outputs to cp_engine_generate (tests/test_engine_prefix.c): the prefix reused is
 * rounded down to a multiple of the backend's row blocks (128 rows on the CPU, 256 on CUDA) and
 * ends before the prompt's last row, so every row, reused or recomputed, went through the very
 * operations of a one-shot prefill (the same GEMM tiles, attention tiles and key blocks); rows
 * of a decode step or of a pass's last partial block are never reused.
 *
 * Refused with CP_EUNSUPPORTED and the reason (cp_engine_cache_create) where a prompt row's
 * result depends on more than the tokens up to it: T5 (its encoder is bidirectional; the prompt is
 * the encoder's input) and dynamic ALiBi (the slope divisor is the pass's key count, hence the
 * prompt's length). The cache borrows the engine, which must outlive it; a rule change
 * (cp_engine_set_rule) empties it. cap: the most tokens (prompt + n_new) a generation through it
 * may hold (a larger one is CP_EARG); the keys and values of cap rows are allocated at once. */
typedef struct cp_engine_cache cp_engine_cache;
int cp_engine_cache_create(cp_engine_cache **out, cp_engine *e, int64_t cap);
void cp_engine_cache_free(cp_engine_cache *c);
/* cp_engine_generate through the cache (decoder-only; no dec_ids). *reused (may be NULL): the
 * prompt rows taken from the cache instead of computed. */
int cp_engine_generate_cached(cp_engine_cache *c, int64_t *out /* [n_new] */, int64_t *n_out,
                              float *step_logits /* [n_new, vocab] or NULL */, const int64_t *ids, int64_t n_ids,
                              int n_new, bool stop_at_eos, int64_t *reused);

/* Attention statistics of the last cp_engine_forward with params.stats (spec "Attention
 * statistics"; module order of docs/attention-decisions.md item 3: encoder self-attention layers,
 * decoder self-attention layers, cross-attention layers). Borrowed from the engine; valid until
 * the next forward or cp_engine_free. n_modules is 0 before any such pass. */
typedef struct {
  int n_modules;
  int n_heads;
  const cp_attn_kind *kind; /* [n_modules] */
  const int *layer;         /* [n_modules], index within the stack */
  const float *pmax;        /* [n_modules, n_heads]: mean over rows of the row's max probability */
  const float *entropy;     /* [n_modules, n_heads]: mean over rows of -sum p ln p */
  const float *logit_std;   /* [n_modules, n_heads]: mean over rows of the standard deviation of
                               the row's logits as they enter the softmax (after tau, over the
                               visible keys); NULL unless params.logit_stats */
} cp_engine_stats;

void cp_engine_get_stats(cp_engine_stats *out, const cp_engine *e);
/* Mean P_max (want_entropy 0) or entropy (1) over the modules of one kind and all their heads,
 * summed in module then head order; NaN when there are none. */
double cp_engine_stats_mean(const cp_engine_stats *st, cp_attn_kind kind, int want_entropy);
const char *cp_attn_kind_name(cp_attn_kind kind); /* "encoder_self", "decoder_self", "cross" */

#endif
