/* Shared prefixes (cp_engine_cache, issue 34): on the probe models of every positional scheme and
 * their rules (ALiBi static and progressive, RoPE with LM-Infinite's Lambda mask, ceiling and
 * top-k middle tokens on decode rows and on all rows, FIRE with its threshold, a temperature
 * schedule), the probe prompts of one length run in order of depth through one cache: every step's
 * logits and every output are bit-identical (memcmp) to cp_engine_generate's, and the prefix rows
 * really come from the cache (the rows reused are those of the common prefix with the previous
 * prompt, in whole 128-row blocks short of either's last row, computed here from the ids).
 * The same on a CUDA device when one is present. The refusals: T5 and dynamic ALiBi (CP_EUNSUPPORTED, saying why), a
 * prompt past the cache's size (CP_EARG); a rule change empties the cache.
 * cp_verify_run with a baseline (issue 32): the two sides on two host threads (side_threads 2, the
 * CUDA default) give every count, answer, token total and ppl figure of the sides run one after
 * the other (side_threads 1, the CPU default), each side's cache on its own thread. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctxpatch/engine/cuda.h"
#include "ctxpatch/engine/engine.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/model/rule.h"
#include "ctxpatch/tokenizers/tokenizer.h"
#include "ctxpatch/verify/verify.h"
#include "test.h"

enum { N_NEW = 3, N_DEPTHS = 3, SAMPLES = 2, LENGTH = 600, ALIGN = 128, CUDA_ALIGN = 256 };

static cp_model *open_probe(const char *src, const char *name) {
  cp_model *m = NULL;
  CHECK_RC(0, cp_model_open(&m, test_path(test_path(src, "examples/probe-models"), name)));
  return m;
}

static int parse(cp_rule *r, const char *json) { return cp_rule_parse(r, json, strlen(json), "test rule"); }

/* The rows a prompt should take from the cache, computed here from the two prompts' ids: their
 * common prefix, short of either's last row, in whole blocks of `align` (the backend's row blocks). */
static int64_t expected_reuse(const int64_t *prev, int64_t n_prev, const int64_t *ids, int64_t n, int64_t align) {
  int64_t same = 0;
  while (prev && same < n_prev - 1 && same < n - 1 && prev[same] == ids[same]) same++;
  return same / align * align;
}

/* Runs the prompts of `probes` at LENGTH in order of depth through one cache per probe and alone:
 * every step's logits and outputs must be the same bits, and the rows reused those expected. */
static void same_as_alone(const char *label, const cp_model *m, const cp_tokenizer *tok, const char *rule_json,
                          const cp_probe_kind *probes, int n_probes, cp_device device, int64_t *reused_all,
                          int64_t *prompt_all) {
  cp_rule rule;
  cp_rule_init(&rule);
  CHECK_RC(0, parse(&rule, rule_json));
  cp_engine_params ep;
  cp_engine_params_init(&ep);
  ep.threads = 2;
  ep.device = device;
  cp_engine *e = NULL;
  CHECK_RC(0, cp_engine_create(&e, m, &rule, &ep));
  if (!e) return;
  const size_t V = (size_t)m->vocab;
  float *want = malloc(N_NEW * V * sizeof *want), *got = malloc(N_NEW * V * sizeof *got);
  int64_t out_want[N_NEW], out_got[N_NEW], reused_here = 0, prompts_here = 0;
  int bad = 0;
  for (int k = 0; k < n_probes; k++) {
    cp_engine_cache *c = NULL;
    cp_probe_sample prev = {0};
    CHECK_RC(0, cp_engine_cache_create(&c, e, LENGTH + N_NEW));
    for (int d = 0; c && d < N_DEPTHS; d++)
      for (int s = 0; s < SAMPLES; s++) {
        cp_probe_sample ps;
        CHECK_RC(0, cp_probe_make(&ps, tok, probes[k], LENGTH, d / (N_DEPTHS - 1.0), 1000 * d + s));
        int64_t nw = 0, ng = 0, reused = -1;
        memset(want, 0, N_NEW * V * sizeof *want); /* padding after an early eos compares equal */
        memset(got, 0, N_NEW * V * sizeof *got);
        CHECK_RC(0, cp_engine_generate(e, out_want, &nw, want, ps.ids, (int64_t)ps.n_ids, NULL, 0, N_NEW, true));
        CHECK_RC(0, cp_engine_generate_cached(c, out_got, &ng, got, ps.ids, (int64_t)ps.n_ids, N_NEW, true, &reused));
        const bool same = nw == ng && !memcmp(out_want, out_got, (size_t)nw * sizeof *out_want) &&
                          !memcmp(want, got, N_NEW * V * sizeof *want);
        const int64_t expect = expected_reuse(prev.ids, (int64_t)prev.n_ids, ps.ids, (int64_t)ps.n_ids,
                                              device == CP_DEVICE_CUDA ? CUDA_ALIGN : ALIGN);
        if ((!same || reused != expect) && bad++ < 3)
          CHECK_MSG(false, "%s: %s depth %d sample %d: %s (%lld rows reused, %lld expected)", label,
                    cp_probe_name(probes[k]), d, s, same ? "same bits" : "logits or outputs differ from the run alone",
                    (long long)reused, (long long)expect);
        reused_here += reused;
        prompts_here += (int64_t)ps.n_ids;
        cp_probe_sample_free(&prev);
        prev = ps;
      }
    cp_probe_sample_free(&prev);
    cp_engine_cache_free(c);
  }
  CHECK_MSG(bad == 0, "%s: %d prompts differ", label, bad);
  printf("%-34s %s: %lld of %lld prompt rows reused, logits bit-identical: %s\n", label,
         device == CP_DEVICE_CPU ? "cpu" : "cuda", (long long)reused_here, (long long)prompts_here, bad ? "NO" : "yes");
  *reused_all += reused_here;
  *prompt_all += prompts_here;
  free(want);
  free(got);
  cp_engine_free(e);
}

/* The refusals and the rule change. */
static void refusals(const char *src, const cp_tokenizer *tok) {
  cp_model *t5 = open_probe(src, "t5-probe"), *alibi = open_probe(src, "alibi-probe");
  cp_engine *e = NULL;
  cp_engine_cache *c = NULL;
  if (t5 && cp_engine_create(&e, t5, NULL, NULL) == 0) {
    CHECK_RC(CP_EUNSUPPORTED, cp_engine_cache_create(&c, e, 100));
    CHECK(c == NULL && strstr(cp_error_message(), "bidirectional encoder") && !strchr(cp_error_message(), '\n'));
    printf("t5: %s\n", cp_error_message());
  }
  cp_engine_free(e);
  e = NULL;
  cp_rule dyn;
  cp_rule_init(&dyn);
  CHECK_RC(0, parse(&dyn, "{\"alibi_scale\": {\"mode\": \"dynamic\"}, \"train_len\": 256}"));
  if (alibi && cp_engine_create(&e, alibi, &dyn, NULL) == 0) {
    CHECK_RC(CP_EUNSUPPORTED, cp_engine_cache_create(&c, e, 100));
    CHECK(c == NULL && strstr(cp_error_message(), "dynamic ALiBi"));
    printf("dynamic alibi: %s\n", cp_error_message());
    /* The identity on the same engine shares; a prompt past the cache's size is refused; a rule
     * change empties the cache (nothing reused, and the new rule's answers). */
    CHECK_RC(0, cp_engine_set_rule(e, NULL));
    CHECK_RC(0, cp_engine_cache_create(&c, e, LENGTH + N_NEW));
    cp_probe_sample ps;
    CHECK_RC(0, cp_probe_make(&ps, tok, CP_PROBE_PASSKEY, LENGTH, 0.5, 3));
    int64_t out[N_NEW], want[N_NEW], n = 0, nw = 0, reused = -1;
    if (c && ps.ids) {
      CHECK_RC(CP_EARG, cp_engine_generate_cached(c, out, &n, NULL, ps.ids, (int64_t)ps.n_ids, LENGTH, true, &reused));
      CHECK_RC(0, cp_engine_generate_cached(c, out, &n, NULL, ps.ids, (int64_t)ps.n_ids, N_NEW, true, &reused));
      CHECK(reused == 0);
      CHECK_RC(0, cp_engine_generate_cached(c, out, &n, NULL, ps.ids, (int64_t)ps.n_ids, N_NEW, true, &reused));
      CHECK_MSG(reused > 0 && reused == ((int64_t)ps.n_ids - 1) / ALIGN * ALIGN,
                "the same prompt again reused %lld rows", (long long)reused);
      cp_rule stat;
      cp_rule_init(&stat);
      CHECK_RC(0, parse(&stat, "{\"alibi_scale\": {\"mode\": \"static\", \"factor\": 3}}"));
      CHECK_RC(0, cp_engine_set_rule(e, &stat));
      CHECK_RC(0, cp_engine_generate(e, want, &nw, NULL, ps.ids, (int64_t)ps.n_ids, NULL, 0, N_NEW, true));
      CHECK_RC(0, cp_engine_generate_cached(c, out, &n, NULL, ps.ids, (int64_t)ps.n_ids, N_NEW, true, &reused));
      CHECK(reused == 0 && n == nw && !memcmp(out, want, (size_t)n * sizeof *out));
    }
    cp_probe_sample_free(&ps);
    cp_engine_cache_free(c);
  }
  cp_engine_free(e);
  cp_model_free(t5);
  cp_model_free(alibi);
}

/* verify with a baseline: sequential sides and two threads give the same result, field by field. */
static void sides_case(const char *src, const cp_tokenizer *tok) {
  cp_model *m = open_probe(src, "rope-probe");
  cp_rule rule;
  cp_rule_init(&rule);
  CHECK_RC(0, parse(&rule, "{\"lambda_mask\": {\"n_global\": 4, \"n_local\": 96}, \"top_k\": {\"k\": 3}}"));
  const char *fx = getenv("CTXPATCH_FIXTURES");
  char corpus[2048];
  snprintf(corpus, sizeof corpus, "%.1900s/third_party/text/tinystories_val_1000_eot.txt",
           fx ? fx : test_path(src, "../shared/fixtures"));
  const bool ppl = access(corpus, R_OK) == 0;
  const cp_probe_kind probes[] = {CP_PROBE_PASSKEY, CP_PROBE_LINES};
  const int64_t lengths[] = {160, 300};
  const double depths[] = {0.2, 0.8};
  cp_verify_result *r[2] = {NULL, NULL};
  for (int t = 0; t < 2 && m; t++) {
    cp_verify_params p;
    cp_verify_params_init(&p);
    p.probes = probes, p.n_probes = 2, p.lengths = lengths, p.n_lengths = 2, p.depths = depths, p.n_depths = 2;
    p.samples = 2, p.threads = 0, p.baseline = true, p.max_new_tokens = 4, p.side_threads = t == 0 ? 1 : 2;
    p.corpus_path = ppl ? corpus : NULL, p.ppl_windows = 2, p.ppl_buckets = 4;
    CHECK_RC(0, cp_verify_run(&r[t], m, tok, &rule, &p));
  }
  if (r[0] && r[1]) {
    const size_t cells = 2 * 2 * 2, nb = 2 * 4;
    bool same = r[0]->side_tokens[0] == r[1]->side_tokens[0] && r[0]->side_tokens[1] == r[1]->side_tokens[1] &&
                r[0]->side_reused[0] == r[1]->side_reused[0] && r[0]->side_reused[1] == r[1]->side_reused[1] &&
                !memcmp(r[0]->answered, r[1]->answered, cells * 2);
    for (int s = 0; s < 2; s++) {
      same = same && !memcmp(r[0]->correct[s], r[1]->correct[s], cells * sizeof(int)) &&
             !memcmp(r[0]->only[s], r[1]->only[s], cells * sizeof(int));
      if (ppl)
        same = same && !memcmp(r[0]->ppl_nll[s], r[1]->ppl_nll[s], nb * sizeof(double)) &&
               !memcmp(r[0]->ppl_mean[s], r[1]->ppl_mean[s], 2 * sizeof(double));
    }
    printf("verify sides: one thread %.2f s, two threads %.2f s (%lld tokens, ppl %s): %s\n", r[0]->seconds,
           r[1]->seconds, (long long)r[0]->tokens, ppl ? "run" : "skipped, no fixtures",
           same ? "same results" : "DIFFERENT results");
    CHECK_MSG(same, "verify: two side threads change the result");
    CHECK(r[0]->side_tokens[1] > 0);
  }
  for (int t = 0; t < 2; t++) cp_verify_result_free(r[t]);
  cp_model_free(m);
}

int main(void) {
  const char *src = test_env("CTXPATCH_SOURCE_DIR");
  cp_tokenizer *tok = NULL;
  CHECK_RC(0, cp_tokenizer_open(&tok, test_path(src, "examples/probe-models/tokenizer.json")));
  if (!tok) return test_finish();
  static const struct {
    const char *model, *label, *rule;
  } cases[] = {
      {"alibi-probe", "alibi identity", "{}"},
      {"alibi-probe", "alibi static x2", "{\"alibi_scale\": {\"mode\": \"static\", \"factor\": 2}}"},
      {"alibi-probe", "alibi progressive", "{\"alibi_scale\": {\"mode\": \"progressive\"}, \"train_len\": 256}"},
      {"rope-probe", "rope identity", "{}"},
      {"rope-probe", "rope lambda + ceiling + top-k",
       "{\"lambda_mask\": {\"n_global\": 10, \"n_local\": 256}, \"distance_ceiling\": 256, \"top_k\": {\"k\": 5}}"},
      {"rope-probe", "rope lambda + top-k on all rows",
       "{\"lambda_mask\": {\"n_global\": 4, \"n_local\": 100}, \"top_k\": {\"k\": 3, \"rows\": \"all\"}}"},
      {"rope-probe", "rope temperature schedule",
       "{\"temperature_schedule\": {\"points\": [[256, 1.0], [1024, 0.8]]}, \"temperature_scope\": \"self\"}"},
      {"fire-probe", "fire identity", "{}"},
      {"fire-probe", "fire threshold 300", "{\"fire_threshold\": 300}"},
  };
  /* passkey for every rule (its filler is shared up to the key); every probe under the rule with
   * the most row-dependent mask (Lambda with top-k on all rows) */
  const cp_probe_kind passkey[] = {CP_PROBE_PASSKEY};
  const cp_probe_kind all[] = {CP_PROBE_PASSKEY, CP_PROBE_LINES, CP_PROBE_NEEDLE, CP_PROBE_MULTIKEY};
  int64_t reused = 0, prompt = 0;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    cp_model *m = open_probe(src, cases[i].model);
    const bool every = strstr(cases[i].label, "all rows") != NULL;
    if (m)
      same_as_alone(cases[i].label, m, tok, cases[i].rule, every ? all : passkey, every ? 4 : 1, CP_DEVICE_CPU, &reused,
                    &prompt);
    cp_model_free(m);
  }
  CHECK_MSG(reused > 0, "no row reused");
  /* On a device (not in CI): the same through cuBLAS and the fused kernel (docs/cuda.md). */
  char why[512];
  int64_t dr = 0, dp = 0;
  if (cp_cuda_available(why, sizeof why)) {
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
      cp_model *m = open_probe(src, cases[i].model);
      if (m) same_as_alone(cases[i].label, m, tok, cases[i].rule, all, 4, CP_DEVICE_CUDA, &dr, &dp);
      cp_model_free(m);
    }
  } else {
    printf("cuda: not checked here (%s); tests/test_cuda_engine_emulated checks the CUDA backend's host code\n", why);
  }
  refusals(src, tok);
  sides_case(src, tok);
  cp_tokenizer_free(tok);
  return test_finish();
}
