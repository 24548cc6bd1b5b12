/* Floor: import. The training length a user states (`--train-len N`) in place of the one the
 * checkpoint's config gives (config.json max_position_embeddings, GGUF {arch}.context_length),
 * with where it came from, so certificates and written files can say so. */
#include <stdio.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/import/model.h"

int cp_model_set_train_len(cp_model *m, int64_t n, const char *source) {
  if (n < 1 || n > CP_TRAIN_LEN_MAX)
    return cp_error_set(CP_EARG, "--train-len %lld: expected a length in [1, %lld]", (long long)n,
                        (long long)CP_TRAIN_LEN_MAX);
  /* A learned position table has exactly train_len rows: its length is a shape, not a claim. */
  if (m->pos_embed && n != m->train_len)
    return cp_error_set(CP_EARG, "--train-len %lld: this %s model has learned absolute positions, %lld rows (%s)",
                        (long long)n, cp_family_name(m->family), (long long)m->train_len, m->cfg->train_len_key);
  m->train_len = n;
  m->cfg->train_len = n;
  snprintf(m->cfg->train_len_key, sizeof m->cfg->train_len_key, "%s", source);
  return 0;
}
