/* config.json parsing: realistic configs of public models parse to their documented numbers
 * (the values written below are those of the models' published configs and HF's config-class
 * defaults, not outputs of the parser); hostile or broken configs fail with their exact code and
 * a message that names the file. */
#include "ctxpatch/model/hf_config.h"

#include "model/hf_config_json.h"

#include <math.h>
#include <string.h>

#include "test.h"

static const char *g_dir;

static const char *golden(const char *name) { return test_path(g_dir, name); }

static cp_hf_config *load(const char *name) {
  cp_hf_config *cfg = NULL;
  CHECK_RC(0, cp_hf_config_load(&cfg, golden(name)));
  if (!cfg) fprintf(stderr, "  (loading %s)\n", name);
  return cfg;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(1.0, fabs(b)); }

/* Loads a bad config and checks the code, that the message names the file, and that it
 * contains `needle` (a key or phrase) when given. */
static void expect_fail(const char *name, int code, const char *needle) {
  cp_hf_config *cfg = (cp_hf_config *)1;
  cp_error_clear();
  int rc = cp_hf_config_load(&cfg, golden(name));
  const char *msg = cp_error_message();
  CHECK_MSG(rc == code, "%s: got %s, want %s (%s)", name, cp_err_name(rc), cp_err_name(code), msg);
  CHECK_MSG(cfg == NULL, "%s: out-parameter not cleared on failure", name);
  CHECK_MSG(cp_error_code() == code, "%s: last error code %s", name, cp_err_name(cp_error_code()));
  CHECK_MSG(strstr(msg, name) != NULL, "%s: message does not name the file: %s", name, msg);
  if (needle) CHECK_MSG(strstr(msg, needle) != NULL, "%s: message lacks '%s': %s", name, needle, msg);
  if (rc == 0) cp_hf_config_free(cfg);
}

static cp_hf_config *parse_mem(int want, const char *text) {
  cp_hf_config *cfg = NULL;
  CHECK_RC(want, cp_hf_config_parse(&cfg, text, strlen(text), "mem/config.json"));
  if (want != 0) {
    CHECK(cfg == NULL);
    CHECK_MSG(strstr(cp_error_message(), "mem/config.json") != NULL, "message: %s",
              cp_error_message());
  }
  return cfg;
}

static void t5_small(void) {
  cp_hf_config *c = load("t5-small.json");
  if (!c) return;
  CHECK(c->family == CP_FAMILY_T5);
  CHECK(c->pos == CP_POS_T5_BUCKETS);
  CHECK(strcmp(c->model_type, "t5") == 0);
  CHECK(strcmp(c->architecture, "T5ForConditionalGeneration") == 0);
  CHECK(c->vocab_size == 32128);
  CHECK(c->d_model == 512);
  CHECK(c->n_layers == 6);
  CHECK(c->n_decoder_layers == 6); /* num_decoder_layers absent: = num_layers */
  CHECK(c->n_heads == 8 && c->n_kv_heads == 8);
  CHECK(c->d_head == 64);
  CHECK(c->d_ff == 2048);
  CHECK(near(c->norm_eps, 1e-6));
  CHECK(strcmp(c->activation, "relu") == 0); /* feed_forward_proj default */
  CHECK(c->tie_word_embeddings);             /* T5Config default */
  CHECK(c->train_len == 512);
  CHECK(c->t5_num_buckets == 32);
  CHECK(c->t5_max_distance == 128); /* relative_attention_max_distance default */
  CHECK(c->pad_token_id == 0 && c->eos_token_id == 1 && c->decoder_start_token_id == 0);
  CHECK(c->bos_token_id == -1);
  CHECK(!c->qkv_bias);
  CHECK(c->rotary_dims == 0);
  cJSON *tree = NULL; /* the whole file stays available to the config.json rewrite */
  CHECK_RC(0, cp_hf_config_json(&tree, c));
  CHECK(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(tree, "task_specific_params")));
  cJSON_Delete(tree);
  cp_hf_config_free(c);
}

static void t5_by_architecture(void) {
  cp_hf_config *c = load("t5-by-architecture.json");
  if (!c) return;
  CHECK(c->family == CP_FAMILY_T5 && c->pos == CP_POS_T5_BUCKETS);
  CHECK(strcmp(c->model_type, "t5") == 0);
  CHECK(strcmp(c->architecture, "T5WithLMHeadModel") == 0);
  CHECK(c->n_layers == 6 && c->n_decoder_layers == 4);
  CHECK(strcmp(c->activation, "gated-gelu") == 0);
  CHECK(!c->tie_word_embeddings);
  CHECK(c->train_len == 0); /* no n_positions */
  CHECK(near(c->norm_eps, 1e-6));
  CHECK(c->pad_token_id == 0 && c->eos_token_id == 1); /* T5Config defaults */
  CHECK(c->decoder_start_token_id == -1);
  cp_hf_config_free(c);
}

static void bloom_560m(void) {
  cp_hf_config *c = load("bloom-560m.json");
  if (!c) return;
  CHECK(c->family == CP_FAMILY_BLOOM);
  CHECK(c->pos == CP_POS_ALIBI);
  CHECK(strcmp(c->architecture, "BloomForCausalLM") == 0);
  CHECK(c->vocab_size == 250880);
  CHECK(c->d_model == 1024);
  CHECK(c->n_layers == 24 && c->n_decoder_layers == 0);
  CHECK(c->n_heads == 16 && c->n_kv_heads == 16);
  CHECK(c->d_head == 64);
  CHECK(c->d_ff == 4096);
  CHECK(near(c->norm_eps, 1e-5));
  CHECK(c->tie_word_embeddings);
  CHECK(c->train_len == 0); /* BLOOM states no length */
  CHECK(near(c->alibi_bias_max, 8.0));
  CHECK(c->bos_token_id == 1 && c->eos_token_id == 2 && c->pad_token_id == 3);
  CHECK(c->qkv_bias && !c->no_bias);
  cp_hf_config_free(c);
}

static void bloom_aliases(void) {
  cp_hf_config *c = load("bloom-aliases.json");
  if (!c) return;
  CHECK(c->family == CP_FAMILY_BLOOM);
  CHECK(c->d_model == 14336);
  CHECK(c->n_layers == 70);
  CHECK(c->n_heads == 112);
  CHECK(c->d_head == 128);
  CHECK(c->d_ff == 4 * 14336);
  cp_hf_config_free(c);
}

static void mpt_7b(void) {
  cp_hf_config *c = load("mpt-7b.json");
  if (!c) return;
  CHECK(c->family == CP_FAMILY_MPT);
  CHECK(c->pos == CP_POS_ALIBI);
  CHECK(strcmp(c->architecture, "MPTForCausalLM") == 0);
  CHECK(c->vocab_size == 50432);
  CHECK(c->d_model == 4096);
  CHECK(c->n_layers == 32);
  CHECK(c->n_heads == 32 && c->n_kv_heads == 32);
  CHECK(c->d_head == 128);
  CHECK(c->d_ff == 16384);
  CHECK(near(c->norm_eps, 1e-5));
  CHECK(strcmp(c->activation, "gelu") == 0);
  CHECK(c->tie_word_embeddings);
  CHECK(c->train_len == 2048);
  CHECK(near(c->alibi_bias_max, 8.0));
  CHECK(c->no_bias && !c->qkv_bias);
  CHECK(c->bos_token_id == -1 && c->eos_token_id == -1 && c->pad_token_id == -1);
  cp_hf_config_free(c);
}

static void llama_2_7b(void) {
  cp_hf_config *c = load("llama-2-7b.json");
  if (!c) return;
  CHECK(c->family == CP_FAMILY_LLAMA);
  CHECK(c->pos == CP_POS_ROPE);
  CHECK(strcmp(c->model_type, "llama") == 0);
  CHECK(c->vocab_size == 32000);
  CHECK(c->d_model == 4096);
  CHECK(c->n_layers == 32 && c->n_decoder_layers == 0);
  CHECK(c->n_heads == 32 && c->n_kv_heads == 32);
  CHECK(c->d_head == 128);
  CHECK(c->d_ff == 11008);
  CHECK(near(c->norm_eps, 1e-5));
  CHECK(strcmp(c->activation, "silu") == 0);
  CHECK(!c->tie_word_embeddings);
  CHECK(c->train_len == 4096);
  CHECK(near(c->rope_theta, 10000.0)); /* LlamaConfig default */
  CHECK(near(c->rotary_pct, 1.0));
  CHECK(c->rotary_dims == 128);
  CHECK(c->rope_scaling_type[0] == '\0' && near(c->rope_scaling_factor, 1.0));
  CHECK(c->sliding_window == 0);
  CHECK(c->bos_token_id == 1 && c->eos_token_id == 2 && c->pad_token_id == -1);
  CHECK(!c->qkv_bias && c->no_bias);
  cp_hf_config_free(c);
}

static void llama_rope_linear(void) {
  cp_hf_config *c = load("llama-rope-linear.json");
  if (!c) return;
  CHECK(c->pos == CP_POS_ROPE);
  CHECK(strcmp(c->rope_scaling_type, "linear") == 0);
  CHECK(near(c->rope_scaling_factor, 4.0));
  CHECK(c->train_len == 4096); /* max_position_embeddings, not max_sequence_length */
  CHECK(c->pad_token_id == 0);
  cp_hf_config_free(c);
}

/* rope_scaling as transformers 5 reads it: llama3 and yarn parsed strictly (every key known to
 * the type, required ones present), the 4.x / 5.x yarn factor ambiguity refused, the v5
 * "rope_parameters" layout read, dynamic / longrope read for inspect (loading refuses them). */
#define LLAMA_HEAD "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,\"num_hidden_layers\":2," \
                   "\"intermediate_size\":128,\"vocab_size\":100,\"max_position_embeddings\":131072,"
static void rope_scaling_types(void) {
  cp_hf_config *c = parse_mem(0, LLAMA_HEAD "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,"
                                 "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
                                 "\"original_max_position_embeddings\":8192}}");
  if (c) {
    CHECK(!strcmp(c->rope_scaling_type, "llama3") && near(c->rope_scaling_factor, 8));
    CHECK(near(c->rope_low_freq_factor, 1) && near(c->rope_high_freq_factor, 4) && c->rope_original_max_pos == 8192);
    cp_hf_config_free(c);
  }
  c = parse_mem(0, LLAMA_HEAD "\"rope_scaling\":{\"type\":\"yarn\",\"rope_type\":\"yarn\",\"factor\":4.0,"
                              "\"original_max_position_embeddings\":32768,\"beta_fast\":16,\"truncate\":false}}");
  if (c) {
    CHECK(!strcmp(c->rope_scaling_type, "yarn") && near(c->rope_scaling_factor, 4) && c->rope_original_max_pos == 32768);
    CHECK(near(c->rope_beta_fast, 16) && near(c->rope_beta_slow, 1) && !c->rope_truncate && c->rope_attention_factor == 0);
    cp_hf_config_free(c);
  }
  /* transformers 5: rope_parameters with rope_theta inside */
  c = parse_mem(0, LLAMA_HEAD "\"rope_parameters\":{\"rope_type\":\"llama3\",\"rope_theta\":500000.0,\"factor\":32.0,"
                              "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192}}");
  if (c) {
    CHECK(!strcmp(c->rope_scaling_type, "llama3") && near(c->rope_theta, 500000) && near(c->rope_scaling_factor, 32));
    cp_hf_config_free(c);
  }
  c = parse_mem(0, LLAMA_HEAD "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":1000000.0}}");
  if (c) {
    CHECK(c->rope_scaling_type[0] == '\0' && near(c->rope_theta, 1e6));
    cp_hf_config_free(c);
  }
  /* longrope without an original length: max_position_embeddings is the original, the factor is
   * rope_scaling's (head 16: 8 pairs per list) */
  c = parse_mem(0, LLAMA_HEAD "\"rope_scaling\":{\"rope_type\":\"longrope\",\"factor\":4.0,"
                              "\"short_factor\":[1,1,1,1,1,1,1,1.5],\"long_factor\":[1,2,3,4,5,6,7,8]}}");
  if (c) {
    CHECK(!strcmp(c->rope_scaling_type, "longrope") && c->rope_n_factors == 8 && c->rope_original_max_pos == 131072);
    CHECK(near(c->rope_scaling_factor, 4) && near(c->rope_short_factor[7], 1.5) && near(c->rope_long_factor[7], 8));
    cp_hf_config_free(c);
  }
  c = parse_mem(0, LLAMA_HEAD "\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":2.0}}");
  if (c) {
    CHECK(!strcmp(c->rope_scaling_type, "dynamic") && near(c->rope_scaling_factor, 2));
    CHECK(c->rope_original_max_pos == 131072); /* max_position_embeddings: the length NTK scales from */
    cp_hf_config_free(c);
  }
  static const struct {
    const char *scaling, *needle;
  } bad[] = {
      {"\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":1,\"high_freq_factor\":4}}",
       "'rope_scaling.original_max_position_embeddings': missing"},
      {"\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"high_freq_factor\":4,"
       "\"original_max_position_embeddings\":8192}}", "'rope_scaling.low_freq_factor': missing"},
      {"\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":4,\"high_freq_factor\":4,"
       "\"original_max_position_embeddings\":8192}}", "'rope_scaling.high_freq_factor': 4 is not above"},
      {"\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":0.5,\"low_freq_factor\":1,\"high_freq_factor\":4,"
       "\"original_max_position_embeddings\":8192}}", "'rope_scaling.factor': expected a number in [1, 1e6]"},
      {"\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4,\"mscale\":1,\"mscale_all_dim\":1}}",
       "'rope_scaling.mscale': not a key ctxpatch reads for type 'yarn'"},
      {"\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":4096}}",
       "'rope_scaling.factor': 4, but max_position_embeddings / original_max_position_embeddings is 32"},
      {"\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4,\"truncate\":1}}", "'rope_scaling.truncate'"},
      {"\"rope_scaling\":{\"type\":\"linear\",\"rope_type\":\"yarn\",\"factor\":4}}",
       "'rope_scaling.type': disagrees with 'rope_scaling.rope_type'"},
      {"\"rope_scaling\":{\"rope_type\":\"ntk-by-parts\",\"factor\":4}}", "unknown RoPE scaling type 'ntk-by-parts'"},
      {"\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":4,\"low_freq_factor\":1}}",
       "'rope_scaling.low_freq_factor': not a key ctxpatch reads for type 'linear'"},
      {"\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2},\"rope_parameters\":{\"rope_type\":\"default\"}}",
       "'rope_scaling' and 'rope_parameters': both present"},
      {"\"rope_theta\":10000,\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":500000}}",
       "'rope_parameters.rope_theta': 500000 disagrees with 'rope_theta' 10000"},
      {"\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":2,\"beta_fast\":-1}}", "'rope_parameters.beta_fast'"},
      /* dynamic and longrope (issue 31) */
      {"\"rope_scaling\":{\"rope_type\":\"dynamic\"}}", "'rope_scaling.factor': missing"},
      {"\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":-2}}", "'rope_scaling.factor': expected a number in [1"},
      {"\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":2,\"original_max_position_embeddings\":4096}}",
       "'rope_scaling.original_max_position_embeddings': 4096, but dynamic NTK scales from max_position_embeddings"},
      {"\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":2,\"attention_factor\":2}}",
       "'rope_scaling.attention_factor': not a key ctxpatch reads for type 'dynamic'"},
      {"\"rope_scaling\":{\"rope_type\":\"longrope\",\"factor\":2,\"long_factor\":[1,1,1,1,1,1,1,1]}}",
       "'rope_scaling.short_factor': missing"},
      {"\"rope_scaling\":{\"rope_type\":\"longrope\",\"factor\":2,\"short_factor\":[1,1,1,1,1,1,1,1]}}",
       "'rope_scaling.long_factor': missing"},
      {"\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":[1,1,1,1,1,1,1,1],"
       "\"long_factor\":[1,1,1,1,1,1,1,1]}}", "'rope_scaling.factor': missing"},
      {"\"rope_scaling\":{\"rope_type\":\"longrope\",\"factor\":2,\"short_factor\":[1,1,1],\"long_factor\":[1,1,1]}}",
       "'rope_scaling.short_factor': 3 factors for 16 rotary dims (want 8"},
      {"\"rope_scaling\":{\"rope_type\":\"longrope\",\"factor\":2,\"short_factor\":[1,1,1,1,1,1,1,1],"
       "\"long_factor\":[1,1,1,1,1,1,1]}}", "'rope_scaling.long_factor': 7 factors, but short_factor has 8"},
      {"\"rope_scaling\":{\"rope_type\":\"longrope\",\"factor\":2,\"short_factor\":[1,1,1,-1,1,1,1,1],"
       "\"long_factor\":[1,1,1,1,1,1,1,1]}}", "'rope_scaling.short_factor[3]': expected a number in (0, 1e6]"},
      {"\"rope_scaling\":{\"rope_type\":\"longrope\",\"factor\":2,\"short_factor\":[1,1,1,1,1,1,1,1],"
       "\"long_factor\":[1,1,1,1,1,1,1,\"x\"]}}", "'rope_scaling.long_factor[7]': expected a number in (0, 1e6]"},
      {"\"rope_scaling\":{\"rope_type\":\"longrope\",\"factor\":2,\"short_factor\":7,"
       "\"long_factor\":[1,1,1,1,1,1,1,1]}}", "'rope_scaling.short_factor': expected a list of numbers"},
      {"\"rope_scaling\":{\"rope_type\":\"longrope\",\"factor\":2,\"short_factor\":[1,1,1,1,1,1,1,1],"
       "\"long_factor\":[1,1,1,1,1,1,1,1],\"original_max_position_embeddings\":4096}}",
       "'rope_scaling.factor': 2, but max_position_embeddings / original_max_position_embeddings is 32"},
      {"\"original_max_position_embeddings\":4096,\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":"
       "[1,1,1,1,1,1,1,1],\"long_factor\":[1,1,1,1,1,1,1,1],\"original_max_position_embeddings\":8192}}",
       "'rope_scaling.original_max_position_embeddings': 8192 disagrees with 'original_max_position_embeddings' 4096"},
      {"\"rope_scaling\":{\"rope_type\":\"longrope\",\"factor\":2,\"short_factor\":[1,1,1,1,1,1,1,1],"
       "\"long_factor\":[1,1,1,1,1,1,1,1],\"attention_factor\":0}}", "'rope_scaling.attention_factor'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[1024];
    snprintf(text, sizeof text, "%s%s", LLAMA_HEAD, bad[i].scaling);
    c = parse_mem(CP_ECFG_FIELD, text);
    CHECK_MSG(strstr(cp_error_message(), bad[i].needle) != NULL, "case %zu: message '%s' lacks '%s'", i,
              cp_error_message(), bad[i].needle);
    if (c) cp_hf_config_free(c);
  }
}

/* Qwen2: the Llama body with q/k/v biases (whatever attention_bias says); use_sliding_window slides
 * the layers from max_window_layers on, or layer_types' sliding entries. */
static void qwen2_configs(void) {
  cp_hf_config *c = parse_mem(0, "{\"architectures\":[\"Qwen2ForCausalLM\"],\"model_type\":\"qwen2\",\"hidden_size\":64,"
                                 "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_hidden_layers\":2,"
                                 "\"intermediate_size\":128,\"vocab_size\":100,\"max_position_embeddings\":32768,"
                                 "\"use_sliding_window\":false,\"sliding_window\":4096,\"rope_theta\":1000000.0}");
  if (c) {
    CHECK(c->family == CP_FAMILY_LLAMA && !strcmp(c->model_type, "qwen2") && c->qkv_bias && !c->no_bias);
    CHECK(c->sliding_window == 0 && c->n_kv_heads == 2 && near(c->rope_theta, 1e6));
    cp_hf_config_free(c);
  }
  c = parse_mem(0, "{\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":64,\"num_attention_heads\":4,"
                   "\"num_hidden_layers\":2,\"intermediate_size\":128,\"vocab_size\":100,"
                   "\"layer_types\":[\"full_attention\",\"full_attention\"]}");
  if (c) {
    CHECK(!strcmp(c->model_type, "qwen2")); /* from architectures[0] */
    cp_hf_config_free(c);
  }
  /* use_sliding_window: layers from max_window_layers on slide (Qwen2Config's layer_types) */
  c = parse_mem(0, "{\"model_type\":\"qwen2\",\"hidden_size\":64,\"num_attention_heads\":4,\"num_hidden_layers\":3,"
                   "\"intermediate_size\":128,\"vocab_size\":100,\"use_sliding_window\":true,\"sliding_window\":16,"
                   "\"max_window_layers\":1}");
  if (c) {
    CHECK(c->sliding_window == 16 && !c->layer_sliding[0] && c->layer_sliding[1] && c->layer_sliding[2]);
    cp_hf_config_free(c);
  }
  c = parse_mem(0, "{\"model_type\":\"qwen2\",\"hidden_size\":64,\"num_attention_heads\":4,\"num_hidden_layers\":2,"
                   "\"intermediate_size\":128,\"vocab_size\":100,\"use_sliding_window\":true}");
  if (c) { /* defaults: a 4096 window from layer 28 on, so none of 2 layers slides */
    CHECK(c->sliding_window == 4096 && !c->layer_sliding[0] && !c->layer_sliding[1]);
    cp_hf_config_free(c);
  }
  c = parse_mem(0, "{\"model_type\":\"qwen2\",\"hidden_size\":64,\"num_attention_heads\":4,\"num_hidden_layers\":2,"
                   "\"intermediate_size\":128,\"vocab_size\":100,\"use_sliding_window\":true,\"sliding_window\":8,"
                   "\"layer_types\":[\"sliding_attention\",\"full_attention\"]}");
  if (c) {
    CHECK(c->sliding_window == 8 && c->layer_sliding[0] && !c->layer_sliding[1]);
    cp_hf_config_free(c);
  }
  /* a sliding layer with no window (use_sliding_window false): transformers raises on it */
  c = parse_mem(CP_ECFG_FIELD, "{\"model_type\":\"qwen2\",\"hidden_size\":64,\"num_attention_heads\":4,"
                               "\"num_hidden_layers\":2,\"intermediate_size\":128,\"vocab_size\":100,"
                               "\"layer_types\":[\"full_attention\",\"sliding_attention\"]}");
  CHECK_MSG(strstr(cp_error_message(), "key 'layer_types[1]': \"sliding_attention\" but the config sets no sliding "
                                       "window") != NULL, "message: %s", cp_error_message());
  c = parse_mem(CP_ECFG_FIELD, "{\"model_type\":\"qwen2\",\"hidden_size\":64,\"num_attention_heads\":4,"
                               "\"num_hidden_layers\":2,\"intermediate_size\":128,\"vocab_size\":100,"
                               "\"use_sliding_window\":true,\"max_window_layers\":-1}");
  CHECK(strstr(cp_error_message(), "key 'max_window_layers': expected an integer >= 0") != NULL);
}

/* Qwen3 (Qwen3Config, modeling_qwen3.py): the Llama body with per-head q/k RMSNorm, head_dim
 * required and free of hidden / heads, biases by attention_bias; sliding layers as for qwen2; qwen3_moe refused with its reason. */
#define QWEN3_HEAD                                                                                              \
  "{\"architectures\":[\"Qwen3ForCausalLM\"],\"model_type\":\"qwen3\",\"hidden_size\":64,\"num_attention_heads\":4," \
  "\"num_key_value_heads\":2,\"num_hidden_layers\":2,\"intermediate_size\":128,\"vocab_size\":100,"             \
  "\"max_position_embeddings\":40960,"
static void qwen3_configs(void) {
  cp_hf_config *c = parse_mem(0, QWEN3_HEAD "\"head_dim\":32,\"attention_bias\":false,\"use_sliding_window\":false,"
                                            "\"sliding_window\":null,\"max_window_layers\":2,\"rope_theta\":1000000,"
                                            "\"tie_word_embeddings\":true,\"layer_types\":[\"full_attention\",\"full_attention\"]}");
  if (c) {
    CHECK(c->family == CP_FAMILY_LLAMA && !strcmp(c->model_type, "qwen3") && c->qk_norm);
    CHECK(c->d_head == 32 && c->n_heads * c->d_head == 128 && c->rotary_dims == 32); /* not 64 / 4 */
    CHECK(!c->qkv_bias && c->no_bias && c->sliding_window == 0 && c->tie_word_embeddings && near(c->rope_theta, 1e6));
    cp_hf_config_free(c);
  }
  c = parse_mem(0, QWEN3_HEAD "\"head_dim\":16,\"attention_bias\":true}");
  if (c) {
    CHECK(c->qk_norm && c->qkv_bias && !c->no_bias); /* q, k, v and o biases, as Llama's attention_bias */
    cp_hf_config_free(c);
  }
  c = parse_mem(0, "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,\"num_hidden_layers\":2,"
                   "\"intermediate_size\":128,\"vocab_size\":100}");
  if (c) {
    CHECK(!c->qk_norm); /* only qwen3 has the norms */
    cp_hf_config_free(c);
  }
  c = parse_mem(CP_ECFG_FIELD, QWEN3_HEAD "\"rope_theta\":1000000}");
  CHECK(strstr(cp_error_message(), "key 'head_dim': missing (required for model_type qwen3)") != NULL);
  c = parse_mem(0, QWEN3_HEAD "\"head_dim\":32,\"use_sliding_window\":true,\"sliding_window\":64,\"max_window_layers\":0}");
  if (c) {
    CHECK(c->sliding_window == 64 && c->layer_sliding[0] && c->layer_sliding[1]);
    cp_hf_config_free(c);
  }
  c = parse_mem(CP_ECFG_FIELD, QWEN3_HEAD "\"head_dim\":32,\"layer_types\":[\"full_attention\",\"sliding_attention\"]}");
  CHECK(strstr(cp_error_message(), "key 'layer_types[1]'") != NULL);
  c = parse_mem(CP_ECFG_FAMILY, "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"model_type\":\"qwen3_moe\","
                                "\"hidden_size\":64,\"num_attention_heads\":4,\"num_experts\":8}");
  CHECK_MSG(strstr(cp_error_message(), "'qwen3_moe' is not supported: a mixture of experts") != NULL, "message: %s",
            cp_error_message());
  c = parse_mem(CP_ECFG_FAMILY, "{\"architectures\":[\"Qwen3MoeForCausalLM\"],\"hidden_size\":64}");
  CHECK(strstr(cp_error_message(), "'qwen3_moe' is not supported") != NULL); /* from architectures[0] */
}

/* Phi-3 (Phi3Config, modeling_phi3.py): the Llama body, fused qkv_proj / gate_up_proj, no biases,
 * Phi3Config's defaults (rms_norm_eps 1e-5, eos and pad 32000); partial_rotary_factor; a sliding
 * window on every layer (Phi-3-mini-4k's 2047 of 4096); "su" / "yarn" (read by Phi3Config as longrope) refused at parse,
 * longrope itself read (for inspect) and refused at load (model/rope.c). */
#define PHI3_HEAD                                                                                              \
  "{\"architectures\":[\"Phi3ForCausalLM\"],\"model_type\":\"phi3\",\"hidden_size\":3072,\"num_attention_heads\":32," \
  "\"num_key_value_heads\":32,\"num_hidden_layers\":32,\"intermediate_size\":8192,\"vocab_size\":32064,"        \
  "\"max_position_embeddings\":4096,\"original_max_position_embeddings\":4096,"
/* Granite (GraniteConfig, modeling_granite.py): the Llama body with its four multipliers (1.0 when
 * absent); granite-3.0-2b's numbers; head_dim other than hidden / heads refused, as are the keys of
 * the MoE / hybrid / sliding variants; granitemoe and granitemoehybrid refused with their reason. */
#define GRANITE_HEAD                                                                                               \
  "{\"architectures\":[\"GraniteForCausalLM\"],\"model_type\":\"granite\",\"hidden_size\":2048,"                 \
  "\"num_attention_heads\":32,\"num_key_value_heads\":8,\"num_hidden_layers\":40,\"intermediate_size\":8192,"    \
  "\"vocab_size\":49155,\"max_position_embeddings\":4096,"
static void granite_configs(void) {
  cp_hf_config *c = parse_mem(0, GRANITE_HEAD "\"embedding_multiplier\":12.0,\"residual_multiplier\":0.22,"
                                              "\"attention_multiplier\":0.015625,\"logits_scaling\":8.0,"
                                              "\"rope_theta\":10000.0,\"tie_word_embeddings\":true}");
  if (c) {
    CHECK(c->family == CP_FAMILY_LLAMA && !strcmp(c->model_type, "granite") && c->granite);
    CHECK(c->d_head == 64 && c->n_kv_heads == 8 && c->tie_word_embeddings && c->pos == CP_POS_ROPE);
    CHECK(near(c->embedding_multiplier, 12.0) && near(c->residual_multiplier, 0.22) &&
          near(c->attention_multiplier, 0.015625) && near(c->logits_scaling, 8.0));
    cp_hf_config_free(c);
  }
  c = parse_mem(0, GRANITE_HEAD "\"head_dim\":64}");
  if (c) {
    CHECK(c->granite && near(c->embedding_multiplier, 1.0) && near(c->residual_multiplier, 1.0) &&
          near(c->attention_multiplier, 1.0) && near(c->logits_scaling, 1.0));
    cp_hf_config_free(c);
  }
  c = parse_mem(0, "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,"
                   "\"num_hidden_layers\":2,\"intermediate_size\":128,\"vocab_size\":100}");
  if (c) {
    CHECK(!c->granite && near(c->residual_multiplier, 1.0) && near(c->logits_scaling, 1.0));
    cp_hf_config_free(c);
  }
  c = parse_mem(CP_ECFG_FIELD, GRANITE_HEAD "\"head_dim\":128}");
  CHECK_MSG(strstr(cp_error_message(), "key 'head_dim'") != NULL, "message: %s", cp_error_message());
  c = parse_mem(CP_ECFG_FIELD, GRANITE_HEAD "\"residual_multiplier\":0}");
  CHECK_MSG(strstr(cp_error_message(), "key 'residual_multiplier'") != NULL, "message: %s", cp_error_message());
  c = parse_mem(CP_ECFG_FIELD, GRANITE_HEAD "\"logits_scaling\":\"8\"}");
  CHECK_MSG(strstr(cp_error_message(), "key 'logits_scaling'") != NULL, "message: %s", cp_error_message());
  c = parse_mem(CP_ECFG_FIELD, GRANITE_HEAD "\"num_local_experts\":40}");
  CHECK_MSG(strstr(cp_error_message(), "key 'num_local_experts': not a GraniteConfig key") != NULL, "message: %s",
            cp_error_message());
  c = parse_mem(CP_ECFG_FIELD, GRANITE_HEAD "\"sliding_window\":1024}");
  CHECK_MSG(strstr(cp_error_message(), "key 'sliding_window': not a GraniteConfig key") != NULL, "message: %s",
            cp_error_message());
  c = parse_mem(CP_ECFG_FAMILY, "{\"architectures\":[\"GraniteMoeForCausalLM\"],\"hidden_size\":64}");
  CHECK(strstr(cp_error_message(), "'granitemoe' is not supported: a mixture of experts") != NULL);
  c = parse_mem(CP_ECFG_FAMILY, "{\"model_type\":\"granitemoehybrid\",\"hidden_size\":64}");
  CHECK(strstr(cp_error_message(), "'granitemoehybrid' is not supported: Mamba-2 layers") != NULL);
}

/* OLMo 2 (Olmo2Config, modeling_olmo2.py): OLMo-2-1124-7B's numbers; a family of its own (no
 * pre-norms, whole-row q/k norms, Olmo2Config's rms_norm_eps 1e-5 and ids); llama3 rope_scaling read
 * as Llama's; attention_bias true and keys Olmo2Config does not have refused; olmo, olmoe and olmo3
 * refused with their reason. */
#define OLMO2_HEAD                                                                                              \
  "{\"architectures\":[\"Olmo2ForCausalLM\"],\"model_type\":\"olmo2\",\"hidden_size\":4096,"                  \
  "\"num_attention_heads\":32,\"num_key_value_heads\":32,\"num_hidden_layers\":32,\"intermediate_size\":11008," \
  "\"vocab_size\":100352,\"max_position_embeddings\":4096,"
static void olmo2_configs(void) {
  cp_hf_config *c = parse_mem(0, OLMO2_HEAD "\"rope_theta\":500000,\"rope_scaling\":null,\"tie_word_embeddings\":false,"
                                            "\"attention_bias\":false,\"hidden_act\":\"silu\"}");
  if (c) {
    CHECK(c->family == CP_FAMILY_OLMO2 && !strcmp(c->model_type, "olmo2") && !strcmp(cp_family_name(c->family), "olmo2"));
    CHECK(c->d_head == 128 && c->pos == CP_POS_ROPE && near(c->rope_theta, 500000) && !c->tie_word_embeddings);
    CHECK(c->qk_norm && c->qk_norm_whole && c->post_norms && !c->sandwich_norms && !c->qkv_bias && c->no_bias);
    CHECK(near(c->norm_eps, 1e-5) && c->eos_token_id == 50279 && c->pad_token_id == 1 && c->bos_token_id == -1);
    cp_hf_config_free(c);
  }
  c = parse_mem(0, "{\"architectures\":[\"Olmo2ForCausalLM\"],\"hidden_size\":64,\"num_attention_heads\":4,"
                   "\"num_hidden_layers\":2,\"intermediate_size\":128,\"vocab_size\":100,\"head_dim\":32,"
                   "\"max_position_embeddings\":128,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,"
                   "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":64}}");
  if (c) {
    CHECK(c->family == CP_FAMILY_OLMO2 && c->d_head == 32 && !strcmp(c->rope_scaling_type, "llama3"));
    cp_hf_config_free(c);
  }
  c = parse_mem(0, "{\"model_type\":\"qwen3\",\"hidden_size\":64,\"num_attention_heads\":4,\"head_dim\":16,"
                   "\"num_hidden_layers\":2,\"intermediate_size\":128,\"vocab_size\":100}");
  if (c) {
    CHECK(c->qk_norm && !c->qk_norm_whole && !c->post_norms); /* Qwen3's norms are per head */
    cp_hf_config_free(c);
  }
  c = parse_mem(CP_ECFG_FIELD, OLMO2_HEAD "\"attention_bias\":true}");
  CHECK_MSG(strstr(cp_error_message(), "key 'attention_bias': true is not supported for olmo2") != NULL, "message: %s",
            cp_error_message());
  c = parse_mem(CP_ECFG_FIELD, OLMO2_HEAD "\"sliding_window\":4096}");
  CHECK_MSG(strstr(cp_error_message(), "key 'sliding_window': not an Olmo2Config key") != NULL, "message: %s",
            cp_error_message());
  c = parse_mem(CP_ECFG_FIELD, OLMO2_HEAD "\"partial_rotary_factor\":0.5}");
  CHECK_MSG(strstr(cp_error_message(), "key 'partial_rotary_factor': not an Olmo2Config key") != NULL, "message: %s",
            cp_error_message());
  c = parse_mem(CP_ECFG_FAMILY, "{\"architectures\":[\"OlmoeForCausalLM\"],\"hidden_size\":64}");
  CHECK(strstr(cp_error_message(), "'olmoe' is not supported: a mixture of experts") != NULL);
  c = parse_mem(CP_ECFG_FAMILY, "{\"model_type\":\"olmo\",\"hidden_size\":64}");
  CHECK(strstr(cp_error_message(), "'olmo' is not supported: OLMo 1's non-parametric LayerNorm") != NULL);
  c = parse_mem(CP_ECFG_FAMILY, "{\"model_type\":\"olmo3\",\"hidden_size\":64}");
  CHECK(strstr(cp_error_message(), "'olmo3' is not supported") != NULL);
}

/* StarCoder2 (configuration_starcoder2.py Starcoder2Config; starcoder2-3b's config.json numbers): LayerNorm eps
 * norm_epsilon, GELU tanh, biases by use_bias, num_key_value_heads 2 by default, tied head by default,
 * sliding_window on every layer when set. */
#define SC2_HEAD                                                                                          \
  "{\"architectures\":[\"Starcoder2ForCausalLM\"],\"model_type\":\"starcoder2\",\"hidden_size\":3072,"    \
  "\"intermediate_size\":12288,\"num_attention_heads\":24,\"num_hidden_layers\":30,\"vocab_size\":49152," \
  "\"max_position_embeddings\":16384,"

static void starcoder2_configs(void) {
  cp_hf_config *c = parse_mem(0, SC2_HEAD
                              "\"num_key_value_heads\":2,\"norm_epsilon\":1e-05,\"rope_theta\":999999.4420358813,"
                              "\"sliding_window\":4096,\"use_bias\":true,\"hidden_act\":\"gelu_pytorch_tanh\"}");
  if (c) {
    CHECK(c->family == CP_FAMILY_STARCODER2 && !strcmp(cp_family_name(c->family), "starcoder2"));
    CHECK(c->d_head == 128 && c->rotary_dims == 128 && c->n_kv_heads == 2 && c->pos == CP_POS_ROPE);
    CHECK(near(c->norm_eps, 1e-5) && near(c->rope_theta, 999999.4420358813) && c->train_len == 16384);
    CHECK(c->qkv_bias && !c->no_bias && c->tie_word_embeddings && c->bos_token_id == 50256);
    CHECK(c->sliding_window == 4096 && c->layer_sliding[0] && c->layer_sliding[29]);
    cp_hf_config_free(c);
  }
  c = parse_mem(0, SC2_HEAD
                "\"use_bias\":false,\"sliding_window\":null,\"tie_word_embeddings\":false,"
                "\"norm_epsilon\":1e-6,\"head_dim\":64}");
  if (c) {
    CHECK(!c->qkv_bias && c->no_bias && c->sliding_window == 0 && !c->layer_sliding[0] && !c->tie_word_embeddings);
    CHECK(c->n_kv_heads == 2 && c->d_head == 64 && near(c->norm_eps, 1e-6) &&
          !strcmp(c->activation, "gelu_pytorch_tanh"));
    cp_hf_config_free(c);
  }
  c = parse_mem(CP_ECFG_FIELD, SC2_HEAD "\"use_bias\":1}");
  CHECK_MSG(strstr(cp_error_message(), "key 'use_bias'") != NULL, "message: %s", cp_error_message());
  c = parse_mem(CP_ECFG_FIELD, SC2_HEAD "\"norm_epsilon\":0}");
  CHECK_MSG(strstr(cp_error_message(), "key 'norm_epsilon'") != NULL, "message: %s", cp_error_message());
  c = parse_mem(CP_ECFG_FIELD, SC2_HEAD "\"sliding_window\":0}");
  CHECK_MSG(strstr(cp_error_message(), "key 'sliding_window'") != NULL, "message: %s", cp_error_message());
  c = parse_mem(CP_ECFG_FIELD, SC2_HEAD "\"partial_rotary_factor\":0.5}");
  CHECK_MSG(strstr(cp_error_message(), "key 'partial_rotary_factor'") != NULL, "message: %s", cp_error_message());
  c = parse_mem(CP_ECFG_FIELD, SC2_HEAD "\"num_key_value_heads\":5}");
  CHECK_MSG(strstr(cp_error_message(), "key 'num_key_value_heads'") != NULL, "message: %s", cp_error_message());
  c = parse_mem(CP_ECFG_FAMILY, "{\"model_type\":\"starcoder2\",\"architectures\":[\"LlamaForCausalLM\"]}");
  CHECK_MSG(strstr(cp_error_message(), "disagrees with architectures[0]") != NULL, "message: %s", cp_error_message());
}

static void phi3_configs(void) {
  cp_hf_config *c = parse_mem(0, PHI3_HEAD "\"sliding_window\":null,\"rope_theta\":10000.0,\"rope_scaling\":null,"
                                           "\"tie_word_embeddings\":false,\"bos_token_id\":1}");
  if (c) {
    CHECK(c->family == CP_FAMILY_PHI3 && !strcmp(c->model_type, "phi3") && !strcmp(cp_family_name(c->family), "phi3"));
    CHECK(c->d_head == 96 && c->rotary_dims == 96 && c->n_kv_heads == 32 && c->pos == CP_POS_ROPE);
    CHECK(near(c->norm_eps, 1e-5) && c->eos_token_id == 32000 && c->pad_token_id == 32000 && c->bos_token_id == 1);
    CHECK(!c->qkv_bias && c->no_bias && c->sliding_window == 0 && !c->tie_word_embeddings && !c->qk_norm);
    cp_hf_config_free(c);
  }
  c = parse_mem(0, PHI3_HEAD "\"sliding_window\":4096,\"partial_rotary_factor\":0.75,\"rms_norm_eps\":1e-6}");
  if (c) {
    CHECK(c->rotary_dims == 72 && near(c->norm_eps, 1e-6) && c->sliding_window == 4096);
    CHECK(c->layer_sliding[0] && c->layer_sliding[31]); /* Phi3Model: every layer */
    cp_hf_config_free(c);
  }
  c = parse_mem(0, PHI3_HEAD "\"sliding_window\":2047}"); /* Phi-3-mini-4k's */
  if (c) {
    CHECK(c->sliding_window == 2047 && c->layer_sliding[0] && c->layer_sliding[31]);
    cp_hf_config_free(c);
  }
  /* Phi-3-mini-128k's layout: the factor is max / original (32), the attention factor is left to
   * the default (rope.c); head 96, 48 pairs */
  {
    char text[4096];
    int at = snprintf(text, sizeof text, "%s", "{\"architectures\":[\"Phi3ForCausalLM\"],\"model_type\":\"phi3\","
                      "\"hidden_size\":3072,\"num_attention_heads\":32,\"num_hidden_layers\":32,\"intermediate_size\":8192,"
                      "\"vocab_size\":32064,\"max_position_embeddings\":131072,\"original_max_position_embeddings\":4096,"
                      "\"rope_scaling\":{\"type\":\"longrope\",\"short_factor\":[");
    for (int k = 0; k < 2; k++) {
      for (int a = 0; a < 48; a++) at += snprintf(text + at, sizeof text - at, "%s%g", a ? "," : "", k ? 1.0 + a : 1.0);
      at += snprintf(text + at, sizeof text - at, "%s", k ? "]}}" : "],\"long_factor\":[");
    }
    c = parse_mem(0, text);
    if (c) {
      CHECK(!strcmp(c->rope_scaling_type, "longrope") && c->rope_n_factors == 48 && c->rope_original_max_pos == 4096);
      CHECK(near(c->rope_scaling_factor, 32) && c->rope_attention_factor == 0 && near(c->rope_long_factor[47], 48));
      cp_hf_config_free(c);
    }
  }
  /* Phi3Config would default a missing original to 4096: refused, not guessed */
  c = parse_mem(CP_ECFG_FIELD, "{\"model_type\":\"phi3\",\"hidden_size\":64,\"num_attention_heads\":4,"
                               "\"num_hidden_layers\":2,\"intermediate_size\":128,\"vocab_size\":100,"
                               "\"max_position_embeddings\":256,\"rope_scaling\":{\"type\":\"longrope\",\"short_factor\":"
                               "[1,1,1,1,1,1,1,1],\"long_factor\":[1,1,1,1,1,1,1,1]}}");
  CHECK_MSG(strstr(cp_error_message(), "key 'original_max_position_embeddings': missing") != NULL, "message: %s",
            cp_error_message());
  c = parse_mem(CP_ECFG_FIELD, PHI3_HEAD "\"rope_scaling\":{\"type\":\"su\",\"short_factor\":[1],\"long_factor\":[2]}}");
  CHECK(strstr(cp_error_message(), "key 'rope_scaling.type': 'su' is read by Phi3Config as 'longrope'") != NULL);
  c = parse_mem(CP_ECFG_FIELD, PHI3_HEAD "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2.0}}");
  CHECK(strstr(cp_error_message(), "key 'rope_scaling.rope_type': 'yarn' is read by Phi3Config as 'longrope'") != NULL);
  c = parse_mem(CP_ECFG_FIELD, "{\"model_type\":\"phi3\",\"hidden_size\":64,\"num_attention_heads\":4,"
                               "\"num_hidden_layers\":2,\"intermediate_size\":1073741825,\"vocab_size\":100}");
  CHECK(strstr(cp_error_message(), "key 'intermediate_size': 1073741825 is above 2^30") != NULL);
}

static void mistral_7b(void) {
  cp_hf_config *c = load("mistral-7b-v0.1.json");
  if (!c) return;
  CHECK(c->family == CP_FAMILY_LLAMA);
  CHECK(c->pos == CP_POS_ROPE);
  CHECK(strcmp(c->model_type, "mistral") == 0);
  CHECK(strcmp(c->architecture, "MistralForCausalLM") == 0);
  CHECK(c->vocab_size == 32000);
  CHECK(c->d_model == 4096);
  CHECK(c->n_layers == 32);
  CHECK(c->n_heads == 32 && c->n_kv_heads == 8);
  CHECK(c->d_head == 128);
  CHECK(c->d_ff == 14336);
  CHECK(near(c->norm_eps, 1e-5));
  CHECK(c->train_len == 32768);
  CHECK(near(c->rope_theta, 10000.0));
  CHECK(c->rotary_dims == 128);
  CHECK(c->sliding_window == 4096);
  CHECK(!c->tie_word_embeddings);
  cp_hf_config_free(c);
}

/* openai-community/gpt2's config.json: GPT2Config defaults (n_inner null -> 4 n_embd, gelu_new,
 * scale_attn_weights, tied head) and the learned position table of n_positions rows. */
static void gpt2_small(void) {
  cp_hf_config *c = load("gpt2.json");
  if (!c) return;
  CHECK(c->family == CP_FAMILY_GPT2);
  CHECK(c->pos == CP_POS_LEARNED);
  CHECK(strcmp(cp_pos_scheme_name(c->pos), "learned") == 0 && strcmp(cp_family_name(c->family), "gpt2") == 0);
  CHECK(c->vocab_size == 50257 && c->d_model == 768 && c->n_layers == 12);
  CHECK(c->n_heads == 12 && c->n_kv_heads == 12 && c->d_head == 64);
  CHECK(c->d_ff == 3072);
  CHECK(near(c->norm_eps, 1e-5));
  CHECK(strcmp(c->activation, "gelu_new") == 0);
  CHECK(c->tie_word_embeddings);
  CHECK(c->train_len == 1024 && strcmp(c->train_len_key, "config.json n_positions") == 0);
  CHECK(c->scale_attn_weights && !c->scale_attn_inverse_layer);
  CHECK(c->bos_token_id == 50256 && c->eos_token_id == 50256);
  CHECK(c->qkv_bias && !c->no_bias);
  cp_hf_config_free(c);
  /* n_positions sizes the wpe table: required; add_cross_attention is refused */
  const char *no_pos = "{\"model_type\": \"gpt2\", \"n_embd\": 8, \"n_head\": 2, \"n_layer\": 1, \"vocab_size\": 5}";
  CHECK(cp_hf_config_parse(&c, no_pos, strlen(no_pos), "x.json") == CP_ECFG_FIELD && !c);
  CHECK(strstr(cp_error_message(), "'n_positions'") != NULL);
  const char *cross = "{\"model_type\": \"gpt2\", \"n_embd\": 8, \"n_head\": 2, \"n_layer\": 1, \"vocab_size\": 5, "
                      "\"n_positions\": 4, \"add_cross_attention\": true}";
  CHECK(cp_hf_config_parse(&c, cross, strlen(cross), "x.json") == CP_ECFG_FIELD && !c);
  CHECK(strstr(cp_error_message(), "'add_cross_attention'") != NULL);
  const char *alias = "{\"model_type\": \"gpt2\", \"hidden_size\": 8, \"num_attention_heads\": 2, \"n_layer\": 1, "
                      "\"vocab_size\": 5, \"max_position_embeddings\": 4, \"n_inner\": 12, "
                      "\"scale_attn_by_inverse_layer_idx\": true, \"scale_attn_weights\": false}";
  CHECK(cp_hf_config_parse(&c, alias, strlen(alias), "x.json") == 0);
  if (c) {
    CHECK(c->d_model == 8 && c->d_head == 4 && c->d_ff == 12 && c->train_len == 4);
    CHECK(c->scale_attn_inverse_layer && !c->scale_attn_weights);
  }
  cp_hf_config_free(c);
}

static void pythia_70m(void) {
  cp_hf_config *c = load("pythia-70m.json");
  if (!c) return;
  CHECK(c->family == CP_FAMILY_GPT_NEOX);
  CHECK(c->pos == CP_POS_ROPE);
  CHECK(strcmp(c->architecture, "GPTNeoXForCausalLM") == 0);
  CHECK(c->vocab_size == 50304);
  CHECK(c->d_model == 512);
  CHECK(c->n_layers == 6);
  CHECK(c->n_heads == 8 && c->n_kv_heads == 8);
  CHECK(c->d_head == 64);
  CHECK(c->d_ff == 2048);
  CHECK(near(c->norm_eps, 1e-5));
  CHECK(strcmp(c->activation, "gelu") == 0);
  CHECK(!c->tie_word_embeddings);
  CHECK(c->train_len == 2048);
  CHECK(near(c->rotary_pct, 0.25));
  CHECK(c->rotary_dims == 16); /* int(64 * 0.25) */
  CHECK(near(c->rope_theta, 10000.0));
  CHECK(c->use_parallel_residual);
  CHECK(c->bos_token_id == 0 && c->eos_token_id == 0);
  CHECK(c->qkv_bias && !c->no_bias);
  cp_hf_config_free(c);
}

static void fire_small(void) {
  cp_hf_config *c = load("fire-small.json");
  if (!c) return;
  CHECK(c->family == CP_FAMILY_FIRE);
  CHECK(c->pos == CP_POS_FIRE);
  CHECK(strcmp(c->model_type, "ctxpatch_fire") == 0);
  CHECK(c->vocab_size == 1024 && c->d_model == 256 && c->n_layers == 4);
  CHECK(c->n_heads == 8 && c->n_kv_heads == 4 && c->d_head == 32);
  CHECK(c->d_ff == 688);
  CHECK(near(c->norm_eps, 1e-6)); /* docs/fire-layout.md default */
  CHECK(c->tie_word_embeddings);
  CHECK(c->train_len == 512);
  CHECK(c->fire_mlp_width == 32); /* default */
  CHECK(c->fire_mlp_layers == 1); /* default */
  CHECK(c->fire_shared);
  CHECK(near(c->fire_c_init, 0.5));
  CHECK(near(c->fire_threshold, 512.0)); /* default = max_position_embeddings */
  CHECK(c->rotary_dims == 0 && near(c->rope_theta, 0.0));
  cp_hf_config_free(c);
}

static void bad_files(void) {
  expect_fail("bad-duplicate-key.json", CP_ECFG_DUPLICATE_KEY, "hidden_size");
  expect_fail("bad-depth-129.json", CP_ECFG_DEPTH, "128");
  expect_fail("bad-invalid-json.json", CP_ECFG_JSON, "offset");
  expect_fail("bad-not-object.json", CP_ECFG_JSON, NULL);
  expect_fail("bad-missing-field.json", CP_ECFG_FIELD, "'num_attention_heads'");
  expect_fail("bad-negative-field.json", CP_ECFG_FIELD,
              "key 'num_hidden_layers': expected a positive integer");
  expect_fail("bad-non-integer.json", CP_ECFG_FIELD, "key 'hidden_size': expected a positive integer");
  expect_fail("bad-string-integer.json", CP_ECFG_FIELD, "'num_attention_heads'");
  expect_fail("bad-too-large.json", CP_ECFG_FIELD, "'vocab_size'");
  /* A layer-norm epsilon that is not a finite number in (0, 1]: NaN is no JSON number (refused at
   * its offset), 1e999 overflows to infinity and 1e-400 underflows to 0 (refused naming the key). */
  expect_fail("bad-nan-eps.json", CP_ECFG_JSON, "offset");
  expect_fail("bad-infinite-eps.json", CP_ECFG_FIELD, "'rms_norm_eps'");
  expect_fail("bad-zero-eps.json", CP_ECFG_FIELD, "'rms_norm_eps'");
  expect_fail("bad-subnormal-eps.json", CP_ECFG_FIELD, "'rms_norm_eps': expected a number in (1.2e-38, 1]");
  expect_fail("bad-heads-not-dividing.json", CP_ECFG_FIELD, "'num_attention_heads'");
  expect_fail("bad-kv-heads.json", CP_ECFG_FIELD, "'num_key_value_heads'");
  expect_fail("bad-alias-conflict.json", CP_ECFG_FIELD, "n_embed");
  expect_fail("bad-neox-odd-rotary.json", CP_ECFG_FIELD, "'rotary_pct'");
  expect_fail("bad-mpt-no-alibi.json", CP_ECFG_POSITION, "attn_config.alibi");
  expect_fail("bad-family-mismatch.json", CP_ECFG_FAMILY, "GPTNeoXForCausalLM");
  /* Unknown families list every supported model_type. */
  const char *families[] = {"t5", "bloom", "mpt", "llama", "mistral", "gpt_neox", "ctxpatch_fire", "gpt2"};
  for (int f = 0; f < 2; f++) {
    const char *name = f ? "bad-unknown-architecture.json" : "bad-unknown-family.json";
    expect_fail(name, CP_ECFG_FAMILY, f ? "FalconForCausalLM" : "gptj");
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
      CHECK_MSG(strstr(cp_error_message(), families[i]) != NULL, "%s: '%s' not listed: %s", name,
                families[i], cp_error_message());
  }
  CHECK(strstr(cp_supported_families(), "gpt_neox") != NULL);

  /* 128 levels (the top-level object counts as one) are accepted. */
  cp_hf_config *c = load("ok-depth-128.json");
  if (c) CHECK(c->family == CP_FAMILY_LLAMA);
  cp_hf_config_free(c);

  cp_hf_config *none = (cp_hf_config *)1;
  CHECK_RC(CP_ENOTFOUND, cp_hf_config_load(&none, golden("no-such-config.json")));
  CHECK(none == NULL);
}

static void in_memory(void) {
  /* HF semantics of null and absent fields. */
  cp_hf_config *c = parse_mem(0,
      "{\"model_type\":\"mistral\",\"hidden_size\":64,\"num_attention_heads\":4,"
      "\"num_key_value_heads\":null,\"num_hidden_layers\":2,\"intermediate_size\":128,"
      "\"vocab_size\":100,\"sliding_window\":null,\"eos_token_id\":[7,9],\"pad_token_id\":null,"
      "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2}}");
  if (c) {
    CHECK(c->n_kv_heads == 4);      /* null -> num_attention_heads */
    CHECK(c->sliding_window == 0);  /* explicit null: no window */
    CHECK(c->eos_token_id == 7);    /* list: first id */
    CHECK(c->pad_token_id == -1);
    CHECK(c->bos_token_id == 1);    /* MistralConfig default */
    CHECK(c->train_len == 0);
    CHECK(near(c->norm_eps, 1e-6)); /* MistralConfig default */
    CHECK(strcmp(c->rope_scaling_type, "linear") == 0 && near(c->rope_scaling_factor, 2.0));
    cp_hf_config_free(c);
  }
  /* dynamic NTK scales from max_position_embeddings: a config without it is refused */
  c = parse_mem(CP_ECFG_FIELD, "{\"model_type\":\"mistral\",\"hidden_size\":64,\"num_attention_heads\":4,"
                               "\"num_hidden_layers\":2,\"intermediate_size\":128,\"vocab_size\":100,"
                               "\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":2}}");
  CHECK_MSG(strstr(cp_error_message(), "key 'max_position_embeddings': missing") != NULL, "message: %s",
            cp_error_message());
  c = parse_mem(0, "{\"model_type\":\"mistral\",\"hidden_size\":64,\"num_attention_heads\":4,"
                   "\"num_hidden_layers\":2,\"intermediate_size\":128,\"vocab_size\":100}");
  if (c) {
    CHECK(c->sliding_window == 4096); /* absent: MistralConfig default */
    cp_hf_config_free(c);
  }
  /* Llama head_dim may differ from hidden / heads. */
  c = parse_mem(0, "{\"model_type\":\"llama\",\"hidden_size\":96,\"num_attention_heads\":4,"
                   "\"head_dim\":32,\"num_hidden_layers\":2,\"intermediate_size\":128,"
                   "\"vocab_size\":100,\"rope_theta\":500000.0,\"tie_word_embeddings\":true}");
  if (c) {
    CHECK(c->d_head == 32 && c->rotary_dims == 32);
    CHECK(near(c->rope_theta, 500000.0));
    CHECK(c->tie_word_embeddings);
    cp_hf_config_free(c);
  }
  /* GPT-NeoX under its newer spellings; MPT multi-query attention. */
  c = parse_mem(0, "{\"model_type\":\"gpt_neox\",\"hidden_size\":256,\"num_attention_heads\":4,"
                   "\"num_hidden_layers\":2,\"intermediate_size\":1024,\"vocab_size\":100,"
                   "\"partial_rotary_factor\":0.5,\"rope_theta\":1e6,"
                   "\"use_parallel_residual\":false}");
  if (c) {
    CHECK(c->rotary_dims == 32 && near(c->rope_theta, 1e6) && !c->use_parallel_residual);
    cp_hf_config_free(c);
  }
  c = parse_mem(0, "{\"model_type\":\"mpt\",\"d_model\":256,\"n_heads\":8,\"n_layers\":2,"
                   "\"vocab_size\":100,\"expansion_ratio\":2.5,\"no_bias\":false,"
                   "\"attn_config\":{\"attn_type\":\"multiquery_attention\",\"alibi\":true,"
                   "\"alibi_bias_max\":16}}");
  if (c) {
    CHECK(c->n_kv_heads == 1 && c->d_ff == 640 && near(c->alibi_bias_max, 16.0));
    CHECK(c->qkv_bias && !c->no_bias && c->train_len == 0);
    cp_hf_config_free(c);
  }
  /* MPT without attn_config: MptAttentionConfig defaults (ALiBi, bias max 8). */
  c = parse_mem(0, "{\"model_type\":\"mpt\",\"d_model\":256,\"n_heads\":8,\"n_layers\":2,"
                   "\"vocab_size\":100,\"max_seq_len\":4096}");
  if (c) {
    CHECK(c->pos == CP_POS_ALIBI && near(c->alibi_bias_max, 8.0) && c->d_ff == 1024);
    CHECK(c->train_len == 4096);
    cp_hf_config_free(c);
  }

  parse_mem(CP_ECFG_JSON, "");
  parse_mem(CP_ECFG_JSON, "{\"model_type\":\"llama\"} x");
  parse_mem(CP_ECFG_JSON, "{\"model_type\":\"ll\xff\"}"); /* invalid UTF-8 */
  parse_mem(CP_ECFG_FAMILY, "{\"hidden_size\":64}");
  parse_mem(CP_ECFG_FIELD, "{\"model_type\":7}");
  parse_mem(CP_ECFG_FIELD, "{\"model_type\":\"llama\",\"architectures\":\"LlamaForCausalLM\"}");
  /* MPT with rotary embeddings is not ALiBi. */
  parse_mem(CP_ECFG_POSITION, "{\"model_type\":\"mpt\",\"d_model\":256,\"n_heads\":8,"
                              "\"n_layers\":2,\"vocab_size\":100,"
                              "\"attn_config\":{\"alibi\":false,\"rope\":true}}");
  /* FIRE needs its training length as max_position_embeddings (n_positions does not do). */
  parse_mem(CP_ECFG_FIELD, "{\"model_type\":\"ctxpatch_fire\",\"hidden_size\":64,\"n_positions\":512,"
                           "\"num_attention_heads\":4,\"num_hidden_layers\":2,"
                           "\"intermediate_size\":128,\"vocab_size\":100}");
  CHECK(strstr(cp_error_message(), "max_position_embeddings") != NULL);
  /* fire_mlp_layers: 1 or 2 (the paper's); widths up to CP_FIRE_MAX_WIDTH (docs/fire-layout.md). */
#define FIRE_CFG(extra)                                                                                \
  "{\"model_type\":\"ctxpatch_fire\",\"hidden_size\":64,\"max_position_embeddings\":512,"         \
  "\"num_attention_heads\":4,\"num_hidden_layers\":2,\"intermediate_size\":128,\"vocab_size\":100" \
  extra "}"
  {
    cp_hf_config *fc = parse_mem(0, FIRE_CFG(",\"fire_mlp_layers\":2,\"fire_mlp_width\":1024"));
    CHECK(fc && fc->fire_mlp_layers == 2 && fc->fire_mlp_width == 1024);
    cp_hf_config_free(fc);
  }
  parse_mem(CP_ECFG_FIELD, FIRE_CFG(",\"fire_mlp_layers\":3"));
  CHECK_MSG(!strcmp(cp_error_message(), "mem/config.json: key 'fire_mlp_layers': expected 1 or 2, got 3"), "%s",
            cp_error_message());
  parse_mem(CP_ECFG_FIELD, FIRE_CFG(",\"fire_mlp_layers\":0"));
  CHECK(strstr(cp_error_message(), "fire_mlp_layers") != NULL);
  parse_mem(CP_ECFG_FIELD, FIRE_CFG(",\"fire_mlp_width\":1025"));
  CHECK_MSG(!strcmp(cp_error_message(), "mem/config.json: key 'fire_mlp_width': 1025 is above 1024"), "%s",
            cp_error_message());
#undef FIRE_CFG
  /* Zero, booleans and non-finite-looking numbers are not sizes. */
  parse_mem(CP_ECFG_FIELD, "{\"model_type\":\"bloom\",\"hidden_size\":0,\"n_head\":4,"
                           "\"n_layer\":2,\"vocab_size\":100}");
  parse_mem(CP_ECFG_FIELD, "{\"model_type\":\"bloom\",\"hidden_size\":true,\"n_head\":4,"
                           "\"n_layer\":2,\"vocab_size\":100}");
  parse_mem(CP_ECFG_FIELD, "{\"model_type\":\"bloom\",\"hidden_size\":1e300,\"n_head\":4,"
                           "\"n_layer\":2,\"vocab_size\":100}");
  parse_mem(CP_ECFG_FIELD, "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,"
                           "\"num_hidden_layers\":2,\"intermediate_size\":128,\"vocab_size\":100,"
                           "\"rms_norm_eps\":-1}");
  parse_mem(CP_ECFG_FIELD, "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,"
                           "\"num_hidden_layers\":2,\"intermediate_size\":128,\"vocab_size\":100,"
                           "\"rope_scaling\":{\"type\":\"linear\"}}");
  parse_mem(CP_ECFG_FIELD, "{\"model_type\":\"t5\",\"d_model\":64,\"d_kv\":16,\"d_ff\":128,"
                           "\"num_layers\":2,\"num_heads\":4,\"vocab_size\":100,"
                           "\"feed_forward_proj\":\"fancy-gated-gelu\"}");
}

static void names(void) {
  CHECK(strcmp(cp_family_name(CP_FAMILY_T5), "t5") == 0);
  CHECK(strcmp(cp_family_name(CP_FAMILY_GPT_NEOX), "gpt_neox") == 0);
  CHECK(strcmp(cp_family_name(CP_FAMILY_FIRE), "fire") == 0);
  CHECK(strcmp(cp_pos_scheme_name(CP_POS_T5_BUCKETS), "t5-buckets") == 0);
  CHECK(strcmp(cp_pos_scheme_name(CP_POS_ALIBI), "alibi") == 0);
  CHECK(strcmp(cp_pos_scheme_name(CP_POS_ROPE), "rope") == 0);
  CHECK(strcmp(cp_pos_scheme_name(CP_POS_FIRE), "fire") == 0);
}

/* cp_hf_config_splice on its own: replaced in place, appended in the file's layout, the rest kept. */
static void splice_one(const char *in, const char *key, const char *value, bool only_if_present, const char *want) {
  cp_hf_config cfg = {.text = (char *)in, .text_len = strlen(in)};
  cJSON *v = cJSON_Parse(value);
  cp_hf_member set[] = {{key, v, only_if_present}};
  char *out = NULL;
  size_t n = 0;
  CHECK_RC(0, cp_hf_config_splice(&out, &n, &cfg, set, 1, "c.json"));
  CHECK_MSG(out && n == strlen(want) && !strcmp(out, want), "%s + %s: got <%s> want <%s>", in, key, out ? out : "", want);
  free(out);
  cJSON_Delete(v);
}

static void splice(void) {
  splice_one("{\"a\": 1E400, \"r\": null}", "r", "{\"f\": 2}", false, "{\"a\": 1E400, \"r\": {\"f\":2}}");
  splice_one("{\"a\":9007199254740993}", "r", "2", false, "{\"a\":9007199254740993, \"r\": 2}");
  splice_one("{\n  \"a\": \"x\\u0000y\"\n}\n", "r", "{\"f\": 2}", false,
             "{\n  \"a\": \"x\\u0000y\",\n  \"r\": {\n    \"f\": 2\n  }\n}\n");
  splice_one("{\n\t\"a\": [1, {\"b\": 2}],\n\t\"f\": 1.0000000000000002\n}", "f", "7", true,
             "{\n\t\"a\": [1, {\"b\": 2}],\n\t\"f\": 7\n}");
  splice_one("{\"a\": 1}", "f", "7", true, "{\"a\": 1}"); /* only_if_present, absent */
  splice_one("{}", "r", "2", false, "{\n  \"r\": 2\n}");
  splice_one("{\"r\\u0000\": 1, \"\\u0072\": 1}", "r", "2", false, "{\"r\\u0000\": 1, \"\\u0072\": 2}");
  /* a non-finite number is refused naming the key, nothing returned */
  cp_hf_config cfg = {.text = (char *)"{}", .text_len = 2};
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "factor", INFINITY);
  cp_hf_member set[] = {{"rope_scaling", o, false}};
  char *out = NULL;
  size_t n = 0;
  CHECK_RC(CP_EOVERFLOW, cp_hf_config_splice(&out, &n, &cfg, set, 1, "c.json"));
  CHECK(out == NULL && strstr(cp_error_message(), "c.json: key 'rope_scaling.factor'"));
  cJSON_Delete(o);
}

/* Gemma and Gemma 2 (GemmaConfig, Gemma2Config): HF's defaults (head_dim 256, tied, gelu tanh
 * whatever hidden_act says, query_pre_attn_scalar 256, soft-caps 50 and 30, window 4096 on the
 * even layers), null soft-caps and window, layer_types, and the refusals. */
#define GEMMA2_HEAD                                                                                                 \
  "{\"architectures\":[\"Gemma2ForCausalLM\"],\"model_type\":\"gemma2\",\"hidden_size\":64,\"num_attention_heads\":4," \
  "\"num_key_value_heads\":2,\"num_hidden_layers\":3,\"intermediate_size\":128,\"vocab_size\":100,"
static void gemma_configs(void) {
  cp_hf_config *c = parse_mem(0, GEMMA2_HEAD "\"max_position_embeddings\":8192}");
  if (c) {
    CHECK(c->family == CP_FAMILY_GEMMA && !strcmp(c->model_type, "gemma2") && c->sandwich_norms);
    CHECK(c->d_head == 256 && c->tie_word_embeddings && !strcmp(c->activation, "gelu_pytorch_tanh"));
    CHECK(near(c->query_pre_attn_scalar, 256) && near(c->attn_softcap, 50) && near(c->final_softcap, 30));
    CHECK(c->sliding_window == 4096 && c->layer_sliding[0] && !c->layer_sliding[1] && c->layer_sliding[2]);
    CHECK(c->bos_token_id == 2 && c->eos_token_id == 1 && c->pad_token_id == 0 && c->rotary_dims == 256);
    cp_hf_config_free(c);
  }
  c = parse_mem(0, GEMMA2_HEAD "\"head_dim\":16,\"attn_logit_softcapping\":null,\"final_logit_softcapping\":null,"
                               "\"sliding_window\":null,\"query_pre_attn_scalar\":144,\"tie_word_embeddings\":false}");
  if (c) {
    CHECK(c->attn_softcap == 0 && c->final_softcap == 0 && c->sliding_window == 0 && !c->layer_sliding[0]);
    CHECK(near(c->query_pre_attn_scalar, 144) && c->d_head == 16 && !c->tie_word_embeddings);
    cp_hf_config_free(c);
  }
  c = parse_mem(0, GEMMA2_HEAD "\"sliding_window\":8,\"layer_types\":[\"full_attention\",\"sliding_attention\","
                               "\"full_attention\"]}");
  if (c) {
    CHECK(c->sliding_window == 8 && !c->layer_sliding[0] && c->layer_sliding[1] && !c->layer_sliding[2]);
    cp_hf_config_free(c);
  }
  /* Gemma 1: hidden_act gelu (the original checkpoints) still runs the tanh form, no Gemma 2 pieces */
  c = parse_mem(0, "{\"model_type\":\"gemma\",\"hidden_size\":64,\"num_attention_heads\":4,\"num_hidden_layers\":2,"
                   "\"intermediate_size\":128,\"vocab_size\":100,\"hidden_act\":\"gelu\",\"hidden_activation\":null}");
  if (c) {
    CHECK(c->family == CP_FAMILY_GEMMA && !c->sandwich_norms && c->sliding_window == 0 && c->attn_softcap == 0);
    CHECK(c->query_pre_attn_scalar == 0 && !strcmp(c->activation, "gelu_pytorch_tanh") && c->d_head == 256);
    cp_hf_config_free(c);
  }
  c = parse_mem(CP_ECFG_FIELD, GEMMA2_HEAD "\"layer_types\":[\"full_attention\",\"sliding_attention\"]}");
  CHECK(strstr(cp_error_message(), "key 'layer_types': expected a list of 3 layer types") != NULL);
  c = parse_mem(CP_ECFG_FIELD, GEMMA2_HEAD "\"layer_types\":[\"full_attention\",\"chunked_attention\",\"full_attention\"]}");
  CHECK(strstr(cp_error_message(), "key 'layer_types[1]'") != NULL);
  c = parse_mem(CP_ECFG_FIELD, GEMMA2_HEAD "\"attn_logit_softcapping\":-1}");
  CHECK(strstr(cp_error_message(), "key 'attn_logit_softcapping'") != NULL);
  c = parse_mem(CP_ECFG_FIELD, GEMMA2_HEAD "\"query_pre_attn_scalar\":0}");
  CHECK(strstr(cp_error_message(), "key 'query_pre_attn_scalar'") != NULL);
  c = parse_mem(CP_ECFG_FIELD, GEMMA2_HEAD "\"sliding_window\":0}");
  CHECK(strstr(cp_error_message(), "key 'sliding_window'") != NULL);
}

/* Gemma 3 text (Gemma3TextConfig): its defaults (rope_theta 1e6, rope_local_base_freq 1e4, window
 * 4096 on five layers of six, no soft-caps, q/k norms), sliding_window_pattern and layer_types,
 * rope_scaling on the full layers, and the refusals: a multimodal gemma3 (by model_type or by
 * architecture), an attention soft-cap, a null window, bidirectional attention, rope_parameters per
 * layer type. */
#define GEMMA3_HEAD                                                                                                 \
  "{\"architectures\":[\"Gemma3ForCausalLM\"],\"model_type\":\"gemma3_text\",\"hidden_size\":64,"                   \
  "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_hidden_layers\":7,\"intermediate_size\":128,"         \
  "\"vocab_size\":100,"
static void gemma3_configs(void) {
  cp_hf_config *c = parse_mem(0, GEMMA3_HEAD "\"max_position_embeddings\":32768}");
  if (c) {
    CHECK(c->family == CP_FAMILY_GEMMA && !strcmp(c->model_type, "gemma3_text") && c->sandwich_norms && c->qk_norm);
    CHECK(near(c->rope_theta, 1e6) && near(c->rope_local_theta, 1e4) && !c->rope_scaling_type[0]);
    CHECK(c->attn_softcap == 0 && c->final_softcap == 0 && near(c->query_pre_attn_scalar, 256) && c->d_head == 256);
    CHECK(c->sliding_window == 4096 && c->tie_word_embeddings);
    for (int l = 0; l < 7; l++) CHECK_MSG(c->layer_sliding[l] == (l != 5), "layer %d", l); /* (l + 1) % 6 */
    cp_hf_config_free(c);
  }
  c = parse_mem(0, GEMMA3_HEAD "\"sliding_window\":512,\"sliding_window_pattern\":2,\"rope_theta\":5e5,"
                               "\"rope_local_base_freq\":2e4,\"final_logit_softcapping\":30,"
                               "\"rope_scaling\":{\"factor\":8.0,\"rope_type\":\"linear\"}}");
  if (c) {
    CHECK(c->sliding_window == 512 && c->layer_sliding[0] && !c->layer_sliding[1] && c->layer_sliding[6]);
    CHECK(near(c->rope_theta, 5e5) && near(c->rope_local_theta, 2e4) && near(c->final_softcap, 30));
    CHECK(!strcmp(c->rope_scaling_type, "linear") && near(c->rope_scaling_factor, 8));
    cp_hf_config_free(c);
  }
  c = parse_mem(0, GEMMA3_HEAD "\"sliding_window_pattern\":2,\"layer_types\":[\"full_attention\","
                               "\"sliding_attention\",\"full_attention\",\"full_attention\",\"full_attention\","
                               "\"full_attention\",\"sliding_attention\"]}");
  if (c) { /* layer_types wins over the pattern, as Gemma3TextConfig computes it only when absent */
    CHECK(!c->layer_sliding[0] && c->layer_sliding[1] && !c->layer_sliding[2] && c->layer_sliding[6]);
    cp_hf_config_free(c);
  }
  c = parse_mem(CP_ECFG_FAMILY, "{\"architectures\":[\"Gemma3ForConditionalGeneration\"],\"model_type\":\"gemma3\","
                                "\"text_config\":{\"model_type\":\"gemma3_text\"},\"vision_config\":{}}");
  CHECK(strstr(cp_error_message(), "'gemma3' is not supported") && strstr(cp_error_message(), "vision tower"));
  c = parse_mem(CP_ECFG_FAMILY, "{\"architectures\":[\"Gemma3ForConditionalGeneration\"],\"text_config\":{}}");
  CHECK(strstr(cp_error_message(), "vision tower") != NULL);
  c = parse_mem(CP_ECFG_FIELD, GEMMA3_HEAD "\"attn_logit_softcapping\":50}");
  CHECK(strstr(cp_error_message(), "key 'attn_logit_softcapping'") != NULL);
  c = parse_mem(CP_ECFG_FIELD, GEMMA3_HEAD "\"sliding_window\":null}");
  CHECK(strstr(cp_error_message(), "key 'sliding_window'") != NULL);
  c = parse_mem(CP_ECFG_FIELD, GEMMA3_HEAD "\"use_bidirectional_attention\":true}");
  CHECK(strstr(cp_error_message(), "key 'use_bidirectional_attention'") != NULL);
  c = parse_mem(CP_ECFG_FIELD, GEMMA3_HEAD "\"sliding_window_pattern\":0}");
  CHECK(strstr(cp_error_message(), "key 'sliding_window_pattern'") != NULL);
  c = parse_mem(CP_ECFG_FIELD, GEMMA3_HEAD "\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"default\"}}}");
  CHECK(strstr(cp_error_message(), "key 'rope_parameters'") != NULL);
}

int main(void) {
  const char *src = test_env("CTXPATCH_SOURCE_DIR");
  static char dir[4096];
  snprintf(dir, sizeof dir, "%s/tests/goldens/configs", src);
  g_dir = dir;
  t5_small();
  t5_by_architecture();
  bloom_560m();
  bloom_aliases();
  mpt_7b();
  llama_2_7b();
  llama_rope_linear();
  rope_scaling_types();
  qwen2_configs();
  qwen3_configs();
  phi3_configs();
  granite_configs();
  olmo2_configs();
  starcoder2_configs();
  gemma_configs();
  gemma3_configs();
  mistral_7b();
  pythia_70m();
  gpt2_small();
  fire_small();
  bad_files();
  in_memory();
  names();
  splice();
  return test_finish();
}
