/* RoPE frequency tables (model/rope.c) against the float64 PyTorch reference
 * (python/ctxpatch_ref/torchref/rules.py rope_scaled_inv_freq, written from transformers'
 * modeling_rope_utils): Llama 3.1 8B's llama3 scaling (theta 500000, factor 8, head dim 128) and
 * YaRN at factor 4 from 4096 (head dim 64), with and without truncation. The reference values
 * were printed by the reference and pasted here; the engine goldens (llama3_scaled, llama_yarn)
 * check the same tables through whole models. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ctxpatch/model/rope.h"
#include "test.h"

static int near(double a, double b) { return fabs(a - b) <= 1e-13 * fabs(b); }

static cp_hf_config base(const char *type, double factor) {
  cp_hf_config c;
  memset(&c, 0, sizeof c);
  snprintf(c.rope_scaling_type, sizeof c.rope_scaling_type, "%s", type);
  c.rope_scaling_factor = factor;
  c.rope_beta_fast = 32;
  c.rope_beta_slow = 1;
  c.rope_truncate = true;
  return c;
}

int main(void) {
  cp_rope_table t;
  cp_hf_config c = base("llama3", 8);
  c.rope_low_freq_factor = 1, c.rope_high_freq_factor = 4, c.rope_original_max_pos = 8192, c.train_len = 131072;
  CHECK_RC(0, cp_rope_table_init(&t, &c, 500000.0, 128, "c"));
  static const int li[] = {0, 20, 40, 46, 50, 63};
  static const double lw[] = {1.0,
                              0.016560440080994446,
                              3.428102195952591e-05,
                              1.0017868402809974e-05,
                              4.411534674558404e-06,
                              3.068925988914511e-07};
  CHECK(t.n == 64 && t.mscale == 1.0);
  for (int i = 0; i < 6; i++)
    CHECK_MSG(near(t.inv[li[i]], lw[i]), "llama3 pair %d: %.17g vs %.17g", li[i], t.inv[li[i]], lw[i]);

  c = base("yarn", 4);
  c.rope_original_max_pos = 4096, c.train_len = 16384;
  CHECK_RC(0, cp_rope_table_init(&t, &c, 10000.0, 64, "c"));
  static const int yi[] = {0, 5, 10, 15, 20, 31};
  static const double yw[] = {1.0,
                              0.23713737056616555,
                              0.056234132519034905,
                              0.009488517882700576,
                              0.0013378867023789293,
                              3.33380358040831e-05};
  for (int i = 0; i < 6; i++)
    CHECK_MSG(near(t.inv[yi[i]], yw[i]), "yarn pair %d: %.17g vs %.17g", yi[i], t.inv[yi[i]], yw[i]);
  CHECK_MSG(near(t.mscale, 1.138629436111989), "yarn mscale %.17g", t.mscale);

  c.rope_truncate = false, c.rope_beta_fast = 16, c.rope_attention_factor = 1.2;
  CHECK_RC(0, cp_rope_table_init(&t, &c, 10000.0, 64, "c"));
  static const double y2[] = {
      1.0, 0.23713737056616555, 0.056234132519034905, 0.011134625650841968, 0.001409397684647836, 3.33380358040831e-05};
  for (int i = 0; i < 6; i++)
    CHECK_MSG(near(t.inv[yi[i]], y2[i]), "yarn2 pair %d: %.17g vs %.17g", yi[i], t.inv[yi[i]], y2[i]);
  CHECK(t.mscale == 1.2);

  /* No scaling and linear: the engine's old expression, bit for bit; linear leaves the table. */
  c = base("", 1);
  CHECK_RC(0, cp_rope_table_init(&t, &c, 10000.0, 6, "c"));
  for (int a = 0; a < 3; a++) CHECK(t.inv[a] == 1.0 / pow(10000.0, (double)(2 * a) / 6.0));
  c = base("linear", 4);
  cp_rope_table u;
  CHECK_RC(0, cp_rope_table_init(&u, &c, 10000.0, 6, "c"));
  CHECK(memcmp(t.inv, u.inv, sizeof t.inv) == 0 && u.mscale == 1.0);

  /* Refusals name the file and the key. */
  c = base("dynamic", 2);
  CHECK_RC(CP_ECFG_FIELD, cp_rope_table_init(&t, &c, 10000.0, 64, "m/config.json"));
  CHECK(strstr(cp_error_message(), "m/config.json: key 'rope_scaling.type': 'dynamic' is not supported") != NULL);
  c = base("longrope", 2);
  CHECK_RC(CP_ECFG_FIELD, cp_rope_table_init(&t, &c, 10000.0, 64, "m/config.json"));
  c = base("", 1);
  CHECK_RC(CP_ECFG_FIELD, cp_rope_table_init(&t, &c, 10000.0, 2 * CP_ROPE_MAX_DIMS, "m/config.json"));
  CHECK_RC(CP_ECFG_FIELD, cp_rope_table_init(&t, &c, 10000.0, 7, "m/config.json"));
  return test_finish();
}
