/* Fuzz harness: config.json through the strict JSON scanner and the family parsers. */
#include <stdint.h>

#include "ctxpatch/converters/hf_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cp_hf_config *cfg = NULL;
  if (cp_hf_config_parse(&cfg, (const char *)data, size, "config.json") == 0) cp_hf_config_free(cfg);
  return 0;
}
