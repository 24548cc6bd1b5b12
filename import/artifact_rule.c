/* Floor: import. What rule a run on a patched artifact applies, and the refusal of a second
 * temperature on top of one the artifact's weights already carry (include/ctxpatch/import/model.h). */
#include <stdlib.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/import/model.h"

const cp_rule *cp_model_applied_rule(const cp_model *m, const cp_rule *caller) {
  if (caller && !cp_rule_is_identity(caller)) return caller;
  return m->has_metadata_rule ? &m->metadata_rule : NULL;
}

int cp_model_check_rule_on_top(const cp_model *m, const cp_rule *caller, bool on_top) {
  const cp_hf_config *cfg = m->cfg;
  bool caller_temp = caller && (caller->n_temperature > 0 || caller->n_schedule > 0);
  bool baked_temp = cfg && cfg->has_ctxpatch && cfg->ctxpatch_baked_rule.n_temperature > 0;
  if (!caller_temp || !baked_temp || on_top) return 0;
  char *baked = cp_rule_to_string(&cfg->ctxpatch_baked_rule);
  int rc = cp_error_set(CP_ERULE_MODEL,
                        "rule: the artifact's weights already carry a temperature (config.json 'ctxpatch.baked_rule' "
                        "%s); a second one would divide the logits twice: pass --on-top to mean that",
                        baked ? baked : "{...}");
  free(baked);
  return rc;
}
