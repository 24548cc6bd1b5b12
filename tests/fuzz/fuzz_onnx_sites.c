/* Fuzz harness: the in-place rewriter's attention-site finder (export/onnx/rewrite/onnx_sites.c)
 * on any graph the full reader accepts: the sites, then, as the rewriter asks for them, rotary
 * embeddings, the ALiBi slopes constants and each Softmax site's ALiBi entry. Besides crashes, it
 * aborts when the finder's node visits pass its linear bound (issue 33 item 12: the search was
 * super-linear): at most 1 + 2 x WALK_STEPS (8) per node plus one per node input. Seeds:
 * tests/fuzz/seeds/onnx_sites (plain-op and contrib sites, ALiBi slopes; written by
 * tests/fuzz/make_onnx_sites_seeds.py) and the seeds of fuzz_onnx; regressions in
 * tests/fuzz/regress/fuzz_onnx_sites (600 sites: refused at the 513th). */
#include <stdint.h>
#include <stdlib.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/export/onnx_rewrite.h"
#include "ctxpatch/formats/onnx_graph.h"
#include "export/onnx/rewrite/onnx_sites.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_file("model.onnx", data, size);
  if (!path) return 0;
  cp_onnx_model *m = NULL;
  if (cp_onnx_model_open_bytes(&m, path, data, size, NULL) < 0) {
    cp_error_clear();
    return 0;
  }
  const cp_onnx_graph *g = m->graph;
  uint64_t work = 0, inputs = 0;
  for (size_t k = 0; k < g->n_nodes; k++) inputs += g->nodes[k].n_inputs;
  cp_onnx_site *s = NULL;
  size_t n = 0, at = 0;
  int rc = cp_onnx_find_sites_counted(&s, &n, m, &work);
  if (work > (uint64_t)g->n_nodes * 17 + inputs) abort(); /* the linear bound */
  (void)cp_onnx_graph_rotary(g, &at);
  bool *found = rc == 0 ? calloc(g->n_initializers + 1, sizeof *found) : NULL;
  cp_onnx_alibi_entry *entry = rc == 0 ? calloc(n + 1, sizeof *entry) : NULL;
  if (found && entry && cp_onnx_find_slopes(found, g, s, n, m->path) == 0)
    (void)cp_onnx_alibi_entries(entry, g, s, n, found, m->path, "alibi_scale");
  free(found), free(entry), free(s);
  cp_onnx_model_free(m);
  cp_error_clear();
  return 0;
}
