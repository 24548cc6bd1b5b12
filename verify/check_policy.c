/* `ctxpatch check`'s policy flags for CI (include/ctxpatch/verify/check.h, point 7; docs/ci.md):
 * what a certificate must also show beyond a pass, read from the certificate the schema vouched for. */
#include <math.h>
#include <string.h>

#include "verify/check_int.h"

static const cJSON *at(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static const char *str_of(const cJSON *o, const char *key) {
  const cJSON *v = at(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* --min-prompts N: every compared (probe, length) cell had at least N pairs, and the pairs are the
 * prompts the probes record (samples x depths, or the prompts a sequential cell records it ran:
 * an edited count is not believed). */
static int min_prompts(check_ctx *c, int64_t n) {
  const cJSON *cmp = at(at(c->cert, "results"), "comparison"), *probe, *cell;
  const cJSON *samples = at(at(c->cert, "probes"), "samples"), *depths = at(at(c->cert, "probes"), "depths");
  double prompts =
      cJSON_IsNumber(samples) && cJSON_IsArray(depths) ? samples->valuedouble * cJSON_GetArraySize(depths) : NAN;
  int cells = 0;
  if (!cJSON_IsObject(cmp) || !cmp->child)
    return check_fail(c->report, "policy-prompts",
                      "--min-prompts %lld: the certificate compares no retrieval probe "
                      "with the original (results.comparison)",
                      (long long)n);
  cJSON_ArrayForEach(probe, cmp) {
    int l = 0;
    cJSON_ArrayForEach(cell, probe) {
      const cJSON *pairs = at(cell, "pairs"), *len = at(cell, "length");
      const cJSON *ran =
          at(cJSON_GetArrayItem(at(at(at(c->cert, "results"), "patched"), probe->string), l++), "prompts");
      if (cJSON_IsNumber(ran)) prompts = ran->valuedouble; /* a sequential cell (the schema bounds it) */
      else
        prompts =
            cJSON_IsNumber(samples) && cJSON_IsArray(depths) ? samples->valuedouble * cJSON_GetArraySize(depths) : NAN;
      cells++;
      if (cJSON_IsNumber(pairs) && pairs->valuedouble != prompts)
        return check_fail(c->report, "policy-prompts",
                          "--min-prompts %lld: %s at %.0f: %.0f pairs, but the probes ran "
                          "%.0f prompts (probes.samples x depths, or the cell's prompts)",
                          (long long)n, probe->string ? probe->string : "?",
                          cJSON_IsNumber(len) ? len->valuedouble : NAN, pairs->valuedouble, prompts);
      if (cJSON_IsNumber(pairs) && pairs->valuedouble >= (double)n) continue;
      return check_fail(c->report, "policy-prompts", "--min-prompts %lld: %s at %.0f was compared on %s%.0f pairs",
                        (long long)n, probe->string ? probe->string : "?", cJSON_IsNumber(len) ? len->valuedouble : NAN,
                        cJSON_IsNumber(pairs) ? "" : "(missing) ", cJSON_IsNumber(pairs) ? pairs->valuedouble : 0.0);
    }
  }
  return cells ? 0
               : check_fail(c->report, "policy-prompts", "--min-prompts %lld: results.comparison has no cell",
                            (long long)n);
}

/* --require-gain: the verdict included the gain criterion, and its test found the gain. */
static int require_gain(check_ctx *c) {
  const cJSON *req = at(at(c->cert, "thresholds"), "require_gain");
  if (!cJSON_IsTrue(req))
    return check_fail(c->report, "policy-gain",
                      "--require-gain: the verdict did not include the gain criterion "
                      "(thresholds.require_gain is %s: --accept-no-gain, no comparison with the original, or a "
                      "certificate from before the criterion)",
                      cJSON_IsFalse(req) ? "false" : "absent");
  const cJSON *found = at(at(at(c->cert, "statistics"), "gain"), "found");
  if (!cJSON_IsTrue(found))
    return check_fail(c->report, "policy-gain",
                      "--require-gain: statistics.gain.found is not true, yet the verdict "
                      "claims the gain criterion");
  return 0;
}

/* --require-runtime NAME: the runtime comparison was made in NAME and was equal. */
static int require_runtime(check_ctx *c, const char *name) {
  const cJSON *rc = at(c->cert, "runtime_check");
  const char *rt = str_of(rc, "runtime"), *result = str_of(rc, "result");
  if (!rt || strcmp(rt, name))
    return check_fail(c->report, "policy-runtime", "--require-runtime %s: the certificate %s%s%s", name,
                      rt ? "compared the logits in " : "has no runtime_check", rt ? rt : "", rt ? " instead" : "");
  if (!result || strcmp(result, "equal"))
    return check_fail(c->report, "policy-runtime",
                      "--require-runtime %s: its runtime_check result is '%s', not 'equal'", name,
                      result ? result : "?");
  return 0;
}

/* --fidelity F: the certificate's patch.fidelity ("exact" stands for "exact-weights"). */
static int fidelity(check_ctx *c, const char *want) {
  const char *name = !strcmp(want, "exact") ? "exact-weights" : want;
  const char *got = str_of(at(c->cert, "patch"), "fidelity");
  if (got && !strcmp(got, name)) return 0;
  return check_fail(c->report, "policy-fidelity", "--fidelity %s: the certificate's patch.fidelity is '%s'", want,
                    got ? got : "absent");
}

int check_policy(check_ctx *c, const cp_check_params *p) {
  int rc = 0;
  if (!p || !c->cert) return 0; /* no certificate: already a failure */
  if (p->min_prompts > 0) rc = min_prompts(c, p->min_prompts);
  if (rc == 0 && p->require_gain) rc = require_gain(c);
  if (rc == 0 && p->require_runtime) rc = require_runtime(c, p->require_runtime);
  if (rc == 0 && p->fidelity) rc = fidelity(c, p->fidelity);
  return rc;
}
