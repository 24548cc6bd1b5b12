/* Hugging Face config.json -> cp_hf_config, parsed once and strictly into typed fields.
 *
 * Field names and defaults follow each family's HF config class (T5Config, BloomConfig,
 * MptConfig + MptAttentionConfig, LlamaConfig, MistralConfig, GPTNeoXConfig, GPT2Config) and
 * docs/fire-layout.md for ctxpatch_fire. Two deliberate departures from HF:
 *  - the sizes that fix tensor shapes (vocab, width, depth, heads, FFN width, T5 d_kv) are
 *    required: HF's class defaults for them are one arbitrary model's numbers, and silently
 *    assuming them would only fail later, less clearly, against the weights;
 *  - train_len is 0 when the config does not state it (no family default is assumed).
 * A JSON null counts as absent (HF passes None on to the class default), except for special
 * ids and Mistral's sliding_window, where null means "none".
 */
#include "ctxpatch/model/hf_config.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#include "model/hf_config_json.h"
#include "model/rule_json.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "base/json_strict.h"

#define CFG_MAX_BYTES ((size_t)16 << 20) /* real configs are a few KiB; id2label maps stay far below */
#define CFG_MAX_DEPTH 128
#define CFG_INT_MAX 2147483647.0 /* sizes must fit a C int */

typedef struct {
  const char *what;   /* source name for messages */
  const char *family; /* model_type, for "required for ..." messages */
  const cJSON *root;  /* the parsed file; lives only while cp_hf_config_parse runs */
} ctx_t;

/* ---------- names ---------- */

static const struct {
  const char *model_type;
  cp_family family;
} k_model_types[] = {
    {"t5", CP_FAMILY_T5},       {"bloom", CP_FAMILY_BLOOM},       {"mpt", CP_FAMILY_MPT},
    {"llama", CP_FAMILY_LLAMA}, {"mistral", CP_FAMILY_LLAMA},     {"gpt_neox", CP_FAMILY_GPT_NEOX},
    {"qwen2", CP_FAMILY_LLAMA}, /* the Llama body with q/k/v biases (modeling_qwen2.py) */
    {"qwen3", CP_FAMILY_LLAMA}, /* the Llama body with per-head q/k RMSNorm (modeling_qwen3.py) */
    {"ctxpatch_fire", CP_FAMILY_FIRE}, {"gpt2", CP_FAMILY_GPT2},
    {"phi3", CP_FAMILY_PHI3},
    {"gemma", CP_FAMILY_GEMMA},  {"gemma2", CP_FAMILY_GEMMA},
    {"granite", CP_FAMILY_LLAMA}, /* the Llama body with four multipliers (modeling_granite.py) */
    {"gemma3_text", CP_FAMILY_GEMMA}, /* Gemma3ForCausalLM: Gemma 2's body, q/k norms, two RoPE bases */
    {"olmo2", CP_FAMILY_OLMO2},
    {"starcoder2", CP_FAMILY_STARCODER2},
};

/* The name a message calls a model by ("this gemma3 model") where it is not its model_type:
 * Gemma 3 as llama.cpp and Google name it (HF's gemma3_text is its text model's class), and the
 * FIRE family as the docs do. */
static const struct {
  const char *model_type, *name;
} k_display_names[] = {{"gemma3_text", "gemma3"}, {"ctxpatch_fire", "fire"}};

/* architectures[0] -> model_type, used only when model_type is absent. */
static const struct {
  const char *arch;
  const char *model_type;
} k_archs[] = {
    {"T5ForConditionalGeneration", "t5"}, {"T5WithLMHeadModel", "t5"}, /* t5-small's older name */
    {"T5Model", "t5"},
    {"BloomForCausalLM", "bloom"},        {"BloomModel", "bloom"},
    {"MptForCausalLM", "mpt"},            {"MPTForCausalLM", "mpt"}, /* mosaicml remote code */
    {"MptModel", "mpt"},
    {"LlamaForCausalLM", "llama"},        {"LlamaModel", "llama"},
    {"MistralForCausalLM", "mistral"},    {"MistralModel", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},        {"Qwen2Model", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3"},        {"Qwen3Model", "qwen3"},
    {"Qwen3MoeForCausalLM", "qwen3_moe"}, {"Qwen3MoeModel", "qwen3_moe"},
    {"GPTNeoXForCausalLM", "gpt_neox"},   {"GPTNeoXModel", "gpt_neox"},
    {"CtxpatchFireForCausalLM", "ctxpatch_fire"},
    {"GPT2LMHeadModel", "gpt2"},          {"GPT2Model", "gpt2"},
    {"Phi3ForCausalLM", "phi3"},          {"Phi3Model", "phi3"},
    {"GemmaForCausalLM", "gemma"},        {"GemmaModel", "gemma"},
    {"Gemma2ForCausalLM", "gemma2"},      {"Gemma2Model", "gemma2"},
    {"GraniteForCausalLM", "granite"},    {"GraniteModel", "granite"},
    {"Starcoder2ForCausalLM", "starcoder2"}, {"Starcoder2Model", "starcoder2"},
    {"GraniteMoeForCausalLM", "granitemoe"}, {"GraniteMoeHybridForCausalLM", "granitemoehybrid"},
    {"Gemma3ForCausalLM", "gemma3_text"}, {"Gemma3TextModel", "gemma3_text"},
    {"Gemma3ForConditionalGeneration", "gemma3"},
    {"Olmo2ForCausalLM", "olmo2"},        {"Olmo2Model", "olmo2"},
    {"OlmoForCausalLM", "olmo"},          {"OlmoeForCausalLM", "olmoe"},
    {"Olmo3ForCausalLM", "olmo3"},
};

/* Model types refused with their reason rather than as unknown. */
static const struct {
  const char *model_type;
  const char *why;
} k_refused[] = {
    {"qwen3_moe", "a mixture of experts (Qwen3MoeForCausalLM routes each token to a few of its expert FFNs), "
                  "which the engines do not run; dense qwen3 is supported"},
    {"granitemoe", "a mixture of experts (GraniteMoeForCausalLM), which the engines do not run; dense granite is "
                   "supported"},
    {"granitemoehybrid", "Mamba-2 layers beside attention (GraniteMoeHybridForCausalLM), which the engines do not "
                         "run; dense granite is supported"},
    /* configuration_gemma3.py Gemma3Config builds a SiglipVisionConfig even when vision_config is
     * null or absent, and Gemma3ForConditionalGeneration's text weights sit beside the tower under
     * language_model.*: a text_config-only folder is the same multimodal model. */
    {"gemma3", "Gemma3ForConditionalGeneration carries a SigLIP vision tower (vision_config, "
               "vision_tower.* weights) that the engines do not run; a text-only gemma3_text checkpoint "
               "(Gemma3ForCausalLM) is supported"},
    {"olmo", "OLMo 1's non-parametric LayerNorm before each module (OlmoLayerNorm), which no family table row "
             "describes; olmo2 is supported"},
    {"olmoe", "a mixture of experts (OlmoeForCausalLM), which the engines do not run; dense olmo2 is supported"},
    {"olmo3", "Olmo3Config's sliding-window layers are not read for this family; olmo2 is supported"},
};

/* Built once from k_model_types, so a family added there is listed (and checked against the
 * docs by tests/test_family_docs.sh) with no second list to keep in step. */
static char g_supported[512];
static once_flag g_supported_once = ONCE_FLAG_INIT;

static void build_supported(void) {
  size_t n = 0;
  for (size_t i = 0; i < sizeof k_model_types / sizeof k_model_types[0]; i++) {
    int w = snprintf(g_supported + n, sizeof g_supported - n, "%s%s", i ? ", " : "", k_model_types[i].model_type);
    assert(w > 0 && (size_t)w < sizeof g_supported - n); /* the buffer holds the table */
    n += (size_t)w;
  }
}

const char *cp_supported_families(void) {
  call_once(&g_supported_once, build_supported);
  return g_supported;
}

const char *cp_family_name(cp_family family) {
  switch (family) {
    case CP_FAMILY_T5: return "t5";
    case CP_FAMILY_BLOOM: return "bloom";
    case CP_FAMILY_MPT: return "mpt";
    case CP_FAMILY_LLAMA: return "llama";
    case CP_FAMILY_GPT_NEOX: return "gpt_neox";
    case CP_FAMILY_FIRE: return "fire";
    case CP_FAMILY_GPT2: return "gpt2";
    case CP_FAMILY_PHI3: return "phi3";
    case CP_FAMILY_GEMMA: return "gemma";
    case CP_FAMILY_OLMO2: return "olmo2";
    case CP_FAMILY_STARCODER2: return "starcoder2";
    case CP_FAMILY_COUNT: break;
  }
  return "?";
}

const char *cp_hf_config_name(const cp_hf_config *cfg) {
  for (size_t i = 0; i < sizeof k_display_names / sizeof k_display_names[0]; i++)
    if (!strcmp(cfg->model_type, k_display_names[i].model_type)) return k_display_names[i].name;
  return cfg->model_type[0] ? cfg->model_type : cp_family_name(cfg->family);
}

const char *cp_pos_scheme_name(cp_pos_scheme pos) {
  switch (pos) {
    case CP_POS_T5_BUCKETS: return "t5-buckets";
    case CP_POS_ALIBI: return "alibi";
    case CP_POS_ROPE: return "rope";
    case CP_POS_FIRE: return "fire";
    case CP_POS_LEARNED: return "learned";
  }
  return "?";
}

/* ---------- field readers ---------- */

static void describe(char *buf, size_t n, const cJSON *v) {
  if (!v || cJSON_IsNull(v)) snprintf(buf, n, "null");
  else if (cJSON_IsNumber(v)) snprintf(buf, n, "%.17g", v->valuedouble);
  else if (cJSON_IsBool(v)) snprintf(buf, n, "%s", cJSON_IsTrue(v) ? "true" : "false");
  else if (cJSON_IsString(v)) snprintf(buf, n, "a string");
  else if (cJSON_IsArray(v)) snprintf(buf, n, "a list");
  else snprintf(buf, n, "an object");
}

static int bad(const ctx_t *c, const char *label, const char *expect, const cJSON *got) {
  char g[48];
  describe(g, sizeof g, got);
  return cp_error_set(CP_ECFG_FIELD, "%s: key '%s': expected %s, got %s", c->what, label, expect, g);
}

static int missing(const ctx_t *c, const char *label) {
  return cp_error_set(CP_ECFG_FIELD, "%s: key '%s': missing (required for model_type %s)", c->what,
                      label, c->family);
}

/* cJSON ends a string at a decoded \u0000, so "t5\u0000x" would read as "t5". The reader's copy
 * of the text has each \u0000 escape turned into \uFFFF (same length), which decodes to this
 * mark; identifiers and keys carrying it are refused. U+FFFF is a noncharacter: no real name
 * has one. */
#define NUL_MARK "\xEF\xBF\xBF"

static int has_nul(const ctx_t *c, const char *label) {
  return cp_error_set(CP_ECFG_FIELD, "%s: key '%s': contains a NUL character (\\u0000) or U+FFFF", c->what, label);
}

/* A copy of text[0..len) with every \u0000 escape spelled \uFFFF. The text is well-formed JSON
 * (scanned first), so every backslash starts an escape. */
static char *mark_nuls(const char *text, size_t len) {
  char *t = malloc(len + 1);
  if (!t) return NULL;
  if (len) memcpy(t, text, len);
  t[len] = '\0';
  for (size_t i = 0; i + 1 < len; i++) {
    if (t[i] != '\\') continue;
    if (t[i + 1] == 'u' && i + 5 < len && !memcmp(t + i + 2, "0000", 4)) memcpy(t + i + 2, "FFFF", 4);
    i++; /* the escaped character */
  }
  return t;
}

/* Refuses a key with a NUL anywhere in the tree (keys are names; a truncated one could read as
 * another key). `path` names the parent for the message. */
static int keys_without_nul(const ctx_t *c, const cJSON *v, const char *path) {
  for (const cJSON *it = v->child; it; it = it->next) {
    char sub[160];
    snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", it->string ? it->string : "[]");
    if (it->string && strstr(it->string, NUL_MARK)) return has_nul(c, sub);
    int rc = keys_without_nul(c, it, sub);
    if (rc) return rc;
  }
  return 0;
}

/* Present and not null. */
static const cJSON *field(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return (v && !cJSON_IsNull(v)) ? v : NULL;
}

/* `key` or its HF attribute_map alias; both present with different values is refused. */
static int pick(const cJSON **out, const char **label, const ctx_t *c, const cJSON *obj,
                const char *key, const char *alias) {
  const cJSON *a = field(obj, key), *b = alias ? field(obj, alias) : NULL;
  *out = a ? a : b;
  *label = a || !b ? key : alias;
  if (a && b && !cJSON_Compare(a, b, 1))
    return cp_error_set(CP_ECFG_FIELD, "%s: key '%s': disagrees with its alias '%s'", c->what, key,
                        alias);
  return 0;
}

static bool is_integer(const cJSON *v, double lo, double hi) {
  if (!cJSON_IsNumber(v)) return false;
  double d = v->valuedouble;
  return isfinite(d) && d == floor(d) && d >= lo && d <= hi;
}

static int as_pos_int(int *out, const ctx_t *c, const cJSON *v, const char *label) {
  if (!is_integer(v, 1, CFG_INT_MAX)) return bad(c, label, "a positive integer below 2^31", v);
  *out = (int)v->valuedouble;
  return 0;
}

static int req_int(int *out, const ctx_t *c, const cJSON *obj, const char *key, const char *alias) {
  const cJSON *v;
  const char *label;
  int rc = pick(&v, &label, c, obj, key, alias);
  if (rc) return rc;
  if (!v) return missing(c, key);
  return as_pos_int(out, c, v, label);
}

static int opt_int(int *out, const ctx_t *c, const cJSON *obj, const char *key, const char *alias,
                   int def) {
  const cJSON *v;
  const char *label;
  int rc = pick(&v, &label, c, obj, key, alias);
  if (rc) return rc;
  if (!v) {
    *out = def;
    return 0;
  }
  return as_pos_int(out, c, v, label);
}

/* A finite number in (lo, hi]. */
static int opt_num(double *out, const ctx_t *c, const cJSON *obj, const char *key,
                   const char *alias, const char *label_prefix, double def, double lo, double hi,
                   const char *expect) {
  const cJSON *v;
  const char *label;
  char full[96];
  int rc = pick(&v, &label, c, obj, key, alias);
  if (rc) return rc;
  if (!v) {
    *out = def;
    return 0;
  }
  snprintf(full, sizeof full, "%s%s", label_prefix, label);
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || !(v->valuedouble > lo) ||
      !(v->valuedouble <= hi))
    return bad(c, full, expect, v);
  *out = v->valuedouble;
  return 0;
}

static int opt_bool(bool *out, const ctx_t *c, const cJSON *obj, const char *key,
                    const char *label, bool def) {
  const cJSON *v = field(obj, key);
  if (!v) {
    *out = def;
    return 0;
  }
  if (!cJSON_IsBool(v)) return bad(c, label ? label : key, "true or false", v);
  *out = cJSON_IsTrue(v);
  return 0;
}

static int opt_str(char *buf, size_t size, const ctx_t *c, const cJSON *obj, const char *key,
                   const char *label, const char *def) {
  const cJSON *v = field(obj, key);
  const char *s = def;
  if (v) {
    if (!cJSON_IsString(v) || !v->valuestring) return bad(c, label ? label : key, "a string", v);
    s = v->valuestring;
    if (strstr(s, NUL_MARK)) return has_nul(c, label ? label : key);
  }
  if (strlen(s) >= size)
    return cp_error_set(CP_ECFG_FIELD, "%s: key '%s': string longer than %zu bytes", c->what,
                        label ? label : key, size - 1);
  memcpy(buf, s, strlen(s) + 1);
  return 0;
}

/* Special token id: absent -> def, null -> -1, integer >= -1, or a list (first entry). */
static int opt_id(int *out, const ctx_t *c, const cJSON *obj, const char *key, int def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) {
    *out = def;
    return 0;
  }
  if (cJSON_IsArray(v)) v = v->child; /* e.g. eos_token_id: [128001, 128009] */
  if (!v || cJSON_IsNull(v)) {
    *out = -1;
    return 0;
  }
  if (!is_integer(v, -1, CFG_INT_MAX)) return bad(c, key, "a token id (integer >= -1) or null", v);
  *out = (int)v->valuedouble;
  return 0;
}

/* train_len: the family's own key first, then the other spellings in the spec's order. */
static int train_len(cp_hf_config *cfg, const ctx_t *c, const char *own) {
  static const char *keys[] = {"n_positions", "max_position_embeddings", "max_seq_len",
                               "seq_length"};
  const cJSON *root = c->root;
  const char *key = field(root, own) ? own : NULL;
  for (size_t i = 0; !key && i < sizeof keys / sizeof keys[0]; i++)
    if (field(root, keys[i])) key = keys[i];
  cfg->train_len = 0;
  cfg->train_len_key[0] = '\0';
  if (!key) return 0;
  int v = 0;
  int rc = as_pos_int(&v, c, field(root, key), key);
  if (rc) return rc;
  cfg->train_len = v;
  snprintf(cfg->train_len_key, sizeof cfg->train_len_key, "config.json %s", key);
  return 0;
}

/* NAME.KEY as a number in (lo, hi]; absent -> def. NAME is "rope_scaling" or "rope_parameters". */
static int rope_num(double *out, const ctx_t *c, const cJSON *rs, const char *name, const char *key, double def,
                    double lo, double hi, const char *expect) {
  char prefix[24];
  snprintf(prefix, sizeof prefix, "%s.", name);
  return opt_num(out, c, rs, key, NULL, prefix, def, lo, hi, expect);
}

/* Every key of rope_scaling must be one the type reads: a key ctxpatch would ignore (mscale,
 * short_factor, ...) changes what transformers computes, so it is refused, not dropped. */
static int rope_keys(const ctx_t *c, const cJSON *rs, const char *name, const char *type, const char *const *known) {
  for (const cJSON *it = rs->child; it; it = it->next) {
    bool ok = !strcmp(it->string, "type") || !strcmp(it->string, "rope_type") ||
              (!strcmp(name, "rope_parameters") && !strcmp(it->string, "rope_theta"));
    for (int i = 0; !ok && known[i]; i++) ok = !strcmp(it->string, known[i]);
    if (!ok)
      return cp_error_set(CP_ECFG_FIELD, "%s: key '%s.%s': not a key ctxpatch reads for type '%s' "
                          "(refused rather than ignored: it would change the frequencies)", c->what, name, it->string,
                          type);
  }
  return 0;
}

/* One of longrope's factor lists: finite numbers in (0, 1e6], at most CP_HF_ROPE_MAX_PAIRS of them
 * (their count against the rotary dims is checked once those are known, parse_fields). */
static int rope_factor_list(double *dst, int *n_out, const ctx_t *c, const cJSON *rs, const char *name,
                            const char *key) {
  char lbl[80];
  snprintf(lbl, sizeof lbl, "%s.%s", name, key);
  const cJSON *a = field(rs, key);
  if (!a) return missing(c, lbl);
  if (!cJSON_IsArray(a)) return bad(c, lbl, "a list of numbers", a);
  int n = 0;
  for (const cJSON *it = a->child; it; it = it->next, n++) {
    if (n >= CP_HF_ROPE_MAX_PAIRS)
      return cp_error_set(CP_ECFG_FIELD, "%s: key '%s': more than %d factors", c->what, lbl, CP_HF_ROPE_MAX_PAIRS);
    char at[96];
    snprintf(at, sizeof at, "%s[%d]", lbl, n);
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || !(it->valuedouble > 0) || it->valuedouble > 1e6)
      return bad(c, at, "a number in (0, 1e6]", it);
    dst[n] = it->valuedouble;
  }
  *n_out = n;
  return 0;
}

/* longrope (transformers' _compute_longrope_parameters; the list picked per call by
 * dynamic_rope_update, model/rope.c). The original length is the top-level
 * original_max_position_embeddings (Phi3Config) or rope_scaling's (transformers 5); both given
 * must agree, and none is refused (Phi3Config would default it to 4096 unseen). With it, the
 * factor is max_position_embeddings / original (a rope_scaling.factor that differs is refused as
 * ambiguous, as yarn's); without it, the original is max_position_embeddings and the factor is
 * rope_scaling.factor (needed unless attention_factor is given). */
static int rope_longrope(cp_hf_config *cfg, const ctx_t *c, const cJSON *rs, const char *name) {
  char lbl[80];
  int n_long = 0, top_orig = 0, in_orig = 0, rc;
  if ((rc = rope_factor_list(cfg->rope_short_factor, &cfg->rope_n_factors, c, rs, name, "short_factor")) ||
      (rc = rope_factor_list(cfg->rope_long_factor, &n_long, c, rs, name, "long_factor")))
    return rc;
  if (n_long != cfg->rope_n_factors)
    return cp_error_set(CP_ECFG_FIELD, "%s: key '%s.long_factor': %d factors, but short_factor has %d", c->what, name,
                        n_long, cfg->rope_n_factors);
  const cJSON *top = field(c->root, "original_max_position_embeddings");
  const cJSON *in = field(rs, "original_max_position_embeddings");
  snprintf(lbl, sizeof lbl, "%s.original_max_position_embeddings", name);
  if ((top && (rc = as_pos_int(&top_orig, c, top, "original_max_position_embeddings"))) ||
      (in && (rc = as_pos_int(&in_orig, c, in, lbl))))
    return rc;
  if (top && in && top_orig != in_orig)
    return cp_error_set(CP_ECFG_FIELD, "%s: key '%s': %d disagrees with 'original_max_position_embeddings' %d",
                        c->what, lbl, in_orig, top_orig);
  if ((rc = rope_num(&cfg->rope_attention_factor, c, rs, name, "attention_factor", 0, 0, 1e6, "a positive number")))
    return rc;
  if (cfg->train_len <= 0) return missing(c, "max_position_embeddings");
  const bool given = field(rs, "factor") != NULL;
  if (given && (rc = rope_num(&cfg->rope_scaling_factor, c, rs, name, "factor", 1.0, 0, 1e6, "a number in (0, 1e6]")))
    return rc;
  if (!top && !in) {
    if (cfg->family == CP_FAMILY_PHI3) return missing(c, "original_max_position_embeddings");
    if (!given && cfg->rope_attention_factor == 0) return missing(c, "rope_scaling.factor");
    cfg->rope_original_max_pos = (int)cfg->train_len;
    return 0;
  }
  cfg->rope_original_max_pos = top ? top_orig : in_orig;
  const double ratio = (double)cfg->train_len / (double)cfg->rope_original_max_pos;
  if (given && fabs(ratio - cfg->rope_scaling_factor) > 1e-9 * ratio)
    return cp_error_set(CP_ECFG_FIELD, "%s: key '%s.factor': %.17g, but max_position_embeddings / "
                        "original_max_position_embeddings is %.17g (transformers uses the ratio: refused as ambiguous)",
                        c->what, name, cfg->rope_scaling_factor, ratio);
  cfg->rope_scaling_factor = ratio;
  return 0;
}

/* rope_scaling (transformers' modeling_rope_utils, _compute_*_parameters and their
 * validation): linear {factor}; llama3 {factor, low_freq_factor, high_freq_factor,
 * original_max_position_embeddings}; yarn {factor, attention_factor?, beta_fast?, beta_slow?,
 * original_max_position_embeddings?, truncate?}; dynamic {factor, original_max_position_embeddings?};
 * longrope {short_factor, long_factor, factor?, attention_factor?, original_max_position_embeddings?}.
 * dynamic and longrope choose their frequencies by the length of each call (model/rope.c
 * cp_rope_table_at; docs/attention-decisions.md, "RoPE scaling").
 * Runs after train_len (yarn checks its factor against max_position_embeddings). */
static int rope_scaling(cp_hf_config *cfg, const ctx_t *c) {
  /* transformers 5 saves the same keys, with rope_theta, as "rope_parameters". */
  const char *name = field(c->root, "rope_scaling") ? "rope_scaling" : "rope_parameters";
  const cJSON *rs = field(c->root, name);
  if (field(c->root, "rope_scaling") && field(c->root, "rope_parameters"))
    return cp_error_set(CP_ECFG_FIELD, "%s: keys 'rope_scaling' and 'rope_parameters': both present (one layout "
                        "or the other)", c->what);
  cfg->rope_scaling_type[0] = '\0';
  cfg->rope_scaling_factor = 1.0;
  cfg->rope_low_freq_factor = cfg->rope_high_freq_factor = 0;
  cfg->rope_original_max_pos = 0;
  cfg->rope_attention_factor = 0;
  cfg->rope_beta_fast = 32;
  cfg->rope_beta_slow = 1;
  cfg->rope_truncate = true;
  cfg->rope_parameters_layout = rs && !strcmp(name, "rope_parameters");
  if (!rs) return 0;
  if (!cJSON_IsObject(rs)) return bad(c, name, "an object or null", rs);
  if (!strcmp(name, "rope_parameters") && field(rs, "rope_theta")) {
    double theta = 0;
    int rc0 = rope_num(&theta, c, rs, name, "rope_theta", 0, 0, INFINITY, "a positive number");
    if (rc0) return rc0;
    if (field(c->root, "rope_theta") && theta != cfg->rope_theta)
      return cp_error_set(CP_ECFG_FIELD, "%s: key 'rope_parameters.rope_theta': %.17g disagrees with 'rope_theta' "
                          "%.17g", c->what, theta, cfg->rope_theta);
    cfg->rope_theta = theta;
  }
  /* HF copies a legacy "type" over "rope_type"; both present must agree. */
  const cJSON *t = field(rs, "type"), *rt = field(rs, "rope_type");
  if (t && rt && !cJSON_Compare(t, rt, 1))
    return cp_error_set(CP_ECFG_FIELD, "%s: key '%s.type': disagrees with '%s.rope_type'", c->what, name, name);
  const char *key = t ? "type" : "rope_type";
  char label[40];
  snprintf(label, sizeof label, "%s.%s", name, key);
  if (!field(rs, key)) return missing(c, !strcmp(name, "rope_scaling") ? "rope_scaling.type" : "rope_parameters.rope_type");
  int rc = opt_str(cfg->rope_scaling_type, sizeof cfg->rope_scaling_type, c, rs, key, label, "");
  if (rc) return rc;
  const char *type = cfg->rope_scaling_type;
  if (strcmp(type, "default") == 0) { /* explicit "no scaling" */
    cfg->rope_scaling_type[0] = '\0';
    return 0;
  }
  static const char *const linear[] = {"factor", NULL};
  static const char *const llama3[] = {"factor", "low_freq_factor", "high_freq_factor",
                                       "original_max_position_embeddings", NULL};
  static const char *const yarn[] = {"factor", "attention_factor", "beta_fast", "beta_slow",
                                     "original_max_position_embeddings", "truncate", NULL};
  static const char *const dynamic[] = {"factor", "original_max_position_embeddings", NULL};
  static const char *const longrope[] = {"short_factor", "long_factor", "factor", "attention_factor",
                                         "original_max_position_embeddings", NULL};
  const char *const *known = !strcmp(type, "linear") ? linear : !strcmp(type, "llama3") ? llama3
                             : !strcmp(type, "yarn") ? yarn : !strcmp(type, "dynamic") ? dynamic
                             : !strcmp(type, "longrope") ? longrope : NULL;
  if (!known)
    return cp_error_set(CP_ECFG_FIELD, "%s: key '%s': unknown RoPE scaling type '%s' (supported: linear, llama3, "
                        "yarn, dynamic, longrope)", c->what, label, type);
  if ((rc = rope_keys(c, rs, name, type, known))) return rc;
  if (!strcmp(type, "longrope")) return rope_longrope(cfg, c, rs, name);
  char lbl[80];
#define LBL(k) (snprintf(lbl, sizeof lbl, "%s.%s", name, k), lbl)
  if (!field(rs, "factor")) return missing(c, LBL("factor"));
  if (strcmp(type, "linear") == 0)
    return rope_num(&cfg->rope_scaling_factor, c, rs, name, "factor", 1.0, 0, INFINITY, "a positive number");
  /* llama3 and yarn: transformers warns below 1; a factor < 1 would raise the frequencies. */
  if ((rc = rope_num(&cfg->rope_scaling_factor, c, rs, name, "factor", 1.0, 1.0 - 1e-12, 1e6, "a number in [1, 1e6]")))
    return rc;
  const cJSON *orig = field(rs, "original_max_position_embeddings");
  if (orig && (rc = as_pos_int(&cfg->rope_original_max_pos, c, orig, LBL("original_max_position_embeddings"))))
    return rc;
  if (strcmp(type, "dynamic") == 0) {
    /* _compute_dynamic_ntk_parameters (transformers 4.x) scales from max_position_embeddings and
     * ignores rope_scaling's original (a TODO there): one given must be the same length. */
    if (cfg->train_len <= 0) return missing(c, "max_position_embeddings");
    if (orig && cfg->rope_original_max_pos != cfg->train_len)
      return cp_error_set(CP_ECFG_FIELD, "%s: key '%s': %d, but dynamic NTK scales from max_position_embeddings %lld "
                          "(transformers reads only that one: refused rather than ignored)", c->what,
                          LBL("original_max_position_embeddings"), cfg->rope_original_max_pos,
                          (long long)cfg->train_len);
    cfg->rope_original_max_pos = (int)cfg->train_len;
    return 0;
  }
  if (strcmp(type, "llama3") == 0) {
    if (!field(rs, "low_freq_factor")) return missing(c, LBL("low_freq_factor"));
    if (!field(rs, "high_freq_factor")) return missing(c, LBL("high_freq_factor"));
    if (!orig) return missing(c, LBL("original_max_position_embeddings"));
    if ((rc = rope_num(&cfg->rope_low_freq_factor, c, rs, name, "low_freq_factor", 1, 0, 1e6, "a positive number")) ||
        (rc = rope_num(&cfg->rope_high_freq_factor, c, rs, name, "high_freq_factor", 4, 0, 1e6, "a positive number")))
      return rc;
    if (!(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor))
      return cp_error_set(CP_ECFG_FIELD, "%s: key '%s.high_freq_factor': %.17g is not above "
                          "low_freq_factor %.17g", c->what, name, cfg->rope_high_freq_factor, cfg->rope_low_freq_factor);
    return 0;
  }
  /* yarn */
  if ((rc = rope_num(&cfg->rope_attention_factor, c, rs, name, "attention_factor", 0, 0, 1e6, "a positive number")) ||
      (rc = rope_num(&cfg->rope_beta_fast, c, rs, name, "beta_fast", 32, 0, 1e6, "a positive number")) ||
      (rc = rope_num(&cfg->rope_beta_slow, c, rs, name, "beta_slow", 1, 0, 1e6, "a positive number")) ||
      (rc = opt_bool(&cfg->rope_truncate, c, rs, "truncate", LBL("truncate"), true)))
    return rc;
  /* transformers 4.x derives the factor as max_position_embeddings / original when the original
   * is given; 5.x reads rope_scaling.factor. ctxpatch reads the factor (5.x) and refuses a
   * config on which the two would compute different frequencies. */
  if (orig && cfg->train_len > 0) {
    double ratio = (double)cfg->train_len / (double)cfg->rope_original_max_pos;
    if (fabs(ratio - cfg->rope_scaling_factor) > 1e-9 * cfg->rope_scaling_factor)
      return cp_error_set(CP_ECFG_FIELD, "%s: key '%s.factor': %.17g, but max_position_embeddings / "
                          "original_max_position_embeddings is %.17g (transformers 4.x uses the ratio, 5.x the "
                          "factor: ambiguous, refused)", c->what, name, cfg->rope_scaling_factor, ratio);
  }
  return 0;
#undef LBL
}

/* ---------- families ---------- */

#define TRY(expr)          \
  do {                     \
    int rc_ = (expr);      \
    if (rc_) return rc_;   \
  } while (0)

/* The engines add eps in float: one below FLT_MIN (1e-40 and such) became 0 or subnormal there,
 * and a zero row then normalised to NaN. */
static int positive_eps(double *out, const ctx_t *c, const cJSON *obj, const char *key,
                        double def) {
  return opt_num(out, c, obj, key, NULL, "", def, FLT_MIN, 1, "a number in (1.2e-38, 1] (a normal float)");
}

/* The special ids: the family's HF class defaults when absent (-1: none), -1 when null. No class
 * read here gives decoder_start_token_id a default. */
static int special_ids(cp_hf_config *cfg, const ctx_t *c, int bos, int eos, int pad) {
  const cJSON *r = c->root;
  TRY(opt_id(&cfg->bos_token_id, c, r, "bos_token_id", bos));
  TRY(opt_id(&cfg->eos_token_id, c, r, "eos_token_id", eos));
  TRY(opt_id(&cfg->pad_token_id, c, r, "pad_token_id", pad));
  return opt_id(&cfg->decoder_start_token_id, c, r, "decoder_start_token_id", -1);
}

/* d_head = d_model / n_heads, which HF requires to divide exactly. */
static int split_heads(cp_hf_config *cfg, const ctx_t *c, const char *heads_key) {
  if (cfg->d_model % cfg->n_heads != 0)
    return cp_error_set(CP_ECFG_FIELD, "%s: key '%s': %d heads do not divide the width %d",
                        c->what, heads_key, cfg->n_heads, cfg->d_model);
  cfg->d_head = cfg->d_model / cfg->n_heads;
  return 0;
}

static int parse_t5(cp_hf_config *cfg, const ctx_t *c) {
  const cJSON *r = c->root;
  cfg->pos = CP_POS_T5_BUCKETS;
  TRY(req_int(&cfg->vocab_size, c, r, "vocab_size", NULL));
  TRY(req_int(&cfg->d_model, c, r, "d_model", "hidden_size"));
  TRY(req_int(&cfg->n_layers, c, r, "num_layers", "num_hidden_layers"));
  TRY(req_int(&cfg->n_heads, c, r, "num_heads", "num_attention_heads"));
  TRY(req_int(&cfg->d_head, c, r, "d_kv", "head_dim"));
  TRY(req_int(&cfg->d_ff, c, r, "d_ff", NULL));
  TRY(opt_int(&cfg->n_decoder_layers, c, r, "num_decoder_layers", NULL, cfg->n_layers));
  cfg->n_kv_heads = cfg->n_heads;
  TRY(opt_int(&cfg->t5_num_buckets, c, r, "relative_attention_num_buckets", NULL, 32));
  TRY(opt_int(&cfg->t5_max_distance, c, r, "relative_attention_max_distance", NULL, 128));
  /* HF's bucket function divides by log(max_distance / max_exact), max_exact = buckets/2 in
   * the decoder and buckets/4 in the encoder: both must be >= 1 and below max_distance. */
  if (cfg->t5_num_buckets < 4)
    return cp_error_set(CP_ECFG_FIELD, "%s: key 'relative_attention_num_buckets': %d is below 4",
                        c->what, cfg->t5_num_buckets);
  if (cfg->t5_max_distance <= cfg->t5_num_buckets / 2)
    return cp_error_set(CP_ECFG_FIELD,
                        "%s: key 'relative_attention_max_distance': %d must exceed half the %d "
                        "buckets",
                        c->what, cfg->t5_max_distance, cfg->t5_num_buckets);
  TRY(positive_eps(&cfg->norm_eps, c, r, "layer_norm_epsilon", 1e-6));
  TRY(opt_str(cfg->activation, sizeof cfg->activation, c, r, "feed_forward_proj", NULL, "relu"));
  /* T5Config accepts "ACT" or "gated-ACT" only. */
  const char *dash = strchr(cfg->activation, '-');
  if (!cfg->activation[0] || (dash && (strncmp(cfg->activation, "gated-", 6) != 0 ||
                                       strchr(dash + 1, '-') || !dash[1])))
    return cp_error_set(CP_ECFG_FIELD,
                        "%s: key 'feed_forward_proj': '%s' is not of the form ACT or gated-ACT",
                        c->what, cfg->activation);
  TRY(opt_bool(&cfg->tie_word_embeddings, c, r, "tie_word_embeddings", NULL, true));
  TRY(train_len(cfg, c, "n_positions"));
  TRY(special_ids(cfg, c, -1, 1, 0));
  cfg->qkv_bias = false;
  cfg->no_bias = true; /* T5 has no biases anywhere */
  return 0;
}

/* The sizes BLOOM and GPT-2 spell alike (n_layer, n_head with their HF aliases) and the width
 * under `width_key` / `width_alias`; d_head = width / n_head; *ff4 = 4 x width, their FFN width
 * (GPT-2's n_inner default), checked for overflow. */
static int n_sizes(cp_hf_config *cfg, int *ff4, const ctx_t *c, const char *width_key, const char *width_alias) {
  const cJSON *r = c->root;
  TRY(req_int(&cfg->vocab_size, c, r, "vocab_size", NULL));
  TRY(req_int(&cfg->d_model, c, r, width_key, width_alias));
  TRY(req_int(&cfg->n_layers, c, r, "n_layer", "num_hidden_layers"));
  TRY(req_int(&cfg->n_heads, c, r, "n_head", "num_attention_heads"));
  cfg->n_kv_heads = cfg->n_heads;
  TRY(split_heads(cfg, c, field(r, "n_head") ? "n_head" : "num_attention_heads"));
  if ((double)cfg->d_model * 4 > CFG_INT_MAX)
    return cp_error_set(CP_ECFG_FIELD, "%s: key '%s': 4 x %d overflows the FFN width", c->what, width_key,
                        cfg->d_model);
  *ff4 = 4 * cfg->d_model;
  return 0;
}

static int parse_bloom(cp_hf_config *cfg, const ctx_t *c) {
  const cJSON *r = c->root;
  cfg->pos = CP_POS_ALIBI;
  /* BloomConfig: a given n_embed replaces hidden_size. */
  TRY(n_sizes(cfg, &cfg->d_ff, c, "hidden_size", "n_embed"));
  TRY(positive_eps(&cfg->norm_eps, c, r, "layer_norm_epsilon", 1e-5));
  snprintf(cfg->activation, sizeof cfg->activation, "gelu_pytorch_tanh"); /* BloomGelu */
  TRY(opt_bool(&cfg->tie_word_embeddings, c, r, "tie_word_embeddings", NULL, true));
  TRY(train_len(cfg, c, "seq_length"));
  cfg->alibi_bias_max = 8.0;
  /* Read leniently, as the loader always has: anything but true counts as false. */
  cfg->residual_post_layernorm =
      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "apply_residual_connection_post_layernorm"));
  TRY(special_ids(cfg, c, 1, 2, -1));
  cfg->qkv_bias = true;
  cfg->no_bias = false;
  return 0;
}

/* attn_config.softmax_scale and clip_qkv: a number must be positive; any other value (null, a
 * string) means "none", as the loader has always read them. qk_ln counts only when true. */
static int mpt_attn_scales(cp_hf_config *cfg, const ctx_t *c, const cJSON *ac) {
  static const char *const keys[2] = {"softmax_scale", "clip_qkv"};
  double *dst[2] = {&cfg->mpt_softmax_scale, &cfg->mpt_clip_qkv};
  for (int i = 0; i < 2; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(ac, keys[i]);
    *dst[i] = 0;
    if (!cJSON_IsNumber(v)) continue;
    if (!(v->valuedouble > 0) || !isfinite(v->valuedouble))
      return cp_error_set(CP_ECFG_FIELD, "%s: key 'attn_config.%s': expected a positive number", c->what,
                          keys[i]);
    *dst[i] = v->valuedouble;
  }
  cfg->mpt_qk_ln = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ac, "qk_ln"));
  return 0;
}

static int parse_mpt(cp_hf_config *cfg, const ctx_t *c) {
  const cJSON *r = c->root;
  cfg->pos = CP_POS_ALIBI;
  TRY(req_int(&cfg->vocab_size, c, r, "vocab_size", NULL));
  TRY(req_int(&cfg->d_model, c, r, "d_model", "hidden_size"));
  TRY(req_int(&cfg->n_layers, c, r, "n_layers", "num_hidden_layers"));
  TRY(req_int(&cfg->n_heads, c, r, "n_heads", "num_attention_heads"));
  TRY(split_heads(cfg, c, field(r, "n_heads") ? "n_heads" : "num_attention_heads"));
  double ratio;
  TRY(opt_num(&ratio, c, r, "expansion_ratio", NULL, "", 4.0, 0, 1e6, "a positive number"));
  double ff = floor(ratio * cfg->d_model);
  if (ff < 1 || ff > CFG_INT_MAX)
    return cp_error_set(CP_ECFG_FIELD, "%s: key 'expansion_ratio': %g x %d is not a valid FFN width",
                        c->what, ratio, cfg->d_model);
  cfg->d_ff = (int)ff;

  const cJSON *ac = field(r, "attn_config");
  if (ac && !cJSON_IsObject(ac)) return bad(c, "attn_config", "an object", ac);
  static const cJSON empty = {0};
  if (!ac) ac = &empty; /* MptAttentionConfig() defaults */
  bool alibi = true, rope = false;
  /* HF's MptAttentionConfig defaults alibi to true (mosaicml's remote code to false, but its
   * config.json files always spell it out). */
  TRY(opt_bool(&alibi, c, ac, "alibi", "attn_config.alibi", true));
  TRY(opt_bool(&rope, c, ac, "rope", "attn_config.rope", false));
  if (!alibi || rope)
    return cp_error_set(CP_ECFG_POSITION,
                        "%s: key 'attn_config.alibi': %s: this MPT uses %s, not ALiBi alone; only "
                        "ALiBi MPT checkpoints are supported",
                        c->what, alibi ? "true" : "false",
                        rope ? "rotary embeddings (attn_config.rope)"
                             : "learned absolute position embeddings");
  TRY(opt_num(&cfg->alibi_bias_max, c, ac, "alibi_bias_max", NULL, "attn_config.", 8.0, 0, 1e6,
              "a positive number"));
  char attn_type[40];
  TRY(opt_str(attn_type, sizeof attn_type, c, ac, "attn_type", "attn_config.attn_type",
              "multihead_attention"));
  if (strcmp(attn_type, "multihead_attention") == 0) {
    cfg->n_kv_heads = cfg->n_heads;
  } else if (strcmp(attn_type, "multiquery_attention") == 0) {
    cfg->n_kv_heads = 1;
  } else if (strcmp(attn_type, "grouped_query_attention") == 0) {
    const cJSON *kv = field(ac, "kv_n_heads");
    if (!kv) return missing(c, "attn_config.kv_n_heads");
    TRY(as_pos_int(&cfg->n_kv_heads, c, kv, "attn_config.kv_n_heads"));
  } else {
    return cp_error_set(CP_ECFG_FIELD, "%s: key 'attn_config.attn_type': unknown value '%s'",
                        c->what, attn_type);
  }
  TRY(mpt_attn_scales(cfg, c, ac));
  TRY(positive_eps(&cfg->norm_eps, c, r, "layer_norm_epsilon", 1e-5));
  snprintf(cfg->activation, sizeof cfg->activation, "gelu"); /* exact GELU in MptMLP */
  TRY(opt_bool(&cfg->tie_word_embeddings, c, r, "tie_word_embeddings", NULL, true));
  TRY(train_len(cfg, c, "max_seq_len"));
  TRY(opt_bool(&cfg->no_bias, c, r, "no_bias", NULL, true));
  cfg->qkv_bias = !cfg->no_bias;
  TRY(special_ids(cfg, c, -1, -1, -1));
  return 0;
}

/* The sizes decoders spell as LlamaConfig does (vocab_size, hidden_size, num_hidden_layers,
 * num_attention_heads, intermediate_size), all required. */
static int decoder_sizes(cp_hf_config *cfg, const ctx_t *c) {
  const cJSON *r = c->root;
  TRY(req_int(&cfg->vocab_size, c, r, "vocab_size", NULL));
  TRY(req_int(&cfg->d_model, c, r, "hidden_size", NULL));
  TRY(req_int(&cfg->n_layers, c, r, "num_hidden_layers", NULL));
  TRY(req_int(&cfg->n_heads, c, r, "num_attention_heads", NULL));
  return req_int(&cfg->d_ff, c, r, "intermediate_size", NULL);
}

/* head_dim where the family's attention reads it (reads_head_dim) and the key is given, else
 * hidden_size / num_attention_heads. */
static int head_width(cp_hf_config *cfg, const ctx_t *c, bool reads_head_dim) {
  const cJSON *hd = reads_head_dim ? field(c->root, "head_dim") : NULL;
  return hd ? as_pos_int(&cfg->d_head, c, hd, "head_dim") : split_heads(cfg, c, "num_attention_heads");
}

/* Llama-named body shared by llama, mistral and ctxpatch_fire. */
static int parse_llama_body(cp_hf_config *cfg, const ctx_t *c, bool allow_head_dim) {
  const cJSON *r = c->root;
  TRY(decoder_sizes(cfg, c));
  TRY(opt_int(&cfg->n_kv_heads, c, r, "num_key_value_heads", NULL, cfg->n_heads));
  TRY(head_width(cfg, c, allow_head_dim));
  TRY(positive_eps(&cfg->norm_eps, c, r, "rms_norm_eps", 1e-6));
  TRY(opt_str(cfg->activation, sizeof cfg->activation, c, r, "hidden_act", NULL, "silu"));
  TRY(opt_bool(&cfg->tie_word_embeddings, c, r, "tie_word_embeddings", NULL, false));
  return train_len(cfg, c, "max_position_embeddings");
}

/* A sliding_window key: absent -> def, null -> 0 (none), else a positive integer. */
static int window_key(int *out, const ctx_t *c, int def) {
  const cJSON *sw = cJSON_GetObjectItemCaseSensitive(c->root, "sliding_window");
  *out = def;
  if (sw && cJSON_IsNull(sw)) *out = 0;
  else if (sw) TRY(as_pos_int(out, c, sw, "sliding_window"));
  return 0;
}

/* Which layers attend to the last cfg->sliding_window keys only (0: none, no layer slides):
 * layer_types' "sliding_attention" entries when the list is given (transformers 5 and recent 4.x
 * write it for every family with windows), else the family's default, layers from `first` on
 * every `step`-th. A sliding entry with no window is refused: transformers' masking_utils
 * (create_sliding_window_causal_mask) raises on it. */
static int sliding_layers(cp_hf_config *cfg, const ctx_t *c, int first, int step) {
  const cJSON *types = field(c->root, "layer_types");
  if (types && (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != cfg->n_layers)) {
    char e[64];
    snprintf(e, sizeof e, "a list of %d layer types", cfg->n_layers);
    return bad(c, "layer_types", e, types);
  }
  if (cfg->sliding_window > 0 && cfg->n_layers > CP_RULE_MAX_LAYERS)
    return cp_error_set(CP_ECFG_FIELD, "%s: key 'num_hidden_layers': %d layers with sliding windows (at most %d)",
                        c->what, cfg->n_layers, CP_RULE_MAX_LAYERS);
  int i = 0;
  for (const cJSON *t = types ? types->child : NULL; t; t = t->next, i++) {
    char label[48];
    snprintf(label, sizeof label, "layer_types[%d]", i);
    if (!cJSON_IsString(t) ||
        (strcmp(t->valuestring, "sliding_attention") != 0 && strcmp(t->valuestring, "full_attention") != 0))
      return bad(c, label, "\"sliding_attention\" or \"full_attention\"", t);
    bool slides = !strcmp(t->valuestring, "sliding_attention");
    if (slides && cfg->sliding_window <= 0)
      return cp_error_set(CP_ECFG_FIELD, "%s: key '%s': \"sliding_attention\" but the config sets no sliding window",
                          c->what, label);
    cfg->layer_sliding[i] = slides;
  }
  if (!types && cfg->sliding_window > 0)
    for (i = first; i < cfg->n_layers; i += step) cfg->layer_sliding[i] = true;
  return 0;
}

/* Qwen2 and Qwen3 (configuration_qwen2.py Qwen2Config.__init__, Qwen3Config the same): the window
 * is sliding_window (4096 when absent) only with use_sliding_window, and it applies to the layers
 * from max_window_layers (28 when absent) on, unless layer_types says otherwise. */
static int qwen_sliding(cp_hf_config *cfg, const ctx_t *c) {
  const cJSON *r = c->root;
  bool use = false;
  TRY(opt_bool(&use, c, r, "use_sliding_window", NULL, false));
  TRY(window_key(&cfg->sliding_window, c, 4096));
  if (!use) cfg->sliding_window = 0;
  const cJSON *mwl = field(r, "max_window_layers");
  int first = 28;
  if (mwl && !is_integer(mwl, 0, CFG_INT_MAX)) return bad(c, "max_window_layers", "an integer >= 0", mwl);
  if (mwl) first = (int)mwl->valuedouble;
  return sliding_layers(cfg, c, first, 1);
}

/* Qwen2: q, k and v carry biases (o does not), whatever attention_bias says. */
static int parse_qwen2(cp_hf_config *cfg, const ctx_t *c) {
  cfg->qkv_bias = true;
  cfg->no_bias = false;
  return qwen_sliding(cfg, c);
}

/* Qwen3 (Qwen3Attention): q and k are RMS-normalised per head (q_norm, k_norm, eps rms_norm_eps)
 * after the projections and before RoPE; biases follow attention_bias as Llama's (o included).
 * head_dim is required: Qwen3Config's default (128) is one model's number, not hidden / heads. */
static int parse_qwen3(cp_hf_config *cfg, const ctx_t *c) {
  if (!field(c->root, "head_dim")) return missing(c, "head_dim");
  cfg->qk_norm = true;
  return qwen_sliding(cfg, c);
}

/* Granite (transformers' models/granite: configuration_granite.py GraniteConfig, modeling_granite.py):
 * the Llama body with four multipliers, each 1.0 when absent: GraniteModel.forward multiplies the
 * embeddings by embedding_multiplier; GraniteAttention.scaling is attention_multiplier (in place
 * of head_dim^-1/2); GraniteDecoderLayer.forward adds each module's output times
 * residual_multiplier; GraniteForCausalLM.forward divides the logits by logits_scaling.
 * GraniteAttention's head width is hidden_size / num_attention_heads: a head_dim key that says
 * otherwise is refused (transformers would ignore it, other runtimes might not), as are the keys of
 * the sliding-window and mixture-of-experts variants that GraniteConfig does not have. */
static int parse_granite(cp_hf_config *cfg, const ctx_t *c) {
  const cJSON *r = c->root;
  static const char *const foreign[] = {"num_local_experts", "num_experts_per_tok", "shared_intermediate_size",
                                        "layer_types", "sliding_window", "use_sliding_window", "mamba_n_heads",
                                        "position_embedding_type", "qk_layernorm"};
  for (size_t i = 0; i < sizeof foreign / sizeof *foreign; i++) {
    const cJSON *v = field(r, foreign[i]);
    if (v && !cJSON_IsNull(v))
      return cp_error_set(CP_ECFG_FIELD, "%s: key '%s': not a GraniteConfig key (it changes the architecture, "
                          "which model_type granite does not describe)", c->what, foreign[i]);
  }
  const cJSON *hd = field(r, "head_dim");
  if (hd && !cJSON_IsNull(hd) && !(cJSON_IsNumber(hd) && hd->valuedouble == (double)cfg->d_head))
    return bad(c, "head_dim", "hidden_size / num_attention_heads (GraniteAttention's head width)", hd);
  TRY(opt_num(&cfg->embedding_multiplier, c, r, "embedding_multiplier", NULL, "", 1.0, 0, 1e6, "a positive number"));
  TRY(opt_num(&cfg->residual_multiplier, c, r, "residual_multiplier", NULL, "", 1.0, 0, 1e6, "a positive number"));
  TRY(opt_num(&cfg->attention_multiplier, c, r, "attention_multiplier", NULL, "", 1.0, 0, 1e6, "a positive number"));
  TRY(opt_num(&cfg->logits_scaling, c, r, "logits_scaling", NULL, "", 1.0, 1e-6, 1e6, "a number in (1e-6, 1e6]"));
  cfg->granite = true;
  return 0;
}

static int parse_llama(cp_hf_config *cfg, const ctx_t *c) {
  const cJSON *r = c->root;
  bool mistral = strcmp(cfg->model_type, "mistral") == 0, qwen2 = strcmp(cfg->model_type, "qwen2") == 0,
       qwen3 = strcmp(cfg->model_type, "qwen3") == 0, granite = strcmp(cfg->model_type, "granite") == 0;
  cfg->pos = CP_POS_ROPE;
  TRY(parse_llama_body(cfg, c, !granite));
  if (granite) TRY(parse_granite(cfg, c));
  TRY(opt_num(&cfg->rope_theta, c, r, "rope_theta", NULL, "", 10000.0, 0, INFINITY,
              "a positive number"));
  TRY(opt_num(&cfg->rotary_pct, c, r, "partial_rotary_factor", NULL, "", 1.0, 0, 1,
              "a number in (0, 1]"));
  TRY(rope_scaling(cfg, c));
  bool attention_bias = false, mlp_bias = false;
  TRY(opt_bool(&attention_bias, c, r, "attention_bias", NULL, false));
  TRY(opt_bool(&mlp_bias, c, r, "mlp_bias", NULL, false));
  cfg->qkv_bias = attention_bias;
  cfg->no_bias = !attention_bias && !mlp_bias;
  cfg->sliding_window = 0;
  if (qwen2) TRY(parse_qwen2(cfg, c));
  if (qwen3) TRY(parse_qwen3(cfg, c));
  if (mistral) {
    /* MistralConfig defaults to a 4096 window, an explicit null disables it; MistralModel masks
     * every layer with it (create_sliding_window_causal_mask when config.sliding_window is set). */
    TRY(window_key(&cfg->sliding_window, c, 4096));
    TRY(sliding_layers(cfg, c, 0, 1));
  }
  TRY(special_ids(cfg, c, 1, 2, -1));
  return 0;
}

/* Phi-3 / Phi-3.5 mini (transformers' models/phi3: configuration_phi3.py Phi3Config,
 * modeling_phi3.py Phi3Attention and Phi3MLP): the Llama body with q | k | v fused in qkv_proj
 * and gate | up in gate_up_proj (split at load, model/families.c), no biases, RMSNorm, SiLU,
 * partial_rotary_factor. Phi3Config reads a rope type "su" or "yarn" as "longrope" (refused here:
 * spelled out as longrope, it is run, model/rope.c). Phi3Model masks every layer with
 * sliding_window when it is set (the engines run it: cp_hf_sliding_layers). */
static int parse_phi3(cp_hf_config *cfg, const ctx_t *c) {
  const cJSON *r = c->root;
  cfg->pos = CP_POS_ROPE;
  TRY(parse_llama_body(cfg, c, true));
  if (!field(r, "rms_norm_eps")) cfg->norm_eps = 1e-5; /* Phi3Config's default */
  if (cfg->d_ff > CFG_INT_MAX / 2) /* gate_up_proj has 2 d_ff rows */
    return cp_error_set(CP_ECFG_FIELD, "%s: key 'intermediate_size': %d is above 2^30 (gate_up_proj holds twice as "
                        "many rows)", c->what, cfg->d_ff);
  TRY(opt_num(&cfg->rope_theta, c, r, "rope_theta", NULL, "", 10000.0, 0, INFINITY, "a positive number"));
  TRY(opt_num(&cfg->rotary_pct, c, r, "partial_rotary_factor", NULL, "", 1.0, 0, 1, "a number in (0, 1]"));
  const char *name = field(r, "rope_scaling") ? "rope_scaling" : "rope_parameters";
  const cJSON *rs = field(r, name);
  if (rs && cJSON_IsObject(rs)) {
    const cJSON *t = field(rs, "type") ? field(rs, "type") : field(rs, "rope_type");
    if (cJSON_IsString(t) && (!strcmp(t->valuestring, "su") || !strcmp(t->valuestring, "yarn")))
      return cp_error_set(CP_ECFG_FIELD, "%s: key '%s.%s': '%s' is read by Phi3Config as 'longrope' (a legacy "
                          "name: refused rather than renamed; write 'longrope')", c->what, name,
                          field(rs, "type") ? "type" : "rope_type", t->valuestring);
  }
  TRY(rope_scaling(cfg, c));
  /* Phi3Model masks every layer with sliding_window when it is set (None by default). */
  TRY(window_key(&cfg->sliding_window, c, 0));
  TRY(sliding_layers(cfg, c, 0, 1));
  cfg->qkv_bias = false;
  cfg->no_bias = true;
  TRY(special_ids(cfg, c, 1, 32000, 32000));
  return 0;
}

/* A soft-capping key of Gemma2Config: absent -> def, null -> 0 (none), else a positive number. */
static int softcap(double *out, const ctx_t *c, const char *key, double def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->root, key);
  if (v && cJSON_IsNull(v)) {
    *out = 0;
    return 0;
  }
  return opt_num(out, c, c->root, key, NULL, "", def, 0, 1e6, "a number in (0, 1e6] or null");
}

/* Gemma 2's sliding layers: Gemma2DecoderLayer's is_sliding = not bool(layer_idx % 2), every even
 * layer, unless layer_types is given; the window is 4096 when absent (Gemma2Config's default). */
static int gemma2_layers(cp_hf_config *cfg, const ctx_t *c) {
  TRY(window_key(&cfg->sliding_window, c, 4096));
  return sliding_layers(cfg, c, 0, 2);
}

/* Gemma 3 text (configuration_gemma3.py Gemma3TextConfig; modeling_gemma3.py): Gemma 2's body with
 * Gemma3Attention's q_norm / k_norm, rope_theta (default 1e6) with rope_scaling on the full layers
 * and rope_local_base_freq (default 1e4), unscaled, on the sliding ones (Gemma3TextModel.__init__'s
 * rotary_emb_local, chosen by Gemma3DecoderLayer.forward), no soft-capping unless set. Without
 * layer_types, layer l slides unless (l + 1) % sliding_window_pattern == 0 (default 6: five
 * sliding layers to one full). */
static int parse_gemma3(cp_hf_config *cfg, const ctx_t *c) {
  const cJSON *r = c->root;
  const cJSON *rp = field(r, "rope_parameters");
  if (rp && cJSON_IsObject(rp) && (field(rp, "full_attention") || field(rp, "sliding_attention")))
    return cp_error_set(CP_ECFG_FIELD, "%s: key 'rope_parameters': RoPE parameters per layer type (transformers 5) "
                        "are not read yet; write rope_theta, rope_local_base_freq and rope_scaling", c->what);
  TRY(opt_num(&cfg->rope_theta, c, r, "rope_theta", NULL, "", 1e6, 0, INFINITY, "a positive number"));
  TRY(opt_num(&cfg->rope_local_theta, c, r, "rope_local_base_freq", NULL, "", 1e4, 0, INFINITY,
              "a positive number"));
  /* Gemma3Attention.forward hands eager_attention_forward no softcap: transformers reads the key and
   * never applies it, so a set value has no one meaning to reproduce. */
  const cJSON *cap = field(r, "attn_logit_softcapping");
  if (cap && !cJSON_IsNull(cap))
    return bad(c, "attn_logit_softcapping", "null (Gemma3Attention does not apply it)", cap);
  bool bidir = false;
  TRY(opt_bool(&bidir, c, r, "use_bidirectional_attention", NULL, false));
  if (bidir)
    return cp_error_set(CP_ECFG_FIELD, "%s: key 'use_bidirectional_attention': true is not supported (a "
                        "bidirectional encoder, not a causal language model)", c->what);
  int pattern = 6;
  TRY(opt_int(&pattern, c, r, "sliding_window_pattern", NULL, 6));
  const cJSON *sw = cJSON_GetObjectItemCaseSensitive(r, "sliding_window");
  if (sw && cJSON_IsNull(sw))
    return bad(c, "sliding_window", "a positive integer (the sliding layers are those with rope_local_base_freq)",
               sw);
  TRY(window_key(&cfg->sliding_window, c, 4096));
  TRY(sliding_layers(cfg, c, 0, 1));
  if (!field(r, "layer_types"))
    for (int i = pattern - 1; i < cfg->n_layers; i += pattern) cfg->layer_sliding[i] = false;
  cfg->qk_norm = true;
  return 0;
}

/* Gemma and Gemma 2 (GemmaConfig, Gemma2Config; modeling_gemma.py, modeling_gemma2.py): the Llama
 * body with head_dim 256 unless given, tied embeddings unless untied, and the activation of
 * hidden_activation (GemmaMLP: gelu_pytorch_tanh when it is null or absent, whatever hidden_act
 * says). Gemma 2 adds query_pre_attn_scalar, the soft-caps, the sandwich norms and the sliding
 * layers. */
static int parse_gemma(cp_hf_config *cfg, const ctx_t *c) {
  const cJSON *r = c->root;
  const bool g3 = strcmp(cfg->model_type, "gemma3_text") == 0, g2 = g3 || strcmp(cfg->model_type, "gemma2") == 0;
  cfg->pos = CP_POS_ROPE;
  TRY(parse_llama_body(cfg, c, true));
  if (!field(r, "head_dim")) cfg->d_head = 256;
  TRY(opt_bool(&cfg->tie_word_embeddings, c, r, "tie_word_embeddings", NULL, true));
  TRY(opt_str(cfg->activation, sizeof cfg->activation, c, r, "hidden_activation", NULL, "gelu_pytorch_tanh"));
  if (g3) TRY(parse_gemma3(cfg, c));
  else TRY(opt_num(&cfg->rope_theta, c, r, "rope_theta", NULL, "", 10000.0, 0, INFINITY, "a positive number"));
  TRY(rope_scaling(cfg, c));
  /* Gemma 3's sliding layers keep their own unscaled table (model_load.c); a table per call length
   * on the full layers beside it is not built. */
  if (g3 && (!strcmp(cfg->rope_scaling_type, "dynamic") || !strcmp(cfg->rope_scaling_type, "longrope")))
    return cp_error_set(CP_ECFG_FIELD, "%s: key 'rope_scaling': type '%s' is not supported on gemma3_text "
                        "(two RoPE bases with a table per call length)", c->what, cfg->rope_scaling_type);
  bool attention_bias = false;
  TRY(opt_bool(&attention_bias, c, r, "attention_bias", NULL, false));
  cfg->qkv_bias = attention_bias;
  cfg->no_bias = !attention_bias;
  if (g2) {
    cfg->sandwich_norms = true;
    TRY(opt_num(&cfg->query_pre_attn_scalar, c, r, "query_pre_attn_scalar", NULL, "", 256, 0, 1e12,
                "a positive number"));
    /* Gemma3TextConfig's caps default to null (its attention cap refused above). */
    TRY(softcap(&cfg->attn_softcap, c, "attn_logit_softcapping", g3 ? 0 : 50.0));
    TRY(softcap(&cfg->final_softcap, c, "final_logit_softcapping", g3 ? 0 : 30.0));
    if (!g3) TRY(gemma2_layers(cfg, c));
  }
  TRY(special_ids(cfg, c, 2, 1, 0));
  return 0;
}

/* OLMo 2 (transformers' models/olmo2: configuration_olmo2.py Olmo2Config, modeling_olmo2.py): the
 * Llama names and MLP without the pre-norms. Olmo2DecoderLayer.forward adds
 * post_attention_layernorm(attn(x)) and then post_feedforward_layernorm(mlp(x)) to the residual;
 * Olmo2Attention.forward norms the whole q_proj and k_proj outputs (q_norm [H*dh], k_norm
 * [Hkv*dh], eps rms_norm_eps) before the head split and RoPE. Olmo2Config has no MLP bias, no
 * window and no partial rotary factor: such keys are refused rather than ignored, and so is
 * attention_bias true (every runtime ctxpatch exports to loads OLMo 2 without biases). */
static int parse_olmo2(cp_hf_config *cfg, const ctx_t *c) {
  const cJSON *r = c->root;
  static const char *const foreign[] = {"sliding_window", "use_sliding_window", "layer_types", "mlp_bias",
                                        "partial_rotary_factor", "num_experts", "clip_qkv"};
  for (size_t i = 0; i < sizeof foreign / sizeof *foreign; i++) {
    const cJSON *v = field(r, foreign[i]);
    if (v && !cJSON_IsNull(v))
      return cp_error_set(CP_ECFG_FIELD, "%s: key '%s': not an Olmo2Config key (it changes the architecture, "
                          "which model_type olmo2 does not describe)", c->what, foreign[i]);
  }
  cfg->pos = CP_POS_ROPE;
  TRY(parse_llama_body(cfg, c, true)); /* Olmo2Attention: getattr(config, "head_dim", hidden / heads) */
  if (!field(r, "rms_norm_eps")) cfg->norm_eps = 1e-5; /* Olmo2Config's default */
  TRY(opt_num(&cfg->rope_theta, c, r, "rope_theta", NULL, "", 10000.0, 0, INFINITY, "a positive number"));
  TRY(rope_scaling(cfg, c));
  bool attention_bias = false;
  TRY(opt_bool(&attention_bias, c, r, "attention_bias", NULL, false));
  if (attention_bias)
    return cp_error_set(CP_ECFG_FIELD, "%s: key 'attention_bias': true is not supported for olmo2 (q/k/v/o biases "
                        "beside the whole q/k norms)", c->what);
  cfg->qkv_bias = false;
  cfg->no_bias = true;
  cfg->qk_norm = cfg->qk_norm_whole = cfg->post_norms = true;
  TRY(special_ids(cfg, c, -1, 50279, 1));
  return 0;
}

/* StarCoder2 (transformers' models/starcoder2: configuration_starcoder2.py Starcoder2Config,
 * modeling_starcoder2.py): Starcoder2DecoderLayer is pre-norm with nn.LayerNorm (weight and bias,
 * eps norm_epsilon, 1e-5), Starcoder2Attention's q/k/v/o and Starcoder2MLP's c_fc -> hidden_act
 * (gelu_pytorch_tanh) -> c_proj carry biases when use_bias (true), num_key_value_heads defaults to
 * 2, head_dim is getattr(config, "head_dim") or hidden / heads, the head is tied unless
 * tie_word_embeddings says otherwise (PretrainedConfig's default). Starcoder2Model masks every layer
 * with sliding_window when it is set (None by default). partial_rotary_factor is refused:
 * compute_default_rope_parameters would read it, but apply_rotary_pos_emb rotates the whole head. */
static int parse_starcoder2(cp_hf_config *cfg, const ctx_t *c) {
  const cJSON *r = c->root;
  cfg->pos = CP_POS_ROPE;
  TRY(decoder_sizes(cfg, c));
  TRY(opt_int(&cfg->n_kv_heads, c, r, "num_key_value_heads", NULL, 2));
  TRY(head_width(cfg, c, true));
  const cJSON *prf = field(r, "partial_rotary_factor");
  if (prf && !(cJSON_IsNumber(prf) && prf->valuedouble == 1.0))
    return bad(c, "partial_rotary_factor", "1 (Starcoder2Attention rotates the whole head)", prf);
  cfg->rotary_pct = 1.0;
  TRY(positive_eps(&cfg->norm_eps, c, r, "norm_epsilon", 1e-5));
  TRY(opt_str(cfg->activation, sizeof cfg->activation, c, r, "hidden_act", NULL, "gelu_pytorch_tanh"));
  TRY(opt_bool(&cfg->tie_word_embeddings, c, r, "tie_word_embeddings", NULL, true));
  TRY(train_len(cfg, c, "max_position_embeddings"));
  TRY(opt_num(&cfg->rope_theta, c, r, "rope_theta", NULL, "", 10000.0, 0, INFINITY, "a positive number"));
  TRY(rope_scaling(cfg, c));
  TRY(window_key(&cfg->sliding_window, c, 0));
  TRY(sliding_layers(cfg, c, 0, 1));
  bool use_bias = true;
  TRY(opt_bool(&use_bias, c, r, "use_bias", NULL, true));
  cfg->qkv_bias = use_bias;
  cfg->no_bias = !use_bias; /* the LayerNorms keep theirs */
  TRY(special_ids(cfg, c, 50256, 50256, -1));
  return 0;
}

static int parse_gpt_neox(cp_hf_config *cfg, const ctx_t *c) {
  const cJSON *r = c->root;
  cfg->pos = CP_POS_ROPE;
  TRY(decoder_sizes(cfg, c));
  cfg->n_kv_heads = cfg->n_heads;
  TRY(split_heads(cfg, c, "num_attention_heads"));
  /* Newer transformers spell these partial_rotary_factor and rope_theta. */
  TRY(opt_num(&cfg->rotary_pct, c, r, "rotary_pct", "partial_rotary_factor", "", 0.25, 0, 1,
              "a number in (0, 1]"));
  TRY(opt_num(&cfg->rope_theta, c, r, "rotary_emb_base", "rope_theta", "", 10000.0, 0, INFINITY,
              "a positive number"));
  TRY(train_len(cfg, c, "max_position_embeddings"));
  TRY(rope_scaling(cfg, c));
  TRY(opt_bool(&cfg->use_parallel_residual, c, r, "use_parallel_residual", NULL, true));
  TRY(positive_eps(&cfg->norm_eps, c, r, "layer_norm_eps", 1e-5));
  TRY(opt_str(cfg->activation, sizeof cfg->activation, c, r, "hidden_act", NULL, "gelu"));
  TRY(opt_bool(&cfg->tie_word_embeddings, c, r, "tie_word_embeddings", NULL, false));
  TRY(opt_bool(&cfg->qkv_bias, c, r, "attention_bias", NULL, true));
  cfg->no_bias = false; /* LayerNorms and the MLP always carry biases */
  TRY(special_ids(cfg, c, 0, 2, -1));
  return 0;
}

static int parse_fire(cp_hf_config *cfg, const ctx_t *c) {
  const cJSON *r = c->root;
  cfg->pos = CP_POS_FIRE;
  TRY(parse_llama_body(cfg, c, false)); /* q and o are [D, D]: d_head = D / H */
  /* docs/fire-layout.md requires L_train under this exact key (the other spellings would
   * have been accepted by train_len). */
  if (!field(r, "max_position_embeddings")) return missing(c, "max_position_embeddings");
  TRY(opt_int(&cfg->fire_mlp_width, c, r, "fire_mlp_width", NULL, 32));
  if (cfg->fire_mlp_width > CP_FIRE_MAX_WIDTH)
    return cp_error_set(CP_ECFG_FIELD, "%s: key 'fire_mlp_width': %d is above %d", c->what, cfg->fire_mlp_width,
                        CP_FIRE_MAX_WIDTH);
  TRY(opt_int(&cfg->fire_mlp_layers, c, r, "fire_mlp_layers", NULL, 1));
  if (cfg->fire_mlp_layers > 2)
    return cp_error_set(CP_ECFG_FIELD, "%s: key 'fire_mlp_layers': expected 1 or 2, got %d", c->what,
                        cfg->fire_mlp_layers);
  TRY(opt_bool(&cfg->fire_shared, c, r, "fire_shared", NULL, false));
  TRY(opt_num(&cfg->fire_c_init, c, r, "fire_c_init", NULL, "", 1.0, 0, INFINITY,
              "a positive number"));
  TRY(opt_num(&cfg->fire_threshold, c, r, "fire_threshold", NULL, "", (double)cfg->train_len, 0,
              INFINITY, "a positive number"));
  cfg->qkv_bias = false;
  cfg->no_bias = true;
  TRY(special_ids(cfg, c, -1, -1, -1));
  return 0;
}

/* GPT2Config. n_positions is required like the other sizes: it is the row count of the learned
 * position table wpe, and no position past it has an embedding. n_inner null means 4 n_embd. */
static int parse_gpt2(cp_hf_config *cfg, const ctx_t *c) {
  const cJSON *r = c->root;
  cfg->pos = CP_POS_LEARNED;
  int ff4, n_pos;
  TRY(n_sizes(cfg, &ff4, c, "n_embd", "hidden_size"));
  TRY(req_int(&n_pos, c, r, "n_positions", "max_position_embeddings"));
  cfg->train_len = n_pos;
  snprintf(cfg->train_len_key, sizeof cfg->train_len_key, "config.json %s",
           field(r, "n_positions") ? "n_positions" : "max_position_embeddings");
  TRY(opt_int(&cfg->d_ff, c, r, "n_inner", NULL, ff4));
  TRY(positive_eps(&cfg->norm_eps, c, r, "layer_norm_epsilon", 1e-5));
  TRY(opt_str(cfg->activation, sizeof cfg->activation, c, r, "activation_function", NULL, "gelu_new"));
  TRY(opt_bool(&cfg->tie_word_embeddings, c, r, "tie_word_embeddings", NULL, true));
  TRY(opt_bool(&cfg->scale_attn_weights, c, r, "scale_attn_weights", NULL, true));
  TRY(opt_bool(&cfg->scale_attn_inverse_layer, c, r, "scale_attn_by_inverse_layer_idx", NULL, false));
  bool ignored, cross;
  TRY(opt_bool(&ignored, c, r, "reorder_and_upcast_attn", NULL, false));
  TRY(opt_bool(&cross, c, r, "add_cross_attention", NULL, false));
  if (cross)
    return cp_error_set(CP_ECFG_FIELD, "%s: key 'add_cross_attention': true is not supported (a GPT-2 with "
                        "cross-attention is an encoder-decoder's decoder)", c->what);
  cfg->qkv_bias = true;
  cfg->no_bias = false; /* Conv1D layers and LayerNorms all carry biases */
  TRY(special_ids(cfg, c, 50256, 50256, -1));
  return 0;
}

/* ctxpatch.KEY as a string of fewer than `size` bytes into out ("" when absent; null too when
 * null_ok); hex: exactly 64 hex digits. */
static int ctxpatch_string(char *out, size_t size, const cJSON *block, const char *key, bool null_ok, bool hex,
                           const ctx_t *c) {
  out[0] = '\0';
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(block, key);
  if (!v || (null_ok && cJSON_IsNull(v))) return 0;
  size_t n = cJSON_IsString(v) ? strlen(v->valuestring) : 0;
  bool good = cJSON_IsString(v) && n < size && (!hex || n == 64);
  for (size_t i = 0; good && hex && i < n; i++) good = strchr("0123456789abcdef", v->valuestring[i]) != NULL;
  if (!good)
    return cp_error_set(CP_ECFG_FIELD, "%s: key 'ctxpatch.%s': expected %s", c->what, key,
                        hex ? "64 lowercase hex digits or null" : "a short string");
  memcpy(out, v->valuestring, n + 1);
  return 0;
}

/* ctxpatch.KEY as a rule (the identity when absent or null). */
static int ctxpatch_rule(cp_rule *out, const cJSON *block, const char *key, const ctx_t *c) {
  cp_rule_init(out);
  const cJSON *rule = cJSON_GetObjectItemCaseSensitive(block, key);
  if (!rule || cJSON_IsNull(rule)) return 0;
  char what[600];
  snprintf(what, sizeof what, "%s: key 'ctxpatch.%s'", c->what, key);
  return cp_rule_from_json(out, rule, what);
}

/* ctxpatch.effective_in: an array of short runtime names, joined by ", " into out ("" when absent). */
static int ctxpatch_runtimes(char *out, size_t size, const cJSON *block, const ctx_t *c) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(block, "effective_in"), *e;
  size_t len = 0;
  out[0] = '\0';
  if (!a) return 0;
  bool good = cJSON_IsArray(a);
  if (good) cJSON_ArrayForEach(e, a) {
    size_t n = cJSON_IsString(e) ? strlen(e->valuestring) : 0;
    if (!(good = n > 0 && len + n + 3 < size)) break;
    len += (size_t)snprintf(out + len, size - len, "%s%s", len ? ", " : "", e->valuestring);
  }
  if (!good)
    return cp_error_set(CP_ECFG_FIELD, "%s: key 'ctxpatch.effective_in': expected an array of runtime names (at most "
                        "%zu bytes together)", c->what, size - 1);
  return 0;
}

/* "ctxpatch": {"rule": {...}, "baked_rule": {...}, "method", "fidelity", "certified",
 * "certificate_sha256", ...} of a patched artifact (include/ctxpatch/patchers/patch.h). */
static int ctxpatch_block(cp_hf_config *cfg, const ctx_t *c) {
  const cJSON *block = cJSON_GetObjectItemCaseSensitive(c->root, "ctxpatch");
  cp_rule_init(&cfg->ctxpatch_rule);
  cp_rule_init(&cfg->ctxpatch_baked_rule);
  cfg->ctxpatch_certified = -1;
  if (!block) return 0;
  if (!cJSON_IsObject(block))
    return cp_error_set(CP_ECFG_FIELD, "%s: key 'ctxpatch': expected an object", c->what);
  cfg->has_ctxpatch = true;
  const cJSON *cert = cJSON_GetObjectItemCaseSensitive(block, "certified");
  if (cert && !cJSON_IsBool(cert))
    return cp_error_set(CP_ECFG_FIELD, "%s: key 'ctxpatch.certified': expected true or false", c->what);
  if (cert) cfg->ctxpatch_certified = cJSON_IsTrue(cert);
  int rc;
  if ((rc = ctxpatch_string(cfg->ctxpatch_method, sizeof cfg->ctxpatch_method, block, "method", false, false, c)) ||
      (rc = ctxpatch_string(cfg->ctxpatch_fidelity, sizeof cfg->ctxpatch_fidelity, block, "fidelity", false, false, c)) ||
      (rc = ctxpatch_string(cfg->ctxpatch_certificate_sha256, sizeof cfg->ctxpatch_certificate_sha256, block,
                            "certificate_sha256", true, true, c)) ||
      (rc = ctxpatch_rule(&cfg->ctxpatch_baked_rule, block, "baked_rule", c)) ||
      (rc = ctxpatch_runtimes(cfg->ctxpatch_effective_in, sizeof cfg->ctxpatch_effective_in, block, c)))
    return rc;
  return ctxpatch_rule(&cfg->ctxpatch_rule, block, "rule", c);
}

/* Checks shared by every family once the numbers are in. */
static int check_shapes(const cp_hf_config *cfg, const ctx_t *c) {
  const char *kv_key = cfg->family == CP_FAMILY_MPT ? "attn_config.kv_n_heads" : "num_key_value_heads";
  if (cfg->n_kv_heads > cfg->n_heads || cfg->n_heads % cfg->n_kv_heads != 0)
    return cp_error_set(CP_ECFG_FIELD, "%s: key '%s': %d key/value heads do not divide %d heads",
                        c->what, kv_key, cfg->n_kv_heads, cfg->n_heads);
  if ((double)cfg->n_heads * cfg->d_head > CFG_INT_MAX)
    return cp_error_set(CP_ECFG_FIELD, "%s: %d heads x %d head width overflows", c->what,
                        cfg->n_heads, cfg->d_head);
  return 0;
}

static int detect_family(cp_hf_config *cfg, const ctx_t *c) {
  const cJSON *r = c->root;
  const cJSON *mt = field(r, "model_type"), *ar = field(r, "architectures");
  if (mt && !cJSON_IsString(mt)) return bad(c, "model_type", "a string", mt);
  if (mt && strstr(mt->valuestring, NUL_MARK)) return has_nul(c, "model_type");
  int rc = keys_without_nul(c, r, "");
  if (rc) return rc;
  if (ar) {
    if (!cJSON_IsArray(ar)) return bad(c, "architectures", "a list of strings", ar);
    if (ar->child) {
      const cJSON *a0 = ar->child;
      if (!cJSON_IsString(a0) || !a0->valuestring) return bad(c, "architectures[0]", "a string", a0);
      for (const cJSON *a = a0; a; a = a->next)
        if (cJSON_IsString(a) && strstr(a->valuestring, NUL_MARK)) return has_nul(c, "architectures");
      if (strlen(a0->valuestring) >= sizeof cfg->architecture)
        return cp_error_set(CP_ECFG_FIELD, "%s: key 'architectures[0]': longer than %zu bytes",
                            c->what, sizeof cfg->architecture - 1);
      memcpy(cfg->architecture, a0->valuestring, strlen(a0->valuestring) + 1);
    }
  }
  const char *arch_type = NULL; /* model_type implied by a known architecture */
  for (size_t i = 0; cfg->architecture[0] && i < sizeof k_archs / sizeof k_archs[0]; i++)
    if (strcmp(cfg->architecture, k_archs[i].arch) == 0) arch_type = k_archs[i].model_type;

  const char *type = mt ? mt->valuestring : arch_type;
  if (!type) {
    if (cfg->architecture[0])
      return cp_error_set(CP_ECFG_FAMILY,
                          "%s: no 'model_type', and architectures[0] '%.127s' is not a supported "
                          "architecture (supported model_type values: %s)",
                          c->what, cfg->architecture, cp_supported_families());
    return cp_error_set(CP_ECFG_FAMILY,
                        "%s: neither 'model_type' nor 'architectures' names the model family "
                        "(supported model_type values: %s)",
                        c->what, cp_supported_families());
  }
  for (size_t i = 0; i < sizeof k_model_types / sizeof k_model_types[0]; i++) {
    if (strcmp(type, k_model_types[i].model_type) != 0) continue;
    cfg->family = k_model_types[i].family;
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", type);
    /* A known architecture of another family means the file was assembled wrongly. */
    if (arch_type) {
      for (size_t j = 0; j < sizeof k_model_types / sizeof k_model_types[0]; j++)
        if (strcmp(arch_type, k_model_types[j].model_type) == 0 &&
            k_model_types[j].family != cfg->family)
          return cp_error_set(CP_ECFG_FAMILY,
                              "%s: key 'model_type': '%s' disagrees with architectures[0] '%s'",
                              c->what, type, cfg->architecture);
    }
    return 0;
  }
  for (size_t i = 0; i < sizeof k_refused / sizeof k_refused[0]; i++)
    if (strcmp(type, k_refused[i].model_type) == 0)
      return cp_error_set(CP_ECFG_FAMILY, "%s: key 'model_type': '%s' is not supported: %s", c->what, type,
                          k_refused[i].why);
  return cp_error_set(CP_ECFG_FAMILY,
                      "%s: key 'model_type': unsupported model type '%.63s' (supported: %s)",
                      c->what, type, cp_supported_families());
}

/* ---------- entry points ---------- */

/* The family's fields, then the checks every family shares. */
static int parse_fields(cp_hf_config *cfg, ctx_t *c) {
  int rc = detect_family(cfg, c);
  if (rc) return rc;
  c->family = cfg->model_type;
  switch (cfg->family) {
    case CP_FAMILY_T5: rc = parse_t5(cfg, c); break;
    case CP_FAMILY_BLOOM: rc = parse_bloom(cfg, c); break;
    case CP_FAMILY_MPT: rc = parse_mpt(cfg, c); break;
    case CP_FAMILY_LLAMA: rc = parse_llama(cfg, c); break;
    case CP_FAMILY_GPT_NEOX: rc = parse_gpt_neox(cfg, c); break;
    case CP_FAMILY_FIRE: rc = parse_fire(cfg, c); break;
    case CP_FAMILY_GPT2: rc = parse_gpt2(cfg, c); break;
    case CP_FAMILY_PHI3: rc = parse_phi3(cfg, c); break;
    case CP_FAMILY_GEMMA: rc = parse_gemma(cfg, c); break;
    case CP_FAMILY_OLMO2: rc = parse_olmo2(cfg, c); break;
    case CP_FAMILY_STARCODER2: rc = parse_starcoder2(cfg, c); break;
    case CP_FAMILY_COUNT: assert(0); break;
  }
  if (rc) return rc;
  if ((rc = check_shapes(cfg, c))) return rc;
  if (cfg->pos == CP_POS_ROPE) {
    /* HF: rotary dims = int(head_dim * fraction); the rotate-half layout needs an even,
     * non-zero count. */
    cfg->rotary_dims = (int)floor(cfg->d_head * cfg->rotary_pct);
    if (cfg->rotary_dims < 2 || cfg->rotary_dims % 2 != 0)
      return cp_error_set(CP_ECFG_FIELD,
                          "%s: key '%s': %g of head width %d gives %d rotary dims (need an even "
                          "number >= 2)",
                          c->what, cfg->family == CP_FAMILY_GPT_NEOX ? "rotary_pct" : "partial_rotary_factor",
                          cfg->rotary_pct, cfg->d_head, cfg->rotary_dims);
    if (!strcmp(cfg->rope_scaling_type, "longrope") && cfg->rope_n_factors != cfg->rotary_dims / 2)
      return cp_error_set(CP_ECFG_FIELD, "%s: key '%s.short_factor': %d factors for %d rotary dims (want %d, one per "
                          "pair)", c->what, cfg->rope_parameters_layout ? "rope_parameters" : "rope_scaling",
                          cfg->rope_n_factors, cfg->rotary_dims, cfg->rotary_dims / 2);
  }
  return ctxpatch_block(cfg, c);
}

static int parse_tree(cJSON **out, const char *text, size_t len, const char *what) {
  int rc = cp_json_parse_strict(out, text ? text : "", len, what, CFG_MAX_DEPTH, CP_ECFG_JSON,
                                CP_ECFG_JSON, CP_ECFG_DUPLICATE_KEY, CP_ECFG_DEPTH);
  if (rc == 0 && !cJSON_IsObject(*out))
    rc = cp_error_set(CP_ECFG_JSON, "%s: offset 0: top level is not a JSON object", what);
  return rc;
}

int cp_hf_config_parse(cp_hf_config **out, const char *text, size_t len, const char *what) {
  assert(out && (text || len == 0) && what);
  *out = NULL;
  cJSON *root = NULL;
  cp_hf_config *cfg = NULL;
  char *marked = text ? mark_nuls(text, len) : NULL;
  if (text && !marked) return cp_nomem("%s", what);
  int rc = parse_tree(&root, marked, len, what);
  if (rc) goto done;
  cfg = calloc(1, sizeof *cfg);
  CP_CHECK_ALLOC_GOTO(cfg, what);
  cfg->text = malloc(len + 1);
  CP_CHECK_ALLOC_GOTO(cfg->text, what);
  if (len) memcpy(cfg->text, text, len);
  cfg->text[len] = '\0';
  cfg->text_len = len;
  /* Fields a family does not use keep these neutral values. */
  cfg->rotary_pct = 1.0;
  cfg->rope_scaling_factor = 1.0;
  cfg->embedding_multiplier = cfg->residual_multiplier = cfg->attention_multiplier = cfg->logits_scaling = 1.0;
  cfg->bos_token_id = cfg->eos_token_id = cfg->pad_token_id = cfg->decoder_start_token_id = -1;
  ctx_t c = {what, "", root};
  if ((rc = parse_fields(cfg, &c))) goto done;
  *out = cfg;
  cfg = NULL;
done:
  free(marked);
  cJSON_Delete(root);
  cp_hf_config_free(cfg);
  return rc;
}

int cp_hf_config_json(cJSON **out, const cp_hf_config *cfg) {
  *out = NULL;
  return parse_tree(out, cfg->text, cfg->text_len, "config.json");
}

int cp_hf_config_load(cp_hf_config **out, const char *path) {
  assert(out && path);
  *out = NULL;
  char *text = NULL;
  size_t len = 0;
  int rc = cp_read_file(&text, &len, path, CFG_MAX_BYTES);
  if (rc) goto done;
  cp_input_note(path);
  rc = cp_hf_config_parse(out, text, len, path);
done:
  free(text);
  return rc;
}

void cp_hf_config_free(cp_hf_config *cfg) {
  if (!cfg) return;
  free(cfg->text);
  free(cfg);
}
