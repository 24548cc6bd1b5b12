/* The probe grid: every probe x length x depth x sample, patched and (optionally) baseline. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctxpatch/engine/engine.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/engine/profile.h"
#include "ctxpatch/verify/verify.h"

void cp_verify_params_init(cp_verify_params *p) {
  memset(p, 0, sizeof *p);
  p->samples = 1;
  p->max_new_tokens = 10;
}

void cp_verify_thresholds_init(cp_verify_thresholds *t) {
  memset(t, 0, sizeof *t);
  t->min_accuracy = -1;
}

void cp_verify_result_free(cp_verify_result *r) {
  if (!r) return;
  free(r->probes);
  free(r->lengths);
  free(r->depths);
  for (int s = 0; s < 2; s++) {
    free(r->correct[s]);
    free(r->pmax[s]);
    free(r->entropy[s]);
  }
  free(r);
}

static size_t cell(const cp_verify_result *r, int p, int l, int d) {
  return ((size_t)p * (size_t)r->n_lengths + (size_t)l) * (size_t)r->n_depths + (size_t)d;
}

double cp_verify_accuracy(const cp_verify_result *r, cp_verify_side side, int probe, int length, int depth) {
  if (!r->correct[side]) return NAN;
  return (double)r->correct[side][cell(r, probe, length, depth)] / r->samples;
}

double cp_verify_accuracy_at(const cp_verify_result *r, cp_verify_side side, int probe, int length) {
  if (!r->correct[side]) return NAN;
  long ok = 0;
  for (int d = 0; d < r->n_depths; d++) ok += r->correct[side][cell(r, probe, length, d)];
  return (double)ok / ((double)r->samples * r->n_depths);
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

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int alloc_result(cp_verify_result **out, const cp_verify_params *p) {
  cp_verify_result *r = calloc(1, sizeof *r);
  if (!r) return cp_error_set(CP_ENOMEM, "out of memory");
  r->n_probes = p->n_probes;
  r->n_lengths = p->n_lengths;
  r->n_depths = p->n_depths;
  r->samples = p->samples;
  r->has_baseline = p->baseline;
  size_t cells = (size_t)p->n_probes * (size_t)p->n_lengths * (size_t)p->n_depths;
  r->probes = malloc((size_t)p->n_probes * sizeof *r->probes);
  r->lengths = malloc((size_t)p->n_lengths * sizeof *r->lengths);
  r->depths = malloc((size_t)p->n_depths * sizeof *r->depths);
  bool ok = r->probes && r->lengths && r->depths;
  for (int s = 0; s < (p->baseline ? 2 : 1) && ok; s++) {
    r->correct[s] = calloc(cells, sizeof *r->correct[s]);
    r->pmax[s] = malloc((size_t)p->n_lengths * sizeof *r->pmax[s]);
    r->entropy[s] = malloc((size_t)p->n_lengths * sizeof *r->entropy[s]);
    ok = r->correct[s] && r->pmax[s] && r->entropy[s];
    for (int l = 0; ok && l < p->n_lengths; l++) r->pmax[s][l] = r->entropy[s][l] = NAN;
  }
  if (!ok) {
    cp_verify_result_free(r);
    return cp_error_set(CP_ENOMEM, "out of memory");
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
    int rc = cp_probe_make(&s, tok, r->probes[0], r->lengths[l], 0.5, sample_seed(p->seed, 0, r->lengths[l], -1, 0));
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

/* Memory a run may use: CTXPATCH_MEMORY_LIMIT (bytes) when set, else the machine's RAM. */
static uint64_t memory_limit(void) {
  const char *env = getenv("CTXPATCH_MEMORY_LIMIT");
  if (env && *env) return strtoull(env, NULL, 10);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
}

/* Refuses a length whose estimated footprint passes the memory limit before anything is
 * allocated: an outsized --lengths otherwise allocates until the kernel kills the process. */
static int check_lengths_fit(const cp_model *model, const cp_verify_params *p) {
  uint64_t per = bytes_per_token(model) * (p->baseline ? 2 : 1), limit = memory_limit();
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

int cp_verify_run(cp_verify_result **out, const cp_model *model, const cp_tokenizer *tok, const cp_rule *rule,
                  const cp_verify_params *params) {
  *out = NULL;
  const cp_verify_params *p = params;
  if (p->n_probes <= 0 || p->n_lengths <= 0 || p->n_depths <= 0 || p->samples <= 0 || p->max_new_tokens <= 0)
    return cp_error_set(CP_EARG, "verify needs at least one probe, length, depth and sample");
  int rc = check_lengths_fit(model, p);
  if (rc < 0) return rc;
  cp_verify_result *r = NULL;
  cp_engine *engines[2] = {NULL, NULL};
  int64_t *gen = NULL;
  char *text = NULL;
  rc = alloc_result(&r, p);
  if (rc < 0) return rc;
  double t0 = now_seconds();
  cp_engine_params ep;
  cp_engine_params_init(&ep);
  ep.threads = p->threads;
  int sides = p->baseline ? 2 : 1;
  const cp_model *side_model[2] = {model, p->baseline_model ? p->baseline_model : model};
  for (int s = 0; s < sides && rc == 0; s++)
    rc = cp_engine_create(&engines[s], side_model[s], s == 0 ? rule : NULL, &ep);
  if (rc < 0) goto done;
  if (!(gen = malloc((size_t)p->max_new_tokens * sizeof *gen))) {
    rc = cp_error_set(CP_ENOMEM, "out of memory");
    goto done;
  }
  int64_t total = (int64_t)p->n_probes * p->n_lengths * p->n_depths * p->samples * sides, done_count = 0;
  for (int pi = 0; pi < p->n_probes; pi++)
    for (int l = 0; l < p->n_lengths; l++)
      for (int d = 0; d < p->n_depths; d++)
        for (int k = 0; k < p->samples; k++) {
          cp_probe_sample sample;
          rc = cp_probe_make(&sample, tok, p->probes[pi], p->lengths[l], p->depths[d],
                             sample_seed(p->seed, (int)p->probes[pi], p->lengths[l], d, k));
          if (rc < 0) goto done;
          for (int s = 0; s < sides; s++) {
            int64_t n_gen = 0;
            /* T5: the prompt is the encoder input and the decoder starts from its start token;
             * decoder-only: the prompt is continued. */
            rc = cp_engine_generate(engines[s], gen, &n_gen, NULL, sample.ids, (int64_t)sample.n_ids, NULL, 0,
                                    p->max_new_tokens, true);
            size_t len = 0;
            if (rc == 0) rc = cp_tokenizer_decode(tok, &text, &len, (const int64_t *)gen, (size_t)n_gen, true);
            if (rc < 0) {
              cp_probe_sample_free(&sample);
              goto done;
            }
            if (cp_probe_correct(p->probes[pi], text, sample.answer)) r->correct[s][cell(r, pi, l, d)]++;
            free(text);
            text = NULL;
            r->tokens += (int64_t)sample.n_ids + n_gen;
            if (p->progress) p->progress(p->progress_ctx, ++done_count, total);
          }
          cp_probe_sample_free(&sample);
        }
  if (p->stats)
    for (int s = 0; s < sides && rc == 0; s++)
      rc = measure_stats(r, side_model[s], tok, s == 0 ? rule : NULL, (cp_verify_side)s, p);
done:
  r->seconds = now_seconds() - t0;
  for (int s = 0; s < 2; s++) cp_engine_free(engines[s]);
  free(gen);
  free(text);
  if (rc < 0) {
    cp_verify_result_free(r);
    return rc;
  }
  *out = r;
  return 0;
}

static int add_reason(char ***reasons, int *n, const char *fmt, double a, double b, const char *probe, long long len) {
  char buf[256];
  snprintf(buf, sizeof buf, fmt, probe, len, a, b);
  char **grown = realloc(*reasons, (size_t)(*n + 1) * sizeof **reasons);
  if (!grown) return cp_error_set(CP_ENOMEM, "out of memory");
  *reasons = grown;
  if (!(grown[*n] = strdup(buf))) return cp_error_set(CP_ENOMEM, "out of memory");
  (*n)++;
  return 0;
}

int cp_verify_judge(bool *pass, char ***reasons, int *n_reasons, const cp_verify_result *r,
                    const cp_verify_thresholds *t) {
  *pass = true;
  *reasons = NULL;
  *n_reasons = 0;
  int rc = 0;
  if (t->n_no_regression > 0 && !r->has_baseline)
    return cp_error_set(CP_EVERIFY_THRESHOLD, "--no-regression-at needs --baseline (nothing to compare against)");
  for (int i = 0; i < t->n_no_regression; i++) {
    int l = 0;
    while (l < r->n_lengths && r->lengths[l] != t->no_regression_at[i]) l++;
    if (l == r->n_lengths)
      return cp_error_set(CP_EVERIFY_THRESHOLD, "--no-regression-at %lld: that length is not in --lengths",
                          (long long)t->no_regression_at[i]);
  }
  for (int p = 0; p < r->n_probes && rc == 0; p++)
    for (int l = 0; l < r->n_lengths && rc == 0; l++) {
      double acc = cp_verify_accuracy_at(r, CP_SIDE_PATCHED, p, l);
      if (t->min_accuracy >= 0 && acc < t->min_accuracy)
        rc = add_reason(reasons, n_reasons, "%s at %lld: accuracy %.3f below --min-accuracy %.3f", acc,
                        t->min_accuracy, cp_probe_name(r->probes[p]), (long long)r->lengths[l]);
      for (int i = 0; i < t->n_no_regression && rc == 0; i++) {
        if (r->lengths[l] != t->no_regression_at[i]) continue;
        double base = cp_verify_accuracy_at(r, CP_SIDE_BASELINE, p, l);
        if (acc < base)
          rc = add_reason(reasons, n_reasons, "%s at %lld: patched accuracy %.3f below the baseline's %.3f", acc,
                          base, cp_probe_name(r->probes[p]), (long long)r->lengths[l]);
      }
    }
  *pass = *n_reasons == 0;
  return rc;
}
