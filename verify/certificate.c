/* The verify certificate (docs/certificate.md). Deterministic: the same inputs give the same bytes. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/file_list.h"
#include "ctxpatch/model/hf_config.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/num.h"
#include "ctxpatch/verify/sequential.h"
#include "ctxpatch/verify/stats.h"
#include "ctxpatch/verify/verify.h"
#include "model/rule_json.h"
#include "verify/certificate_json.h"

#define CERTIFICATE_VERSION 1

/* Skipped by the certificate's listing: hidden names, and files below the first level of
 * subfolders (SHA256SUMS lists "onnx/model.onnx" and no deeper). */
static bool listed_file(const cp_file_entry *e) {
  const char *slash = strchr(e->path, '/');
  if (!S_ISREG(e->mode) || e->path[0] == '.' || (slash && (slash[1] == '.' || strchr(slash + 1, '/')))) return false;
  return true;
}

/* Regular files of the model folder (or the one file) and of its subfolders one level down
 * ("onnx/model.onnx"), sorted by relative path, each with its SHA-256, as the OpenSSF
 * model-signing manifest lists them. */
int cp_certificate_files(cJSON *files, const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return cp_error_set(CP_EIO, "%s: %s", path, strerror(errno));
  char hex[65];
  if (!S_ISDIR(st.st_mode)) {
    int rc = cp_sha256_file(hex, path);
    if (rc < 0) return rc;
    const char *slash = strrchr(path, '/');
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "path", slash ? slash + 1 : path);
    cJSON_AddStringToObject(f, "sha256", hex);
    cJSON_AddItemToArray(files, f);
    return 0;
  }
  cp_file_list l = {0};
  int rc = cp_file_list_make(&l, path);
  for (size_t i = 0; i < l.n && rc == 0; i++) {
    if (!listed_file(&l.items[i])) continue;
    char *full = cp_path_join(path, l.items[i].path);
    rc = full ? cp_sha256_file(hex, full) : cp_nomem("%s", path);
    free(full);
    if (rc < 0) break;
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "path", l.items[i].path);
    cJSON_AddStringToObject(f, "sha256", hex);
    cJSON_AddItemToArray(files, f);
  }
  cp_file_list_free(&l);
  return rc;
}

/* Measured numbers are written at CP_NUM_JSON_DIGITS significant digits (base/num.h); what a
 * re-run reads back (depths, seed, the rule) is written exactly. */
static double num(double x) { return cp_num_round(x, CP_NUM_JSON_DIGITS); }

static cJSON *num_array(const double *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(num(v[i])));
  return a;
}

static cJSON *ci_array(int64_t k, int64_t n) {
  double ci[2];
  cp_wilson_interval(&ci[0], &ci[1], k, n, CP_STATS_Z95);
  return num_array(ci, 2);
}

static void ppl_results(cJSON *obj, const cp_verify_result *r, cp_verify_side side) {
  cJSON *arr = cJSON_AddArrayToObject(obj, "ppl");
  for (int l = 0; l < r->n_lengths; l++) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "length", (double)r->lengths[l]);
    cJSON_AddNumberToObject(c, "nll", num(r->ppl_mean[side][l]));
    cJSON_AddItemToObject(c, "nll_by_bucket", num_array(r->ppl_nll[side] + (size_t)l * r->ppl_buckets, r->ppl_buckets));
    cJSON_AddItemToArray(arr, c);
  }
}

static cJSON *side_results(const cp_verify_result *r, cp_verify_side side) {
  cJSON *obj = cJSON_CreateObject();
  for (int p = 0; p < r->n_probes; p++) {
    cJSON *probe = cJSON_AddArrayToObject(obj, cp_probe_name(r->probes[p]));
    for (int l = 0; l < r->n_lengths; l++) {
      cJSON *c = cJSON_CreateObject();
      int64_t k = cp_verify_correct_at(r, side, p, l), n = cp_verify_prompts_in(r, p, l);
      cJSON_AddNumberToObject(c, "length", (double)r->lengths[l]);
      if (r->looks_every > 0) cJSON_AddNumberToObject(c, "prompts", (double)n); /* a sequential cell may stop early */
      cJSON_AddNumberToObject(c, "accuracy", num(cp_verify_accuracy_at(r, side, p, l)));
      cJSON_AddItemToObject(c, "accuracy_ci95", ci_array(k, n));
      cJSON *by = cJSON_AddArrayToObject(c, "correct_by_depth");
      for (int d = 0; d < r->n_depths; d++)
        cJSON_AddItemToArray(by, cJSON_CreateNumber(r->correct[side][((size_t)p * r->n_lengths + l) * r->n_depths + d]));
      if (r->looks_every > 0) { /* a sequential cell's prompts per depth: the heatmap's denominators */
        cJSON *pd = cJSON_AddArrayToObject(c, "prompts_by_depth");
        for (int d = 0; d < r->n_depths; d++)
          cJSON_AddItemToArray(pd, cJSON_CreateNumber((double)cp_verify_prompts_at_depth(r, p, l, d)));
      }
      cJSON_AddItemToArray(probe, c);
    }
  }
  if (r->has_ppl) ppl_results(obj, r, side);
  if (!isnan(r->pmax[side][0])) {
    cJSON *att = cJSON_AddArrayToObject(obj, "attention");
    for (int l = 0; l < r->n_lengths; l++) {
      cJSON *c = cJSON_CreateObject();
      cJSON_AddNumberToObject(c, "length", (double)r->lengths[l]);
      cJSON_AddNumberToObject(c, "pmax", num(r->pmax[side][l]));
      cJSON_AddNumberToObject(c, "entropy", num(r->entropy[side][l]));
      cJSON_AddItemToArray(att, c);
    }
  }
  return obj;
}

/* A sequential cell's looks ([prompts, lost, gained] at each), why it stopped, and whether its own
 * gain boundary was crossed. */
static void sequential_cell(cJSON *c, const cp_verify_result *r, int p, int l) {
  size_t cl = (size_t)p * (size_t)r->n_lengths + (size_t)l;
  cJSON *looks = cJSON_AddArrayToObject(c, "looks");
  for (int j = 0; j < r->looks_taken[cl]; j++) {
    int64_t n = ((int64_t)j + 1) * r->looks_every;
    double v[3] = {(double)(n < cp_verify_prompts_at(r) ? n : cp_verify_prompts_at(r)),
                   r->look_pairs[(cl * (size_t)r->n_looks + (size_t)j) * 2],
                   r->look_pairs[(cl * (size_t)r->n_looks + (size_t)j) * 2 + 1]};
    cJSON_AddItemToArray(looks, cJSON_CreateDoubleArray(v, 3));
  }
  cJSON_AddStringToObject(c, "stop", cp_seq_stop_name((cp_seq_stop)r->stop[cl]));
  cJSON_AddBoolToObject(c, "gain_boundary", r->gain_crossed[cl] != 0);
}

/* statistics.sequential: the design, its levels per look and what it guarantees. */
static void sequential_design(cJSON *s, const cp_verify_result *r, const cp_verify_thresholds *t) {
  cp_seq_design d;
  if (cp_verify_seq_design(&d, r, t) < 0) {
    cp_error_clear();
    return;
  }
  cJSON *o = cJSON_AddObjectToObject(s, "sequential");
  cJSON_AddStringToObject(o, "design", "group-sequential-bonferroni");
  cJSON_AddStringToObject(o, "spending", "haybittle-peto: the interim looks share 10% of alpha equally, the last look keeps 90%");
  cJSON_AddNumberToObject(o, "looks_every", (double)d.every);
  cJSON_AddNumberToObject(o, "looks", d.n_looks);
  cJSON_AddNumberToObject(o, "prompts_max", (double)d.n_max);
  cJSON_AddNumberToObject(o, "alpha", d.alpha);
  double *lv = malloc((size_t)d.n_looks * 3 * sizeof *lv);
  if (!lv) return; /* the levels are derived from the rest; cJSON's own failures are as silent */
  for (int j = 0; j < d.n_looks; j++) {
    lv[j] = num(cp_seq_fail_level(&d, j));
    lv[d.n_looks + j] = num(cp_seq_futility_level(&d, j));
    lv[2 * d.n_looks + j] = num(cp_seq_gain_level(&d, j));
  }
  cJSON_AddItemToObject(o, "fail_levels", cJSON_CreateDoubleArray(lv, d.n_looks));
  cJSON_AddNumberToObject(o, "futility_drop", d.futility_drop);
  cJSON_AddItemToObject(o, "futility_levels", cJSON_CreateDoubleArray(lv + d.n_looks, d.n_looks));
  int gain_cells = 0; /* the design counts at least one; this is how many the gain test pools */
  for (int l = 0; l < r->n_lengths; l++) gain_cells += r->has_baseline && cp_verify_gain_length(r, t, l);
  cJSON_AddNumberToObject(o, "gain_cells", gain_cells * r->n_probes);
  cJSON_AddItemToObject(o, "gain_levels", cJSON_CreateDoubleArray(lv + 2 * d.n_looks, d.n_looks));
  cJSON_AddNumberToObject(o, "gain_final_alpha", num(cp_seq_gain_final_alpha(&d)));
  free(lv);
  /* the gain-futility rule: its threshold (0: none) and the alternative it is stated against */
  cJSON *gf = cJSON_AddObjectToObject(o, "gain_futility");
  cJSON_AddStringToObject(gf, "rule", "conditional-power");
  cJSON_AddNumberToObject(gf, "gamma", d.gain_gamma);
  cJSON_AddStringToObject(gf, "alternative", "each remaining prompt of the gain cells gained with probability 'gained', "
                                             "none lost");
  if (isnan(d.gain_target)) cJSON_AddNullToObject(gf, "gained");
  else cJSON_AddNumberToObject(gf, "gained", num(d.gain_target));
  cJSON_AddNumberToObject(gf, "power", CP_STATS_POWER);
  int64_t used = 0, planned = 0;
  for (int p = 0; p < r->n_probes; p++)
    for (int l = 0; l < r->n_lengths; l++) used += cp_verify_prompts_in(r, p, l), planned += d.n_max;
  cJSON_AddNumberToObject(o, "prompts_used", (double)used);
  cJSON_AddNumberToObject(o, "prompts_planned", (double)planned);
}

/* results.comparison: the paired test per probe and length (with a baseline). */
static cJSON *comparison(const cp_verify_result *r, const cp_verify_thresholds *t) {
  cJSON *obj = cJSON_CreateObject();
  for (int p = 0; p < r->n_probes; p++) {
    cJSON *probe = cJSON_AddArrayToObject(obj, cp_probe_name(r->probes[p]));
    for (int l = 0; l < r->n_lengths; l++) {
      int64_t lost, gained;
      double pv = cp_verify_pair_test(r, p, l, t->margin, &lost, &gained);
      cJSON *c = cJSON_CreateObject();
      cJSON_AddNumberToObject(c, "length", (double)r->lengths[l]);
      int64_t n = cp_verify_prompts_in(r, p, l);
      cJSON_AddNumberToObject(c, "pairs", (double)n);
      cJSON_AddNumberToObject(c, "lost", (double)lost);
      cJSON_AddNumberToObject(c, "gained", (double)gained);
      cJSON_AddNumberToObject(c, "drop", num(n ? (double)(lost - gained) / (double)n : 0));
      cJSON_AddNumberToObject(c, "p_value", num(pv));
      if (r->looks_every > 0) sequential_cell(c, r, p, l);
      cJSON_AddItemToArray(probe, c);
    }
  }
  return obj;
}

/* statistics: what the intervals and the test are, and what the test can detect. */
static cJSON *statistics(const cp_verify_result *r, const cp_verify_thresholds *t) {
  cJSON *s = cJSON_CreateObject();
  int64_t n = cp_verify_prompts_at(r);
  double drop = cp_verify_detectable_drop(r, t);
  cJSON_AddStringToObject(s, "interval", "wilson-score");
  cJSON_AddNumberToObject(s, "confidence", 0.95);
  cJSON_AddStringToObject(s, "test", "tango-score-paired-noninferiority");
  cJSON_AddStringToObject(s, "alternative", "drop > margin");
  cJSON_AddNumberToObject(s, "alpha", t->alpha);
  cJSON_AddNumberToObject(s, "margin", t->margin);
  cJSON_AddNumberToObject(s, "pairs", (double)n);
  cJSON_AddNumberToObject(s, "power", CP_STATS_POWER);
  if (isnan(drop)) cJSON_AddNullToObject(s, "detectable_drop");
  else cJSON_AddNumberToObject(s, "detectable_drop", num(drop));
  if (r->has_baseline && t->n_no_regression > 0) { /* the gain test, also when not required */
    cp_verify_gain_test g;
    cp_verify_gain(&g, r, t);
    cJSON *o = cJSON_AddObjectToObject(s, "gain");
    cJSON_AddStringToObject(o, "test", "exact-sign-test-paired");
    cJSON_AddStringToObject(o, "alternative", "gained > lost");
    cJSON *ls = cJSON_AddArrayToObject(o, "lengths");
    for (int l = 0; l < r->n_lengths; l++) /* the lengths cp_verify_gain pooled */
      if (cp_verify_gain_length(r, t, l)) cJSON_AddItemToArray(ls, cJSON_CreateNumber((double)r->lengths[l]));
    cJSON_AddNumberToObject(o, "lost", (double)g.lost);
    cJSON_AddNumberToObject(o, "gained", (double)g.gained);
    cJSON_AddNumberToObject(o, "p_value", num(g.p_value));
    if (r->has_ppl) cJSON_AddNumberToObject(o, "ppl_nll_saved", num(g.ppl_saved));
    if (r->looks_every > 0) { /* the pooled test's level, and whether a cell's own boundary showed it */
      cJSON_AddNumberToObject(o, "level", num(g.level));
      cJSON_AddBoolToObject(o, "boundary", g.boundary);
      cJSON_AddBoolToObject(o, "futility", g.futile); /* the gain-futility rule ended the pooled test */
    }
    cJSON_AddBoolToObject(o, "found", g.found);
  }
  if (r->looks_every > 0) sequential_design(s, r, t);
  return s;
}

static void ppl_settings(cJSON *probes, const cp_verify_result *r, const cp_ppl_corpus *corpus) {
  cJSON *p = cJSON_AddObjectToObject(probes, "ppl");
  const char *slash = strrchr(corpus->path, '/');
  cJSON_AddStringToObject(p, "corpus", slash ? slash + 1 : corpus->path);
  cJSON_AddStringToObject(p, "corpus_sha256", corpus->sha256);
  cJSON_AddStringToObject(p, "delimiter", corpus->delimiter);
  cJSON_AddNumberToObject(p, "documents", (double)corpus->n_docs);
  cJSON_AddNumberToObject(p, "tokens", (double)corpus->n_ids);
  cJSON_AddNumberToObject(p, "windows", r->ppl_windows);
  cJSON_AddNumberToObject(p, "buckets", r->ppl_buckets);
}

static void thresholds(cJSON *c, const cp_verify_result *r, const cp_verify_thresholds *t) {
  cJSON *th = cJSON_AddObjectToObject(c, "thresholds");
  if (t->min_accuracy >= 0) cJSON_AddNumberToObject(th, "min_accuracy", t->min_accuracy);
  else cJSON_AddNullToObject(th, "min_accuracy");
  cJSON *nr = cJSON_AddArrayToObject(th, "no_regression_at");
  for (int i = 0; i < t->n_no_regression; i++) cJSON_AddItemToArray(nr, cJSON_CreateNumber((double)t->no_regression_at[i]));
  cJSON_AddNumberToObject(th, "margin", t->margin);
  cJSON_AddNumberToObject(th, "alpha", t->alpha);
  if (r->has_ppl) cJSON_AddNumberToObject(th, "ppl_margin", t->ppl_margin);
  if (t->ppl_flat >= 0) {
    cJSON_AddNumberToObject(th, "ppl_flat", t->ppl_flat);
    cJSON_AddNumberToObject(th, "flat_train_len", (double)t->flat_train_len);
  }
  /* what the verdict included, so that `check --require-gain` knows what was asked */
  cJSON_AddBoolToObject(th, "require_gain", cp_verify_has_criterion(t) && cp_verify_gain_judged(r, t));
  if (cp_verify_has_criterion(t) && cp_verify_power_judged(r, t))
    cJSON_AddNumberToObject(th, "max_detectable_drop", t->max_detectable_drop);
  else cJSON_AddNullToObject(th, "max_detectable_drop");
}

int cp_certificate_build(cJSON **out, const cp_model *model, const cp_verify_result *r,
                         const cp_verify_thresholds *t, cp_verdict verdict, char **reasons, int n_reasons,
                         const cp_certificate_info *info) {
  *out = NULL;
  cJSON *c = cJSON_CreateObject();
  CP_CHECK_ALLOC(c, "certificate");
  cJSON_AddNumberToObject(c, "certificate_version", CERTIFICATE_VERSION);
  cJSON *tool = cJSON_AddObjectToObject(c, "tool");
  cJSON_AddStringToObject(tool, "name", "ctxpatch");
  cJSON_AddStringToObject(tool, "version", CTXPATCH_VERSION);

  cJSON *m = cJSON_AddObjectToObject(c, "model");
  cJSON_AddStringToObject(m, "family", cp_family_name(model->family));
  if (model->train_len > 0) cJSON_AddNumberToObject(m, "train_len", (double)model->train_len);
  else cJSON_AddNullToObject(m, "train_len");
  /* "option --train-len", "config.json max_position_embeddings", "GGUF llama.context_length" */
  if (model->train_len > 0 && model->cfg->train_len_key[0])
    cJSON_AddStringToObject(m, "train_len_source", model->cfg->train_len_key);
  int rc = cp_certificate_files(cJSON_AddArrayToObject(m, "files"), info->model_path);
  if (rc < 0) {
    cJSON_Delete(c);
    return rc;
  }
  cJSON *rule = info->rule ? cp_rule_to_json(info->rule) : cJSON_CreateObject();
  cJSON_AddItemToObject(c, "rule", rule ? rule : cJSON_CreateObject());

  cJSON *probes = cJSON_AddObjectToObject(c, "probes");
  cJSON *names = cJSON_AddArrayToObject(probes, "names");
  for (int p = 0; p < r->n_probes; p++) cJSON_AddItemToArray(names, cJSON_CreateString(cp_probe_name(r->probes[p])));
  cJSON *lengths = cJSON_AddArrayToObject(probes, "lengths");
  for (int l = 0; l < r->n_lengths; l++) cJSON_AddItemToArray(lengths, cJSON_CreateNumber((double)r->lengths[l]));
  cJSON_AddItemToObject(probes, "depths", cJSON_CreateDoubleArray(r->depths, r->n_depths));
  cJSON_AddNumberToObject(probes, "samples", r->samples);
  cJSON_AddNumberToObject(probes, "seed", (double)info->seed);
  cJSON_AddNumberToObject(probes, "max_new_tokens", info->max_new_tokens);
  if (r->has_ppl) ppl_settings(probes, r, &r->corpus);

  cJSON *results = cJSON_AddObjectToObject(c, "results");
  cJSON_AddItemToObject(results, "patched", side_results(r, CP_SIDE_PATCHED));
  if (r->has_baseline) cJSON_AddItemToObject(results, "baseline", side_results(r, CP_SIDE_BASELINE));
  if (r->has_baseline && r->n_probes > 0) cJSON_AddItemToObject(results, "comparison", comparison(r, t));
  cJSON_AddItemToObject(c, "statistics", statistics(r, t));
  thresholds(c, r, t);

  cJSON *v = cJSON_AddObjectToObject(c, "verdict");
  cJSON_AddStringToObject(v, "result", cp_verdict_name(verdict));
  cJSON *why = cJSON_AddArrayToObject(v, "reasons");
  for (int i = 0; i < n_reasons; i++) cJSON_AddItemToArray(why, cJSON_CreateString(reasons[i]));

  cJSON *run = cJSON_AddObjectToObject(c, "run");
  const bool cuda = info->device && !strncmp(info->device, "cuda", 4);
  cJSON_AddStringToObject(run, "engine", cuda ? "cuda-fp32" : "cpu-fp32");
  cJSON_AddStringToObject(run, "device", info->device ? info->device : "cpu");
  cJSON_AddNumberToObject(run, "threads", info->threads);
  /* No wall time or rate: a patched artifact's config.json and safetensors headers carry this
   * document's digest, so anything that varies between identical runs would make the artifact
   * irreproducible. The CLI prints the timings instead. */
  cJSON_AddNumberToObject(run, "tokens", (double)r->tokens);
  cJSON_AddNumberToObject(run, "tokens_reused", (double)r->tokens_reused);
  cJSON *by = cJSON_AddArrayToObject(run, "by_length");
  for (int l = 0; by && r->length_tokens && r->length_reused && l < r->n_lengths; l++) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddItemToArray(by, e);
    cJSON_AddNumberToObject(e, "length", (double)r->lengths[l]);
    cJSON_AddNumberToObject(e, "tokens", (double)r->length_tokens[l]);
    cJSON_AddNumberToObject(e, "tokens_reused", (double)r->length_reused[l]);
  }
  if (r->baseline_cached) { /* the baseline side was not computed here (docs/certificate.md, "Baseline cache") */
    cJSON *bc = cJSON_AddObjectToObject(run, "baseline_from_cache");
    cJSON_AddStringToObject(bc, "key_sha256", r->cache_key);
    cJSON_AddStringToObject(bc, "file_sha256", r->cache_file_sha256);
    cJSON_AddNumberToObject(bc, "prompts_read", (double)r->prompts_from); /* the rest ran here */
  }
  *out = c;
  return 0;
}
