/* Baking a patch into an HF artifact (include/ctxpatch/patchers/patch.h, docs/patching.md): which part of
 * a rule the weights can carry exactly, and the streaming writer of the baked folder.
 *
 * Temperature: the engine computes (c q.k + b) / tau. Scaling the query projection (weight and
 * bias; RoPE rotates q linearly, so rotated q scales too; Qwen3: its q_norm weight) by 1/tau
 * gives c q.k / tau; the positional term b must be scaled as well, and it is a weight only for T5 (the bucket table,
 * shared by every layer of a stack), FIRE (the MLP's output layer, possibly shared by every
 * layer) and ALiBi checkpoints that store their slopes. A shared parameter can be scaled only
 * when every attention call that reads it has the same 1/tau: that is the whole exactness test.
 * MPT's clip_qkv clamps q before attention, which does not commute with scaling. A
 * temperature_schedule (tau per input length) is never baked: it stays in the ctxpatch block. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/hf_config_json.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/names.h"
#include "ctxpatch/patchers/patch.h"
#include "ctxpatch/formats/safetensors.h"
#include "patchers/patch_json.h"

const char *cp_patch_method_name(cp_patch_method m) {
  switch (m) {
    case CP_PATCH_TEMPERATURE: return "temperature";
    case CP_PATCH_ALIBI_PI: return "alibi-pi";
    case CP_PATCH_LM_INFINITE: return "lm-infinite";
    case CP_PATCH_ROPE_PI: return "rope-pi";
    case CP_PATCH_FIRE_THRESHOLD: return "fire-threshold";
    case CP_PATCH_RULE: return "rule";
    case CP_PATCH_METHOD_COUNT: break;
  }
  return "?";
}

int cp_patch_method_from_name(cp_patch_method *out, const char *name) {
  for (int i = 0; i < CP_PATCH_METHOD_COUNT; i++)
    if (!strcmp(name, cp_patch_method_name((cp_patch_method)i))) {
      *out = (cp_patch_method)i;
      return 0;
    }
  return cp_error_set(CP_EARG, "--method '%s': expected temperature, alibi-pi, lm-infinite, rope-pi or "
                               "fire-threshold", name);
}

const char *cp_fidelity_name(cp_fidelity f) {
  switch (f) {
    case CP_FIDELITY_EXACT_WEIGHTS: return "exact-weights";
    case CP_FIDELITY_NATIVE_CONFIG: return "native-config";
    case CP_FIDELITY_METADATA: return "ctxpatch-metadata";
    case CP_FIDELITY_GRAPH: return "graph";
  }
  return "?";
}

static const char *pos_name(cp_pos_scheme p) {
  switch (p) {
    case CP_POS_ALIBI: return "ALiBi";
    case CP_POS_ROPE: return "RoPE";
    case CP_POS_FIRE: return "FIRE";
    case CP_POS_T5_BUCKETS: return "T5 relative buckets";
    case CP_POS_LEARNED: return "learned absolute";
  }
  return "another positional scheme";
}

int cp_patch_method_fits(const cp_model *m, cp_patch_method method) {
  cp_pos_scheme need = m->pos;
  if (method == CP_PATCH_ALIBI_PI) need = CP_POS_ALIBI;
  if (method == CP_PATCH_ROPE_PI) need = CP_POS_ROPE;
  if (method == CP_PATCH_FIRE_THRESHOLD) need = CP_POS_FIRE;
  if (m->pos != need)
    return cp_error_set(CP_EPATCH_FAMILY, "--method %s needs %s positions; this %s model uses %s",
                        cp_patch_method_name(method), pos_name(need), cp_hf_config_name(m->cfg), pos_name(m->pos));
  return 0;
}

int cp_patch_rope_pi_fits(const cp_model *m, const char *dir) {
  /* Position interpolation on top of llama3, yarn, dynamic or longrope frequencies has no rope_scaling that
   * transformers would read (one type per config): refused, not composed
   * (docs/attention-decisions.md, "RoPE scaling"). */
  if (m->rope_type[0] && strcmp(m->rope_type, "linear") != 0)
    return cp_error_set(CP_EARG, "%s/config.json: key 'rope_scaling.type': rope-pi cannot compose with '%s' "
                        "scaling (one rope_scaling type per config); use a temperature or lm-infinite patch",
                        dir, m->rope_type);
  /* configuration_phi3.py (Phi3Config.validate_rope) raises on any type but default and longrope. */
  if (m->family == CP_FAMILY_PHI3)
    return cp_error_set(CP_EARG, "%s/config.json: key 'rope_scaling.type': rope-pi would write 'linear', which "
                        "transformers' Phi3Config refuses (default or longrope only); use a temperature or "
                        "lm-infinite patch", dir);
  return 0;
}

/* cp_patch_check with `what` naming the rule's place (the input folder when known). */
static int patch_check_at(const cp_model *m, const cp_patch *patch, const char *what) {
  int rc = cp_patch_method_fits(m, patch->method);
  if (rc) return rc;
  if (patch->method == CP_PATCH_ROPE_PI && !(patch->rope_factor > 0 && isfinite(patch->rope_factor)))
    return cp_error_set(CP_EARG, "--method rope-pi needs --factor F > 0");
  cp_rule_model rm;
  cp_model_rule_model(&rm, m);
  return cp_rule_check_model(&patch->rule, &rm, what);
}

int cp_patch_check(const cp_model *m, const cp_patch *patch) { return patch_check_at(m, patch, "patch rule"); }

/* ---------------------------------------------------------------- tensor transforms */

typedef enum {
  XF_SCALE_ALL,   /* every element times mult */
  XF_SCALE_ONE_PLUS, /* every element w of a Gemma norm, which multiplies by 1 + w: 1 + w times mult */
  XF_SCALE_ROWS,  /* rows given by q_rows() times their mult (fused or plain q projections) */
  XF_SET,         /* a scalar set to value */
} xf_kind;

/* QL_CONCAT_IN_OUT: GPT-2's Conv1D c_attn, q | k | v along the output, which is the weight's
 * second dimension ([n_in, n_out]) and the bias's only one. */
typedef enum { QL_PLAIN, QL_INTERLEAVED, QL_CONCAT, QL_CONCAT_IN_OUT } q_layout;

typedef struct {
  char *name;
  xf_kind kind;
  double mult, value;
  q_layout layout; /* XF_SCALE_ROWS: which rows are q */
} xform;

typedef struct {
  xform *v;
  size_t n, cap;
} xform_list;

static void xforms_free(xform_list *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i].name);
  free(l->v);
  memset(l, 0, sizeof *l);
}

/* Adds a transform for `name`; a `required` name the checkpoint lacks is an error (the model
 * loaded, so this means a layout the family table does not know). */
static int xf_add(xform_list *l, const cp_checkpoint *ck, const char *name, xform x, bool required) {
  if (!cp_checkpoint_find(ck, name)) {
    if (!required) return 0;
    return cp_error_set(CP_EMODEL_TENSOR, "%s: tensor '%s' not found for baking", cp_checkpoint_dir(ck), name);
  }
  for (size_t i = 0; i < l->n; i++)
    if (!strcmp(l->v[i].name, name))
      return cp_error_set(CP_EUNSUPPORTED, "%s: tensor '%s': would be transformed twice", cp_checkpoint_dir(ck), name);
  int rc = CP_ARRAY_RESERVE(l->v, l->cap, l->n + 1, "bake");
  if (rc) return rc;
  x.name = strdup(name);
  CP_CHECK_ALLOC(x.name, "bake");
  l->v[l->n++] = x;
  return 0;
}

static xform scale_all(double mult) { return (xform){NULL, XF_SCALE_ALL, mult, 0, QL_PLAIN}; }
static xform scale_q(double mult, q_layout layout) { return (xform){NULL, XF_SCALE_ROWS, mult, 0, layout}; }

/* Weight and (when present) bias of the query projection read by one attention call: the fused
 * QKV tensor's q rows where the family fuses them. A model with q norms (Qwen3 per head, OLMo 2 whole) scales
 * the norm's weight instead: RMSNorm would undo a scaled projection (RMSNorm(q / tau) = RMSNorm(q)
 * up to eps), while w / tau scales its output, the query RoPE then rotates, exactly. */
static int add_q(xform_list *l, const cp_names *nm, cp_attn_kind kind, int layer, double mult) {
  char w[CP_TENSOR_NAME_MAX], b[CP_TENSOR_NAME_MAX];
  if (nm->qk_norm && kind != CP_ATTN_CROSS) {
    cp_names_get(w, nm, CP_ROLE_Q_NORM, CP_STACK_DECODER, layer, ".weight");
    /* Gemma 3's q_norm multiplies by 1 + w (a GGUF stores the 1 + w itself) */
    const bool one_plus = nm->fl->family == CP_FAMILY_GEMMA && !nm->gguf;
    return xf_add(l, nm->ck, w, one_plus ? (xform){NULL, XF_SCALE_ONE_PLUS, mult, 0, QL_PLAIN} : scale_all(mult),
                  true);
  }
  cp_qkv_layout fused = kind == CP_ATTN_CROSS ? CP_QKV_SEPARATE : nm->fl->qkv;
  cp_tensor_role role = kind == CP_ATTN_CROSS ? CP_ROLE_CQ : fused == CP_QKV_SEPARATE ? CP_ROLE_Q : CP_ROLE_QKV;
  cp_stack_kind stack = kind == CP_ATTN_ENCODER_SELF ? CP_STACK_ENCODER : CP_STACK_DECODER;
  q_layout ql = fused == CP_QKV_INTERLEAVED ? QL_INTERLEAVED
                : fused == CP_QKV_CONCAT     ? (nm->fl->conv1d && !nm->gguf ? QL_CONCAT_IN_OUT : QL_CONCAT)
                                             : QL_PLAIN;
  if (!cp_names_get(w, nm, role, stack, layer, ".weight") || !cp_names_get(b, nm, role, stack, layer, ".bias"))
    return cp_error_set(CP_EUNSUPPORTED, "%s: layer %d: family %s has no query projection name to bake",
                        cp_checkpoint_dir(nm->ck), layer, cp_family_name(nm->fl->family));
  int rc = xf_add(l, nm->ck, w, scale_q(mult, ql), true);
  if (rc == 0) rc = xf_add(l, nm->ck, b, scale_q(mult, ql), false);
  return rc;
}

/* Part `part` (CP_FIRE_*, with its suffix) of the FIRE MLP read by `layer`. */
static int add_fire(xform_list *l, const cp_names *nm, int layer, const char *part, xform x) {
  char n[CP_TENSOR_NAME_MAX];
  cp_names_get(n, nm, CP_ROLE_FIRE, CP_STACK_DECODER, layer, part);
  return xf_add(l, nm->ck, n, x, true);
}

/* Every stored-slopes tensor, times mult. */
static int add_slopes(xform_list *l, const cp_names *nm, double mult) {
  for (size_t i = cp_names_next_slopes(nm, 0); i != (size_t)-1; i = cp_names_next_slopes(nm, i + 1)) {
    int rc = xf_add(l, nm->ck, cp_checkpoint_tensor(nm->ck, i)->name, scale_all(mult), true);
    if (rc) return rc;
  }
  return 0;
}

/* 1/tau of every attention call, and whether each shared positional parameter sees one value. */
typedef struct {
  int n_enc, n_dec;
  bool t5;
  float enc_self[CP_RULE_MAX_LAYERS], dec_self[CP_RULE_MAX_LAYERS], cross[CP_RULE_MAX_LAYERS];
} tau_map;

static void tau_map_make(tau_map *t, const cp_model *m, const cp_rule *rule) {
  cp_rule_model rm;
  cp_model_rule_model(&rm, m);
  memset(t, 0, sizeof *t);
  t->t5 = m->family == CP_FAMILY_T5;
  t->n_enc = m->encoder.n_layers;
  t->n_dec = m->decoder.n_layers;
  cp_attn_plan p;
  for (int l = 0; l < t->n_enc && l < CP_RULE_MAX_LAYERS; l++) {
    cp_rule_plan(&p, rule, &rm, CP_ATTN_ENCODER_SELF, l);
    t->enc_self[l] = p.inv_tau;
  }
  for (int l = 0; l < t->n_dec && l < CP_RULE_MAX_LAYERS; l++) {
    cp_rule_plan(&p, rule, &rm, CP_ATTN_DECODER_SELF, l);
    t->dec_self[l] = p.inv_tau;
    if (t->t5) {
      cp_rule_plan(&p, rule, &rm, CP_ATTN_CROSS, l);
      t->cross[l] = p.inv_tau;
    }
  }
}

static bool all_equal(const float *v, int n) {
  for (int i = 1; i < n; i++)
    if (v[i] != v[0]) return false;
  return true;
}

/* Whether a temperature-only rule can be baked exactly; *why says what prevents it. */
static bool temperature_bakeable(const cp_model *m, const tau_map *t, bool stored_slopes, const char **why) {
  *why = NULL;
  if (t->n_enc > CP_RULE_MAX_LAYERS || t->n_dec > CP_RULE_MAX_LAYERS) {
    *why = "more layers than a rule can list";
    return false;
  }
  switch (m->pos) {
    case CP_POS_T5_BUCKETS:
      if (!all_equal(t->enc_self, t->n_enc) || !all_equal(t->dec_self, t->n_dec)) {
        *why = "per-layer temperatures would need per-layer copies of the shared T5 bias table, which HF's T5 "
               "does not load";
        return false;
      }
      return true;
    case CP_POS_FIRE:
      if (m->cfg->fire_shared && !all_equal(t->dec_self, t->n_dec)) {
        *why = "per-layer temperatures would need per-layer copies of the shared FIRE MLP";
        return false;
      }
      return true;
    case CP_POS_ALIBI:
      if (!stored_slopes) {
        *why = "the ALiBi term must be divided by tau too, and this checkpoint does not store its slopes "
               "(BLOOM and MPT compute them from the head count)";
        return false;
      }
      if (!all_equal(t->dec_self, t->n_dec)) {
        *why = "per-layer temperatures would need per-layer copies of the stored ALiBi slopes";
        return false;
      }
      if (m->clip_qkv > 0) {
        *why = "MPT's clip_qkv clamps q before attention, which does not commute with dividing q by tau";
        return false;
      }
      return true;
    case CP_POS_ROPE:
    case CP_POS_LEARNED: return true; /* no positional weight beside q (GPT-2's is in the input) */
    default: *why = "unknown positional scheme"; return false;
  }
}

static int temperature_xforms(xform_list *l, const cp_model *m, const cp_names *nm, const tau_map *t) {
  int rc = 0;
  for (int i = 0; i < t->n_enc && rc == 0; i++)
    if (t->enc_self[i] != 1.0f) rc = add_q(l, nm, CP_ATTN_ENCODER_SELF, i, t->enc_self[i]);
  for (int i = 0; i < t->n_dec && rc == 0; i++) {
    if (t->dec_self[i] != 1.0f) rc = add_q(l, nm, CP_ATTN_DECODER_SELF, i, t->dec_self[i]);
    if (rc == 0 && t->t5 && t->cross[i] != 1.0f) rc = add_q(l, nm, CP_ATTN_CROSS, i, t->cross[i]);
  }
  if (rc) return rc;
  char n[CP_TENSOR_NAME_MAX];
  switch (nm->fl->tau) {
    case CP_TAU_REL_BIAS:
      if (t->n_enc > 0 && t->enc_self[0] != 1.0f && cp_names_get(n, nm, CP_ROLE_REL_BIAS, CP_STACK_ENCODER, 0, ".weight"))
        rc = xf_add(l, nm->ck, n, scale_all(t->enc_self[0]), true);
      if (rc == 0 && t->n_dec > 0 && t->dec_self[0] != 1.0f &&
          cp_names_get(n, nm, CP_ROLE_REL_BIAS, CP_STACK_DECODER, 0, ".weight"))
        rc = xf_add(l, nm->ck, n, scale_all(t->dec_self[0]), true);
      return rc;
    case CP_TAU_FIRE_OUT: {
      int n_mlp = m->cfg->fire_shared ? 1 : t->n_dec;
      for (int i = 0; i < n_mlp && rc == 0; i++) {
        if (t->dec_self[i] == 1.0f) continue;
        /* the output layer only: 1/tau of the bias is 1/tau of that last affine map */
        const int nl = m->cfg->fire_mlp_layers;
        rc = add_fire(l, nm, i, cp_fire_out_part(nl, false), scale_all(t->dec_self[i]));
        if (rc == 0) rc = add_fire(l, nm, i, cp_fire_out_part(nl, true), scale_all(t->dec_self[i]));
      }
      return rc;
    }
    case CP_TAU_STORED_SLOPES: return t->n_dec > 0 && t->dec_self[0] != 1.0f ? add_slopes(l, nm, t->dec_self[0]) : 0;
    case CP_TAU_NOWHERE: return 0;
  }
  return 0;
}

/* ---------------------------------------------------------------- the plan */

int cp_bake_plan_make(cp_bake_plan *out, const cp_model *m, const cp_checkpoint *ck, const cp_patch *patch) {
  memset(out, 0, sizeof *out);
  cp_rule_init(&out->baked);
  cp_rule_init(&out->residual);
  char what[4200]; /* paths are cut at 4000 bytes in this message */
  snprintf(what, sizeof what, "%.4000s: patch rule", cp_checkpoint_dir(ck));
  int rc = patch_check_at(m, patch, what);
  if (rc) return rc;
  cp_names nm;
  cp_names_init(&nm, ck, m->cfg);
  out->stored_slopes = m->pos == CP_POS_ALIBI && cp_names_next_slopes(&nm, 0) != (size_t)-1;
  const cp_rule *r = &patch->rule;
  const char *fam = cp_family_name(m->family);
  switch (patch->method) {
    case CP_PATCH_TEMPERATURE: {
      tau_map t;
      tau_map_make(&t, m, r);
      const char *why;
      if (r->n_schedule > 0) {
        /* tau(T) depends on the input length; weights hold one tau (spec: it travels as metadata). */
        out->fidelity = CP_FIDELITY_METADATA;
        out->residual = *r;
        snprintf(out->note, sizeof out->note, "temperature_schedule kept in the ctxpatch block: tau depends on the "
                 "input length, which no weight can express");
      } else if (temperature_bakeable(m, &t, out->stored_slopes, &why)) {
        out->fidelity = CP_FIDELITY_EXACT_WEIGHTS;
        out->baked = *r;
        snprintf(out->note, sizeof out->note, "%s%s divided by tau",
                 m->cfg->qk_norm_whole ? "query norms (OLMo 2's q_norm over the whole q, after which RoPE rotates)"
                 : m->cfg->qk_norm     ? "per-head query norms (q_norm, after which RoPE rotates)"
                                       : "query projections",
                 m->pos == CP_POS_T5_BUCKETS ? " and relative-bias tables"
                 : m->pos == CP_POS_FIRE    ? " and FIRE MLP output layers"
                 : m->pos == CP_POS_ALIBI   ? " and stored ALiBi slopes"
                                            : "");
      } else {
        out->fidelity = CP_FIDELITY_METADATA;
        out->residual = *r;
        snprintf(out->note, sizeof out->note, "temperature kept in the ctxpatch block: %s", why);
      }
      return 0;
    }
    case CP_PATCH_ALIBI_PI:
      if (r->alibi_mode == CP_ALIBI_STATIC && out->stored_slopes) {
        out->fidelity = CP_FIDELITY_EXACT_WEIGHTS;
        out->baked = *r;
        snprintf(out->note, sizeof out->note, "stored ALiBi slopes divided by %g", r->alibi_factor);
      } else {
        out->fidelity = CP_FIDELITY_METADATA;
        out->residual = *r;
        snprintf(out->note, sizeof out->note,
                 r->alibi_mode == CP_ALIBI_STATIC
                     ? "alibi_scale kept in the ctxpatch block: %s computes its slopes from the head count and "
                       "reads no alibi_scaling field (BTLM's is not a supported family)"
                     : "alibi_scale kept in the ctxpatch block: %s runtimes have no dynamic or progressive "
                       "ALiBi interpolation",
                 fam);
      }
      return 0;
    case CP_PATCH_LM_INFINITE:
      out->fidelity = CP_FIDELITY_METADATA;
      out->residual = *r;
      snprintf(out->note, sizeof out->note,
               "lambda mask, distance ceiling%s kept in the ctxpatch block: no weight or standard config field "
               "expresses them",
               r->has_top_k ? " and top-k" : "");
      return 0;
    case CP_PATCH_ROPE_PI:
      if ((rc = cp_patch_rope_pi_fits(m, cp_checkpoint_dir(ck)))) return rc;
      out->fidelity = CP_FIDELITY_NATIVE_CONFIG;
      out->rope_factor = m->rope_scale * patch->rope_factor;
      if (!isfinite(out->rope_factor)) /* JSON has no infinity: it would be written as null */
        return cp_error_set(CP_EOVERFLOW, "%s/config.json: key 'rope_scaling.factor': %g x --factor %g is not a "
                            "finite number", cp_checkpoint_dir(ck), m->rope_scale, patch->rope_factor);
      snprintf(out->note, sizeof out->note, "config.json rope_scaling {\"type\": \"linear\", \"factor\": %g}%s",
               out->rope_factor, m->rope_scale != 1.0 ? " (the existing factor times --factor)" : "");
      return 0;
    case CP_PATCH_FIRE_THRESHOLD:
      out->fidelity = CP_FIDELITY_EXACT_WEIGHTS;
      out->baked = *r;
      snprintf(out->note, sizeof out->note, "every FIRE L tensor set to %g", r->fire_threshold);
      return 0;
    case CP_PATCH_RULE:
      out->fidelity = CP_FIDELITY_METADATA;
      out->residual = *r;
      snprintf(out->note, sizeof out->note, "the --rule file kept whole in the ctxpatch block: it combines "
               "mechanisms no single weight change or config field carries");
      return 0;
    case CP_PATCH_METHOD_COUNT: break;
  }
  return cp_error_set(CP_EARG, "patch: unknown method");
}

static int plan_xforms(xform_list *l, const cp_model *m, const cp_checkpoint *ck, const cp_bake_plan *plan) {
  const cp_rule *b = &plan->baked;
  cp_names nm;
  cp_names_init(&nm, ck, m->cfg);
  int rc = 0;
  if (b->n_temperature > 0) {
    tau_map t;
    tau_map_make(&t, m, b);
    if ((rc = temperature_xforms(l, m, &nm, &t))) return rc;
  }
  if (b->alibi_mode == CP_ALIBI_STATIC && b->alibi_factor != 1.0)
    if ((rc = add_slopes(l, &nm, 1.0 / b->alibi_factor))) return rc;
  if (b->fire_threshold > 0) {
    int n_mlp = m->cfg->fire_shared ? 1 : m->decoder.n_layers;
    for (int i = 0; i < n_mlp && rc == 0; i++)
      rc = add_fire(l, &nm, i, "." CP_FIRE_L, (xform){NULL, XF_SET, 1, b->fire_threshold, QL_PLAIN});
  }
  return rc;
}

/* ---------------------------------------------------------------- writing */

static int apply_xform(float *v, const cp_tensor *t, const xform *x, const cp_model *m, const char *dir) {
  uint64_t numel = 0;
  if (cp_shape_numel(&numel, t->ndim, t->shape))
    return cp_error_set(CP_EOVERFLOW, "%s: tensor '%s': too large to bake", dir, t->name);
  if (x->kind == XF_SET) {
    if (numel != 1) return cp_error_set(CP_EMODEL_TENSOR, "%s: tensor '%s': is not a scalar", dir, t->name);
    v[0] = (float)x->value;
    return 0;
  }
  if (x->kind == XF_SCALE_ALL) {
    for (uint64_t i = 0; i < numel; i++) v[i] = (float)(v[i] * x->mult);
    return 0;
  }
  if (x->kind == XF_SCALE_ONE_PLUS) {
    for (uint64_t i = 0; i < numel; i++) v[i] = (float)((1.0 + v[i]) * x->mult - 1.0);
    return 0;
  }
  uint64_t rows = t->ndim > 0 ? (uint64_t)t->shape[0] : 1, width = rows ? numel / rows : 0;
  uint64_t dh = (uint64_t)m->d_head, nq = (uint64_t)m->n_heads * dh;
  if (x->layout == QL_CONCAT_IN_OUT && t->ndim == 2) { /* [n_in, n_out]: the first nq columns */
    for (uint64_t r = 0; r < rows; r++)
      for (uint64_t k = 0; k < width && k < nq; k++) v[r * width + k] = (float)(v[r * width + k] * x->mult);
    return 0;
  }
  for (uint64_t r = 0; r < rows; r++) {
    bool q = x->layout == QL_PLAIN || ((x->layout == QL_CONCAT || x->layout == QL_CONCAT_IN_OUT) && r < nq) ||
             (x->layout == QL_INTERLEAVED && (r % (3 * dh)) < dh);
    if (!q) continue;
    for (uint64_t k = 0; k < width; k++) v[r * width + k] = (float)(v[r * width + k] * x->mult);
  }
  return 0;
}

static int narrow(void *dst, const float *src, cp_dtype dtype, uint64_t n, const char *dir, const char *name) {
  switch (dtype) {
    case CP_F32: memcpy(dst, src, n * sizeof *src); return 0;
    case CP_F16:
      for (uint64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = cp_f32_to_f16(src[i]);
      return 0;
    case CP_BF16:
      for (uint64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = cp_f32_to_bf16(src[i]);
      return 0;
    case CP_F64:
      for (uint64_t i = 0; i < n; i++) ((double *)dst)[i] = src[i];
      return 0;
    default: return cp_error_set(CP_EUNSUPPORTED, "%s: tensor '%s': has dtype %s; only float tensors can be "
                                                  "rescaled", dir, name, cp_dtype_name(dtype));
  }
}

/* config.json: the input's text (kept from its one strict parse) with only rope_scaling,
 * fire_threshold and the ctxpatch block spliced in, so every other key keeps its bytes. The
 * result is parsed again as a model config before it is written: what cannot be opened is not
 * written. Called again with the digest filled in once the certificate is known. */
int cp_bake_write_config(const char *dir, const cp_hf_config *src, const cp_bake_plan *plan, const cJSON *block) {
  char *out = NULL, *path = NULL;
  size_t out_len = 0;
  cJSON *rs = NULL, *fire = NULL;
  cp_hf_config *check = NULL;
  cp_atomic_file *f = NULL;
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(path = cp_path_join(dir, "config.json"), dir);
  /* transformers 5's layout ("rope_parameters", rope_theta inside) is kept: a rope_scaling beside
   * it would make a config with both, which no reader takes. */
  const bool v5 = src->rope_parameters_layout;
  if (plan->rope_factor > 0) {
    CP_CHECK_ALLOC_GOTO(rs = cJSON_CreateObject(), path);
    CP_CHECK_ALLOC_GOTO(cJSON_AddStringToObject(rs, v5 ? "rope_type" : "type", "linear"), path);
    CP_CHECK_ALLOC_GOTO(cJSON_AddNumberToObject(rs, "factor", plan->rope_factor), path);
    if (v5) CP_CHECK_ALLOC_GOTO(cJSON_AddNumberToObject(rs, "rope_theta", src->rope_theta), path);
  }
  if (plan->baked.fire_threshold > 0) CP_CHECK_ALLOC_GOTO(fire = cJSON_CreateNumber(plan->baked.fire_threshold), path);
  const cp_hf_member set[] = {
      {v5 ? "rope_parameters" : "rope_scaling", rs, false}, {"fire_threshold", fire, true}, {"ctxpatch", block, false}};
  if ((rc = cp_hf_config_splice(&out, &out_len, src, set, 3, path))) goto done;
  if ((rc = cp_hf_config_parse(&check, out, out_len, path))) goto done;
  if ((rc = cp_atomic_open(&f, path))) goto done;
  if ((rc = cp_atomic_write(f, out, out_len))) goto done;
  if (out_len == 0 || out[out_len - 1] != '\n') rc = cp_atomic_write(f, "\n", 1);
  if (rc) goto done;
  rc = cp_atomic_commit(f);
  f = NULL;
done:
  cp_atomic_abort(f);
  cp_hf_config_free(check);
  cJSON_Delete(rs);
  cJSON_Delete(fire);
  free(out);
  free(path);
  return rc;
}

/* The block as compact JSON for __metadata__, with *digest_pos the offset of the 64-zero digest
 * placeholder (SIZE_MAX when the block has none). The placeholder is appended last by hand, so its
 * place is known rather than searched for; cp_patch_block adds the key last, so the text is the
 * same cJSON would print. */
static char *block_text(const cJSON *block, size_t *digest_pos) {
  *digest_pos = SIZE_MAX;
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(block, "certificate_sha256");
  if (!cJSON_IsString(d)) return cJSON_PrintUnformatted(block);
  static const char key[] = ",\"certificate_sha256\":\"";
  cJSON *rest = cJSON_Duplicate(block, true);
  char *head = NULL, *text = NULL;
  if (rest) cJSON_DeleteItemFromObjectCaseSensitive(rest, "certificate_sha256");
  if (rest && (head = cJSON_PrintUnformatted(rest))) {
    size_t n = strlen(head) - 1; /* without the closing brace */
    if ((text = malloc(n + sizeof key - 1 + 64 + 3))) {
      *digest_pos = n + sizeof key - 1;
      snprintf(text, n + sizeof key - 1 + 64 + 3, "%.*s%s%.64s\"}", (int)n, head, key, d->valuestring);
    }
  }
  cJSON_Delete(rest);
  free(head);
  return text;
}

/* The transform hook: the tensors the plan rescales, each widened to float32, changed, narrowed. */
typedef struct {
  const xform_list *xl;
  const cp_model *m;
  const char *dir; /* the input checkpoint, for messages */
} bake_hook;

static const xform *xform_of(const xform_list *xl, const char *name) {
  for (size_t j = 0; j < xl->n; j++)
    if (!strcmp(xl->v[j].name, name)) return &xl->v[j];
  return NULL;
}

static bool bake_wants(void *ctx, const cp_tensor *t) { return xform_of(((bake_hook *)ctx)->xl, t->name); }

static int bake_transform(void *ctx, const cp_tensor *t, const void *in /* [nbytes] */, void *out /* [nbytes] */) {
  const bake_hook *h = ctx;
  uint64_t numel = 0;
  float *vals = NULL;
  int rc = 0;
  if (cp_shape_numel(&numel, t->ndim, t->shape) || numel > SIZE_MAX / sizeof *vals)
    return cp_error_set(CP_EOVERFLOW, "%s: tensor '%s': too large to bake", h->dir, t->name);
  CP_CHECK_ALLOC(vals = malloc(numel ? numel * sizeof *vals : 1), t->name);
  if ((rc = cp_convert_to_f32(vals, in, t->dtype, numel)) == 0 &&
      (rc = apply_xform(vals, t, xform_of(h->xl, t->name), h->m, h->dir)) == 0)
    rc = narrow(out, vals, t->dtype, numel, h->dir, t->name);
  free(vals);
  return rc;
}

int cp_bake_write(cp_folder_result *out, const char *dir, cp_checkpoint *ck, const cp_model *m,
                  const cp_bake_plan *plan, const cJSON *block, uint64_t shard_size) {
  memset(out, 0, sizeof *out);
  xform_list xl = {0};
  char *meta_text = NULL;
  size_t digest_pos = SIZE_MAX;
  int rc = plan_xforms(&xl, m, ck, plan);
  if (rc) goto done;
  if (block) CP_CHECK_ALLOC_GOTO(meta_text = block_text(block, &digest_pos), dir);
  const char *meta[4] = {"format", "pt", "ctxpatch", meta_text};
  bake_hook h = {&xl, m, cp_checkpoint_dir(ck)};
  cp_tensor_hook hook = {bake_wants, bake_transform, &h, true}; /* reads only the plan and the model */
  cp_folder_params fp = {.shard_size = shard_size, .meta_kv = meta, .n_meta = block ? 2 : 1,
                         .mark_key = digest_pos != SIZE_MAX ? "ctxpatch" : NULL, .mark_pos = digest_pos,
                         .skip_aux = "config.json", .hook = &hook};
  if ((rc = cp_folder_write(out, dir, ck, &fp))) goto done;
  rc = cp_bake_write_config(dir, m->cfg, plan, block);
done:
  xforms_free(&xl);
  free(meta_text);
  return rc;
}
