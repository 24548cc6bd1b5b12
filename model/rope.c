/* RoPE frequency tables (include/ctxpatch/model/rope.h), written from transformers'
 * src/transformers/modeling_rope_utils.py: _compute_default_rope_parameters,
 * _compute_linear_scaling_rope_parameters, _compute_llama3_parameters and
 * _compute_yarn_parameters (read with the search tool; not copied). transformers computes the
 * tables in float32; here they are double, as the float64 PyTorch reference
 * (python/ctxpatch_ref/torchref/rules.py, rope_scaled_inv_freq) computes them. */
#include "ctxpatch/model/rope.h"

#include <math.h>
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

int cp_rope_table_init(cp_rope_table *t, const cp_hf_config *cfg, double theta, int rot_dims, const char *what) {
  memset(t, 0, sizeof *t);
  if (rot_dims < 2 || rot_dims > CP_ROPE_MAX_DIMS || rot_dims % 2)
    return cp_error_set(CP_ECFG_FIELD, "%s: %d rotary dims (want an even number in 2..%d)", what, rot_dims,
                        CP_ROPE_MAX_DIMS);
  t->n = rot_dims / 2;
  t->mscale = 1.0;
  for (int a = 0; a < t->n; a++) t->inv[a] = 1.0 / pow(theta, (double)(2 * a) / (double)rot_dims);
  const char *type = cfg->rope_scaling_type;
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
  if (!strcmp(type, "dynamic") || !strcmp(type, "longrope"))
    return cp_error_set(CP_ECFG_FIELD,
                        "%s: key 'rope_scaling.type': '%s' is not supported: its frequencies change "
                        "with the length of each forward call (supported: linear, llama3, yarn)",
                        what, type);
  return cp_error_set(CP_ECFG_FIELD, "%s: key 'rope_scaling.type': '%s' is not supported (linear, llama3, yarn)", what,
                      type);
}
