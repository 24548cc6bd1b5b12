/* ctxpatch inspect's description of a checkpoint as a cJSON tree (import/describe.h). */
#include "import/describe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/model/rule.h"
#include "model/rule_json.h"

cJSON *cp_describe_tensor(const char *name, cp_dtype dtype, int ndim, const int64_t *shape, uint64_t nbytes) {
  cJSON *item = cJSON_CreateObject();
  cJSON_AddStringToObject(item, "name", name);
  cJSON_AddStringToObject(item, "dtype", cp_dtype_name(dtype));
  cJSON *dims = cJSON_AddArrayToObject(item, "shape");
  for (int d = 0; d < ndim; d++) cJSON_AddItemToArray(dims, cJSON_CreateNumber((double)shape[d]));
  cJSON_AddNumberToObject(item, "bytes", (double)nbytes);
  return item;
}

cJSON *cp_describe_ctxpatch(const cp_hf_config *cfg) {
  cJSON *a = cJSON_CreateObject();
  bool ok = a && cJSON_AddStringToObject(a, "method", cfg->ctxpatch_method) &&
            cJSON_AddStringToObject(a, "fidelity", cfg->ctxpatch_fidelity) &&
            cJSON_AddItemToObject(a, "rule", cp_rule_to_json(&cfg->ctxpatch_rule)) &&
            cJSON_AddItemToObject(a, "baked_rule", cp_rule_to_json(&cfg->ctxpatch_baked_rule)) &&
            (cfg->ctxpatch_certified < 0 ? cJSON_AddNullToObject(a, "certified")
                                         : cJSON_AddBoolToObject(a, "certified", cfg->ctxpatch_certified)) &&
            (cfg->ctxpatch_certificate_sha256[0]
                 ? cJSON_AddStringToObject(a, "certificate_sha256", cfg->ctxpatch_certificate_sha256)
                 : cJSON_AddNullToObject(a, "certificate_sha256")) &&
            (!cfg->ctxpatch_effective_in[0] ||
             cJSON_AddStringToObject(a, "effective_in", cfg->ctxpatch_effective_in));
  if (ok) return a;
  cJSON_Delete(a);
  return NULL;
}

/* The window and the indices of the layers it applies to. */
static void add_window(cJSON *obj, const cp_hf_config *c) {
  cJSON_AddNumberToObject(obj, "sliding_window", c->sliding_window);
  cJSON *sl = cJSON_AddArrayToObject(obj, "sliding_layers");
  for (int l = 0; c->sliding_window > 0 && l < c->n_layers && l < CP_RULE_MAX_LAYERS; l++)
    if (c->layer_sliding[l]) cJSON_AddItemToArray(sl, cJSON_CreateNumber(l));
}

static cJSON *add_hyperparameters(cJSON *obj, const cp_hf_config *c) {
  cJSON *h = cJSON_AddObjectToObject(obj, "hyperparameters");
  cJSON_AddNumberToObject(h, "vocab_size", c->vocab_size);
  cJSON_AddNumberToObject(h, "d_model", c->d_model);
  cJSON_AddNumberToObject(h, "n_layers", c->n_layers);
  if (c->n_decoder_layers) cJSON_AddNumberToObject(h, "n_decoder_layers", c->n_decoder_layers);
  cJSON_AddNumberToObject(h, "n_heads", c->n_heads);
  cJSON_AddNumberToObject(h, "n_kv_heads", c->n_kv_heads);
  cJSON_AddNumberToObject(h, "d_head", c->d_head);
  cJSON_AddNumberToObject(h, "d_ff", c->d_ff);
  cJSON_AddNumberToObject(h, "norm_eps", c->norm_eps);
  cJSON_AddStringToObject(h, "activation", c->activation);
  cJSON_AddBoolToObject(h, "tie_word_embeddings", c->tie_word_embeddings);
  if (c->qk_norm) cJSON_AddBoolToObject(h, "qk_norm", true); /* Qwen3's per-head q/k RMSNorm */
  if (c->family == CP_FAMILY_OLMO2) { /* modeling_olmo2.py: whole-row q/k norms, norms after the modules */
    cJSON *o = cJSON_AddObjectToObject(h, "olmo2");
    cJSON_AddBoolToObject(o, "qk_norm_whole", c->qk_norm_whole);
    cJSON_AddBoolToObject(o, "post_norms", c->post_norms);
  }
  if (c->family == CP_FAMILY_GEMMA) { /* what Gemma's layers do besides Llama's (0: none) */
    cJSON *g = cJSON_AddObjectToObject(h, "gemma");
    cJSON_AddNumberToObject(g, "embedding_scale", sqrt((double)c->d_model));
    cJSON_AddNumberToObject(g, "query_pre_attn_scalar", c->query_pre_attn_scalar);
    cJSON_AddNumberToObject(g, "attn_logit_softcapping", c->attn_softcap);
    cJSON_AddNumberToObject(g, "final_logit_softcapping", c->final_softcap);
    cJSON_AddBoolToObject(g, "post_norms", c->sandwich_norms);
    add_window(g, c);
  } else if (c->sliding_window > 0) { /* Mistral, Qwen2/3, Phi-3, StarCoder2: the same two keys */
    add_window(h, c);
  }
  if (c->granite) { /* GraniteConfig's multipliers (1: none) */
    cJSON *g = cJSON_AddObjectToObject(h, "granite");
    cJSON_AddNumberToObject(g, "embedding_multiplier", c->embedding_multiplier);
    cJSON_AddNumberToObject(g, "residual_multiplier", c->residual_multiplier);
    cJSON_AddNumberToObject(g, "attention_multiplier", c->attention_multiplier);
    cJSON_AddNumberToObject(g, "logits_scaling", c->logits_scaling);
  }
  return h;
}

static cJSON *add_positional(cJSON *obj, const cp_hf_config *c) {
  cJSON *p = cJSON_AddObjectToObject(obj, "positional");
  cJSON_AddStringToObject(p, "scheme", cp_pos_scheme_name(c->pos));
  switch (c->pos) {
  case CP_POS_T5_BUCKETS:
    cJSON_AddNumberToObject(p, "num_buckets", c->t5_num_buckets);
    cJSON_AddNumberToObject(p, "max_distance", c->t5_max_distance);
    break;
  case CP_POS_ALIBI: {
    cJSON_AddNumberToObject(p, "alibi_bias_max", c->alibi_bias_max);
    double *slopes = calloc((size_t)c->n_heads, sizeof *slopes);
    if (slopes) {
      cp_alibi_slopes(slopes, c->n_heads, c->alibi_bias_max);
      cJSON_AddItemToObject(p, "slopes", cJSON_CreateDoubleArray(slopes, c->n_heads));
    }
    free(slopes);
    break;
  }
  case CP_POS_ROPE:
    cJSON_AddNumberToObject(p, "theta", c->rope_theta);
    cJSON_AddNumberToObject(p, "rotary_dims", c->rotary_dims);
    cJSON_AddNumberToObject(p, "rotary_pct", c->rotary_pct);
    if (c->rope_scaling_type[0]) {
      cJSON *s = cJSON_AddObjectToObject(p, "scaling");
      cJSON_AddStringToObject(s, "type", c->rope_scaling_type);
      cJSON_AddNumberToObject(s, "factor", c->rope_scaling_factor);
    }
    /* Gemma 3: the sliding layers' own base, unscaled (theta and scaling are the full layers') */
    if (c->rope_local_theta > 0) cJSON_AddNumberToObject(p, "local_theta", c->rope_local_theta);
    break;
  case CP_POS_FIRE:
    cJSON_AddNumberToObject(p, "mlp_width", c->fire_mlp_width);
    cJSON_AddNumberToObject(p, "mlp_layers", c->fire_mlp_layers);
    cJSON_AddBoolToObject(p, "shared", c->fire_shared);
    cJSON_AddNumberToObject(p, "threshold_init", c->fire_threshold);
    break;
  case CP_POS_LEARNED: /* a table of n_positions rows: no position past it has an embedding */
    cJSON_AddNumberToObject(p, "n_positions", (double)c->train_len);
    cJSON_AddBoolToObject(p, "scale_attn_weights", c->scale_attn_weights);
    cJSON_AddBoolToObject(p, "scale_attn_by_inverse_layer_idx", c->scale_attn_inverse_layer);
    break;
  }
  return p;
}

int cp_describe_checkpoint(cJSON **out, const char *path, const cp_checkpoint *ck, const cp_hf_config *cfg) {
  *out = NULL;
  cJSON *root = cJSON_CreateObject();
  CP_CHECK_ALLOC(root, path);
  cJSON_AddStringToObject(root, "path", path);
  cJSON_AddStringToObject(root, "format", cp_format_name(cp_checkpoint_format(ck)));
  cJSON *files = cJSON_AddArrayToObject(root, "files");
  for (size_t i = 0; i < cp_checkpoint_file_count(ck); i++)
    cJSON_AddItemToArray(files, cJSON_CreateString(cp_checkpoint_file(ck, i)));
  if (cfg) {
    cJSON *a = cJSON_AddObjectToObject(root, "architecture");
    cJSON_AddStringToObject(a, "family", cp_family_name(cfg->family));
    cJSON_AddStringToObject(a, "model_type", cfg->model_type);
    cJSON_AddStringToObject(a, "class", cfg->architecture);
    add_positional(root, cfg);
    if (cfg->train_len > 0) {
      cJSON_AddNumberToObject(root, "train_len", (double)cfg->train_len);
      cJSON_AddStringToObject(root, "train_len_source", cfg->train_len_key);
    }
    else cJSON_AddNullToObject(root, "train_len");
    add_hyperparameters(root, cfg);
    if (cfg->has_ctxpatch) cJSON_AddItemToObject(root, "ctxpatch", cp_describe_ctxpatch(cfg));
  } else {
    cJSON_AddNullToObject(root, "architecture");
  }

  uint64_t params = 0, bytes = 0, per_dtype[CP_DTYPE_COUNT] = {0};
  size_t n = cp_checkpoint_count(ck);
  cJSON *tensors = cJSON_CreateArray();
  for (size_t i = 0; i < n; i++) {
    const cp_tensor *t = cp_checkpoint_tensor(ck, i);
    uint64_t numel = 1;
    cp_shape_numel(&numel, t->ndim, t->shape); /* validated by the readers */
    params += numel;
    bytes += t->nbytes;
    per_dtype[t->dtype]++;
    cJSON *item = cp_describe_tensor(t->name, t->dtype, t->ndim, t->shape, t->nbytes);
    if (item && cp_checkpoint_gguf(ck)) /* GGUF: the stored type (block types are dequantised to F32) */
      cJSON_AddStringToObject(item, "ggml_type",
                              cp_gguf_ggml_type_name(cp_gguf_tensor_ggml_type(cp_checkpoint_gguf(ck), i)));
    cJSON_AddItemToArray(tensors, item);
  }
  cJSON_AddNumberToObject(root, "tensor_count", (double)n);
  cJSON_AddNumberToObject(root, "parameter_count", (double)params);
  cJSON_AddNumberToObject(root, "bytes", (double)bytes);
  cJSON *dtypes = cJSON_AddObjectToObject(root, "dtypes");
  for (int d = 0; d < CP_DTYPE_COUNT; d++)
    if (per_dtype[d]) cJSON_AddNumberToObject(dtypes, cp_dtype_name((cp_dtype)d), (double)per_dtype[d]);
  cJSON_AddItemToObject(root, "tensors", tensors);
  *out = root;
  return 0;
}
