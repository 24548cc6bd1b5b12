/* RoPE frequency tables (include/ctxpatch/model/rope.h), written from transformers'
 * src/transformers/modeling_rope_utils.py: _compute_default_rope_parameters,
 * _compute_linear_scaling_rope_parameters, _compute_llama3_parameters, _compute_yarn_parameters,
 * _compute_dynamic_ntk_parameters, _compute_longrope_parameters and dynamic_rope_update (read with
 * the search tool; not copied). transformers computes the
 * tables in float32; here they are double, as the float64 PyTorch reference
 * (python/ctxpatch_ref/torchref/rules.py, rope_scaled_inv_freq) computes them. */
#include "ctxpatch/model/rope.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ctxpatch/base/error.h"

static const double PI = 3.14159265358979323846;

/* llama3: wavelengths below original / high_freq_factor keep their frequency, those above
 * original / low_freq_factor are divided by the factor, the band between is blended by
 * smooth = (original / wavelength - low) / (high - low). */
static void llama3(cp_rope_table *t, const cp_hf_config *c) {
  const double factor = c->rope_scaling_factor, lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
  const double old = (double)c->rope_original_max_pos;
  const double low_wavelen = old / lo, high_wavelen = old / hi;
  for (int a = 0; a < t->n; a++) {
    const double inv = t->inv[a], wavelen = 2 * PI / inv;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      t->inv[a] = inv / factor;
      continue;
    }
    const double smooth = (old / wavelen - lo) / (hi - lo);
    t->inv[a] = (1 - smooth) * inv / factor + smooth * inv;
  }
}

/* The dim at which a wavelength makes `rotations` turns over the original context (YaRN's
 * find_correction_dim). */
static double correction_dim(double rotations, int dim, double base, double original) {
  return (dim * log(original / (rotations * 2 * PI))) / (2 * log(base));
}

/* yarn: frequencies ramp from extrapolated (pairs below `low`) to interpolated (above `high`),
 * the range from beta_fast / beta_slow rotations over the original context; cos and sin are
 * scaled by the attention factor (0.1 ln(factor) + 1 unless given). */
static void yarn(cp_rope_table *t, const cp_hf_config *c, double theta, int dim) {
  const double factor = c->rope_scaling_factor;
  const double original = c->rope_original_max_pos > 0 ? c->rope_original_max_pos : c->train_len;
  double low = correction_dim(c->rope_beta_fast, dim, theta, original);
  double high = correction_dim(c->rope_beta_slow, dim, theta, original);
  if (c->rope_truncate) low = floor(low), high = ceil(high);
  low = low > 0 ? low : 0;
  high = high < dim - 1 ? high : dim - 1;
  if (low == high) high += 0.001; /* as transformers: no zero-width ramp */
  for (int a = 0; a < t->n; a++) {
    double ramp = ((double)a - low) / (high - low);
    ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
    const double extrapolation = 1 - ramp;
    const double pos_freq = pow(theta, (double)(2 * a) / (double)dim);
    t->inv[a] = 1.0 / (factor * pos_freq) * (1 - extrapolation) + 1.0 / pos_freq * extrapolation;
  }
  t->mscale = c->rope_attention_factor > 0 ? c->rope_attention_factor : 0.1 * log(factor) + 1.0;
}

/* dynamic (_compute_dynamic_ntk_parameters): theta x (factor L / max_pos - (factor - 1))^(d / (d - 2))
 * with L = max(seq_len, max_pos), max_pos the config's max_position_embeddings. */
static void dynamic_ntk(cp_rope_table *t, const cp_hf_config *c, double theta, int dim, int64_t seq_len) {
  const double max_pos = (double)c->rope_original_max_pos, factor = c->rope_scaling_factor;
  const double len = (double)seq_len > max_pos ? (double)seq_len : max_pos;
  const double base = theta * pow(factor * len / max_pos - (factor - 1), (double)dim / (double)(dim - 2));
  for (int a = 0; a < t->n; a++) t->inv[a] = 1.0 / pow(base, (double)(2 * a) / (double)dim);
}

/* longrope (_compute_longrope_parameters, with the list dynamic_rope_update's longrope branch
 * picks): pair a divided by long_factor[a] once seq_len passes the original length, else by
 * short_factor[a]; cos and sin times the attention factor. */
static void longrope(cp_rope_table *t, const cp_hf_config *c, int64_t seq_len) {
  const double *ext = seq_len > c->rope_original_max_pos ? c->rope_long_factor : c->rope_short_factor;
  for (int a = 0; a < t->n; a++) t->inv[a] /= ext[a];
  const double f = c->rope_scaling_factor;
  t->mscale = c->rope_attention_factor > 0 ? c->rope_attention_factor
              : f <= 1.0                   ? 1.0
                                           : sqrt(1 + log(f) / log((double)c->rope_original_max_pos));
}

bool cp_rope_by_length(const cp_hf_config *cfg) {
  return !strcmp(cfg->rope_scaling_type, "dynamic") || !strcmp(cfg->rope_scaling_type, "longrope");
}

int cp_rope_table_init(cp_rope_table *t, const cp_hf_config *cfg, double theta, int rot_dims, const char *what) {
  return cp_rope_table_at(t, cfg, theta, rot_dims, 0, what);
}

int cp_rope_table_at(cp_rope_table *t, const cp_hf_config *cfg, double theta, int rot_dims, int64_t seq_len,
                     const char *what) {
  memset(t, 0, sizeof *t);
  if (rot_dims < 2 || rot_dims > CP_ROPE_MAX_DIMS || rot_dims % 2)
    return cp_error_set(CP_ECFG_FIELD, "%s: %d rotary dims (want an even number in 2..%d)", what, rot_dims,
                        CP_ROPE_MAX_DIMS);
  t->n = rot_dims / 2;
  t->mscale = 1.0;
  for (int a = 0; a < t->n; a++) t->inv[a] = 1.0 / pow(theta, (double)(2 * a) / (double)rot_dims);
  const char *type = cfg ? cfg->rope_scaling_type : "";
  if (!type[0]) return 0;
  if (!strcmp(type, "linear")) return 0; /* a position divisor: cp_model.rope_scale */
  if (!strcmp(type, "llama3")) {
    llama3(t, cfg);
    return 0;
  }
  if (!strcmp(type, "yarn")) {
    yarn(t, cfg, theta, rot_dims);
    return 0;
  }
  if (!strcmp(type, "dynamic")) {
    if (rot_dims < 4 || cfg->rope_original_max_pos <= 0 || !(cfg->rope_scaling_factor >= 1))
      return cp_error_set(CP_ECFG_FIELD,
                          "%s: dynamic RoPE scaling needs 4 or more rotary dims, "
                          "max_position_embeddings and a factor >= 1",
                          what);
    dynamic_ntk(t, cfg, theta, rot_dims, seq_len);
    return 0;
  }
  if (!strcmp(type, "longrope")) {
    if (cfg->rope_n_factors != t->n || cfg->rope_original_max_pos <= 0)
      return cp_error_set(CP_ECFG_FIELD, "%s: key 'rope_scaling.short_factor': %d factors for %d rotary dims (want %d)",
                          what, cfg->rope_n_factors, rot_dims, t->n);
    longrope(t, cfg, seq_len);
    return 0;
  }
  return cp_error_set(CP_ECFG_FIELD,
                      "%s: key 'rope_scaling.type': '%s' is not supported (linear, llama3, yarn, dynamic, longrope)",
                      what, type);
}

int cp_rope_freq_factors(float *factors, const cp_hf_config *cfg, double theta, int rot_dims, const char *what) {
  cp_rope_table plain, scaled;
  cp_hf_config unscaled = *cfg;
  unscaled.rope_scaling_type[0] = 0;
  int rc = cp_rope_table_init(&plain, &unscaled, theta, rot_dims, what);
  if (rc == 0) rc = cp_rope_table_init(&scaled, cfg, theta, rot_dims, what);
  for (int a = 0; rc == 0 && a < scaled.n; a++) factors[a] = (float)(plain.inv[a] / scaled.inv[a]);
  return rc;
}

/* Largest relative difference between `factors` and the table of `fit`, and where. */
static double fit_error(int *at, const cp_rope_fit *fit, const float *factors, int n, double theta, int rot_dims) {
  cp_hf_config c = {0};
  float mine[CP_ROPE_MAX_DIMS / 2];
  snprintf(c.rope_scaling_type, sizeof c.rope_scaling_type, "%s", fit->type);
  c.rope_scaling_factor = fit->factor;
  c.rope_low_freq_factor = fit->low_freq_factor;
  c.rope_high_freq_factor = fit->high_freq_factor;
  c.rope_original_max_pos = fit->original_max_pos;
  *at = 0;
  if (!strcmp(fit->type, "linear")) { /* a position divisor: every pair divided by the factor */
    for (int a = 0; a < n; a++) mine[a] = (float)fit->factor;
  } else if (cp_rope_freq_factors(mine, &c, theta, rot_dims, "fit")) {
    cp_error_clear();
    *at = -1;
    return INFINITY;
  }
  double worst = 0;
  for (int a = 0; a < n; a++) {
    double e = fabs((double)mine[a] - (double)factors[a]) / (double)factors[a];
    if (!(e <= worst)) worst = e, *at = a;
  }
  return worst;
}

int cp_rope_fit_factors(cp_rope_fit *fit, const float *factors, int n, double theta, int rot_dims, const char *what) {
  memset(fit, 0, sizeof *fit);
  if (rot_dims < 2 || rot_dims > CP_ROPE_MAX_DIMS || rot_dims % 2 || n != rot_dims / 2)
    return cp_error_set(CP_ECFG_POSITION, "%s: %d RoPE frequency factors for %d rotated dims (want %d)", what, n,
                        rot_dims, rot_dims / 2);
  double f_max = 1;
  for (int a = 0; a < n; a++) {
    double f = factors[a];
    if (!isfinite(f) || f < 1 - 1e-6 || f > 1e6 || (a > 0 && f < (double)factors[a - 1] * (1 - 1e-6)))
      return cp_error_set(CP_ECFG_POSITION,
                          "%s: factor %d is %.9g: want finite factors in [1, 1e6] that do not "
                          "decrease with the pair (llama3 scaling)",
                          what, a, f);
    if (f > f_max) f_max = f;
  }
  if (f_max <= 1 + 1e-7) return 0; /* all 1: the default table */
  fit->factor = f_max;
  int at = -1;                                    /* the factor the last table tried missed most; -1: no table tried */
  if ((double)factors[0] >= f_max * (1 - 1e-7)) { /* all equal: positions divided by the factor */
    snprintf(fit->type, sizeof fit->type, "linear");
    if (fit_error(&at, fit, factors, n, theta, rot_dims) <= 2e-6) return 0;
  }
  /* smooth(a) = (1 / f - 1 / F) / (1 - 1 / F): 1 on kept pairs, 0 on divided ones, and on the
   * blended ones A * inv + B with A = original / (2 pi (high - low)), B = -low / (high - low). */
  cp_rope_table plain;
  cp_hf_config unscaled = {0};
  int rc = cp_rope_table_init(&plain, &unscaled, theta, rot_dims, what);
  if (rc) return rc;
  double sx = 0, sy = 0, sxx = 0, sxy = 0, last_kept = 0, first_divided = 0;
  int m = 0;
  for (int a = 0; a < n; a++) {
    double smooth = (1 / (double)factors[a] - 1 / f_max) / (1 - 1 / f_max), x = plain.inv[a];
    if (smooth >= 1 - 1e-6) last_kept = x;
    else if (smooth <= 1e-6) {
      if (first_divided == 0) first_divided = x;
    } else {
      sx += x, sy += smooth, sxx += x * x, sxy += x * smooth, m++;
    }
  }
  double A, B;
  if (m >= 2 && sxx * m - sx * sx > 0) { /* least squares over the blended pairs */
    A = (m * sxy - sx * sy) / (m * sxx - sx * sx);
    B = (sy - A * sx) / m;
  } else if (m == 1) { /* one blended pair: Llama 3's high_freq_factor 4 */
    B = -1.0 / 3.0;
    A = (sy - B) / sx;
  } else if (last_kept > 0 && first_divided > 0) { /* no blended pair: the band edges between the two */
    double original = floor(2 * PI / first_divided);
    double high = original * last_kept / (2 * PI);
    B = high > 1 ? -1 / (high - 1) : 0;
    A = high > 1 ? original / (2 * PI * (high - 1)) : 0;
  } else {
    A = B = 0;
  }
  if (A > 0 && B < 0) {
    double high = 1 - 1 / B, original = -2 * PI * A / B;
    snprintf(fit->type, sizeof fit->type, "llama3");
    fit->low_freq_factor = 1;
    /* the roundest high factor that gives the same table (Llama 3: 1, 4, 8192) */
    const double highs[4] = {round(high), round(high * 10) / 10, round(high * 1000) / 1000, high};
    for (int k = 0; k < 4; k++) {
      fit->high_freq_factor = highs[k];
      fit->original_max_pos = original >= 1 && original < 1e9 ? (int)lround(original) : 0;
      if (fit->original_max_pos > 0 && fit->high_freq_factor > 1 &&
          fit_error(&at, fit, factors, n, theta, rot_dims) <= 2e-6)
        return 0;
    }
  }
  memset(fit, 0, sizeof *fit);
  if (at < 0)
    return cp_error_set(CP_ECFG_POSITION,
                        "%s: the %d RoPE frequency factors (largest %.9g) are not a llama3 or linear "
                        "scaling table (no band of blended pairs fits them)",
                        what, n, f_max);
  return cp_error_set(CP_ECFG_POSITION,
                      "%s: the %d RoPE frequency factors (largest %.9g) are not a llama3 or linear "
                      "scaling table (the nearest misses factor %d, %.9g, by more than 2e-6)",
                      what, n, f_max, at, (double)factors[at]);
}
