/* The streaming parts of the CPU engine at lengths the goldens do not reach:
 *  1. cp_plan_visible_ranges / cp_plan_hidden_range agree with the per-key rule helpers;
 *  2. the streaming attention kernel (tiles of rows, key blocks, online softmax, top-k heap)
 *     equals a dense O(L^2) evaluation built from the per-key helpers, over many tiles/blocks;
 *  3. on a random Llama-layout model: a wrong shape or a missing tensor is refused naming the
 *     tensor; bad ids are refused; stop_at_eos stops; 1 and 2 threads give identical logits;
 *     KV-cache decoding gives the logits of a full forward pass; a 16K-token forward stays under
 *     1 GB peak RSS and its first rows equal a short forward's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctxpatch/engine/engine.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/model/rule.h"
#include "ctxpatch/formats/safetensors.h"
#include "test.h"
#include "engine/attention_cpu.h"
#include "engine/pool.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float urand(void) { /* uniform in [-1, 1) */
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((rng_state >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
}


/* ---------------------------------------------------------------- 1. ranges */

static void test_ranges(void) {
  static const bool sliding[1] = {true};
  cp_rule_model rm = {false, 0, 3, 100, true, true, false, NULL, NULL, 0};
  int bad = 0, checked = 0;
  for (int win = 0; win < 9; win += 4) /* a sliding layer's window (Gemma 2) of 4 and 8, or none */
  for (int lam = 0; lam < 2; lam++)
    for (int g = 0; g < 4; g++)
      for (int loc = 1; loc < 7; loc++)
        for (int kind = 0; kind < 3; kind++) {
          cp_rule r;
          cp_rule_init(&r);
          r.has_lambda = lam;
          r.n_global = g;
          r.n_local = loc;
          cp_attn_plan p;
          rm.layer_sliding = win ? sliding : NULL, rm.sliding_window = win;
          cp_rule_plan(&p, &r, &rm, (cp_attn_kind)kind, 0);
          for (int64_t nk = 0; nk < 16; nk++)
            for (int64_t i = 0; i < 16; i++) {
              int64_t lo[2], hi[2], hlo, hhi;
              int n = cp_plan_visible_ranges(&p, i, nk, lo, hi);
              cp_plan_hidden_range(&p, i, nk, &hlo, &hhi);
              for (int a = 0; a < n; a++) bad += !(lo[a] < hi[a]) || (a && !(hi[a - 1] < lo[a]));
              for (int64_t j = 0; j < nk; j++) {
                bool in = false;
                for (int a = 0; a < n; a++) in |= j >= lo[a] && j < hi[a];
                bad += in != cp_plan_visible(&p, i, j);
                bad += (j >= hlo && j < hhi) != cp_plan_lambda_hidden(&p, i, j);
                checked++;
              }
            }
        }
  CHECK_MSG(bad == 0, "%d of %d (plan, i, j) disagree with the per-key helpers", bad, checked);
}

/* ---------------------------------------------------------------- 2. kernel vs dense */

typedef struct {
  int H, Hkv, dh;
  int64_t n_keys;
  float *q, *qfar, *qtopk, *k, *kraw, *v; /* [n_keys, *] */
  double slopes[8];
  cp_fire_mlp fire;                        /* FIRE cases: random MLP, two hidden layers of 8 */
} att_data;

/* The positional term of FIRE at (i, distance d), per head, as the spec writes it. */
static double fire_bias(const att_data *d, const cp_attn_plan *p, int h, int64_t i, int64_t dist) {
  double L = p->fire_threshold > 0 ? p->fire_threshold : d->fire.L;
  return cp_fire_mlp_bias(&d->fire, h, cp_fire_input(dist, i, d->fire.c, L));
}

static float dot(const float *a, const float *b, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
  return (float)s;
}

/* Dense evaluation of rows [q_off, q_off + n_q) from the per-key helpers. out [n_q, H*dh]. */
static void dense(const att_data *d, const cp_attn_plan *p, cp_attn_pos pos, int64_t q_off, int64_t n_q,
                  int64_t last_prompt_row, float *out, float *pm, float *en) {
  const int H = d->H, dh = d->dh, grp = d->H / d->Hkv, ldq = H * dh, ldk = d->Hkv * dh;
  const int64_t nk = d->n_keys;
  double *s = malloc((size_t)nk * sizeof *s);
  bool *vis = malloc((size_t)nk);
  for (int h = 0; h < H; h++) {
    int g = h / grp;
    for (int64_t r = 0; r < n_q; r++) {
      int64_t i = q_off + r;
      const float *q = d->q + (size_t)r * ldq + h * dh;
      double slope = pos == CP_ATTN_POS_ALIBI ? d->slopes[h] / cp_plan_alibi_divisor(p, i, nk) : 0;
      for (int64_t j = 0; j < nk; j++) {
        vis[j] = cp_plan_visible(p, i, j);
        const float *kj = d->k + (size_t)j * ldk + g * dh;
        double dd = i - j;
        double qk = (pos == CP_ATTN_POS_ROPE && j <= i && cp_plan_distance(p, i - j) != i - j)
                        ? dot(d->qfar + (size_t)r * ldq + h * dh, d->kraw + (size_t)j * ldk + g * dh, dh)
                        : dot(q, kj, dh);
        s[j] = 0.5 * qk - (j <= i ? slope * (double)cp_plan_distance(p, (int64_t)dd) : 0);
        if (pos == CP_ATTN_POS_FIRE && j <= i) s[j] += (float)fire_bias(d, p, h, i, cp_plan_distance(p, i - j));
      }
      if (cp_plan_topk_row(p, i, last_prompt_row)) {
        /* k largest hidden logits at the top-k distance, ties to the smaller j */
        int64_t *cand = malloc((size_t)nk * sizeof *cand);
        double *cv = malloc((size_t)nk * sizeof *cv);
        int64_t nc = 0;
        for (int64_t j = 0; j < nk; j++) {
          if (!cp_plan_lambda_hidden(p, i, j)) continue;
          const float *qq = pos == CP_ATTN_POS_ROPE ? d->qtopk + (size_t)r * ldq + h * dh : q;
          const float *kk = (pos == CP_ATTN_POS_ROPE ? d->kraw : d->k) + (size_t)j * ldk + g * dh;
          cand[nc] = j;
          float pt = pos == CP_ATTN_POS_FIRE ? (float)fire_bias(d, p, h, i, p->top_k_distance)
                                             : (float)(-slope * (double)p->top_k_distance);
          cv[nc++] = (float)(0.5f * dot(qq, kk, dh) + pt);
        }
        for (int t = 0; t < p->k && t < nc; t++) {
          int64_t best = -1;
          for (int64_t c = 0; c < nc; c++)
            if (cand[c] >= 0 && (best < 0 || cv[c] > cv[best])) best = c;
          s[cand[best]] = cv[best];
          vis[cand[best]] = true;
          cand[best] = -1;
        }
        free(cand);
        free(cv);
      }
      double mx = -INFINITY, l = 0, pmax = 0, ent = 0;
      for (int64_t j = 0; j < nk; j++)
        if (vis[j] && s[j] * p->inv_tau > mx) mx = s[j] * p->inv_tau;
      for (int64_t j = 0; j < nk; j++)
        if (vis[j]) l += exp(s[j] * p->inv_tau - mx);
      float *o = out + (size_t)r * ldq + h * dh;
      for (int e = 0; e < dh; e++) o[e] = 0;
      for (int64_t j = 0; j < nk; j++) {
        if (!vis[j]) continue;
        double pr = exp(s[j] * p->inv_tau - mx) / l;
        if (pr > pmax) pmax = pr;
        if (pr > 0) ent -= pr * log(pr);
        for (int e = 0; e < dh; e++) o[e] += (float)(pr * d->v[(size_t)j * ldk + g * dh + e]);
      }
      pm[(size_t)h * n_q + r] = (float)pmax;
      en[(size_t)h * n_q + r] = (float)ent;
    }
  }
  free(s);
  free(vis);
}

/* The kernel on rows [q_off, q_off + n_q) against the dense evaluation; fire_bytes: the call's
 * fire_table_bytes (FIRE cases also run with the default and must give the same bits). */
static void kernel_case_bytes(cp_pool *pool, const att_data *d, const char *name, const cp_rule *rule,
                              cp_attn_pos pos, int64_t q_off, int64_t n_q, size_t fire_bytes) {
  cp_rule_model rm = {false, 0, 1, 100, pos == CP_ATTN_POS_ALIBI, pos == CP_ATTN_POS_FIRE, false, NULL, NULL, 0};
  cp_attn_plan p;
  CHECK_RC(0, cp_rule_check_model(rule, &rm, name));
  cp_rule_plan(&p, rule, &rm, CP_ATTN_DECODER_SELF, 0);
  int64_t nk = q_off + n_q, last = nk - 1;
  const int ldq = d->H * d->dh;
  float *got = calloc((size_t)n_q * ldq, sizeof *got), *want = calloc((size_t)n_q * ldq, sizeof *want);
  float *gpm = calloc((size_t)d->H * n_q, sizeof(float)), *gen = calloc((size_t)d->H * n_q, sizeof(float));
  float *wpm = calloc((size_t)d->H * n_q, sizeof(float)), *wen = calloc((size_t)d->H * n_q, sizeof(float));
  cp_attn_call c = {0};
  c.plan = &p;
  c.H = d->H, c.Hkv = d->Hkv, c.dh = d->dh;
  c.q_off = q_off, c.n_q = n_q, c.n_keys = nk, c.last_prompt_row = last;
  c.scale = 0.5f;
  c.q = d->q, c.k = d->k, c.v = d->v;
  c.pos = pos;
  c.slopes = d->slopes;
  c.fire = &d->fire;
  c.fire_table_bytes = fire_bytes;
  CHECK_RC(0, cp_attn_tables_build(&c));
  if (pos == CP_ATTN_POS_ROPE) {
    c.k_raw = d->kraw;
    c.q_topk = p.top_k ? d->qtopk : NULL;
    c.q_far = c.tab.rope_far >= 0 ? d->qfar : NULL;
  }
  c.out = got, c.row_pmax = gpm, c.row_ent = gen;
  CHECK_RC(0, cp_cpu_attention(pool, &c));
  dense(d, &p, pos, q_off, n_q, last, want, wpm, wen);
  double e1 = test_rel_err(got, want, (size_t)n_q * ldq), e2 = test_rel_err(gpm, wpm, (size_t)d->H * n_q);
  double e3 = test_rel_err(gen, wen, (size_t)d->H * n_q);
  printf("kernel %-28s rows %4lld+%-4lld out %.2e pmax %.2e entropy %.2e\n", name, (long long)q_off,
         (long long)n_q, e1, e2, e3);
  CHECK_MSG(e1 <= 1e-5 && e2 <= 1e-5 && e3 <= 1e-5, "%s: kernel differs from the dense evaluation", name);
  if (pos == CP_ATTN_POS_FIRE && fire_bytes) { /* the chunking changes nothing: same bits as one chunk */
    float *one = calloc((size_t)n_q * ldq, sizeof *one);
    c.out = one, c.row_pmax = c.row_ent = NULL, c.fire_table_bytes = 0;
    CHECK_RC(0, cp_cpu_attention(pool, &c));
    CHECK_MSG(memcmp(one, got, (size_t)n_q * ldq * sizeof *got) == 0, "%s: chunks of %zu bytes differ from one chunk",
              name, fire_bytes);
    free(one);
  }
  cp_attn_tables_free(&c.tab);
  free(got), free(want), free(gpm), free(gen), free(wpm), free(wen);
}

static void kernel_case(cp_pool *pool, const att_data *d, const char *name, const cp_rule *rule, cp_attn_pos pos,
                        int64_t q_off, int64_t n_q) {
  kernel_case_bytes(pool, d, name, rule, pos, q_off, n_q, 0);
}

static void test_kernel(void) {
  att_data d = {4, 2, 8, 300, NULL, NULL, NULL, NULL, NULL, NULL, {0}, {0}};
  size_t nq = (size_t)d.n_keys * d.H * d.dh, nkv = (size_t)d.n_keys * d.Hkv * d.dh;
  float **bufs[6] = {&d.q, &d.qfar, &d.qtopk, &d.k, &d.kraw, &d.v};
  for (int b = 0; b < 6; b++) {
    size_t n = b < 3 ? nq : nkv;
    *bufs[b] = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) (*bufs[b])[i] = 2.0f * urand();
  }
  cp_alibi_slopes(d.slopes, d.H, 8.0);
  cp_pool *pool = NULL;
  CHECK_RC(0, cp_pool_create(&pool, 2));

  cp_rule r;
  cp_rule_init(&r);
  kernel_case(pool, &d, "alibi identity", &r, CP_ATTN_POS_ALIBI, 0, 300);
  r.n_temperature = 1, r.temperature[0] = 0.7;
  kernel_case(pool, &d, "alibi temperature", &r, CP_ATTN_POS_ALIBI, 0, 300);
  cp_rule_init(&r);
  r.has_lambda = true, r.n_global = 3, r.n_local = 40;
  kernel_case(pool, &d, "alibi lambda", &r, CP_ATTN_POS_ALIBI, 0, 300);
  r.has_top_k = true, r.top_k = 3, r.top_k_rows = CP_TOPK_ROWS_ALL, r.top_k_distance = 20;
  kernel_case(pool, &d, "alibi lambda top-k all", &r, CP_ATTN_POS_ALIBI, 0, 300);
  r.top_k_rows = CP_TOPK_ROWS_DECODE, r.top_k_distance = 0, r.distance_ceiling = 25;
  kernel_case(pool, &d, "alibi lambda top-k decode", &r, CP_ATTN_POS_ALIBI, 0, 300);
  kernel_case(pool, &d, "alibi lambda top-k decode", &r, CP_ATTN_POS_ALIBI, 299, 1);
  cp_rule_init(&r);
  r.alibi_mode = CP_ALIBI_PROGRESSIVE, r.train_len = 50;
  kernel_case(pool, &d, "alibi progressive", &r, CP_ATTN_POS_ALIBI, 0, 300);
  r.alibi_mode = CP_ALIBI_DYNAMIC;
  kernel_case(pool, &d, "alibi dynamic", &r, CP_ATTN_POS_ALIBI, 0, 300);
  cp_rule_init(&r);
  r.distance_ceiling = 50;
  kernel_case(pool, &d, "rope ceiling", &r, CP_ATTN_POS_ROPE, 0, 300);
  cp_rule_init(&r);
  r.has_lambda = true, r.n_global = 5, r.n_local = 33;
  r.has_top_k = true, r.top_k = 4, r.top_k_rows = CP_TOPK_ROWS_ALL;
  kernel_case(pool, &d, "rope lambda top-k all", &r, CP_ATTN_POS_ROPE, 0, 300);
  kernel_case(pool, &d, "rope lambda top-k all", &r, CP_ATTN_POS_ROPE, 250, 50);

  /* FIRE (L 100 of 300 keys): rows past L take their bias from a table built a chunk of tiles at
   * a time; 1 byte makes every 32-row tile its own chunk (10 here). */
  enum { FW = 8 };
  float fw[FW + FW + FW * FW + FW + 4 * FW + 4];
  for (size_t i = 0; i < sizeof fw / sizeof *fw; i++) fw[i] = urand();
  d.fire = (cp_fire_mlp){fw, fw + FW, fw + 2 * FW, fw + 2 * FW + FW * FW, fw + 3 * FW + FW * FW,
                         fw + 7 * FW + FW * FW, FW, 2, 0.8, 100.0};
  cp_rule_init(&r);
  kernel_case_bytes(pool, &d, "fire identity", &r, CP_ATTN_POS_FIRE, 0, 300, 1);
  kernel_case_bytes(pool, &d, "fire identity decode", &r, CP_ATTN_POS_FIRE, 299, 1, 1);
  kernel_case_bytes(pool, &d, "fire identity rows 90+60", &r, CP_ATTN_POS_FIRE, 90, 60, 1);
  r.fire_threshold = 200;
  kernel_case_bytes(pool, &d, "fire threshold 200", &r, CP_ATTN_POS_FIRE, 0, 300, 1);
  cp_rule_init(&r);
  r.has_lambda = true, r.n_global = 3, r.n_local = 40;
  r.has_top_k = true, r.top_k = 3, r.top_k_rows = CP_TOPK_ROWS_ALL, r.top_k_distance = 20;
  kernel_case_bytes(pool, &d, "fire lambda top-k all", &r, CP_ATTN_POS_FIRE, 0, 300, 1);
  d.fire.layers = 1, d.fire.w2 = fw + 2 * FW, d.fire.b2 = fw + 6 * FW; /* [4, 8] and [4] */
  cp_rule_init(&r);
  kernel_case_bytes(pool, &d, "fire one hidden layer", &r, CP_ATTN_POS_FIRE, 0, 300, 1);
  cp_pool_free(pool);
  for (int b = 0; b < 6; b++) free(*bufs[b]);
}

/* ---------------------------------------------------------------- 3. whole engine */

enum { V = 64, D = 64, NL = 2, NH = 4, NKV = 2, DH = 16, FF = 128 };

typedef enum { MODEL_OK, MODEL_BAD_SHAPE, MODEL_NO_HEAD } model_variant;

/* Random Llama-layout model in dir; eos_token_id as given (-1: none). */
static int write_model(const char *dir, model_variant variant, int eos) {
  char path[600];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "{\"model_type\": \"llama\", \"vocab_size\": %d, \"hidden_size\": %d, \"num_hidden_layers\": %d,"
             " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"intermediate_size\": %d,"
             " \"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0,"
             " \"eos_token_id\": %d}\n",
          V, D, NL, NH, NKV, FF, eos);
  fclose(f);
  rng_state = 0x9e3779b97f4a7c15ull; /* the same weights every time */
  enum { MAXT = 4 + NL * 9 };
  cp_tensor t[MAXT];
  char names[MAXT][96];
  float *data[MAXT];
  int n = 0;
#define ADD(nm, d0, d1, nd, scale, one)                                                      \
  do {                                                                                       \
    snprintf(names[n], sizeof names[n], "%s", nm);                                           \
    memset(&t[n], 0, sizeof t[n]);                                                           \
    t[n].name = names[n], t[n].dtype = CP_F32, t[n].ndim = nd;                               \
    t[n].shape[0] = d0, t[n].shape[1] = d1;                                                  \
    size_t cnt = (size_t)(d0) * (nd == 2 ? (size_t)(d1) : 1);                                \
    data[n] = malloc(cnt * sizeof(float));                                                   \
    for (size_t x = 0; x < cnt; x++) data[n][x] = (one) ? 1.0f + 0.1f * urand() : (scale) * urand(); \
    t[n].data = data[n];                                                                     \
    n++;                                                                                     \
  } while (0)
  char nm[96];
  ADD("model.embed_tokens.weight", V, D, 2, 1.0f, 0);
  for (int l = 0; l < NL; l++) {
    snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l); ADD(nm, D, 0, 1, 0, 1);
    snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l); ADD(nm, D, 0, 1, 0, 1);
    snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_proj.weight", l);
    ADD(nm, NH * DH, D + (variant == MODEL_BAD_SHAPE && l == 1), 2, 0.4f, 0);
    snprintf(nm, sizeof nm, "model.layers.%d.self_attn.k_proj.weight", l); ADD(nm, NKV * DH, D, 2, 0.4f, 0);
    snprintf(nm, sizeof nm, "model.layers.%d.self_attn.v_proj.weight", l); ADD(nm, NKV * DH, D, 2, 0.2f, 0);
    snprintf(nm, sizeof nm, "model.layers.%d.self_attn.o_proj.weight", l); ADD(nm, D, NH * DH, 2, 0.2f, 0);
    snprintf(nm, sizeof nm, "model.layers.%d.mlp.gate_proj.weight", l); ADD(nm, FF, D, 2, 0.2f, 0);
    snprintf(nm, sizeof nm, "model.layers.%d.mlp.up_proj.weight", l); ADD(nm, FF, D, 2, 0.2f, 0);
    snprintf(nm, sizeof nm, "model.layers.%d.mlp.down_proj.weight", l); ADD(nm, D, FF, 2, 0.2f, 0);
  }
  ADD("model.norm.weight", D, 0, 1, 0, 1);
  if (variant != MODEL_NO_HEAD) ADD("lm_head.weight", V, D, 2, 0.3f, 0);
#undef ADD
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  int rc = cp_st_write_file(path, t, (size_t)n, NULL, 0);
  for (int i = 0; i < n; i++) free(data[i]);
  return rc;
}

static long vm_hwm_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) kib = strtol(line + 6, NULL, 10);
  if (f) fclose(f);
  return kib;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *forward(const cp_model *m, const cp_rule *r, int threads, const int64_t *ids, int64_t n) {
  cp_engine_params ep;
  cp_engine_params_init(&ep);
  ep.threads = threads;
  cp_engine *e = NULL;
  float *logits = malloc((size_t)n * V * sizeof *logits);
  CHECK_RC(0, cp_engine_create(&e, m, r, &ep));
  if (e) CHECK_RC(0, cp_engine_forward(e, logits, ids, n, NULL, 0));
  cp_engine_free(e);
  return logits;
}

static void test_engine(const char *dir) {
  cp_model *m = NULL;
  CHECK_RC(0, cp_model_open(&m, dir));
  if (!m) return;
  enum { LONG = 16384, SHORT = 700, PROMPT = 300, NEW = 6 };
  int64_t *ids = malloc(LONG * sizeof *ids);
  for (int i = 0; i < LONG; i++) ids[i] = (int64_t)((urand() + 1.0f) * 0.5f * V) % V;
  cp_rule lam;
  cp_rule_init(&lam);
  lam.has_lambda = true, lam.n_global = 4, lam.n_local = 64; /* ceiling 64 implied: RoPE far path */

  /* 16K tokens: memory grows with L, not L^2 (an L^2 score matrix alone would be 4 GiB). */
  double t0 = now();
  float *big = forward(m, &lam, 2, ids, LONG);
  double secs = now() - t0;
  long hwm = vm_hwm_kib();
  size_t nonfinite = 0;
  for (size_t i = 0; i < (size_t)LONG * V; i++) nonfinite += !isfinite(big[i]);
  printf("16K-token forward (Lambda 4/64): %.2f s, peak RSS %.1f MiB\n", secs, hwm / 1024.0);
  CHECK_MSG(nonfinite == 0, "%zu non-finite logits", nonfinite);
  CHECK_MSG(hwm > 0 && hwm < 1024 * 1024, "peak RSS %ld KiB is not under 1 GiB", hwm);

  /* Rows of a short pass equal the first rows of the long one (causal + Lambda). */
  float *s1 = forward(m, &lam, 1, ids, SHORT), *s2 = forward(m, &lam, 2, ids, SHORT);
  double e = test_rel_err(s1, big, (size_t)SHORT * V);
  printf("prefix rows of the 16K pass vs a %d-token pass: %.2e\n", SHORT, e);
  CHECK_MSG(e <= 1e-5, "prefix rows differ by %.3g", e);
  CHECK_MSG(memcmp(s1, s2, (size_t)SHORT * V * sizeof *s1) == 0, "1 and 2 threads give different logits");
  free(big), free(s1), free(s2);

  /* KV-cache decoding = full forward over prompt + generated ids (identity and Lambda). */
  for (int variant = 0; variant < 2; variant++) {
    cp_rule id;
    cp_rule_init(&id);
    const cp_rule *r = variant ? &lam : &id;
    cp_engine_params ep;
    cp_engine_params_init(&ep);
    ep.threads = 2;
    cp_engine *eng = NULL;
    CHECK_RC(0, cp_engine_create(&eng, m, r, &ep));
    if (!eng) continue;
    int64_t gen[NEW], n_out = 0;
    float *steps = malloc((size_t)NEW * V * sizeof *steps);
    CHECK_RC(0, cp_engine_generate(eng, gen, &n_out, steps, ids, PROMPT, NULL, 0, NEW, false));
    CHECK(n_out == NEW);
    int64_t *all = malloc((PROMPT + NEW) * sizeof *all);
    memcpy(all, ids, PROMPT * sizeof *all);
    memcpy(all + PROMPT, gen, NEW * sizeof *all);
    float *full = forward(m, r, 2, all, PROMPT + NEW - 1);
    double worst = 0;
    for (int k = 0; k < NEW; k++) {
      double ek = test_rel_err(steps + (size_t)k * V, full + (size_t)(PROMPT - 1 + k) * V, V);
      if (ek > worst) worst = ek;
    }
    printf("KV-cache decoding vs full forward (%s): %.2e\n", variant ? "Lambda" : "identity", worst);
    CHECK_MSG(worst <= 1e-4, "decoding differs from the full forward by %.3g", worst);
    free(steps), free(all), free(full);
    cp_engine_free(eng);
  }
  free(ids);
  cp_model_free(m);
}

/* Shape and presence checks name the tensor; greedy decoding stops after eos when asked. */
static void test_model_checks(const char *dir) {
  cp_model *m = NULL;
  CHECK(write_model(dir, MODEL_BAD_SHAPE, -1) == 0);
  CHECK_RC(CP_EMODEL_TENSOR, cp_model_open(&m, dir));
  CHECK_MSG(strstr(cp_error_message(), "'model.layers.1.self_attn.q_proj.weight'") &&
                strstr(cp_error_message(), "[64,65]") && strstr(cp_error_message(), "[64,64]"),
            "message: %s", cp_error_message());
  CHECK(m == NULL);
  CHECK(write_model(dir, MODEL_NO_HEAD, -1) == 0);
  CHECK_RC(CP_EMODEL_TENSOR, cp_model_open(&m, dir));
  CHECK_MSG(strstr(cp_error_message(), "lm_head.weight"), "message: %s", cp_error_message());

  int64_t ids[5] = {1, 2, 3, 4, 5}, gen[8], n_out = 0;
  CHECK(write_model(dir, MODEL_OK, -1) == 0);
  CHECK_RC(0, cp_model_open(&m, dir));
  cp_engine *e = NULL;
  if (m) CHECK_RC(0, cp_engine_create(&e, m, NULL, NULL));
  if (e) {
    int64_t bad[2] = {3, V};
    CHECK_RC(CP_EMODEL_INPUT, cp_engine_forward(e, NULL, bad, 2, NULL, 0));
    CHECK_RC(CP_EMODEL_INPUT, cp_engine_forward(e, NULL, bad, 0, NULL, 0));
    CHECK_RC(0, cp_engine_generate(e, gen, &n_out, NULL, ids, 5, NULL, 0, 8, true));
    CHECK(n_out == 8); /* no eos in the config: never stops early */
  }
  cp_engine_free(e);
  cp_model_free(m);
  m = NULL, e = NULL;
  if (n_out != 8) return;
  int64_t eos = gen[2], first = 0;
  while (gen[first] != eos) first++; /* eos may occur before index 2 */
  CHECK(write_model(dir, MODEL_OK, (int)eos) == 0);
  CHECK_RC(0, cp_model_open(&m, dir));
  if (m) CHECK_RC(0, cp_engine_create(&e, m, NULL, NULL));
  if (e) {
    int64_t again[8];
    CHECK_RC(0, cp_engine_generate(e, again, &n_out, NULL, ids, 5, NULL, 0, 8, true));
    CHECK_MSG(n_out == first + 1 && memcmp(again, gen, (size_t)n_out * sizeof *gen) == 0,
              "stop_at_eos: %lld tokens, want %lld", (long long)n_out, (long long)first + 1);
  }
  cp_engine_free(e);
  cp_model_free(m);
}

int main(void) {
  test_ranges();
  test_kernel();
  char dir[] = "/tmp/ctxpatch_engine_stream_XXXXXX";
  if (!mkdtemp(dir)) {
    CHECK_MSG(0, "mkdtemp failed");
    return test_finish();
  }
  test_model_checks(dir);
  int rc = write_model(dir, MODEL_OK, -1);
  CHECK_MSG(rc == 0, "writing the random model failed: %s", cp_error_message());
  if (rc == 0) test_engine(dir);
  char p1[600], p2[600];
  snprintf(p1, sizeof p1, "%s/config.json", dir);
  snprintf(p2, sizeof p2, "%s/model.safetensors", dir);
  unlink(p1);
  unlink(p2);
  rmdir(dir);
  return test_finish();
}
