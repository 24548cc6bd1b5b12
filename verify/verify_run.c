/* The probe grid: every probe x length x depth x sample, patched and (optionally) baseline. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctxpatch/engine/engine.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/clock.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/memory.h"
#include "ctxpatch/engine/profile.h"
#include "ctxpatch/verify/sequential.h"
#include "ctxpatch/verify/stats.h"
#include "ctxpatch/verify/verify.h"
#include "verify/baseline_cache.h"
#include "verify/sides.h"
#include "verify/verify_seq.h"

void cp_verify_params_init(cp_verify_params *p) {
  memset(p, 0, sizeof *p);
  p->samples = 1;
  p->max_new_tokens = 10;
  p->ppl_windows = 4;
  p->ppl_buckets = 8;
}

void cp_verify_thresholds_init(cp_verify_thresholds *t) {
  memset(t, 0, sizeof *t);
  t->min_accuracy = -1;
  t->margin = CP_STATS_MARGIN;
  t->alpha = CP_STATS_ALPHA;
  t->ppl_margin = 0.05;
  t->ppl_flat = -1;
  t->max_detectable_drop = CP_STATS_MAX_DETECTABLE_DROP;
}

bool cp_verify_has_criterion(const cp_verify_thresholds *t) {
  return t->min_accuracy >= 0 || t->n_no_regression > 0 || t->ppl_flat >= 0;
}

bool cp_verify_gain_judged(const cp_verify_result *r, const cp_verify_thresholds *t) {
  return r->has_baseline && t->n_no_regression > 0 && !t->accept_no_gain;
}

bool cp_verify_power_judged(const cp_verify_result *r, const cp_verify_thresholds *t) {
  return r->has_baseline && t->n_no_regression > 0 && r->n_probes > 0 && !t->accept_underpowered;
}

const char *cp_verdict_name(cp_verdict v) {
  static const char *const names[] = {"none", "pass", "fail", "no effect", "inconclusive"};
  return (unsigned)v < sizeof names / sizeof *names ? names[v] : "?";
}

void cp_verify_result_free(cp_verify_result *r) {
  if (!r) return;
  free(r->probes);
  free(r->lengths);
  free(r->depths);
  for (int s = 0; s < 2; s++) {
    free(r->correct[s]);
    free(r->only[s]);
    free(r->ppl_nll[s]);
    free(r->ppl_mean[s]);
    free(r->pmax[s]);
    free(r->entropy[s]);
  }
  free(r->answered);
  free(r->baseline_answered);
  free(r->answered_known);
  free(r->cache_warnings);
  free(r->length_tokens);
  free(r->length_reused);
  free(r->used);
  free(r->looks_taken);
  free(r->look_pairs);
  free(r->stop);
  free(r->gain_crossed);
  cp_ppl_corpus_free(&r->corpus);
  free(r);
}

static size_t cell(const cp_verify_result *r, int p, int l, int d) {
  return ((size_t)p * (size_t)r->n_lengths + (size_t)l) * (size_t)r->n_depths + (size_t)d;
}

double cp_verify_accuracy(const cp_verify_result *r, cp_verify_side side, int probe, int length, int depth) {
  if (!r->correct[side]) return NAN;
  return (double)r->correct[side][cell(r, probe, length, depth)] / r->samples;
}

int64_t cp_verify_correct_at(const cp_verify_result *r, cp_verify_side side, int probe, int length) {
  int64_t ok = 0;
  for (int d = 0; r->correct[side] && d < r->n_depths; d++) ok += r->correct[side][cell(r, probe, length, d)];
  return ok;
}

int64_t cp_verify_prompts_at(const cp_verify_result *r) { return (int64_t)r->samples * r->n_depths; }

int64_t cp_verify_prompts_in(const cp_verify_result *r, int probe, int length) {
  return r->used ? r->used[(size_t)probe * (size_t)r->n_lengths + (size_t)length] : cp_verify_prompts_at(r);
}

int64_t cp_verify_prompts_at_depth(const cp_verify_result *r, int probe, int length, int depth) {
  if (!r->used) return r->samples;
  int rank = 0; /* place of `depth` in the rounds' order (run_cell_group's stable sort) */
  for (int d = 0; d < r->n_depths; d++)
    rank += r->depths[d] < r->depths[depth] || (r->depths[d] == r->depths[depth] && d < depth);
  int64_t n = cp_verify_prompts_in(r, probe, length);
  return n / r->n_depths + (rank < n % r->n_depths);
}

double cp_verify_accuracy_at(const cp_verify_result *r, cp_verify_side side, int probe, int length) {
  if (!r->correct[side]) return NAN;
  int64_t n = cp_verify_prompts_in(r, probe, length);
  return n ? (double)cp_verify_correct_at(r, side, probe, length) / (double)n : NAN;
}

double cp_verify_pair_test(const cp_verify_result *r, int probe, int length, double margin, int64_t *lost,
                           int64_t *gained) {
  *lost = *gained = 0;
  if (!r->only[CP_SIDE_BASELINE]) return NAN;
  for (int d = 0; d < r->n_depths; d++) {
    *lost += r->only[CP_SIDE_BASELINE][cell(r, probe, length, d)];
    *gained += r->only[CP_SIDE_PATCHED][cell(r, probe, length, d)];
  }
  int64_t n = cp_verify_prompts_in(r, probe, length);
  return n ? cp_tango_p_value(n, *lost, *gained, margin) : 1.0;
}

/* One seed per sample, independent of the order cells are visited in. */
static uint64_t sample_seed(uint64_t seed, int probe, int64_t length, int depth, int sample) {
  uint64_t h = seed ^ 0x243f6a8885a308d3ull;
  uint64_t parts[4] = {(uint64_t)probe, (uint64_t)length, (uint64_t)depth, (uint64_t)sample};
  for (int i = 0; i < 4; i++) {
    h ^= parts[i] + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
  }
  return h;
}

int verify_result_alloc(cp_verify_result **out, const cp_verify_params *p) {
  cp_verify_result *r = calloc(1, sizeof *r);
  CP_CHECK_ALLOC(r, "verify: result");
  r->n_probes = p->n_probes;
  r->n_lengths = p->n_lengths;
  r->n_depths = p->n_depths;
  r->samples = p->samples;
  r->has_baseline = p->baseline;
  r->has_ppl = p->corpus_path != NULL;
  r->ppl_windows = p->ppl_windows;
  r->ppl_buckets = p->ppl_buckets;
  size_t cells = (size_t)p->n_probes * (size_t)p->n_lengths * (size_t)p->n_depths;
  r->probes = malloc((size_t)(p->n_probes ? p->n_probes : 1) * sizeof *r->probes);
  r->lengths = malloc((size_t)p->n_lengths * sizeof *r->lengths);
  r->depths = malloc((size_t)p->n_depths * sizeof *r->depths);
  size_t n_answers = 0;
  if (cp_size_mul(&n_answers, cells, (size_t)p->samples)) r->answered = calloc(n_answers + 1, 1);
  if (p->baseline && r->answered) r->baseline_answered = calloc(n_answers + 1, 1);
  r->length_tokens = calloc((size_t)p->n_lengths + 1, sizeof *r->length_tokens);
  r->length_reused = calloc((size_t)p->n_lengths + 1, sizeof *r->length_reused);
  bool ok = r->probes && r->lengths && r->depths && r->answered && r->length_tokens && r->length_reused &&
            (!p->baseline || r->baseline_answered);
  for (int s = 0; s < (p->baseline ? 2 : 1) && ok; s++) {
    r->correct[s] = calloc(cells ? cells : 1, sizeof *r->correct[s]);
    r->pmax[s] = malloc((size_t)p->n_lengths * sizeof *r->pmax[s]);
    r->entropy[s] = malloc((size_t)p->n_lengths * sizeof *r->entropy[s]);
    ok = r->correct[s] && r->pmax[s] && r->entropy[s];
    if (ok && p->baseline) ok = (r->only[s] = calloc(cells ? cells : 1, sizeof *r->only[s])) != NULL;
    if (ok && p->corpus_path) {
      r->ppl_nll[s] = calloc((size_t)p->n_lengths * (size_t)p->ppl_buckets, sizeof *r->ppl_nll[s]);
      r->ppl_mean[s] = calloc((size_t)p->n_lengths, sizeof *r->ppl_mean[s]);
      ok = r->ppl_nll[s] && r->ppl_mean[s];
    }
    for (int l = 0; ok && l < p->n_lengths; l++) r->pmax[s][l] = r->entropy[s][l] = NAN;
  }
  if (!ok) {
    cp_verify_result_free(r);
    return cp_nomem("verify: result");
  }
  int rc = p->looks > 0 ? verify_seq_alloc(r, p) : 0;
  if (rc < 0) {
    cp_verify_result_free(r);
    return rc;
  }
  memcpy(r->probes, p->probes, (size_t)p->n_probes * sizeof *r->probes);
  memcpy(r->lengths, p->lengths, (size_t)p->n_lengths * sizeof *r->lengths);
  memcpy(r->depths, p->depths, (size_t)p->n_depths * sizeof *r->depths);
  *out = r;
  return 0;
}

/* Self-attention statistics of the first passkey-like prompt at each length: the
 * dispersed-attention picture of the report. T5 reports its encoder, others their decoder. */
static int measure_stats(cp_verify_result *r, const cp_model *model, const cp_tokenizer *tok, const cp_rule *rule,
                         cp_verify_side side, const cp_verify_params *p) {
  cp_attn_kind kind = model->family == CP_FAMILY_T5 ? CP_ATTN_ENCODER_SELF : CP_ATTN_DECODER_SELF;
  for (int l = 0; l < r->n_lengths; l++) {
    cp_probe_sample s;
    int rc = cp_probe_make(&s, tok, r->n_probes ? r->probes[0] : CP_PROBE_PASSKEY, r->lengths[l], 0.5, sample_seed(p->seed, 0, r->lengths[l], -1, 0));
    if (rc < 0) return rc;
    cp_profile_params pp;
    cp_profile_params_init(&pp);
    pp.ids = s.ids;
    pp.n_ids = (int64_t)s.n_ids;
    pp.threads = p->threads;
    cp_profile_point pt;
    int64_t len = (int64_t)s.n_ids;
    rc = cp_attention_profile(&pt, model, rule, &len, 1, &pp);
    cp_probe_sample_free(&s);
    if (rc < 0) return rc;
    r->pmax[side][l] = cp_profile_mean(&pt, kind, 0);
    r->entropy[side][l] = cp_profile_mean(&pt, kind, 1);
    cp_profile_point_free(&pt);
  }
  return 0;
}

/* Bytes one token of context costs a run, by an estimate: the K and V cache of every layer and
 * the per-token activations (residual, q/k/v/o, FFN), float32, twice when a baseline runs. */
static uint64_t bytes_per_token(const cp_model *m) {
  uint64_t layers = (uint64_t)m->encoder.n_layers + (uint64_t)m->decoder.n_layers;
  uint64_t kv = layers * 2 * (uint64_t)m->n_kv_heads * (uint64_t)m->d_head;
  uint64_t act = 6 * (uint64_t)m->d_model + 3 * (uint64_t)m->d_ff;
  return (kv + act) * sizeof(float);
}

/* Refuses a length whose estimated footprint passes the memory limit before anything is
 * allocated: an outsized --lengths otherwise allocates until the kernel kills the process. */
static int check_lengths_fit(const cp_model *model, const cp_verify_params *p) {
  /* the logits are one block of rows (cp_engine_forward_blocks) or the last row, not per token */
  uint64_t per = bytes_per_token(model) * (p->baseline ? 2 : 1), limit = cp_memory_limit();
  for (int l = 0; l < p->n_lengths; l++) {
    uint64_t len = (uint64_t)p->lengths[l] + (uint64_t)p->max_new_tokens;
    if (per && len > limit / per)
      return cp_error_set(CP_EVERIFY_LENGTH,
                          "--lengths: %lld tokens need about %llu bytes (%llu per token for the KV "
                          "cache and activations), over the %llu bytes of memory available",
                          (long long)p->lengths[l], (unsigned long long)(len * per),
                          (unsigned long long)per, (unsigned long long)limit);
  }
  return 0;
}

/* Whether the two sides run on two host threads (cp_verify_params.side_threads). */
static bool two_threads(const cp_verify_params *p) {
  return p->side_threads == 2 || (p->side_threads == 0 && p->device == CP_DEVICE_CUDA);
}

/* One prompt's generation on each side, into the side's own slots. */
typedef struct {
  cp_engine *const *engines;
  cp_engine_cache *const *caches;
  const cp_probe_sample *sample;
  const cp_verify_params *p;
  int64_t *gen[2];
  int64_t n_gen[2], reused[2];
} sample_sides;

static int sample_side(void *ctx, int s) {
  sample_sides *x = ctx;
  const cp_probe_sample *sm = x->sample;
  /* T5: the prompt is the encoder input and the decoder starts from its start token;
   * decoder-only: the prompt is continued. */
  if (x->caches[s]) /* the rows this prompt shares with the previous one come from its cache */
    return cp_engine_generate_cached(x->caches[s], x->gen[s], &x->n_gen[s], NULL, sm->ids, (int64_t)sm->n_ids,
                                     x->p->max_new_tokens, true, &x->reused[s]);
  return cp_engine_generate(x->engines[s], x->gen[s], &x->n_gen[s], NULL, sm->ids, (int64_t)sm->n_ids, NULL, 0,
                            x->p->max_new_tokens, true);
}

/* One prompt on every side; counts the correct answers and, with a baseline, the discordant pairs.
 * gen: [2, max_new_tokens], a row per side. */
static int run_sample(cp_verify_result *r, cp_engine *const *engines, cp_engine_cache *const *caches, int sides,
                      const cp_tokenizer *tok, const cp_verify_params *p, int pi, int l, int d, int k, int64_t *gen,
                      int64_t *done_count) {
  cp_probe_sample sample;
  int rc = cp_probe_make(&sample, tok, p->probes[pi], p->lengths[l], p->depths[d],
                         sample_seed(p->seed, (int)p->probes[pi], p->lengths[l], d, k));
  if (rc < 0) return rc;
  int64_t total = ((int64_t)p->n_probes * p->n_depths * p->samples + (p->corpus_path ? p->ppl_windows : 0)) *
                  p->n_lengths * (p->baseline_from ? 1 : sides);
  bool ok[2] = {false, false};
  size_t c = cell(r, pi, l, d), a = c * (size_t)r->samples + (size_t)k;
  const cp_verify_result *f = sides == 2 ? p->baseline_from : NULL;
  bool recorded = f && (!f->answered_known || f->answered_known[a]);
  int run_sides = recorded ? 1 : sides; /* sides that run here */
  if (recorded) ok[1] = f->answered[a], r->prompts_from++; /* the original's run, recorded */
  sample_sides x = {engines, caches, &sample, p, {gen, gen + p->max_new_tokens}, {0, 0}, {0, 0}};
  rc = verify_sides_run(run_sides, two_threads(p), sample_side, &x);
  /* each side's answer, in side order whichever finished first */
  for (int s = 0; s < run_sides && rc == 0; s++) {
    int64_t n_gen = x.n_gen[s];
    char *text = NULL;
    size_t len = 0;
    /* an id the tokenizer has no text for (an embedding padded past the tokenizer's vocabulary)
     * ends the answer: it cannot spell any of it */
    for (int64_t i = 0; i < n_gen; i++)
      if (x.gen[s][i] < 0 || (uint64_t)x.gen[s][i] >= (uint64_t)cp_tokenizer_vocab_size(tok)) n_gen = i;
    rc = cp_tokenizer_decode(tok, &text, &len, (const int64_t *)x.gen[s], (size_t)n_gen, true);
    if (rc == 0) ok[s] = cp_probe_correct(p->probes[pi], text, sample.answer);
    free(text);
    r->side_tokens[s] += (int64_t)sample.n_ids - x.reused[s] + n_gen;
    r->side_reused[s] += x.reused[s];
    r->length_tokens[l] += (int64_t)sample.n_ids - x.reused[s] + n_gen;
    r->length_reused[l] += x.reused[s];
    if (rc == 0 && p->progress) p->progress(p->progress_ctx, ++*done_count, total);
  }
  r->answered[a] = ok[0];
  if (sides == 2 && rc == 0) r->baseline_answered[a] = (unsigned char)(1 + ok[1]);
  for (int s = 0; s < sides && rc == 0; s++) {
    r->correct[s][c] += ok[s];
    if (sides == 2) r->only[s][c] += ok[s] && !ok[1 - s];
  }
  cp_probe_sample_free(&sample);
  return rc;
}

typedef struct {
  double *sum;
  int64_t *count;
  const int64_t *ids;
  int64_t length, vocab;
  int buckets;
} ppl_blocks;

static int score_block(void *ctx, const float *logits /* [n_rows, vocab] */, int64_t row0, int64_t n_rows) {
  const ppl_blocks *pb = ctx;
  cp_ppl_score_rows(pb->sum, pb->count, logits, row0, n_rows, pb->ids, pb->length, pb->vocab, pb->buckets);
  return 0;
}

/* One length of the ppl probe on each side, into the side's own sums and counts ([2, buckets]). */
typedef struct {
  cp_verify_result *r;
  cp_engine *const *engines;
  const cp_model *model;
  const cp_verify_params *p;
  int l;
  double *sum;
  int64_t *count;
} ppl_sides;

static int ppl_side(void *ctx, int s) {
  ppl_sides *x = ctx;
  const cp_verify_params *p = x->p;
  const size_t nb = (size_t)p->ppl_buckets;
  const int64_t length = p->lengths[x->l];
  int rc;
  for (int w = 0; w < p->ppl_windows; w++) {
    int64_t start = 0;
    if ((rc = cp_ppl_window_start(&start, &x->r->corpus, length, w, p->seed)) < 0) return rc;
    const int64_t *ids = x->r->corpus.ids + start;
    ppl_blocks pb = {x->sum + (size_t)s * nb, x->count + (size_t)s * nb, ids, length, x->model->vocab,
                     p->ppl_buckets};
    if ((rc = cp_engine_forward_blocks(x->engines[s], score_block, &pb, ids, length, NULL, 0)) < 0) return rc;
  }
  return 0;
}

/* The ppl probe: every window at every length through every side, NLL by position bucket. The
 * logits are scored block by block (cp_engine_forward_blocks), never held for the window. */
static int run_ppl(cp_verify_result *r, cp_engine *const *engines, int sides, const cp_model *model,
                   const cp_verify_params *p, int64_t *done_count) {
  if (model->family == CP_FAMILY_T5)
    return cp_error_set(CP_EVERIFY_PROBE, "ppl: the model is T5 (encoder-decoder); the ppl probe scores a "
                                          "decoder-only language model");
  int run_sides = p->baseline_from ? 1 : sides; /* baseline_from: copied by the caller */
  int64_t total = ((int64_t)p->n_probes * p->n_depths * p->samples + p->ppl_windows) * p->n_lengths * run_sides;
  size_t nb = (size_t)p->ppl_buckets;
  double *sum = calloc(2 * nb, sizeof *sum);
  int64_t *count = calloc(2 * nb, sizeof *count);
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(sum && count, "ppl");
  for (int l = 0; l < p->n_lengths; l++) {
    memset(sum, 0, 2 * nb * sizeof *sum);
    memset(count, 0, 2 * nb * sizeof *count);
    ppl_sides x = {r, engines, model, p, l, sum, count};
    if ((rc = verify_sides_run(run_sides, two_threads(p), ppl_side, &x)) < 0) goto done;
    for (int s = 0; s < run_sides; s++) { /* in side order, whichever finished first */
      const double *ss = sum + (size_t)s * nb;
      const int64_t *cs = count + (size_t)s * nb;
      r->side_tokens[s] += p->lengths[l] * p->ppl_windows;
      r->length_tokens[l] += p->lengths[l] * p->ppl_windows;
      for (int w = 0; w < p->ppl_windows && p->progress; w++) p->progress(p->progress_ctx, ++*done_count, total);
      double all = 0;
      int64_t n = 0;
      for (size_t b = 0; b < nb; b++) {
        r->ppl_nll[s][(size_t)l * nb + b] = cs[b] ? ss[b] / (double)cs[b] : NAN;
        all += ss[b];
        n += cs[b];
      }
      r->ppl_mean[s][l] = all / (double)n;
    }
  }
done:
  free(sum);
  free(count);
  return rc;
}

/* baseline_from must have been run on the same probe grid (verify.h). */
static int check_baseline_from(const cp_verify_result *f, const cp_verify_params *p) {
  bool same = f->n_probes == p->n_probes && f->n_lengths == p->n_lengths && f->n_depths == p->n_depths &&
              f->samples == p->samples && f->has_ppl == (p->corpus_path != NULL) &&
              (!f->has_ppl || (f->ppl_windows == p->ppl_windows && f->ppl_buckets == p->ppl_buckets));
  for (int i = 0; same && i < p->n_probes; i++) same = f->probes[i] == p->probes[i];
  for (int i = 0; same && i < p->n_lengths; i++) same = f->lengths[i] == p->lengths[i];
  for (int i = 0; same && i < p->n_depths; i++) same = f->depths[i] == p->depths[i];
  return same ? 0 : cp_error_set(CP_EARG, "verify: baseline_from was run on another probe grid");
}

/* The baseline side from baseline_from's patched side (its ppl, statistics and token count;
 * run_sample took the answers prompt by prompt). */
static void copy_baseline(cp_verify_result *r, const cp_verify_result *f) {
  size_t nl = (size_t)r->n_lengths;
  if (r->has_ppl) {
    memcpy(r->ppl_nll[CP_SIDE_BASELINE], f->ppl_nll[CP_SIDE_PATCHED], nl * (size_t)r->ppl_buckets * sizeof(double));
    memcpy(r->ppl_mean[CP_SIDE_BASELINE], f->ppl_mean[CP_SIDE_PATCHED], nl * sizeof(double));
  }
  memcpy(r->pmax[CP_SIDE_BASELINE], f->pmax[CP_SIDE_PATCHED], nl * sizeof(double));
  memcpy(r->entropy[CP_SIDE_BASELINE], f->entropy[CP_SIDE_PATCHED], nl * sizeof(double));
  r->side_tokens[CP_SIDE_BASELINE] += f->side_tokens[CP_SIDE_PATCHED]; /* and the prompts f lacked, run here */
  r->side_reused[CP_SIDE_BASELINE] += f->side_reused[CP_SIDE_PATCHED];
  for (size_t l = 0; l < nl; l++) { /* f ran the original alone: its counts are that side's */
    r->length_tokens[l] += f->length_tokens[l];
    r->length_reused[l] += f->length_reused[l];
  }
}

static int64_t only_at(const cp_verify_result *r, cp_verify_side side, int pi, int l) {
  int64_t n = 0;
  for (int d = 0; r->only[side] && d < r->n_depths; d++) n += r->only[side][cell(r, pi, l, d)];
  return n;
}

/* A sequential cell: rounds of every depth (in increasing order) once per sample, so that a look
 * every p->looks prompts sees a prefix spread over the depths; after each look the cell stops when
 * its part of the verdict is decided (verify_seq_look), or after p->replay's count. Within a look
 * the prompts run by depth (then sample): a look judges only the counts, and consecutive prompts
 * of close depths share more of their prefix in the cache. */
static int run_cell_rounds(cp_verify_result *r, cp_engine *const *engines, cp_engine_cache *const *caches, int sides,
                           const cp_tokenizer *tok, const cp_verify_params *p, int pi, int l, const int *order,
                           int64_t *gen, int64_t *done_count, verify_seq_state *st) {
  size_t cl = (size_t)pi * (size_t)r->n_lengths + (size_t)l;
  const int64_t D = p->n_depths, all = cp_verify_prompts_at(r);
  int64_t limit = p->replay ? p->replay[cl] : all, n = 0;
  if (limit > all) limit = all;
  int rc = 0;
  bool stop = false;
  for (int j = 0; n < limit && rc == 0 && !stop; j++) {
    int64_t end = ((int64_t)j + 1) * p->looks; /* the look's prompts: [n, end) of the rounds' order */
    if (end > limit) end = limit;
    /* prompt m of the rounds is sample m / D at depth rank m % D: by rank, then sample */
    for (int64_t i = 0; i < D && rc == 0; i++)
      for (int64_t m = n + ((i - n % D) % D + D) % D; m < end && rc == 0; m += D)
        rc = run_sample(r, engines, caches, sides, tok, p, pi, l, order[i], (int)(m / D), gen, done_count);
    n = end;
    if (rc < 0 || p->replay || n != cp_seq_look_prompts(&st->design, j)) continue;
    stop = verify_seq_look(st, r, p->judge, pi, l, j, only_at(r, CP_SIDE_BASELINE, pi, l),
                           only_at(r, CP_SIDE_PATCHED, pi, l), cp_verify_correct_at(r, CP_SIDE_PATCHED, pi, l));
  }
  r->used[cl] = (int)n;
  if (!p->replay)
    verify_seq_cell_done(st, r, p->judge, l, only_at(r, CP_SIDE_BASELINE, pi, l), only_at(r, CP_SIDE_PATCHED, pi, l));
  return rc;
}

/* One probe at one length: every depth and sample, in order of depth, so that consecutive prompts
 * share their task line and filler up to the earlier insertion point and each side's cache
 * (cp_engine_cache) computes those rows once. Without a cache (a rule whose rows depend on the
 * whole prompt) each prompt runs alone; the answers are the same bit for bit either way. A
 * sequential run takes them in rounds instead (run_cell_rounds). */
static int run_cell_group(cp_verify_result *r, cp_engine *const *engines, int sides, const cp_tokenizer *tok,
                          const cp_verify_params *p, int pi, int l, int64_t *gen, int64_t *done_count,
                          verify_seq_state *st) {
  cp_engine_cache *caches[2] = {NULL, NULL};
  int *order = malloc((size_t)p->n_depths * sizeof *order);
  int rc = 0;
  CP_CHECK_ALLOC(order, "verify: depth order");
  for (int d = 0; d < p->n_depths; d++) { /* insertion sort: a handful of depths, stable */
    int j = d;
    for (; j > 0 && p->depths[order[j - 1]] > p->depths[d]; j--) order[j] = order[j - 1];
    order[j] = d;
  }
  const int64_t cap = p->lengths[l] + p->max_new_tokens; /* a probe prompt fits its length */
  bool partial = p->baseline_from && p->baseline_from->answered_known; /* the baseline side runs some prompts */
  for (int s = 0; s < (p->baseline_from && !partial ? 1 : sides) && rc == 0 && !p->unshared; s++)
    if ((rc = cp_engine_cache_create(&caches[s], engines[s], cap)) == CP_EUNSUPPORTED) {
      cp_error_clear();
      rc = 0;
    }
  if (p->looks > 0 && rc == 0)
    rc = run_cell_rounds(r, engines, caches, sides, tok, p, pi, l, order, gen, done_count, st);
  for (int i = 0; i < p->n_depths && rc == 0 && p->looks <= 0; i++)
    for (int k = 0; k < p->samples && rc == 0; k++)
      rc = run_sample(r, engines, caches, sides, tok, p, pi, l, order[i], k, gen, done_count);
  for (int s = 0; s < 2; s++) cp_engine_cache_free(caches[s]);
  free(order);
  return rc;
}

int cp_verify_run(cp_verify_result **out, const cp_model *model, const cp_tokenizer *tok, const cp_rule *rule,
                  const cp_verify_params *params) {
  *out = NULL;
  cp_verify_params q = *params; /* baseline_from: a baseline cache's file, when one is taken */
  const cp_verify_params *p = &q;
  if ((p->n_probes <= 0 && !p->corpus_path) || p->n_probes < 0 || p->n_lengths <= 0 || p->n_depths <= 0 ||
      p->samples <= 0 || p->max_new_tokens <= 0)
    return cp_error_set(CP_EARG, "verify needs at least one probe, length, depth and sample");
  if (p->corpus_path && (p->ppl_windows <= 0 || p->ppl_buckets <= 0))
    return cp_error_set(CP_EARG, "ppl needs at least one window and one bucket");
  if (p->looks < 0 || (p->looks > 0 && !p->judge && !p->replay))
    return cp_error_set(CP_EARG, "verify: a sequential run needs the thresholds it stops by");
  for (int l = 0; p->corpus_path && l < p->n_lengths; l++)
    if (p->lengths[l] < p->ppl_buckets + 1)
      return cp_error_set(CP_EVERIFY_LENGTH, "ppl: length %lld is shorter than its %d buckets", (long long)p->lengths[l],
                          p->ppl_buckets);
  int rc = check_lengths_fit(model, p);
  if (rc < 0) return rc;
  /* time, as the lengths check bounds memory: refused before any engine runs */
  if ((rc = cp_work_check(cp_verify_plan_work(p, model), p->work_budget, "verify")) < 0) return rc;
  cp_verify_result *cached = NULL, *r = NULL;
  char key[65] = "", file_sha[65] = "";
  cp_strbuf warn = {0};
  const bool use_cache = p->baseline && !p->baseline_from && p->baseline_cache;
  const cp_model *base_model = p->baseline_model ? p->baseline_model : model;
  if (use_cache && (rc = verify_cache_lookup(&cached, key, file_sha, &warn, base_model, tok, p)) < 0) goto fail;
  if (cached) q.baseline_from = cached;
  const cp_verify_result *from = p->baseline ? p->baseline_from : NULL;
  if (from && (rc = check_baseline_from(from, p)) < 0) goto fail;
  cp_engine *engines[2] = {NULL, NULL};
  int64_t *gen = NULL;
  if ((rc = verify_result_alloc(&r, p)) < 0) goto fail;
  verify_seq_state st = {0};
  if (p->looks > 0 && !p->replay && (rc = verify_seq_start(&st, r, p)) < 0) goto fail;
  if (p->looks > 0 && p->replay) st.design.every = p->looks, st.design.n_max = cp_verify_prompts_at(r);
  double t0 = cp_monotonic_seconds();
  cp_engine_params ep;
  cp_engine_params_init(&ep);
  ep.threads = p->threads;
  ep.device = p->device;
  int sides = p->baseline ? 2 : 1;
  /* The baseline side is the model without any rule: an artifact whose rule lives only in its
   * ctxpatch metadata would otherwise apply it on both sides (the engine applies the metadata
   * rule when given none) and be compared with itself. A view of the model without that rule;
   * it owns nothing. */
  cp_model plain = *model;
  plain.has_metadata_rule = false;
  cp_rule_init(&plain.metadata_rule);
  const cp_model *side_model[2] = {model, p->baseline_model ? p->baseline_model : &plain};
  for (int s = 0; s < (from && !from->answered_known ? 1 : sides) && rc == 0; s++) {
    ep.shift = s == 0 ? p->shift : (cp_engine_shift){0, 0, 0};
    rc = cp_engine_create(&engines[s], side_model[s], s == 0 ? rule : NULL, &ep);
  }
  if (rc < 0) goto done;
  CP_CHECK_ALLOC_GOTO(gen = malloc((size_t)2 * p->max_new_tokens * sizeof *gen), "verify"); /* a row per side */
  int64_t done_count = 0;
  for (int pi = 0; pi < p->n_probes; pi++)
    for (int l = 0; l < p->n_lengths; l++)
      if ((rc = run_cell_group(r, engines, sides, tok, p, pi, l, gen, &done_count, &st)) < 0) goto done;
  if (p->corpus_path && (rc = cp_ppl_corpus_load(&r->corpus, p->corpus_path, p->corpus_delimiter, tok)) < 0) goto done;
  if (p->corpus_path && (rc = run_ppl(r, engines, sides, model, p, &done_count)) < 0) goto done;
  if (p->stats)
    for (int s = 0; s < (from ? 1 : sides) && rc == 0; s++)
      rc = measure_stats(r, side_model[s], tok, s == 0 ? rule : NULL, (cp_verify_side)s, p);
  if (from && rc == 0) copy_baseline(r, from);
  r->tokens = r->side_tokens[0] + r->side_tokens[1];
  r->tokens_reused = r->side_reused[0] + r->side_reused[1];
  if (use_cache && rc == 0) {
    memcpy(r->cache_key, key, sizeof key);
    memcpy(r->cache_file_sha256, file_sha, sizeof file_sha);
    r->baseline_cached = cached != NULL;
    /* a new file, or one that the prompts run here on the baseline side complete */
    if (key[0] && (!cached || r->side_tokens[CP_SIDE_BASELINE] > 0)) verify_cache_store(r, cached, key, &warn, p);
  }
done:
  r->seconds = cp_monotonic_seconds() - t0;
  for (int s = 0; s < 2; s++) cp_engine_free(engines[s]);
  free(gen);
  if (rc < 0) goto fail;
  if (warn.oom) cp_strbuf_free(&warn); /* the warnings are lost, not the run */
  r->cache_warnings = warn.s;
  cp_verify_result_free(cached);
  *out = r;
  return 0;
fail:
  cp_verify_result_free(r);
  cp_verify_result_free(cached);
  cp_strbuf_free(&warn);
  return rc;
}

static int add_reason(char ***reasons, int *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int add_reason(char ***reasons, int *n, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  int rc = CP_ARRAY_RESIZE(*reasons, (size_t)*n + 1, "verify: reasons");
  if (rc < 0) return rc;
  CP_CHECK_ALLOC((*reasons)[*n] = strdup(buf), "verify: reasons");
  (*n)++;
  return 0;
}

/* Index of `len` in r->lengths, or -1. */
static int length_index(const cp_verify_result *r, int64_t len) {
  for (int l = 0; l < r->n_lengths; l++)
    if (r->lengths[l] == len) return l;
  return -1;
}

/* Refuses thresholds that cannot be judged on this result. */
static int judgeable(const cp_verify_result *r, const cp_verify_thresholds *t) {
  if (t->n_no_regression > 0 && !r->has_baseline)
    return cp_error_set(CP_EVERIFY_THRESHOLD, "--no-regression-at needs --baseline (nothing to compare against)");
  for (int i = 0; i < t->n_no_regression; i++)
    if (length_index(r, t->no_regression_at[i]) < 0)
      return cp_error_set(CP_EVERIFY_THRESHOLD, "--no-regression-at %lld: that length is not in --lengths",
                          (long long)t->no_regression_at[i]);
  if (!(t->margin >= 0 && t->margin < 1) || !(t->alpha > 0 && t->alpha < 1))
    return cp_error_set(CP_EVERIFY_THRESHOLD, "margin %g / alpha %g: expected margin in [0, 1) and alpha in (0, 1)",
                        t->margin, t->alpha);
  if (t->ppl_flat >= 0 && !r->has_ppl)
    return cp_error_set(CP_EVERIFY_THRESHOLD, "--ppl-flat needs the ppl probe (--corpus)");
  if (t->ppl_flat >= 0 && length_index(r, t->flat_train_len) < 0)
    return cp_error_set(CP_EVERIFY_THRESHOLD, "--ppl-flat: the training length %lld is not in --lengths",
                        (long long)t->flat_train_len);
  return 0;
}

/* The ppl criteria: no regression beyond ppl_margin at the no-regression lengths; flat. */
static int judge_ppl(char ***reasons, int *n_reasons, const cp_verify_result *r, const cp_verify_thresholds *t) {
  int rc = 0;
  for (int i = 0; i < t->n_no_regression && rc == 0 && r->has_ppl; i++) {
    int l = length_index(r, t->no_regression_at[i]);
    double pat = r->ppl_mean[CP_SIDE_PATCHED][l], base = r->ppl_mean[CP_SIDE_BASELINE][l];
    if (!(pat - base <= t->ppl_margin))
      rc = add_reason(reasons, n_reasons, "ppl at %lld: patched NLL %.4f exceeds the original's %.4f by more than "
                      "the margin %.4f nats", (long long)r->lengths[l], pat, base, t->ppl_margin);
  }
  if (rc == 0 && t->ppl_flat >= 0) {
    int lt = length_index(r, t->flat_train_len), ll = 0;
    for (int l = 1; l < r->n_lengths; l++) ll = r->lengths[l] > r->lengths[ll] ? l : ll;
    double at_train = r->ppl_mean[CP_SIDE_PATCHED][lt], longest = r->ppl_mean[CP_SIDE_PATCHED][ll];
    if (!(longest - at_train <= t->ppl_flat))
      rc = add_reason(reasons, n_reasons, "ppl not flat: patched NLL %.4f at %lld exceeds its %.4f at the training "
                      "length %lld by more than %.4f nats", longest, (long long)r->lengths[ll], at_train,
                      (long long)r->lengths[lt], t->ppl_flat);
  }
  return rc;
}

bool cp_verify_gain_length(const cp_verify_result *r, const cp_verify_thresholds *t, int l) {
  bool compared = false;
  for (int i = 0; i < t->n_no_regression; i++) compared |= t->no_regression_at[i] == r->lengths[l];
  /* a length listed twice ran the same prompts twice: counted once */
  for (int k = 0; k < l; k++) compared &= r->lengths[k] != r->lengths[l];
  return r->has_baseline && compared && r->lengths[l] > t->gain_after;
}

void cp_verify_gain(cp_verify_gain_test *g, const cp_verify_result *r, const cp_verify_thresholds *t) {
  memset(g, 0, sizeof *g);
  double saved = 0;
  for (int l = 0; l < r->n_lengths; l++) {
    if (!cp_verify_gain_length(r, t, l)) continue;
    g->n_lengths++;
    for (int p = 0; p < r->n_probes; p++) {
      int64_t lost, gained;
      (void)cp_verify_pair_test(r, p, l, t->margin, &lost, &gained);
      g->lost += lost;
      g->gained += gained;
    }
    if (r->has_ppl) saved += r->ppl_mean[CP_SIDE_BASELINE][l] - r->ppl_mean[CP_SIDE_PATCHED][l];
  }
  g->p_value = cp_sign_test_p_value(g->lost, g->gained);
  g->ppl_saved = r->has_ppl && g->n_lengths ? saved / g->n_lengths : NAN;
  g->level = t->alpha;
  /* sequential: a cell's own boundary, or the pooled test at the level left for it unless the
   * gain-futility rule ended it (the cells after it stopped without the gain: their pairs no longer
   * make the fixed test's sample) */
  cp_seq_design d;
  if (r->looks_every > 0 && cp_verify_seq_design(&d, r, t) == 0) {
    g->level = cp_seq_gain_final_alpha(&d);
    for (int p = 0; p < r->n_probes; p++)
      for (int l = 0; l < r->n_lengths; l++) {
        size_t cl = (size_t)p * (size_t)r->n_lengths + (size_t)l;
        if (!cp_verify_gain_length(r, t, l)) continue;
        g->boundary |= r->gain_crossed[cl] != 0;
        if (r->stop[cl] == CP_SEQ_GAIN_FUTILITY && !g->futile) g->futile = true, g->futile_cell = (int64_t)cl;
      }
  }
  g->found = g->n_lengths > 0 && ((r->n_probes > 0 && (g->boundary || (!g->futile && g->p_value < g->level))) ||
                                  g->ppl_saved > t->ppl_margin);
}

/* The power criterion's reason, with the samples per cell that would meet it (searched up to 400
 * prompts; the detectable drop is not monotone in the prompts, so each count is tried). */
static int power_reason(char ***reasons, int *n_reasons, const cp_verify_result *r, const cp_verify_thresholds *t,
                        double drop) {
  int64_t n = cp_verify_prompts_at(r), need = 0;
  for (int64_t s = r->samples + 1; s * r->n_depths <= 400 && !need; s++) {
    cp_verify_result at = *r; /* the same design with s samples */
    at.samples = (int)s;
    if (cp_verify_detectable_drop(&at, t) <= t->max_detectable_drop) need = s;
  }
  char detect[96], hint[96];
  if (isnan(drop)) snprintf(detect, sizeof detect, "detect no drop at all");
  else snprintf(detect, sizeof detect, "detect only a drop of %.3f", drop);
  if (need) snprintf(hint, sizeof hint, "--samples %lld", (long long)need);
  else snprintf(hint, sizeof hint, "more samples");
  return add_reason(reasons, n_reasons, "inconclusive: %lld prompts per probe and length %s with %.0f%% power, more "
                    "than --max-detectable-drop %.3f (%s; or --accept-underpowered)", (long long)n, detect,
                    CP_STATS_POWER * 100, t->max_detectable_drop, hint);
}

static int gain_reason(char ***reasons, int *n_reasons, const cp_verify_result *r, const cp_verify_thresholds *t,
                       const cp_verify_gain_test *g) {
  if (g->n_lengths == 0)
    return add_reason(reasons, n_reasons, "no effect: no compared length is past the training length %lld, so no gain "
                      "can be shown (--accept-no-gain certifies a patch that only breaks nothing)",
                      (long long)t->gain_after);
  char ppl[128] = "";
  if (r->has_ppl)
    snprintf(ppl, sizeof ppl, "%sppl NLL %.4f nats lower, not more than --ppl-margin %.4f", r->n_probes ? "; " : "",
             g->ppl_saved, t->ppl_margin);
  char pairs[256] = "";
  if (r->n_probes && g->futile) {
    int p = (int)(g->futile_cell / r->n_lengths), l = (int)(g->futile_cell % r->n_lengths);
    snprintf(pairs, sizeof pairs, "%lld prompts gained and %lld lost, and gain futility ended the pooled sign test at %s "
             "%lld after %d prompts (a gain was unlikely to be shown)", (long long)g->gained, (long long)g->lost,
             cp_probe_name(r->probes[p]), (long long)r->lengths[l], r->used[g->futile_cell]);
  } else if (r->n_probes)
    snprintf(pairs, sizeof pairs, "%lld prompts gained and %lld lost (sign test p = %.2g, not < %.3g)",
             (long long)g->gained, (long long)g->lost, g->p_value, g->level);
  char where[64] = "at the compared lengths (no training length known)";
  if (t->gain_after > 0) snprintf(where, sizeof where, "past the training length %lld", (long long)t->gain_after);
  return add_reason(reasons, n_reasons, "no effect: %s the patch shows no gain: %s%s (--accept-no-gain certifies a "
                    "patch that only breaks nothing)", where, pairs, ppl);
}

int cp_verify_judge(cp_verdict *verdict, char ***reasons, int *n_reasons, const cp_verify_result *r,
                    const cp_verify_thresholds *t) {
  *verdict = CP_VERDICT_NONE;
  *reasons = NULL;
  *n_reasons = 0;
  int rc = judgeable(r, t);
  if (rc < 0) return rc;
  if (!(t->max_detectable_drop > 0 && t->max_detectable_drop <= 1))
    return cp_error_set(CP_EVERIFY_THRESHOLD, "max detectable drop %g: expected a number in (0, 1]",
                        t->max_detectable_drop);
  for (int p = 0; p < r->n_probes && rc == 0; p++)
    for (int l = 0; l < r->n_lengths && rc == 0; l++) {
      const char *name = cp_probe_name(r->probes[p]);
      long long len = (long long)r->lengths[l];
      int64_t n = cp_verify_prompts_in(r, p, l), k = cp_verify_correct_at(r, CP_SIDE_PATCHED, p, l);
      double acc = n ? (double)k / (double)n : 0, lo, hi;
      cp_wilson_interval(&lo, &hi, k, n, CP_STATS_Z95);
      if (t->min_accuracy >= 0 && acc < t->min_accuracy)
        rc = add_reason(reasons, n_reasons, "%s at %lld: accuracy %.3f (95%% CI %.3f-%.3f) below --min-accuracy %.3f",
                        name, len, acc, lo, hi, t->min_accuracy);
      for (int i = 0; i < t->n_no_regression && rc == 0; i++) {
        if (r->lengths[l] != t->no_regression_at[i]) continue;
        int64_t lost, gained;
        double pv = cp_verify_pair_test(r, p, l, t->margin, &lost, &gained), level = t->alpha;
        cp_seq_design d; /* sequential: the level of the look the cell stopped at */
        if (r->looks_every > 0 && (rc = cp_verify_seq_design(&d, r, t)) == 0)
          level = cp_seq_fail_level(&d, r->looks_taken[(size_t)p * (size_t)r->n_lengths + (size_t)l] - 1 < 0
                                            ? d.n_looks - 1
                                            : r->looks_taken[(size_t)p * (size_t)r->n_lengths + (size_t)l] - 1);
        if (rc == 0 && pv < level)
          rc = add_reason(reasons, n_reasons, "%s at %lld: regression: patched %.3f vs original %.3f on the same %lld "
                          "prompts (%lld lost, %lld gained); drop beyond the margin %.3f, Tango p = %.2g < %.3g",
                          name, len, acc, cp_verify_accuracy_at(r, CP_SIDE_BASELINE, p, l), (long long)n,
                          (long long)lost, (long long)gained, t->margin, pv, level);
      }
    }
  if (rc == 0) rc = judge_ppl(reasons, n_reasons, r, t);
  int failed = *n_reasons;
  bool underpowered = false, no_gain = false;
  if (rc == 0 && cp_verify_power_judged(r, t)) {
    double drop = cp_verify_detectable_drop(r, t);
    if ((underpowered = !(drop <= t->max_detectable_drop))) rc = power_reason(reasons, n_reasons, r, t, drop);
  }
  if (rc == 0 && cp_verify_gain_judged(r, t)) {
    cp_verify_gain_test g;
    cp_verify_gain(&g, r, t);
    if ((no_gain = !g.found)) rc = gain_reason(reasons, n_reasons, r, t, &g);
  }
  if (!cp_verify_has_criterion(t)) *verdict = CP_VERDICT_NONE;
  else if (failed) *verdict = CP_VERDICT_FAIL;
  else if (underpowered) *verdict = CP_VERDICT_INCONCLUSIVE;
  else if (no_gain) *verdict = CP_VERDICT_NO_EFFECT;
  else *verdict = CP_VERDICT_PASS;
  return rc;
}
