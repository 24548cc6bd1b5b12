/* Baking a patch into an HF artifact (include/ctxpatch/patchers/patch.h, docs/patching.md): which part of
 * a rule the weights can carry exactly, and the streaming writer of the baked folder.
 *
 * Temperature: the engine computes (c q.k + b) / tau. Scaling the query projection (weight and
 * bias; RoPE rotates q linearly, so rotated q scales too) by 1/tau gives c q.k / tau; the
 * positional term b must be scaled as well, and it is a weight only for T5 (the bucket table,
 * shared by every layer of a stack), FIRE (the MLP's output layer, possibly shared by every
 * layer) and ALiBi checkpoints that store their slopes. A shared parameter can be scaled only
 * when every attention call that reads it has the same 1/tau: that is the whole exactness test.
 * MPT's clip_qkv clamps q before attention, which does not commute with scaling. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/patchers/patch.h"
#include "ctxpatch/formats/safetensors.h"

const char *cp_patch_method_name(cp_patch_method m) {
  switch (m) {
    case CP_PATCH_TEMPERATURE: return "temperature";
    case CP_PATCH_ALIBI_PI: return "alibi-pi";
    case CP_PATCH_LM_INFINITE: return "lm-infinite";
    case CP_PATCH_ROPE_PI: return "rope-pi";
    case CP_PATCH_FIRE_THRESHOLD: return "fire-threshold";
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
  }
  return "?";
}

static const char *pos_name(cp_pos_scheme p) {
  switch (p) {
    case CP_POS_ALIBI: return "ALiBi";
    case CP_POS_ROPE: return "RoPE";
    case CP_POS_FIRE: return "FIRE";
    case CP_POS_T5_BUCKETS: return "T5 relative buckets";
  }
  return "another positional scheme";
}

int cp_patch_check(const cp_model *m, const cp_patch *patch) {
  const char *fam = cp_family_name(m->family), *meth = cp_patch_method_name(patch->method);
  cp_pos_scheme need = m->pos;
  if (patch->method == CP_PATCH_ALIBI_PI) need = CP_POS_ALIBI;
  if (patch->method == CP_PATCH_ROPE_PI) need = CP_POS_ROPE;
  if (patch->method == CP_PATCH_FIRE_THRESHOLD) need = CP_POS_FIRE;
  if (m->pos != need)
    return cp_error_set(CP_EPATCH_FAMILY, "--method %s needs %s positions; this %s model uses %s", meth,
                        pos_name(need), fam, pos_name(m->pos));
  if (patch->method == CP_PATCH_ROPE_PI && !(patch->rope_factor > 0 && isfinite(patch->rope_factor)))
    return cp_error_set(CP_EARG, "--method rope-pi needs --factor F > 0");
  cp_rule_model rm;
  cp_model_rule_model(&rm, m);
  return cp_rule_check_model(&patch->rule, &rm, "patch rule");
}

/* ---------------------------------------------------------------- tensor transforms */

typedef enum {
  XF_SCALE_ALL,   /* every element times mult */
  XF_SCALE_ROWS,  /* rows given by q_rows() times their mult (fused or plain q projections) */
  XF_SET,         /* a scalar set to value */
} xf_kind;

typedef enum { QL_PLAIN, QL_INTERLEAVED, QL_CONCAT } q_layout;

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

/* Adds a transform for the first of `names` the checkpoint holds; `required` names missing
 * everywhere are an error (the model loaded, so this means a layout this file does not know). */
static int xf_add(xform_list *l, const cp_checkpoint *ck, const char *name, const char *alt, xform x,
                  bool required) {
  const char *use = cp_checkpoint_find(ck, name) ? name : alt && cp_checkpoint_find(ck, alt) ? alt : NULL;
  if (!use) {
    if (!required) return 0;
    return cp_error_set(CP_EMODEL_TENSOR, "%s: tensor '%s' not found for baking", cp_checkpoint_dir(ck), name);
  }
  for (size_t i = 0; i < l->n; i++)
    if (!strcmp(l->v[i].name, use))
      return cp_error_set(CP_EUNSUPPORTED, "bake: tensor '%s' would be transformed twice", use);
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 32;
    xform *g = realloc(l->v, cap * sizeof *g);
    if (!g) return cp_error_set(CP_ENOMEM, "out of memory");
    l->v = g;
    l->cap = cap;
  }
  x.name = strdup(use);
  if (!x.name) return cp_error_set(CP_ENOMEM, "out of memory");
  l->v[l->n++] = x;
  return 0;
}

static xform scale_all(double mult) { return (xform){NULL, XF_SCALE_ALL, mult, 0, QL_PLAIN}; }
static xform scale_q(double mult, q_layout layout) { return (xform){NULL, XF_SCALE_ROWS, mult, 0, layout}; }

/* The query projection of decoder/encoder layer `l` (weight and bias when present). */
static int add_q(xform_list *l, const cp_model *m, const cp_checkpoint *ck, cp_attn_kind kind, int layer,
                 double mult) {
  char w[512], b[512], wa[512], ba[512];
  const char *alt_w = NULL, *alt_b = NULL;
  q_layout ql = QL_PLAIN;
  switch (m->family) {
    case CP_FAMILY_T5: {
      const char *what = kind == CP_ATTN_ENCODER_SELF ? "encoder.block.%d.layer.0.SelfAttention.q"
                         : kind == CP_ATTN_DECODER_SELF ? "decoder.block.%d.layer.0.SelfAttention.q"
                                                        : "decoder.block.%d.layer.1.EncDecAttention.q";
      char base[256];
      snprintf(base, sizeof base, what, layer);
      snprintf(w, sizeof w, "%s.weight", base);
      snprintf(b, sizeof b, "%s.bias", base);
      break;
    }
    case CP_FAMILY_LLAMA:
    case CP_FAMILY_FIRE:
      snprintf(w, sizeof w, "model.layers.%d.self_attn.q_proj.weight", layer);
      snprintf(b, sizeof b, "model.layers.%d.self_attn.q_proj.bias", layer);
      break;
    case CP_FAMILY_GPT_NEOX:
      ql = QL_INTERLEAVED;
      snprintf(w, sizeof w, "gpt_neox.layers.%d.attention.query_key_value.weight", layer);
      snprintf(b, sizeof b, "gpt_neox.layers.%d.attention.query_key_value.bias", layer);
      break;
    case CP_FAMILY_BLOOM:
      ql = QL_INTERLEAVED;
      snprintf(w, sizeof w, "transformer.h.%d.self_attention.query_key_value.weight", layer);
      snprintf(b, sizeof b, "transformer.h.%d.self_attention.query_key_value.bias", layer);
      alt_w = w + strlen("transformer."), alt_b = b + strlen("transformer.");
      break;
    case CP_FAMILY_MPT:
      ql = QL_CONCAT;
      snprintf(w, sizeof w, "transformer.blocks.%d.attn.Wqkv.weight", layer);
      snprintf(b, sizeof b, "transformer.blocks.%d.attn.Wqkv.bias", layer);
      alt_w = w + strlen("transformer."), alt_b = b + strlen("transformer.");
      break;
    default: return cp_error_set(CP_EUNSUPPORTED, "bake: family %s", cp_family_name(m->family));
  }
  if (alt_w) {
    snprintf(wa, sizeof wa, "%s", alt_w);
    snprintf(ba, sizeof ba, "%s", alt_b);
  }
  int rc = xf_add(l, ck, w, alt_w ? wa : NULL, scale_q(mult, ql), true);
  if (rc == 0) rc = xf_add(l, ck, b, alt_b ? ba : NULL, scale_q(mult, ql), false);
  return rc;
}

/* The FIRE MLP read by `layer` (the shared one when fire_shared). */
static void fire_base(char *out, size_t n, const cp_model *m, int layer) {
  if (m->cfg->fire_shared) snprintf(out, n, "model.fire");
  else snprintf(out, n, "model.layers.%d.self_attn.fire", layer);
}

static int add_slopes(xform_list *l, const cp_checkpoint *ck, double mult) {
  static const char suffix[] = "relative_pe.slopes";
  for (size_t i = 0; i < cp_checkpoint_count(ck); i++) {
    const char *name = cp_checkpoint_tensor(ck, i)->name;
    size_t len = strlen(name);
    if (len >= sizeof suffix - 1 && !strcmp(name + len - (sizeof suffix - 1), suffix)) {
      int rc = xf_add(l, ck, name, NULL, scale_all(mult), true);
      if (rc) return rc;
    }
  }
  return 0;
}

static bool has_stored_slopes(const cp_checkpoint *ck) {
  static const char suffix[] = "relative_pe.slopes";
  for (size_t i = 0; i < cp_checkpoint_count(ck); i++) {
    const char *name = cp_checkpoint_tensor(ck, i)->name;
    size_t len = strlen(name);
    if (len >= sizeof suffix - 1 && !strcmp(name + len - (sizeof suffix - 1), suffix)) return true;
  }
  return false;
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
    case CP_POS_ROPE: return true;
    default: *why = "unknown positional scheme"; return false;
  }
}

static int temperature_xforms(xform_list *l, const cp_model *m, const cp_checkpoint *ck, const tau_map *t) {
  int rc = 0;
  for (int i = 0; i < t->n_enc && rc == 0; i++)
    if (t->enc_self[i] != 1.0f) rc = add_q(l, m, ck, CP_ATTN_ENCODER_SELF, i, t->enc_self[i]);
  for (int i = 0; i < t->n_dec && rc == 0; i++) {
    if (t->dec_self[i] != 1.0f) rc = add_q(l, m, ck, CP_ATTN_DECODER_SELF, i, t->dec_self[i]);
    if (rc == 0 && t->t5 && t->cross[i] != 1.0f) rc = add_q(l, m, ck, CP_ATTN_CROSS, i, t->cross[i]);
  }
  if (rc) return rc;
  switch (m->pos) {
    case CP_POS_T5_BUCKETS:
      if (t->n_enc > 0 && t->enc_self[0] != 1.0f)
        rc = xf_add(l, ck, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", NULL,
                    scale_all(t->enc_self[0]), true);
      if (rc == 0 && t->n_dec > 0 && t->dec_self[0] != 1.0f)
        rc = xf_add(l, ck, "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", NULL,
                    scale_all(t->dec_self[0]), true);
      return rc;
    case CP_POS_FIRE: {
      char base[256], n[300];
      int n_mlp = m->cfg->fire_shared ? 1 : t->n_dec;
      for (int i = 0; i < n_mlp && rc == 0; i++) {
        if (t->dec_self[i] == 1.0f) continue;
        fire_base(base, sizeof base, m, i);
        snprintf(n, sizeof n, "%s.mlp.2.weight", base);
        rc = xf_add(l, ck, n, NULL, scale_all(t->dec_self[i]), true);
        snprintf(n, sizeof n, "%s.mlp.2.bias", base);
        if (rc == 0) rc = xf_add(l, ck, n, NULL, scale_all(t->dec_self[i]), true);
      }
      return rc;
    }
    case CP_POS_ALIBI: return t->n_dec > 0 && t->dec_self[0] != 1.0f ? add_slopes(l, ck, t->dec_self[0]) : 0;
    default: return 0;
  }
}

/* ---------------------------------------------------------------- the plan */

int cp_bake_plan_make(cp_bake_plan *out, const cp_model *m, const cp_checkpoint *ck, const cp_patch *patch) {
  memset(out, 0, sizeof *out);
  cp_rule_init(&out->baked);
  cp_rule_init(&out->residual);
  int rc = cp_patch_check(m, patch);
  if (rc) return rc;
  out->stored_slopes = m->pos == CP_POS_ALIBI && has_stored_slopes(ck);
  const cp_rule *r = &patch->rule;
  const char *fam = cp_family_name(m->family);
  switch (patch->method) {
    case CP_PATCH_TEMPERATURE: {
      tau_map t;
      tau_map_make(&t, m, r);
      const char *why;
      if (temperature_bakeable(m, &t, out->stored_slopes, &why)) {
        out->fidelity = CP_FIDELITY_EXACT_WEIGHTS;
        out->baked = *r;
        snprintf(out->note, sizeof out->note, "query projections%s divided by tau", 
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
      out->fidelity = CP_FIDELITY_NATIVE_CONFIG;
      out->rope_factor = m->rope_scale * patch->rope_factor;
      snprintf(out->note, sizeof out->note, "config.json rope_scaling {\"type\": \"linear\", \"factor\": %g}%s",
               out->rope_factor, m->rope_scale != 1.0 ? " (the existing factor times --factor)" : "");
      return 0;
    case CP_PATCH_FIRE_THRESHOLD:
      out->fidelity = CP_FIDELITY_EXACT_WEIGHTS;
      out->baked = *r;
      snprintf(out->note, sizeof out->note, "every FIRE L tensor set to %g", r->fire_threshold);
      return 0;
    case CP_PATCH_METHOD_COUNT: break;
  }
  return cp_error_set(CP_EARG, "patch: unknown method");
}

static int plan_xforms(xform_list *l, const cp_model *m, const cp_checkpoint *ck, const cp_bake_plan *plan) {
  const cp_rule *b = &plan->baked;
  int rc = 0;
  if (b->n_temperature > 0) {
    tau_map t;
    tau_map_make(&t, m, b);
    if ((rc = temperature_xforms(l, m, ck, &t))) return rc;
  }
  if (b->alibi_mode == CP_ALIBI_STATIC && b->alibi_factor != 1.0)
    if ((rc = add_slopes(l, ck, 1.0 / b->alibi_factor))) return rc;
  if (b->fire_threshold > 0) {
    char base[256], n[300];
    int n_mlp = m->cfg->fire_shared ? 1 : m->decoder.n_layers;
    for (int i = 0; i < n_mlp && rc == 0; i++) {
      fire_base(base, sizeof base, m, i);
      snprintf(n, sizeof n, "%s.L", base);
      rc = xf_add(l, ck, n, NULL, (xform){NULL, XF_SET, 1, b->fire_threshold, QL_PLAIN}, true);
    }
  }
  return rc;
}

/* ---------------------------------------------------------------- writing */

static int apply_xform(float *v, const cp_tensor *t, const xform *x, const cp_model *m) {
  uint64_t numel = 0;
  if (cp_shape_numel(&numel, t->ndim, t->shape)) return cp_error_set(CP_EOVERFLOW, "bake: '%s' too large", t->name);
  if (x->kind == XF_SET) {
    if (numel != 1) return cp_error_set(CP_EMODEL_TENSOR, "bake: '%s' is not a scalar", t->name);
    v[0] = (float)x->value;
    return 0;
  }
  if (x->kind == XF_SCALE_ALL) {
    for (uint64_t i = 0; i < numel; i++) v[i] = (float)(v[i] * x->mult);
    return 0;
  }
  uint64_t rows = t->ndim > 0 ? (uint64_t)t->shape[0] : 1, width = rows ? numel / rows : 0;
  uint64_t dh = (uint64_t)m->d_head, nq = (uint64_t)m->n_heads * dh;
  for (uint64_t r = 0; r < rows; r++) {
    bool q = x->layout == QL_PLAIN || (x->layout == QL_CONCAT && r < nq) ||
             (x->layout == QL_INTERLEAVED && (r % (3 * dh)) < dh);
    if (!q) continue;
    for (uint64_t k = 0; k < width; k++) v[r * width + k] = (float)(v[r * width + k] * x->mult);
  }
  return 0;
}

static int narrow(void *dst, const float *src, cp_dtype dtype, uint64_t n, const char *name) {
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
    default: return cp_error_set(CP_EUNSUPPORTED, "bake: tensor '%s' has dtype %s; only float tensors can be "
                                                  "rescaled", name, cp_dtype_name(dtype));
  }
}

static int write_config(const char *dir, const cp_checkpoint *ck, const cp_bake_plan *plan, const cJSON *block) {
  const char *src = cp_checkpoint_config_path(ck);
  char *text = NULL, *out = NULL, *path = NULL;
  size_t len = 0;
  cJSON *cfg = NULL;
  cp_atomic_file *f = NULL;
  int rc = cp_read_file(&text, &len, src, (size_t)64 << 20);
  if (rc) goto done;
  if (!(cfg = cJSON_ParseWithLength(text, len)) || !cJSON_IsObject(cfg)) {
    rc = cp_error_set(CP_ECFG_JSON, "%s: not a JSON object", src);
    goto done;
  }
  if (plan->rope_factor > 0) {
    cJSON *rs = cJSON_CreateObject();
    cJSON_AddStringToObject(rs, "type", "linear");
    cJSON_AddNumberToObject(rs, "factor", plan->rope_factor);
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "rope_scaling");
    cJSON_AddItemToObject(cfg, "rope_scaling", rs);
  }
  if (plan->baked.fire_threshold > 0 && cJSON_GetObjectItemCaseSensitive(cfg, "fire_threshold"))
    cJSON_ReplaceItemInObjectCaseSensitive(cfg, "fire_threshold", cJSON_CreateNumber(plan->baked.fire_threshold));
  cJSON_DeleteItemFromObjectCaseSensitive(cfg, "ctxpatch");
  if (block) cJSON_AddItemToObject(cfg, "ctxpatch", cJSON_Duplicate(block, true));
  if (!(out = cJSON_Print(cfg)) || !(path = cp_path_join(dir, "config.json"))) {
    rc = cp_error_set(CP_ENOMEM, "out of memory");
    goto done;
  }
  if ((rc = cp_atomic_open(&f, path))) goto done;
  if ((rc = cp_atomic_write(f, out, strlen(out))) || (rc = cp_atomic_write(f, "\n", 1))) goto done;
  rc = cp_atomic_commit(f);
  f = NULL;
done:
  cp_atomic_abort(f);
  cJSON_Delete(cfg);
  free(text);
  free(out);
  free(path);
  return rc;
}

static int copy_aux(const char *dir, const cp_checkpoint *ck) {
  int rc = 0;
  for (size_t k = 0; k < cp_checkpoint_aux_count(ck) && rc == 0; k++) {
    const char *name = cp_checkpoint_aux(ck, k);
    if (!strcmp(name, "config.json")) continue;
    char *src = cp_path_join(cp_checkpoint_dir(ck), name), *dst = cp_path_join(dir, name);
    if (!src || !dst) rc = cp_error_set(CP_ENOMEM, "out of memory");
    if (rc == 0) rc = cp_copy_file_atomic(NULL, dst, src, (size_t)1 << 30);
    free(src);
    free(dst);
  }
  return rc;
}

int cp_bake_write(const char *dir, cp_checkpoint *ck, const cp_model *m, const cp_bake_plan *plan,
                  const cJSON *block) {
  xform_list xl = {0};
  size_t n = cp_checkpoint_count(ck);
  cp_tensor *descs = calloc(n ? n : 1, sizeof *descs);
  const xform **xf_of = calloc(n ? n : 1, sizeof *xf_of);
  char *meta_text = NULL, *path = NULL;
  unsigned char *buf = NULL;
  float *vals = NULL;
  cp_st_writer *w = NULL;
  const size_t chunk = (size_t)16 << 20;
  int rc = 0;
  if (!descs || !xf_of || !(buf = malloc(chunk)) || !(path = cp_path_join(dir, "model.safetensors"))) {
    rc = cp_error_set(CP_ENOMEM, "out of memory");
    goto done;
  }
  if ((rc = plan_xforms(&xl, m, ck, plan))) goto done;
  for (size_t i = 0; i < n; i++) {
    descs[i] = *cp_checkpoint_tensor(ck, i);
    for (size_t j = 0; j < xl.n; j++)
      if (!strcmp(xl.v[j].name, descs[i].name)) xf_of[i] = &xl.v[j];
  }
  if (block && !(meta_text = cJSON_PrintUnformatted(block))) {
    rc = cp_error_set(CP_ENOMEM, "out of memory");
    goto done;
  }
  const char *meta[4] = {"format", "pt", "ctxpatch", meta_text};
  if ((rc = cp_st_writer_open(&w, path, descs, n, meta, block ? 2 : 1))) goto done;
  for (size_t i; (i = cp_st_writer_next_index(w)) != (size_t)-1;) {
    const cp_tensor *t = &descs[i];
    if (xf_of[i]) {
      /* Modified: materialise this one tensor in float32, rescale, store in its dtype. */
      uint64_t numel = 0;
      if (cp_shape_numel(&numel, t->ndim, t->shape)) {
        rc = cp_error_set(CP_EOVERFLOW, "bake: '%s' too large", t->name);
        goto done;
      }
      if ((rc = cp_checkpoint_load_f32(&vals, ck, t->name, -1, NULL))) goto done;
      if ((rc = apply_xform(vals, t, xf_of[i], m))) goto done;
      void *out = malloc(t->nbytes ? t->nbytes : 1);
      if (!out) {
        rc = cp_error_set(CP_ENOMEM, "out of memory");
        goto done;
      }
      rc = narrow(out, vals, t->dtype, numel, t->name);
      if (rc == 0) rc = cp_st_writer_write(w, out, t->nbytes);
      free(out);
      free(vals);
      vals = NULL;
      if (rc) goto done;
      continue;
    }
    for (uint64_t off = 0; off < t->nbytes; off += chunk) {
      size_t len = t->nbytes - off < chunk ? (size_t)(t->nbytes - off) : chunk;
      if ((rc = cp_checkpoint_read(ck, i, off, buf, len))) goto done;
      if ((rc = cp_st_writer_write(w, buf, len))) goto done;
      cp_checkpoint_release(ck, i, off, len);
    }
  }
  rc = cp_st_writer_commit(w);
  w = NULL;
  if (rc) goto done;
  if ((rc = write_config(dir, ck, plan, block))) goto done;
  rc = copy_aux(dir, ck);
done:
  cp_st_writer_abort(w);
  xforms_free(&xl);
  free(descs);
  free(xf_of);
  free(meta_text);
  free(path);
  free(buf);
  free(vals);
  return rc;
}
