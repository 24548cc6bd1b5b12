/* Fuzz harness: config.json through the strict JSON scanner and the family parsers, and every
 * accepted config through the splice `patch` edits it with (it must parse again). */
#include <stdint.h>
#include <stdlib.h>

#include "model/hf_config_json.h"
#include "ctxpatch/model/hf_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cp_hf_config *cfg = NULL, *again = NULL;
  if (cp_hf_config_parse(&cfg, (const char *)data, size, "config.json") != 0) return 0;
  /* as cp_bake_write_config splices rope-pi: in the layout the config uses */
  const bool v5 = cfg->rope_parameters_layout;
  cJSON *rs = cJSON_Parse(v5 ? "{\"rope_type\": \"linear\", \"factor\": 2}" : "{\"type\": \"linear\", \"factor\": 2}");
  cJSON *block = cJSON_Parse("{\"rule\": {}}");
  cJSON *fire = cJSON_CreateNumber(3);
  const cp_hf_member set[] = {
      {v5 ? "rope_parameters" : "rope_scaling", rs, false}, {"fire_threshold", fire, true}, {"ctxpatch", block, false}};
  char *out = NULL;
  size_t n = 0;
  if (rs && block && fire && cp_hf_config_splice(&out, &n, cfg, set, 3, "config.json") == 0) {
    /* A spliced config that no longer parses would be a writer bug: crash so the fuzzer keeps it. */
    if (cp_hf_config_parse(&again, out, n, "spliced config.json") != 0) abort();
    cp_hf_config_free(again);
  }
  free(out);
  cJSON_Delete(rs);
  cJSON_Delete(block);
  cJSON_Delete(fire);
  cp_hf_config_free(cfg);
  return 0;
}
