/* The work budget (ctxpatch/verify/verify.h, "Work"): a run's work counted from its plan before it
 * starts, in attention pairs, and the one refusal when it is over the budget. */
#include <stdint.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/verify/verify.h"

uint64_t cp_work_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

uint64_t cp_work_mul(uint64_t a, uint64_t b) { return b && a > UINT64_MAX / b ? UINT64_MAX : a * b; }

uint64_t cp_work_pass(int64_t n_tokens, bool bidirectional) {
  if (n_tokens <= 0) return 0;
  uint64_t n = (uint64_t)n_tokens;
  if (bidirectional) return cp_work_mul(n, n);
  /* n (n + 1) / 2 without overflowing before the halving: halve the even factor */
  return n % 2 == 0 ? cp_work_mul(n / 2, n + 1) : cp_work_mul(n, (n + 1) / 2);
}

uint64_t cp_work_budget(uint64_t budget) { return budget ? budget : CP_WORK_DEFAULT_BUDGET; }

int cp_work_check(uint64_t work, uint64_t budget, const char *what) {
  uint64_t b = cp_work_budget(budget);
  if (work <= b) return 0;
  return cp_error_set(CP_EVERIFY_WORK,
                      "%s: the plan needs %llu%s attention pairs of work, over the work budget of %llu%s; raise it "
                      "with --work-budget N (docs/reliability.md)",
                      what, (unsigned long long)work, work == UINT64_MAX ? " or more" : "", (unsigned long long)b,
                      budget ? "" : " (the default)");
}

uint64_t cp_verify_plan_work(const cp_verify_params *p, const cp_model *model) {
  bool both = model->family == CP_FAMILY_T5; /* the encoder attends both ways */
  uint64_t sides = p->baseline && !p->baseline_from ? 2 : 1, work = 0;
  uint64_t prompts = cp_work_mul(
      cp_work_mul((uint64_t)(p->n_probes > 0 ? p->n_probes : 0), (uint64_t)(p->n_depths > 0 ? p->n_depths : 0)),
      (uint64_t)(p->samples > 0 ? p->samples : 0));
  for (int l = 0; l < p->n_lengths; l++) {
    int64_t len = p->lengths[l];
    /* a prompt fills the length; the answer's tokens extend the same pass (KV cache) */
    uint64_t at = cp_work_mul(prompts, cp_work_pass(len + (p->max_new_tokens > 0 ? p->max_new_tokens : 0), both));
    if (p->corpus_path)
      at = cp_work_add(at, cp_work_mul((uint64_t)(p->ppl_windows > 0 ? p->ppl_windows : 0), cp_work_pass(len, both)));
    if (p->stats) at = cp_work_add(at, cp_work_pass(len, both)); /* one profile pass per length */
    work = cp_work_add(work, cp_work_mul(at, sides));
  }
  return work;
}
