/* Fuzz harness: attention rule JSON (the spec's every field, ranges and combinations). */
#include <stdint.h>

#include "ctxpatch/converters/rule.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cp_rule rule;
  (void)cp_rule_parse(&rule, (const char *)data, size, "rule.json");
  return 0;
}
