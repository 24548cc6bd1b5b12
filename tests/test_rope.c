/* RoPE frequency tables (model/rope.c) against the float64 PyTorch reference
 * (python/ctxpatch_ref/torchref/rules.py rope_scaled_inv_freq, written from transformers'
 * modeling_rope_utils): Llama 3.1 8B's llama3 scaling (theta 500000, factor 8, head dim 128) and
 * YaRN at factor 4 from 4096 (head dim 64), with and without truncation; dynamic NTK and longrope
 * at sequence lengths on both sides of their original lengths. The reference values
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

/* llama.cpp's converter (convert_hf_to_gguf.py, LlamaModel's rope_freqs; read, not copied): float32
 * frequencies base ** -(2a / dim), then the llama3 bands in double. Independent of model/rope.c. */
static void converter_factors(float *out, float base, int dim, double factor, double lo, double hi, double old) {
  for (int a = 0; a < dim / 2; a++) {
    float freq = 1.0f / powf(base, (float)(2 * a) / (float)dim);
    double wavelen = 2 * 3.14159265358979323846 / (double)freq;
    if (wavelen < old / hi) out[a] = 1.0f;
    else if (wavelen > old / lo) out[a] = (float)factor;
    else {
      double smooth = (old / wavelen - lo) / (hi - lo);
      out[a] = (float)(1.0 / ((1.0 - smooth) / factor + smooth));
    }
  }
}

/* GGUF's rope_freqs both ways: the factors a config writes agree with llama.cpp's converter, and
 * the scaling read back from the converter's factors is the config's (or an equivalent one). */
static void rope_freqs(void) {
  static const struct {
    double theta, factor, lo, hi, old;
    int dim;
  } k[] = {/* Llama 3.1 and 3.2; three blended pairs; one (the golden llama3_scaled); another low factor */
           {500000, 8, 1, 4, 8192, 128},
           {500000, 32, 1, 4, 8192, 64},
           {10000, 8, 1, 32, 2048, 16},
           {10000, 4, 1, 4, 16, 16},
           {10000, 6, 2, 8, 4096, 16}};
  for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
    float conv[CP_ROPE_MAX_DIMS / 2], mine[CP_ROPE_MAX_DIMS / 2];
    cp_hf_config c = base("llama3", k[i].factor);
    c.rope_low_freq_factor = k[i].lo, c.rope_high_freq_factor = k[i].hi, c.rope_original_max_pos = (int)k[i].old;
    converter_factors(conv, (float)k[i].theta, k[i].dim, k[i].factor, k[i].lo, k[i].hi, k[i].old);
    CHECK_RC(0, cp_rope_freq_factors(mine, &c, k[i].theta, k[i].dim, "c"));
    for (int a = 0; a < k[i].dim / 2; a++)
      CHECK_MSG(fabs((double)mine[a] - conv[a]) <= 1e-6 * conv[a], "case %zu pair %d: %.9g vs converter %.9g", i, a,
                (double)mine[a], (double)conv[a]);
    cp_rope_fit fit;
    CHECK_RC(0, cp_rope_fit_factors(&fit, conv, k[i].dim / 2, k[i].theta, k[i].dim, "m.gguf"));
    CHECK_MSG(!strcmp(fit.type, "llama3") && fit.factor == k[i].factor && fit.low_freq_factor == 1, "case %zu: %s %g",
              i, fit.type, fit.factor);
    if (k[i].lo == 1) /* the parameters themselves; lo 2 is the same table under other ones */
      CHECK_MSG(fit.high_freq_factor == k[i].hi && fit.original_max_pos == (int)k[i].old,
                "case %zu: high %.17g, "
                "original %d",
                i, fit.high_freq_factor, fit.original_max_pos);
    c.rope_low_freq_factor = fit.low_freq_factor, c.rope_high_freq_factor = fit.high_freq_factor;
    c.rope_original_max_pos = fit.original_max_pos;
    CHECK_RC(0, cp_rope_freq_factors(mine, &c, k[i].theta, k[i].dim, "c"));
    for (int a = 0; a < k[i].dim / 2; a++)
      CHECK_MSG(fabs((double)mine[a] - conv[a]) <= 2e-6 * conv[a], "case %zu pair %d refit: %.9g vs %.9g", i, a,
                (double)mine[a], (double)conv[a]);
  }
  float f[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  cp_rope_fit fit;
  CHECK_RC(0, cp_rope_fit_factors(&fit, f, 8, 10000, 16, "m.gguf"));
  CHECK(fit.type[0] == 0);
  for (int a = 0; a < 8; a++) f[a] = 4;
  CHECK_RC(0, cp_rope_fit_factors(&fit, f, 8, 10000, 16, "m.gguf"));
  CHECK(!strcmp(fit.type, "linear") && fit.factor == 4);
  /* Refused: a decreasing factor, NaN, a count that is not the pairs, a monotone table no llama3 gives. */
  float bad[8] = {1, 3, 2, 4, 4, 4, 4, 4};
  CHECK_RC(CP_ECFG_POSITION, cp_rope_fit_factors(&fit, bad, 8, 10000, 16, "m.gguf"));
  CHECK(strstr(cp_error_message(), "m.gguf: factor 2 is 2") != NULL);
  bad[1] = NAN;
  CHECK_RC(CP_ECFG_POSITION, cp_rope_fit_factors(&fit, bad, 8, 10000, 16, "m.gguf"));
  CHECK_RC(CP_ECFG_POSITION, cp_rope_fit_factors(&fit, f, 7, 10000, 16, "m.gguf"));
  float bumpy[8] = {1, 1.1f, 1.15f, 3, 3.01f, 3.02f, 7, 8};
  CHECK_RC(CP_ECFG_POSITION, cp_rope_fit_factors(&fit, bumpy, 8, 10000, 16, "m.gguf"));
  CHECK(strstr(cp_error_message(), "not a llama3 or linear scaling table") != NULL);
}

/* Tables chosen by the call's sequence length (rope_scaled_inv_freq with seq_len, values printed
 * by the reference): dynamic NTK x2 over 2048 (head 64) is the default table up to 2048 and
 * rescales the base past it; longrope (8 pairs, original 4096 of 131072: Phi-3-mini-128k's ratio
 * 32, whose default attention factor is sqrt(1 + ln 32 / ln 4096)) takes its long list from 4097. */
static void dynamic_and_longrope(void) {
  cp_rope_table t;
  cp_hf_config c = base("dynamic", 2);
  c.rope_original_max_pos = 2048;
  static const int di[] = {0, 1, 10, 31};
  static const struct {
    int64_t len;
    double inv[4];
  } dyn[] = {{0, {1.0, 0.7498942093324559, 0.056234132519034905, 0.0001333521432163324}},
             {2048, {1.0, 0.7498942093324559, 0.056234132519034905, 0.0001333521432163324}},
             {3000, {1.0, 0.7341600401787418, 0.045489108402982786, 6.910556409591315e-05}},
             {8193, {1.0, 0.7042661560299381, 0.03001706225100595, 1.9047648856677974e-05}}};
  CHECK(cp_rope_by_length(&c));
  for (size_t k = 0; k < sizeof dyn / sizeof *dyn; k++) {
    CHECK_RC(0, cp_rope_table_at(&t, &c, 10000.0, 64, dyn[k].len, "c"));
    CHECK(t.mscale == 1.0);
    for (int i = 0; i < 4; i++)
      CHECK_MSG(near(t.inv[di[i]], dyn[k].inv[i]), "dynamic at %lld, pair %d: %.17g vs %.17g", (long long)dyn[k].len,
                di[i], t.inv[di[i]], dyn[k].inv[i]);
  }
  static const double sf[] = {1.0, 1.05, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0},
                      lf[] = {1.0, 1.5, 3.0, 6.0, 12.0, 20.0, 30.0, 40.0};
  static const double s_inv[] = {1.0,   0.3011693009684171,    0.08333333333333334,   0.021081851067789193,
                                 0.005, 0.0012649110640673515, 0.0003333333333333333, 7.905694150420948e-05};
  static const double l_inv[] = {1.0,
                                 0.21081851067789195,
                                 0.03333333333333333,
                                 0.005270462766947298,
                                 0.0008333333333333334,
                                 0.00015811388300841894,
                                 3.3333333333333335e-05,
                                 7.905694150420949e-06};
  c = base("longrope", 32);
  c.rope_original_max_pos = 4096, c.rope_n_factors = 8;
  memcpy(c.rope_short_factor, sf, sizeof sf);
  memcpy(c.rope_long_factor, lf, sizeof lf);
  CHECK(cp_rope_by_length(&c));
  const int64_t lens[] = {0, 4096, 4097};
  for (int k = 0; k < 3; k++) {
    CHECK_RC(0, cp_rope_table_at(&t, &c, 10000.0, 16, lens[k], "c"));
    const double *want = k < 2 ? s_inv : l_inv;
    for (int a = 0; a < 8; a++)
      CHECK_MSG(near(t.inv[a], want[a]), "longrope at %lld, pair %d: %.17g vs %.17g", (long long)lens[k], a, t.inv[a],
                want[a]);
    CHECK_MSG(near(t.mscale, 1.1902380714238083), "longrope mscale %.17g", t.mscale);
  }
  c.rope_attention_factor = 1.25; /* given: taken as is */
  CHECK_RC(0, cp_rope_table_at(&t, &c, 10000.0, 16, 5000, "c"));
  CHECK(t.mscale == 1.25 && near(t.inv[7], l_inv[7]));
  c = base("llama3", 8);
  CHECK(!cp_rope_by_length(&c));
}

int main(void) {
  rope_freqs();
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

  dynamic_and_longrope();

  /* Refusals name the file and the key. */
  c = base("dynamic", 2); /* no max_position_embeddings */
  CHECK_RC(CP_ECFG_FIELD, cp_rope_table_init(&t, &c, 10000.0, 64, "m/config.json"));
  CHECK(strstr(cp_error_message(), "m/config.json: dynamic RoPE scaling needs") != NULL);
  c = base("longrope", 2); /* no factor lists */
  CHECK_RC(CP_ECFG_FIELD, cp_rope_table_init(&t, &c, 10000.0, 64, "m/config.json"));
  CHECK(strstr(cp_error_message(), "m/config.json: key 'rope_scaling.short_factor': 0 factors") != NULL);
  c = base("ntk", 2);
  CHECK_RC(CP_ECFG_FIELD, cp_rope_table_init(&t, &c, 10000.0, 64, "m/config.json"));
  c = base("", 1);
  CHECK_RC(CP_ECFG_FIELD, cp_rope_table_init(&t, &c, 10000.0, 2 * CP_ROPE_MAX_DIMS, "m/config.json"));
  CHECK_RC(CP_ECFG_FIELD, cp_rope_table_init(&t, &c, 10000.0, 7, "m/config.json"));
  return test_finish();
}
