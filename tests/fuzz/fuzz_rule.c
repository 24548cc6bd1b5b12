/* Fuzz harness: attention rule JSON (the spec's every field, ranges and combinations). A rule
 * that parses must print and parse back, and a temperature schedule must give a finite tau > 0
 * at every length. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/model/rule.h"

static cp_rule rule, again; /* 36 KB each: off the stack */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (cp_rule_parse(&rule, (const char *)data, size, "rule.json")) return 0;
  char *text = cp_rule_to_string(&rule);
  if (!text) return 0; /* out of memory */
  if (cp_rule_parse(&again, text, strlen(text), "canonical")) abort();
  free(text);
  if (rule.n_schedule == 0) return 0;
  cp_rule_model m = {.n_layers_decoder = rule.schedule_width};
  if (cp_rule_check_model(&rule, &m, "rule.json")) abort();
  cp_attn_plan p;
  cp_rule_plan(&p, &rule, &m, CP_ATTN_DECODER_SELF, rule.schedule_width - 1);
  const int64_t at[] = {0, 1, 2, rule.schedule_len[0], rule.schedule_len[rule.n_schedule - 1], INT64_MAX};
  for (size_t x = 0; x < sizeof at / sizeof *at; x++) {
    double tau = cp_plan_tau_at(&p, at[x]);
    if (!(tau > 0) || !isfinite(tau)) abort();
  }
  return 0;
}
