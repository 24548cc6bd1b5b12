/* Floor: model. The runtime table: for each artifact format ctxpatch writes, the runtimes it is
 * for and which carriers of a rule each of them executes. It sits beside the family table
 * (families.h): the family table says where a bake puts a rule part, this one says who will
 * run what was put there. `patch` refuses by default an artifact whose rule part lives where
 * none of its format's runtimes looks (docs/patching.md, "Runtimes").
 *
 * Carriers (how an artifact holds one part of a patch):
 *   weights       the part is baked into tensors (q projections divided by tau, T5 bias tables,
 *                 FIRE output layers and L, stored ALiBi slopes): every loader runs it
 *   rope-linear   RoPE position interpolation as a standard key: config.json
 *                 rope_scaling {"type": "linear", "factor": F} (HF transformers, vLLM, TGI) or
 *                 GGUF {arch}.rope.scaling.type = linear, .factor (llama.cpp)
 *   graph         ONNX nodes: the graph computes every rule (docs/onnx-rules.md)
 *   metadata      ctxpatch's own block (config.json "ctxpatch".rule, GGUF ctxpatch.rule, ONNX
 *                 metadata_props): only ctxpatch's engine reads it
 *
 * Ownership: the table is static; nothing here allocates except cp_rule_part_names' caller's
 * buffer, which it fills.
 */
#ifndef CTXPATCH_MODEL_RUNTIMES_H
#define CTXPATCH_MODEL_RUNTIMES_H

#include <stdbool.h>
#include <stddef.h>

#include "ctxpatch/model/hf_config.h"
#include "ctxpatch/model/rule.h"

typedef enum { CP_ARTIFACT_SAFETENSORS, CP_ARTIFACT_GGUF, CP_ARTIFACT_ONNX, CP_ARTIFACT_COUNT } cp_artifact_format;

typedef enum { CP_CARRY_WEIGHTS, CP_CARRY_ROPE_LINEAR, CP_CARRY_GRAPH, CP_CARRY_METADATA, CP_CARRY_COUNT } cp_carrier;
#define CP_CARRY_BIT(c) (1u << (unsigned)(c))

typedef struct {
  const char *name;      /* "transformers", "llama.cpp", ... (as certificates list it) */
  const char *embedders; /* programs that run it inside and inherit its reading, or NULL */
  cp_artifact_format format;
  unsigned carriers;       /* CP_CARRY_BIT of each carrier it executes */
  unsigned skips_families; /* 1 << cp_family it does not load (ctxpatch_fire is ctxpatch's own) */
  const char *reads;       /* the keys it reads that a patch can set, for docs and messages */
} cp_runtime;

/* The table, one row per runtime, grouped by format. */
const cp_runtime *cp_runtime_table(size_t *n);
/* "safetensors", "gguf", "onnx". */
const char *cp_artifact_format_name(cp_artifact_format f);
/* "weights", "rope-linear", "graph", "ctxpatch metadata". */
const char *cp_carrier_name(cp_carrier c);
/* Where format f keeps ctxpatch metadata, for messages: "config.json \"ctxpatch\".rule", ... */
const char *cp_artifact_metadata_place(cp_artifact_format f);

/* The runtimes of format f that load `family` and execute every carrier in `carriers`, in table
 * order, into out[max]; returns how many (0: the artifact is effective in ctxpatch only). */
int cp_runtimes_executing(const cp_runtime **out, int max, cp_artifact_format f, cp_family family, unsigned carriers);
/* The runtimes of format f that load `family` (whatever they execute), as "A, B and C" text with
 * each one's embedders in parentheses, into buf[cap]. */
void cp_runtimes_text(char *buf, size_t cap, cp_artifact_format f, cp_family family);

/* The rule's top-level parts as its JSON keys, comma-separated ("lambda_mask, distance_ceiling"),
 * into buf[cap] ("" for the identity); train_len, a parameter of alibi_scale, is not listed. */
void cp_rule_part_names(char *buf, size_t cap, const cp_rule *r);

#endif
