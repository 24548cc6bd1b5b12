/* The engine's passes, written once over the backend's primitives (engine/backend.h): input checks,
 * the T5 encoder run, the cross-attention caches, the one-shot forward (whole logits or blocks of
 * rows), the KV-cached greedy generation. What runs on which device is the backend's; the order of
 * the work, the buffers and caches each pass holds and the checks on the logits are here. */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "engine/engine_int.h"

#define MAX_TOKENS ((int64_t)1 << 28)

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* A host array of a x b floats (rows of logits), or NULL with the error set. */
static float *host_floats(int64_t a, int64_t b) {
  size_t n;
  float *p = NULL;
  if (a < 0 || b < 0 || !cp_size_mul(&n, (size_t)a, (size_t)b)) {
    cp_error_set(CP_EOVERFLOW, "engine: buffer of %lld x %lld floats is too large", (long long)a, (long long)b);
    return NULL;
  }
  return CP_ARRAY_RESIZE(p, n ? n : 1, "engine: logits") ? NULL : p;
}

static float *backend_floats(const cp_engine *e, int64_t a, int64_t b) {
  return e->ops->alloc(e->be, a, b, sizeof(float));
}

/* ---------------------------------------------------------------- caches and buffers */

static void kv_free(const cp_engine *e, cp_kv *kv) {
  e->ops->free(e->be, kv->k);
  e->ops->free(e->be, kv->v);
  e->ops->free(e->be, kv->k_raw);
  memset(kv, 0, sizeof *kv);
}

static int kv_alloc(const cp_engine *e, cp_kv *kv, int64_t cap, bool raw) {
  const int width = e->m->n_kv_heads * e->m->d_head;
  memset(kv, 0, sizeof *kv);
  kv->cap = cap;
  if (!(kv->k = backend_floats(e, cap, width)) || !(kv->v = backend_floats(e, cap, width)) ||
      (raw && !(kv->k_raw = backend_floats(e, cap, width)))) {
    int rc = cp_error_code();
    kv_free(e, kv);
    return rc;
  }
  return 0;
}

static void pass_free(const cp_engine *e, cp_pass *p) {
  float *f[] = {p->x, p->h, p->tmp, p->q, p->qraw, p->qfar, p->qtopk, p->att, p->up, p->gate, p->logits};
  for (size_t i = 0; i < sizeof f / sizeof *f; i++) e->ops->free(e->be, f[i]);
  e->ops->free(e->be, p->ids);
  memset(p, 0, sizeof *p);
}

/* Buffers for passes of up to n rows. raw: some layer keeps unrotated RoPE keys
 * (cp_engine_rope_needs_raw), the only user of qraw, qfar and qtopk, three [n, H*dh] arrays that an
 * identity or temperature rule does not pay for. head_rows: the most rows one head call writes
 * (device backends hold them before the copy out). */
static int pass_alloc(const cp_engine *e, cp_pass *p, int64_t n, int64_t head_rows, bool raw) {
  const cp_model *m = e->m;
  const cp_backend_ops *o = e->ops;
  const int64_t qd = (int64_t)m->n_heads * m->d_head, chunk = min64(n, o->ffn_chunk);
  const bool rope = m->pos == CP_POS_ROPE && raw;
  memset(p, 0, sizeof *p);
  p->n = n;
  p->head_rows = head_rows;
  if (!(p->x = backend_floats(e, n, m->d_model)) || !(p->h = backend_floats(e, n, m->d_model)) ||
      !(p->tmp = backend_floats(e, n, m->d_model)) || !(p->q = backend_floats(e, n, qd)) ||
      (rope && (!(p->qraw = backend_floats(e, n, qd)) || !(p->qfar = backend_floats(e, n, qd)) ||
                !(p->qtopk = backend_floats(e, n, qd)))) ||
      !(p->att = backend_floats(e, n, qd)) || !(p->up = backend_floats(e, chunk, m->d_ff)) ||
      (m->gated_ffn && !(p->gate = backend_floats(e, chunk, m->d_ff))) ||
      (o->device && (!(p->ids = o->alloc(e->be, n, 1, sizeof *p->ids)) ||
                     (head_rows > 0 && !(p->logits = backend_floats(e, head_rows, m->vocab)))))) {
    int rc = cp_error_code();
    pass_free(e, p);
    return rc;
  }
  return 0;
}

static bool any_layer_needs_raw(const cp_engine *e, const cp_stack *st, cp_attn_kind kind) {
  for (int l = 0; l < st->n_layers; l++)
    if (cp_engine_rope_needs_raw(e->m, &e->rule, &e->rm, kind, l)) return true;
  return false;
}

/* ---------------------------------------------------------------- stacks */

/* One layer's state for the residual layout's ops (ctxpatch/model/layer_layout.h): the slots are
 * the pass's x, h and tmp; each op is the backend's. */
typedef struct {
  const cp_engine *e;
  cp_module_call call; /* the layer's self-attention */
} layer_ctx;

static float *slot(const layer_ctx *c, cp_slot s) {
  return s == CP_SLOT_X ? c->call.p->x : s == CP_SLOT_H ? c->call.p->h : c->call.p->tmp;
}
static int op_norm(void *ctx, cp_layer_norm which, cp_slot dst, cp_slot src) {
  const layer_ctx *c = ctx;
  return c->e->ops->norm(c->e->be, c->call.st, c->call.layer, which, slot(c, src), slot(c, dst), c->call.n);
}
static int op_attn(void *ctx, bool cross, cp_slot dst, cp_slot src) {
  const layer_ctx *c = ctx;
  cp_module_call call = c->call;
  if (cross) call.kind = CP_ATTN_CROSS, call.kv = NULL;
  else call.cross = NULL;
  return c->e->ops->attention(c->e->be, &call, slot(c, src), slot(c, dst));
}
static int op_add(void *ctx, cp_slot dst, cp_slot a, cp_slot b) {
  const layer_ctx *c = ctx;
  return c->e->ops->add(c->e->be, slot(c, dst), slot(c, a), slot(c, b), c->call.n * c->e->m->d_model);
}
static int op_copy(void *ctx, cp_slot dst, cp_slot src) {
  const layer_ctx *c = ctx;
  return c->e->ops->copy(c->e->be, slot(c, dst), slot(c, src), c->call.n * c->e->m->d_model);
}
static int op_ffn_add(void *ctx, cp_slot dst, cp_slot src) {
  const layer_ctx *c = ctx;
  return c->e->ops->ffn_add(c->e->be, c->call.p, c->call.st, c->call.layer, slot(c, src), slot(c, dst), c->call.n,
                            true);
}
static int op_ffn(void *ctx, cp_slot dst, cp_slot src) {
  const layer_ctx *c = ctx;
  return c->e->ops->ffn_add(c->e->be, c->call.p, c->call.st, c->call.layer, slot(c, src), slot(c, dst), c->call.n,
                            false);
}
static int op_scale(void *ctx, cp_slot s) {
  const layer_ctx *c = ctx;
  return c->e->ops->scale(c->e->be, slot(c, s), c->call.n * c->e->m->d_model, c->e->m->residual_scale);
}
static const cp_layer_ops k_layer_ops = {op_norm, op_attn, op_add, op_copy, op_ffn_add, op_ffn, op_scale};

/* Runs the layers of `st` over p->x [n, D] in place. kvs: one cache per layer, or (shared_kv) one
 * scratch cache reused by every layer; cross: T5's decoder, else NULL. */
static int run_stack(const cp_engine *e, cp_pass *p, const cp_stack *st, cp_attn_kind kind, int64_t n, int64_t q_off,
                     cp_kv *kvs, bool shared_kv, const cp_cross *cross, int64_t last_prompt_row, bool collect) {
  int rc = 0;
  for (int l = 0; l < st->n_layers && rc == 0; l++) {
    layer_ctx c = {e, {st, l, kind, n, q_off, last_prompt_row, shared_kv ? kvs : &kvs[l], cross, p, collect}};
    rc = cp_layer_run(&k_layer_ops, &c, cp_model_residual(e->m), cross != NULL);
  }
  return rc;
}

/* ---------------------------------------------------------------- pieces of a pass */

/* Validates inputs; for T5 resolves the decoder input (default [decoder_start_token_id]).
 * n_new: tokens a generation adds after the prompt (0 for a forward pass); a learned position
 * table must hold every position the run embeds. */
static int check_inputs(const cp_engine *e, const int64_t *ids, int64_t n_ids, const int64_t **dec_ids, int64_t *n_dec,
                        int64_t *start_id, int n_new) {
  const cp_model *m = e->m;
  int rc = cp_model_check_ids(m, ids, n_ids, "input ids");
  if (rc) return rc;
  if (n_ids > MAX_TOKENS)
    return cp_error_set(CP_EMODEL_INPUT, "input ids: %lld tokens is above the limit", (long long)n_ids);
  /* the last generated token is never embedded */
  if ((rc = cp_model_check_positions(m, n_ids + (n_new > 0 ? n_new - 1 : 0), n_new > 0 ? "generate" : "input ids")))
    return rc;
  if (m->family != CP_FAMILY_T5) return 0;
  if (!*dec_ids || *n_dec <= 0) {
    /* T5 starts decoding from decoder_start_token_id, which is the pad id in every T5. */
    int start = m->cfg->decoder_start_token_id >= 0 ? m->cfg->decoder_start_token_id : m->cfg->pad_token_id;
    if (start < 0 || start >= m->vocab)
      return cp_error_set(CP_EMODEL_INPUT, "decoder ids: none given and the config has no decoder_start_token_id");
    *start_id = start;
    *dec_ids = start_id;
    *n_dec = 1;
  }
  if (*n_dec > MAX_TOKENS) return cp_error_set(CP_EMODEL_INPUT, "decoder ids: too many tokens");
  return cp_model_check_ids(m, *dec_ids, *n_dec, "decoder ids");
}

/* T5 encoder: enc [n, D] (backend memory) = the final-normed encoder states. */
static int run_encoder(cp_engine *e, const int64_t *ids, int64_t n, float *enc, bool collect) {
  const cp_model *m = e->m;
  const cp_backend_ops *o = e->ops;
  cp_pass p;
  cp_kv kv;
  int rc = pass_alloc(e, &p, n, 0, false); /* T5: no RoPE */
  if (rc) return rc;
  if ((rc = kv_alloc(e, &kv, n, false))) {
    pass_free(e, &p);
    return rc;
  }
  if (!(rc = o->embed(e->be, &p, ids, n, 0)) &&
      !(rc = run_stack(e, &p, &m->encoder, CP_ATTN_ENCODER_SELF, n, 0, &kv, true, NULL, n - 1, collect)))
    rc = o->final_norm(e->be, &p, &m->encoder, enc, n);
  /* The buffers are freed only after the queued work that reads them. */
  if (!rc && o->sync) rc = o->sync(e->be, "encoder");
  kv_free(e, &kv);
  pass_free(e, &p);
  return rc;
}

static int alloc_cross(const cp_engine *e, cp_cross *cr, const float *enc, int64_t n_enc) {
  const cp_model *m = e->m;
  cr->enc = enc;
  cr->n_enc = n_enc;
  cr->kv = calloc((size_t)m->decoder.n_layers + 1, sizeof *cr->kv);
  CP_CHECK_ALLOC(cr->kv, "engine: cross-attention caches");
  for (int l = 0; l < m->decoder.n_layers; l++) {
    int rc = kv_alloc(e, &cr->kv[l], n_enc, false);
    if (rc) return rc;
  }
  return 0;
}

static void free_cross(const cp_engine *e, cp_cross *cr) {
  if (cr->kv)
    for (int l = 0; l < e->m->decoder.n_layers; l++) kv_free(e, &cr->kv[l]);
  free(cr->kv);
  cr->kv = NULL;
}

/* T5: *enc [n_ids, D] (backend memory) = the encoder's output for ids, and the decoder's empty
 * cross-attention caches over it; the caller frees both (also on error). */
static int encode(cp_engine *e, const int64_t *ids, int64_t n_ids, bool collect, float **enc, cp_cross *cross) {
  if (!(*enc = backend_floats(e, n_ids, e->m->d_model))) return cp_error_code();
  int rc = run_encoder(e, ids, n_ids, *enc, collect);
  return rc ? rc : alloc_cross(e, cross, *enc, n_ids);
}

/* Final norm and output head for rows [r0, n) of p->x into logits [n - r0, V] (host), soft-capped
 * where the model caps them (Gemma2ForCausalLM: c tanh(l / c), on the host so that every backend
 * shares it). The attention kernels turn a NaN score row into zeros, so a non-finite logit must
 * fail the run (CP_EMODEL_NONFINITE); one sum per row (NaN or Inf makes it non-finite) keeps the
 * check cheap. */
static int head(cp_engine *e, cp_pass *p, int64_t n, int64_t r0, float *logits /* [n - r0, V] */) {
  const int V = e->m->vocab;
  int rc = e->ops->head(e->be, p, &e->m->decoder, n, r0, logits);
  const float cap = e->m->final_softcap;
  if (rc == 0 && cap > 0)
    for (size_t i = 0; i < (size_t)(n - r0) * V; i++) logits[i] = cap * tanhf(logits[i] / cap);
  for (int64_t r = 0; rc == 0 && r < n - r0; r++) {
    float s = 0;
    for (int i = 0; i < V; i++) s += logits[(size_t)r * V + i] * 0.0f; /* 0 for finite, NaN for NaN or Inf */
    if (s != 0) rc = cp_error_set(CP_EMODEL_NONFINITE, "engine: row %lld: non-finite logits", (long long)(r0 + r));
  }
  return rc;
}

/* The head in blocks of CP_ENGINE_LOGIT_BLOCK rows through fn. */
static int head_blocks(cp_engine *e, cp_pass *p, int64_t n, cp_engine_logits_fn fn, void *ctx) {
  float *block = host_floats(min64(n, CP_ENGINE_LOGIT_BLOCK), e->m->vocab);
  int rc = block ? 0 : cp_error_code();
  for (int64_t r0 = 0; rc == 0 && r0 < n; r0 += CP_ENGINE_LOGIT_BLOCK) {
    int64_t r1 = min64(n, r0 + CP_ENGINE_LOGIT_BLOCK);
    if ((rc = head(e, p, r1, r0, block)) == 0) rc = fn(ctx, block, r0, r1 - r0);
  }
  free(block);
  return rc;
}

static int64_t argmax(const float *x, int n) {
  int best = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[best]) best = i;
  return best;
}

/* ---------------------------------------------------------------- passes */

/* One forward pass: the logits of every row into logits [rows, V], or in blocks through fn. */
static int forward(cp_engine *e, float *logits, cp_engine_logits_fn fn, void *ctx, const int64_t *ids, int64_t n_ids,
                   const int64_t *dec_ids, int64_t n_dec) {
  const cp_model *m = e->m;
  const cp_backend_ops *o = e->ops;
  int64_t start_id;
  int rc = check_inputs(e, ids, n_ids, &dec_ids, &n_dec, &start_id, 0);
  if (rc) return rc;
  const bool t5 = m->family == CP_FAMILY_T5, collect = e->p.stats;
  const int64_t *xids = t5 ? dec_ids : ids;
  const int64_t n = t5 ? n_dec : n_ids;
  const bool raw = any_layer_needs_raw(e, &m->decoder, CP_ATTN_DECODER_SELF);
  float *enc = NULL;
  cp_cross cross = {0};
  cp_pass p = {0};
  cp_kv kv = {0};
  if (collect) e->n_modules = 0;
  if (o->reserve && (rc = o->reserve(e->be, n_ids, t5 ? n_dec : 0, 0))) return rc;
  if (t5 && (rc = encode(e, ids, n_ids, collect, &enc, &cross))) goto done;
  if ((rc = pass_alloc(e, &p, n, logits ? n : min64(n, CP_ENGINE_LOGIT_BLOCK), raw)) ||
      (rc = kv_alloc(e, &kv, n, raw)) || (rc = o->embed(e->be, &p, xids, n, 0)) ||
      (rc = run_stack(e, &p, &m->decoder, CP_ATTN_DECODER_SELF, n, 0, &kv, true, t5 ? &cross : NULL, n - 1, collect)))
    goto done;
  if (logits && (rc = head(e, &p, n, 0, logits))) goto done;
  if (fn && (rc = head_blocks(e, &p, n, fn, ctx))) goto done;
done:
  if (!rc && collect) e->n_modules = m->encoder.n_layers + m->decoder.n_layers + (t5 ? m->decoder.n_layers : 0);
  if (o->sync) (void)o->sync(e->be, NULL); /* nothing queued may outlive its buffers */
  e->ops->free(e->be, enc);
  free_cross(e, &cross);
  pass_free(e, &p);
  kv_free(e, &kv);
  return rc;
}

static int shift_forward(cp_engine *e, float *logits, cp_engine_logits_fn fn, void *ctx, const int64_t *ids, int64_t n);

/* forward, or its run through llama.cpp's context shift (checked by cp_engine_create). */
static int forward_any(cp_engine *e, float *logits, cp_engine_logits_fn fn, void *ctx, const int64_t *ids,
                       int64_t n_ids, const int64_t *dec_ids, int64_t n_dec) {
  if (e->p.shift.n_ctx == 0) return forward(e, logits, fn, ctx, ids, n_ids, dec_ids, n_dec);
  int64_t start_id;
  int rc = check_inputs(e, ids, n_ids, &dec_ids, &n_dec, &start_id, 0);
  return rc ? rc : shift_forward(e, logits, fn, ctx, ids, n_ids);
}

int cp_engine_forward(cp_engine *e, float *logits, const int64_t *ids, int64_t n_ids, const int64_t *dec_ids,
                      int64_t n_dec) {
  return forward_any(e, logits, NULL, NULL, ids, n_ids, dec_ids, n_dec);
}

int cp_engine_forward_blocks(cp_engine *e, cp_engine_logits_fn fn, void *ctx, const int64_t *ids, int64_t n_ids,
                             const int64_t *dec_ids, int64_t n_dec) {
  assert(fn);
  return forward_any(e, NULL, fn, ctx, ids, n_ids, dec_ids, n_dec);
}

/* Greedy generation over the caches kvs (one per decoder layer, cap >= n + n_new) whose rows
 * [0, n_done) already hold the keys and values of xids[0 .. n_done) (n_done < n): the prefill
 * computes rows [n_done, n), then one row per step; only the last row's logits come out. */
static int generate_rows(cp_engine *e, cp_kv *kvs, int64_t n_done, int64_t *out, int64_t *n_out, float *step_logits,
                         const int64_t *xids, int64_t n, const cp_cross *cross, int n_new, bool stop_at_eos) {
  const cp_model *m = e->m;
  const cp_backend_ops *o = e->ops;
  const cp_stack *st = &m->decoder;
  float *logits = NULL;
  cp_pass p = {0};
  assert(n_done >= 0 && n_done < n);
  /* The loop's buffers are allocated here, for the largest step (the prefill), so the loop itself
   * allocates nothing per token. (The attention call below it still builds its per-call tables and
   * scratch in the backend.) */
  int rc = pass_alloc(e, &p, n - n_done, 1, any_layer_needs_raw(e, st, CP_ATTN_DECODER_SELF));
  if (rc) return rc;
  if (!(logits = host_floats(1, m->vocab))) {
    rc = cp_error_code();
    goto done;
  }
  int64_t tok = 0;
  for (int step = 0; step < n_new; step++) {
    const int64_t rows = step == 0 ? n - n_done : 1, q_off = step == 0 ? n_done : n + step - 1;
    if ((rc = o->embed(e->be, &p, step == 0 ? xids + n_done : &tok, rows, q_off)) ||
        (rc = run_stack(e, &p, st, CP_ATTN_DECODER_SELF, rows, q_off, kvs, false, cross, n - 1, false)) ||
        (rc = head(e, &p, rows, rows - 1, logits)))
      goto done;
    tok = argmax(logits, m->vocab);
    if (step_logits) memcpy(step_logits + (size_t)*n_out * m->vocab, logits, (size_t)m->vocab * sizeof *logits);
    out[(*n_out)++] = tok;
    if (stop_at_eos && m->cfg->eos_token_id >= 0 && tok == m->cfg->eos_token_id) break;
  }
done:
  if (o->sync) (void)o->sync(e->be, NULL);
  pass_free(e, &p);
  free(logits);
  return rc;
}

static void kvs_free(const cp_engine *e, cp_kv *kvs) {
  if (kvs)
    for (int l = 0; l < e->m->decoder.n_layers; l++) kv_free(e, &kvs[l]);
  free(kvs);
}

/* One cache of cap rows per decoder layer, with unrotated keys where the rule needs them. */
static int kvs_alloc(const cp_engine *e, cp_kv **out, int64_t cap) {
  const cp_stack *st = &e->m->decoder;
  cp_kv *kvs = calloc((size_t)st->n_layers + 1, sizeof *kvs);
  CP_CHECK_ALLOC(kvs, "engine: KV caches");
  int rc = 0;
  for (int l = 0; l < st->n_layers && rc == 0; l++)
    rc = kv_alloc(e, &kvs[l], cap, cp_engine_rope_needs_raw(e->m, &e->rule, &e->rm, CP_ATTN_DECODER_SELF, l));
  if (rc) kvs_free(e, kvs);
  else *out = kvs;
  return rc;
}

/* ---------------------------------------------------------------- llama.cpp's context shift */

/* A stream through llama.cpp's context shift (cp_engine_shift): one cache of n_ctx cells per
 * layer, n_past of them filled, and a pass of at most `batch` rows. */
typedef struct {
  cp_engine *e;
  cp_kv *kvs;
  cp_pass p;
  int64_t n_past;
} shift_run;

static void shift_free(shift_run *r) {
  if (r->e->ops->sync) (void)r->e->ops->sync(r->e->be, NULL);
  pass_free(r->e, &r->p);
  kvs_free(r->e, r->kvs);
  memset(r, 0, sizeof *r);
}

static int shift_open(shift_run *r, cp_engine *e, int64_t head_rows) {
  memset(r, 0, sizeof *r);
  r->e = e;
  int rc = kvs_alloc(e, &r->kvs, e->p.shift.n_ctx);
  if (rc == 0) rc = pass_alloc(e, &r->p, e->p.shift.batch, head_rows, false);
  if (rc) shift_free(r);
  return rc;
}

/* Feeds ids [n] (n <= batch) as one batch, shifting first where it would fill the cache: llama.cpp's
 * tools/main/main.cpp, "if (n_past + (int) embd.size() >= n_ctx)": n_left = n_past - n_keep,
 * n_discard = n_left / 2, llama_memory_seq_rm(n_keep, n_keep + n_discard), llama_memory_seq_add(
 * n_keep + n_discard, n_past, -n_discard), n_past -= n_discard. The rows stay in r->p for the head. */
static int shift_feed(shift_run *r, const int64_t *ids, int64_t n) {
  cp_engine *e = r->e;
  const cp_engine_shift *s = &e->p.shift;
  const cp_stack *st = &e->m->decoder;
  int rc = 0;
  if (r->n_past + n >= s->n_ctx) {
    const int64_t discard = (r->n_past - s->n_keep) / 2;
    for (int l = 0; l < st->n_layers && rc == 0; l++)
      rc = e->ops->kv_shift(e->be, &r->kvs[l], s->n_keep, discard, r->n_past);
    if (rc) return rc;
    r->n_past -= discard;
    if (r->n_past + n >= s->n_ctx)
      return cp_error_set(CP_EARG,
                          "engine: context shift: %lld cells after keeping %lld leave no room for a batch "
                          "of %lld in %lld",
                          (long long)r->n_past, (long long)s->n_keep, (long long)n, (long long)s->n_ctx);
  }
  if ((rc = e->ops->embed(e->be, &r->p, ids, n, r->n_past)) ||
      (rc = run_stack(e, &r->p, st, CP_ATTN_DECODER_SELF, n, r->n_past, r->kvs, false, NULL, r->n_past + n - 1, false)))
    return rc;
  r->n_past += n;
  return 0;
}

/* fn's rows of one batch, renumbered from the batch's first token in the stream. */
typedef struct {
  cp_engine_logits_fn fn;
  void *ctx;
  int64_t row0;
} shift_rows;

static int shift_rows_fn(void *ctx, const float *logits, int64_t row0, int64_t n_rows) {
  const shift_rows *b = ctx;
  return b->fn(b->ctx, logits, b->row0 + row0, n_rows);
}

/* forward under the context shift: the stream in batches, every row's logits. */
static int shift_forward(cp_engine *e, float *logits, cp_engine_logits_fn fn, void *ctx, const int64_t *ids,
                         int64_t n) {
  const int64_t B = e->p.shift.batch, V = e->m->vocab;
  shift_run r;
  int rc = shift_open(&r, e, logits ? B : min64(B, CP_ENGINE_LOGIT_BLOCK));
  if (rc) return rc;
  for (int64_t s0 = 0; s0 < n && rc == 0; s0 += B) {
    const int64_t b = min64(B, n - s0);
    shift_rows sr = {fn, ctx, s0};
    if ((rc = shift_feed(&r, ids + s0, b))) break;
    if (logits) rc = head(e, &r.p, b, 0, logits + (size_t)s0 * V);
    else rc = head_blocks(e, &r.p, b, shift_rows_fn, &sr);
  }
  shift_free(&r);
  return rc;
}

/* Greedy generation under the context shift: the prompt in batches, then one token a step (as
 * llama-cli generates), the logits of each batch's last row. */
static int shift_generate(cp_engine *e, int64_t *out, int64_t *n_out, float *step_logits, const int64_t *ids, int64_t n,
                          int n_new, bool stop_at_eos) {
  const cp_model *m = e->m;
  const int64_t B = e->p.shift.batch;
  float *logits = host_floats(1, m->vocab);
  shift_run r;
  int rc = logits ? shift_open(&r, e, 1) : cp_error_code();
  if (rc) {
    free(logits);
    return rc;
  }
  for (int64_t s0 = 0; s0 < n && rc == 0; s0 += B) rc = shift_feed(&r, ids + s0, min64(B, n - s0));
  int64_t last = (n - 1) % B + 1; /* rows of the prompt's last batch */
  for (int step = 0; step < n_new && rc == 0; step++) {
    if ((rc = head(e, &r.p, last, last - 1, logits))) break;
    int64_t tok = argmax(logits, m->vocab);
    if (step_logits) memcpy(step_logits + (size_t)*n_out * m->vocab, logits, (size_t)m->vocab * sizeof *logits);
    out[(*n_out)++] = tok;
    if (stop_at_eos && m->cfg->eos_token_id >= 0 && tok == m->cfg->eos_token_id) break;
    if (step + 1 < n_new) {
      rc = shift_feed(&r, &tok, 1);
      last = 1;
    }
  }
  shift_free(&r);
  free(logits);
  return rc;
}

int cp_engine_generate(cp_engine *e, int64_t *out, int64_t *n_out, float *step_logits, const int64_t *ids,
                       int64_t n_ids, const int64_t *dec_ids, int64_t n_dec, int n_new, bool stop_at_eos) {
  const cp_model *m = e->m;
  const cp_backend_ops *o = e->ops;
  *n_out = 0;
  if (n_new < 0) return cp_error_set(CP_EARG, "engine: negative number of tokens to generate");
  int64_t start_id;
  int rc = check_inputs(e, ids, n_ids, &dec_ids, &n_dec, &start_id, n_new);
  if (rc) return rc;
  if (n_new == 0) return 0;
  if (e->p.shift.n_ctx) return shift_generate(e, out, n_out, step_logits, ids, n_ids, n_new, stop_at_eos);
  const bool t5 = m->family == CP_FAMILY_T5;
  const int64_t n = t5 ? n_dec : n_ids;
  float *enc = NULL;
  cp_cross cross = {0};
  cp_kv *kvs = NULL;
  if (o->reserve && (rc = o->reserve(e->be, n_ids, t5 ? n_dec : 0, n_new))) return rc;
  if ((rc = kvs_alloc(e, &kvs, n + n_new))) return rc; /* the full cache: no allocation per token */
  if (t5 && (rc = encode(e, ids, n_ids, false, &enc, &cross))) goto done;
  rc = generate_rows(e, kvs, 0, out, n_out, step_logits, t5 ? dec_ids : ids, n, t5 ? &cross : NULL, n_new, stop_at_eos);
done:
  if (o->sync) (void)o->sync(e->be, NULL);
  kvs_free(e, kvs);
  e->ops->free(e->be, enc);
  free_cross(e, &cross);
  return rc;
}

/* ---------------------------------------------------------------- a cache kept across prompts */

struct cp_engine_cache {
  cp_engine *e;
  cp_kv *kvs; /* [decoder layers], cap rows each */
  int64_t cap;
  int64_t *ids;    /* [cap]: the tokens of the rows [0, n_valid) the caches hold */
  int64_t n_valid; /* rows reusable as a one-shot prefill would compute them (a multiple of row_align) */
  unsigned epoch;  /* e->rule_epoch when they were computed */
};

/* Why a prompt row of this engine depends on more than the tokens up to it, or NULL. */
static const char *unshareable(const cp_engine *e) {
  const cp_model *m = e->m;
  if (m->family == CP_FAMILY_T5)
    return "T5's prompt is the input of a bidirectional encoder: every state sees the whole prompt";
  if (e->p.shift.n_ctx) return "under llama.cpp's context shift a row's keys depend on the shifts before it";
  for (int l = 0; l < m->decoder.n_layers; l++) {
    cp_attn_plan plan;
    cp_rule_plan(&plan, &e->rule, &e->rm, CP_ATTN_DECODER_SELF, l);
    if (m->pos == CP_POS_ALIBI && plan.alibi_mode == CP_ALIBI_DYNAMIC)
      return "dynamic ALiBi divides every slope by the prompt's length over the training length";
  }
  return NULL;
}

int cp_engine_cache_create(cp_engine_cache **out, cp_engine *e, int64_t cap) {
  *out = NULL;
  const char *why = unshareable(e);
  if (why) return cp_error_set(CP_EUNSUPPORTED, "engine: no shared prefixes: %s", why);
  if (cap < 1 || cap > MAX_TOKENS)
    return cp_error_set(CP_EARG, "engine: a cache of %lld tokens (1 .. %lld)", (long long)cap, (long long)MAX_TOKENS);
  int rc = e->ops->reserve ? e->ops->reserve(e->be, cap - 1, 0, 1) : 0;
  if (rc) return rc;
  cp_engine_cache *c = calloc(1, sizeof *c);
  CP_CHECK_ALLOC(c, "engine: cache");
  c->e = e;
  c->cap = cap;
  c->epoch = e->rule_epoch;
  if (!(c->ids = malloc((size_t)cap * sizeof *c->ids))) rc = cp_nomem("engine: cache of %lld tokens", (long long)cap);
  if (rc == 0) rc = kvs_alloc(e, &c->kvs, cap);
  if (rc) cp_engine_cache_free(c);
  else *out = c;
  return rc;
}

void cp_engine_cache_free(cp_engine_cache *c) {
  if (!c) return;
  kvs_free(c->e, c->kvs);
  free(c->ids);
  free(c);
}

int cp_engine_generate_cached(cp_engine_cache *c, int64_t *out, int64_t *n_out, float *step_logits, const int64_t *ids,
                              int64_t n_ids, int n_new, bool stop_at_eos, int64_t *reused) {
  cp_engine *e = c->e;
  const int64_t align = e->ops->row_align;
  *n_out = 0;
  if (reused) *reused = 0;
  if (n_new < 0) return cp_error_set(CP_EARG, "engine: negative number of tokens to generate");
  const int64_t *no_dec = NULL;
  int64_t n_dec = 0, start_id;
  int rc = check_inputs(e, ids, n_ids, &no_dec, &n_dec, &start_id, n_new);
  if (rc || n_new == 0) return rc;
  if (n_ids + n_new > c->cap)
    return cp_error_set(CP_EARG, "engine: %lld prompt and %d new tokens exceed the cache's %lld", (long long)n_ids,
                        n_new, (long long)c->cap);
  if (c->epoch != e->rule_epoch) c->n_valid = 0, c->epoch = e->rule_epoch;
  /* The longest common prefix with the cached rows, short of the prompt's last row (it must be
   * computed for its logits), rounded down to whole row blocks. */
  int64_t same = 0;
  while (same < c->n_valid && same < n_ids - 1 && c->ids[same] == ids[same]) same++;
  const int64_t from = same / align * align;
  c->n_valid = from; /* the rows past it are overwritten now */
  rc = generate_rows(e, c->kvs, from, out, n_out, step_logits, ids, n_ids, NULL, n_new, stop_at_eos);
  if (rc) return rc;
  /* Rows of whole blocks before the last prompt row were computed as a one-shot prefill computes
   * them; the last row (top-k rows start there) and a last partial block were not. */
  c->n_valid = (n_ids - 1) / align * align;
  memcpy(c->ids, ids, (size_t)c->n_valid * sizeof *ids);
  if (reused) *reused = from;
  return 0;
}
