/* Floor: model. The runtime table (ctxpatch/model/runtimes.h): which runtimes each artifact
 * format is for and which carriers of a rule they execute. */
#include <stdio.h>
#include <string.h>

#include "ctxpatch/model/runtimes.h"
#include "model/rule_json.h"

#define W CP_CARRY_BIT(CP_CARRY_WEIGHTS)
#define R CP_CARRY_BIT(CP_CARRY_ROPE_LINEAR)
#define G CP_CARRY_BIT(CP_CARRY_GRAPH)
#define FAM(f) (1u << (unsigned)(f))

/* What each runtime reads was checked against its loader: transformers' LlamaConfig /
 * GPTNeoXConfig rope_scaling ("linear" divides positions by the factor), vLLM's and TGI's rotary
 * embeddings built from the same key, llama.cpp's llama_model_loader (rope.scaling.type linear
 * sets freq_scale = 1 / factor). None of them reads config.json's "ctxpatch" block or a GGUF's
 * ctxpatch.* keys; none loads model_type ctxpatch_fire, ctxpatch's own FIRE layout (a FIRE model
 * runs in ctxpatch or as an ONNX graph). ONNX runtimes run the graph as written. */
static const cp_runtime k_runtimes[] = {
    {"transformers", NULL, CP_ARTIFACT_SAFETENSORS, W | R, FAM(CP_FAMILY_FIRE),
     "config.json model_type, rope_scaling {type linear, factor}, max_position_embeddings / n_positions"},
    {"vLLM", NULL, CP_ARTIFACT_SAFETENSORS, W | R, FAM(CP_FAMILY_FIRE) | FAM(CP_FAMILY_T5),
     "config.json model_type, rope_scaling {type linear, factor}, max_position_embeddings"},
    {"TGI", NULL, CP_ARTIFACT_SAFETENSORS, W | R, FAM(CP_FAMILY_FIRE),
     "config.json model_type, rope_scaling {type linear, factor}, max_position_embeddings"},
    {"llama.cpp", "Ollama, llama-cpp-python, LM Studio", CP_ARTIFACT_GGUF, W | R, FAM(CP_FAMILY_FIRE),
     "{arch}.context_length, {arch}.rope.scaling.type / .factor / .original_context_length"},
    {"onnxruntime", NULL, CP_ARTIFACT_ONNX, W | G, 0, "the graph's nodes and initializers"},
    {"transformers.js", NULL, CP_ARTIFACT_ONNX, W | G, 0, "the graph's nodes (run by onnxruntime-web / -node)"},
};

const cp_runtime *cp_runtime_table(size_t *n) {
  *n = sizeof k_runtimes / sizeof *k_runtimes;
  return k_runtimes;
}

const char *cp_artifact_format_name(cp_artifact_format f) {
  static const char *const names[] = {"safetensors", "gguf", "onnx"};
  return (unsigned)f < CP_ARTIFACT_COUNT ? names[f] : "?";
}

const char *cp_carrier_name(cp_carrier c) {
  static const char *const names[] = {"weights", "rope-linear", "graph", "ctxpatch metadata"};
  return (unsigned)c < CP_CARRY_COUNT ? names[c] : "?";
}

const char *cp_artifact_metadata_place(cp_artifact_format f) {
  switch (f) {
    case CP_ARTIFACT_SAFETENSORS: return "config.json \"ctxpatch\".rule";
    case CP_ARTIFACT_GGUF: return "the GGUF key ctxpatch.rule";
    case CP_ARTIFACT_ONNX: return "metadata_props ctxpatch.rule";
    case CP_ARTIFACT_COUNT: break;
  }
  return "ctxpatch metadata";
}

static bool loads(const cp_runtime *rt, cp_artifact_format f, cp_family family) {
  return rt->format == f && !((unsigned)family < 32 && (rt->skips_families & FAM(family)));
}

int cp_runtimes_executing(const cp_runtime **out, int max, cp_artifact_format f, cp_family family, unsigned carriers) {
  int n = 0;
  for (size_t i = 0; i < sizeof k_runtimes / sizeof *k_runtimes; i++) {
    const cp_runtime *rt = &k_runtimes[i];
    if (loads(rt, f, family) && (rt->carriers & carriers) == carriers && n < max) out[n++] = rt;
  }
  return n;
}

void cp_runtimes_text(char *buf, size_t cap, cp_artifact_format f, cp_family family) {
  const cp_runtime *rts[8];
  int n = cp_runtimes_executing(rts, 8, f, family, 0);
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && len < cap; i++) {
    const char *sep = i == 0 ? "" : i == n - 1 ? " and " : ", ";
    int w = snprintf(buf + len, cap - len, "%s%s%s%s%s", sep, rts[i]->name, rts[i]->embedders ? " (and " : "",
                     rts[i]->embedders ? rts[i]->embedders : "", rts[i]->embedders ? ")" : "");
    if (w < 0) break;
    len += (size_t)w;
  }
  if (n == 0) snprintf(buf, cap, "no %s runtime", cp_artifact_format_name(f));
}

void cp_rule_part_names(char *buf, size_t cap, const cp_rule *r) {
  cJSON *j = cp_rule_to_json(r), *e;
  size_t len = 0;
  buf[0] = '\0';
  cJSON_ArrayForEach(e, j) {
    if (!strcmp(e->string, "train_len")) continue; /* a parameter of alibi_scale, not a part of its own */
    int w = snprintf(buf + len, len < cap ? cap - len : 0, "%s%s", len ? ", " : "", e->string);
    if (w < 0 || (len += (size_t)w) >= cap) break;
  }
  cJSON_Delete(j);
}
