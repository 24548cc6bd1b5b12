/* `ctxpatch check --rerun`: the certificate's probes (names, lengths, depths, samples, seed,
 * decoding budget; a sequential run's prompts per cell, in its order) run again on the artifact as it is opened (its metadata rule applied, as when
 * it was certified), patched side only: the baseline was the original checkpoint, which is not
 * part of the artifact. Counts and accuracies must be equal bit for bit; P_max and entropy within
 * the stated tolerance. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/tokenizers/tokenizer.h"
#include "ctxpatch/base/num.h"
#include "ctxpatch/verify/verify.h"
#include "verify/check_int.h"

typedef struct {
  cp_probe_kind *probes;
  int64_t *lengths;
  double *depths;
  int *replay; /* a sequential run: prompts per cell */
} rerun_arrays;

/* A sequential certificate (statistics.sequential): its looks and each cell's prompts, so the
 * rerun takes the same prompts in the same order (the baseline side that decided the stops is not
 * part of the artifact; the schema checked the stops against the recorded pairs). */
static int sequential_from_cert(cp_verify_params *vp, rerun_arrays *a, const cJSON *cert) {
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cert, "statistics"), "sequential");
  if (!q) return 0;
  const cJSON *every = cJSON_GetObjectItemCaseSensitive(q, "looks_every");
  const cJSON *patched = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cert, "results"), "patched");
  CP_CHECK_ALLOC(a->replay = calloc((size_t)vp->n_probes * (size_t)vp->n_lengths + 1, sizeof *a->replay),
                 "certificate.json");
  for (int p = 0; p < vp->n_probes; p++)
    for (int l = 0; l < vp->n_lengths; l++) {
      const cJSON *cells = cJSON_GetObjectItemCaseSensitive(patched, cp_probe_name(vp->probes[p]));
      const cJSON *n = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cells, l), "prompts");
      if (!cJSON_IsNumber(n) || !cJSON_IsNumber(every) || !(every->valuedouble >= 1 && every->valuedouble <= 1e6))
        return cp_error_set(CP_EARG, "certificate.json: results.patched.%s[%d].prompts: missing in a sequential run",
                            cp_probe_name(vp->probes[p]), l);
      a->replay[(size_t)p * (size_t)vp->n_lengths + (size_t)l] = (int)n->valuedouble;
    }
  vp->looks = (int)every->valuedouble;
  vp->replay = a->replay;
  return 0;
}

/* cp_verify_params from the certificate (its schema already checked). */
static int params_from_cert(cp_verify_params *vp, rerun_arrays *a, const cJSON *cert, const cp_check_params *p) {
  const cJSON *pr = cJSON_GetObjectItemCaseSensitive(cert, "probes"), *v;
  const cJSON *names = cJSON_GetObjectItemCaseSensitive(pr, "names"), *lengths = cJSON_GetObjectItemCaseSensitive(pr, "lengths");
  const cJSON *depths = cJSON_GetObjectItemCaseSensitive(pr, "depths");
  int np = cJSON_GetArraySize(names), nl = cJSON_GetArraySize(lengths), nd = cJSON_GetArraySize(depths), i = 0;
  CP_CHECK_ALLOC(a->probes = calloc((size_t)np, sizeof *a->probes), "certificate.json");
  CP_CHECK_ALLOC(a->lengths = calloc((size_t)nl, sizeof *a->lengths), "certificate.json");
  CP_CHECK_ALLOC(a->depths = calloc((size_t)nd, sizeof *a->depths), "certificate.json");
  cJSON_ArrayForEach(v, names) {
    int rc = cp_probe_from_name(&a->probes[i++], v->valuestring);
    if (rc < 0) return rc;
  }
  i = 0;
  cJSON_ArrayForEach(v, lengths) a->lengths[i++] = (int64_t)v->valuedouble;
  i = 0;
  cJSON_ArrayForEach(v, depths) a->depths[i++] = v->valuedouble;
  cp_verify_params_init(vp);
  vp->probes = a->probes;
  vp->n_probes = np;
  vp->lengths = a->lengths;
  vp->n_lengths = nl;
  vp->depths = a->depths;
  vp->n_depths = nd;
  vp->samples = (int)cJSON_GetObjectItemCaseSensitive(pr, "samples")->valuedouble;
  vp->seed = (uint64_t)cJSON_GetObjectItemCaseSensitive(pr, "seed")->valuedouble;
  vp->max_new_tokens = (int)cJSON_GetObjectItemCaseSensitive(pr, "max_new_tokens")->valuedouble;
  vp->threads = p->threads > 0 ? p->threads
                               : (int)cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cert, "run"), "threads")->valuedouble;
  const cJSON *patched = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cert, "results"), "patched");
  vp->stats = cJSON_GetObjectItemCaseSensitive(patched, "attention") != NULL;
  vp->work_budget = p->work_budget;
  vp->progress = p->progress;
  vp->progress_ctx = p->progress_ctx;
  return sequential_from_cert(vp, a, cert);
}

/* Re-run numbers against the certificate's: counts exactly, attention within the tolerance. */
static int compare(check_ctx *c, const cp_verify_result *r, const cJSON *patched, double tol) {
  int rc = 0;
  for (int p = 0; p < r->n_probes && rc == 0; p++) {
    const cJSON *cells = cJSON_GetObjectItemCaseSensitive(patched, cp_probe_name(r->probes[p]));
    for (int l = 0; l < r->n_lengths && rc == 0; l++) {
      const cJSON *cell = cJSON_GetArrayItem(cells, l);
      double acc = cp_verify_accuracy_at(r, CP_SIDE_PATCHED, p, l);
      double want = cJSON_GetObjectItemCaseSensitive(cell, "accuracy")->valuedouble;
      const cJSON *by = cJSON_GetObjectItemCaseSensitive(cell, "correct_by_depth");
      /* written at CP_NUM_JSON_DIGITS (base/num.h); certificates before that hold the exact ratio */
      bool acc_same = acc == want || cp_num_round(acc, CP_NUM_JSON_DIGITS) == want, same = acc_same;
      for (int d = 0; d < r->n_depths; d++)
        same = same && r->correct[CP_SIDE_PATCHED][((size_t)p * r->n_lengths + l) * r->n_depths + d] ==
                           (int)cJSON_GetArrayItem(by, d)->valuedouble;
      c->report->rerun_cells++;
      if (!same)
        rc = check_fail(c->report, "rerun-accuracy", "rerun: %s at %lld: accuracy %.17g, the certificate's %.17g%s",
                        cp_probe_name(r->probes[p]), (long long)r->lengths[l], acc, want,
                        acc_same ? " (counts per depth differ)" : "");
    }
  }
  const cJSON *att = cJSON_GetObjectItemCaseSensitive(patched, "attention");
  for (int l = 0; att && l < r->n_lengths && rc == 0; l++) {
    const cJSON *cell = cJSON_GetArrayItem(att, l);
    const cJSON *pm = cJSON_GetObjectItemCaseSensitive(cell, "pmax"), *en = cJSON_GetObjectItemCaseSensitive(cell, "entropy");
    if (!cJSON_IsNumber(pm) || !cJSON_IsNumber(en)) {
      rc = check_fail(c->report, "cert-schema", "certificate.json: results.patched.attention[%d]: pmax and entropy expected", l);
      break;
    }
    double dp = fabs(r->pmax[CP_SIDE_PATCHED][l] - pm->valuedouble), de = fabs(r->entropy[CP_SIDE_PATCHED][l] - en->valuedouble);
    if (!(dp <= tol && de <= tol))
      rc = check_fail(c->report, "rerun-attention", "rerun: attention at %lld: pmax %.6g entropy %.6g, the certificate's %.6g %.6g (tolerance %g)",
                      (long long)r->lengths[l], r->pmax[CP_SIDE_PATCHED][l], r->entropy[CP_SIDE_PATCHED][l],
                      pm->valuedouble, en->valuedouble, tol);
  }
  return rc;
}

int check_rerun(check_ctx *c, const cp_check_params *p) {
  rerun_arrays a = {0};
  cp_verify_params vp;
  cp_model *model = NULL;
  cp_tokenizer *tok = NULL;
  cp_verify_result *r = NULL;
  int rc = params_from_cert(&vp, &a, c->cert, p);
  if (rc < 0) goto done;
  /* A model or tokenizer that no longer opens fails the artifact; it does not stop the report. */
  if (cp_model_open_stored(&model, c->path) < 0 || cp_tokenizer_open(&tok, c->path) < 0 ||
      cp_verify_run(&r, model, tok, NULL, &vp) < 0) {
    rc = check_fail(c->report, "rerun-error", "rerun: %s", cp_error_message());
    goto done;
  }
  c->report->reran = true;
  const cJSON *patched = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c->cert, "results"), "patched");
  rc = compare(c, r, patched, p->tolerance);
done:
  cp_verify_result_free(r);
  cp_tokenizer_free(tok);
  cp_model_free(model);
  free(a.probes);
  free(a.lengths);
  free(a.depths);
  free(a.replay);
  return rc;
}
