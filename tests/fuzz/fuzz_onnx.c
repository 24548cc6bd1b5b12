/* Fuzz harness: the full hardened ONNX reader (include/ctxpatch/formats/onnx_graph.h: the bounded
 * protobuf walk, graphs and subgraphs, SSA and order, tensors, external data confined to the
 * folder) and inspect's summary made from it (cp_onnx_read_info). Every graph is walked and the
 * elements of every small initializer and tensor attribute read as float and int64. Seeds:
 * tests/fuzz/seeds/onnx (a ctxpatch export) and, in scripts/fuzz.sh, the hostile corpus of
 * tests/onnx/make_onnx_cases.py. */
#include <stdint.h>
#include <stdlib.h>

#include "ctxpatch/formats/onnx.h"
#include "ctxpatch/formats/onnx_digest.h"
#include "ctxpatch/formats/onnx_graph.h"
#include "fuzz_input.h"

static void read_tensor(const cp_onnx_tensor *t) {
  static float f[4096];
  static int64_t i[4096];
  if (t->numel > 4096) return;
  (void)cp_onnx_tensor_f32(f, t);
  (void)cp_onnx_tensor_i64(i, t);
}

static void walk(const cp_onnx_graph *g) {
  for (size_t k = 0; k < g->n_initializers; k++) read_tensor(&g->initializers[k]);
  for (size_t k = 0; k < g->n_nodes; k++) {
    const cp_onnx_node *n = &g->nodes[g->order[k]];
    for (size_t a = 0; a < n->n_attrs; a++) {
      const cp_onnx_attribute *at = &n->attrs[a];
      if (at->t) read_tensor(at->t);
      if (at->g) walk(at->g);
      for (size_t j = 0; at->type == CP_ONNX_ATYPE_TENSORS && j < at->n; j++) read_tensor(&at->tensors[j]);
      for (size_t j = 0; at->type == CP_ONNX_ATYPE_GRAPHS && j < at->n; j++) walk(&at->graphs[j]);
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_file("model.onnx", data, size);
  if (!path) return 0;
  cp_onnx_model *m = NULL;
  if (cp_onnx_model_open(&m, path, NULL) == 0) {
    walk(m->graph);
    (void)cp_onnx_model_meta(m, "ctxpatch.rule");
    char hex[65]; /* the graph digest's field scanner (formats/onnx_span.c) over the same bytes */
    (void)cp_onnx_graph_digest(hex, m, data, size);
    cp_onnx_model_free(m);
  }
  cp_onnx_info info;
  if (cp_onnx_read_info(&info, path) == 0) cp_onnx_info_free(&info);
  return 0;
}
