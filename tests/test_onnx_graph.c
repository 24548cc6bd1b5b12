/* The full ONNX reader (include/ctxpatch/formats/onnx_graph.h) on models made by
 * tests/onnx/make_onnx_cases.py with python3-onnx: the structure of a graph with subgraphs and
 * every attribute kind, the topological order of nodes out of file order (and require_sorted
 * refusing them), and every initializer's elements as float and int64 against numpy's values
 * (raw, typed and external storage, f32/f16/bf16/f64/int/bool, a tensor at 2.5 GiB in a sparse
 * 3 GiB data file). */
#include <inttypes.h>
#include <stdint.h>

#include "ctxpatch/formats/onnx_graph.h"
#include "test.h"

static char dir[4096];

static const char *path_of(const char *rel) {
  static char p[8192];
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  return p;
}

static const cp_onnx_node *node_named(const cp_onnx_graph *g, const char *name, size_t *index) {
  for (size_t k = 0; k < g->n_nodes; k++)
    if (!strcmp(g->nodes[k].name, name)) {
      if (index) *index = k;
      return &g->nodes[k];
    }
  return NULL;
}

/* Every node input made by a node of g comes from one earlier in g->order. */
static bool order_valid(const cp_onnx_graph *g) {
  size_t pos[64];
  if (g->n_nodes > 64) return false;
  for (size_t k = 0; k < g->n_nodes; k++) pos[g->order[k]] = k;
  for (size_t i = 0; i < g->n_nodes; i++)
    for (size_t a = 0; a < g->nodes[i].n_inputs; a++)
      for (size_t j = 0; j < g->n_nodes; j++)
        for (size_t o = 0; o < g->nodes[j].n_outputs; o++)
          if (!strcmp(g->nodes[j].outputs[o], g->nodes[i].inputs[a]) && pos[j] >= pos[i]) return false;
  return true;
}

static void test_structure(void) {
  cp_onnx_model *m = NULL;
  CHECK_RC(0, cp_onnx_model_open(&m, path_of("good/structure.onnx"), NULL));
  if (!m) return;
  CHECK(m->ir_version >= 7 && !strcmp(m->producer_name, "make_onnx_cases") && !strcmp(m->producer_version, "1.0"));
  CHECK(cp_onnx_model_opset(m, "") == 17 && cp_onnx_model_opset(m, "ai.onnx") == 17);
  CHECK(cp_onnx_model_opset(m, "test.ctxpatch") == 3 && cp_onnx_model_opset(m, "com.microsoft") == -1);
  CHECK(m->n_metadata == 2 && cp_onnx_model_meta(m, "ctxpatch.k") && !strcmp(cp_onnx_model_meta(m, "ctxpatch.k"), "v"));
  const cp_onnx_graph *g = m->graph;
  CHECK(!strcmp(g->name, "main") && g->depth == 0 && g->n_nodes == 4 && g->n_initializers == 2);
  CHECK(g->n_inputs == 2 && g->inputs[0].is_tensor && g->inputs[0].elem_type == 1 && g->inputs[0].ndim == 2);
  CHECK(g->inputs[0].dims[0].param && !strcmp(g->inputs[0].dims[0].param, "batch") && g->inputs[0].dims[1].value == 4);
  CHECK(g->inputs[1].ndim == 0 && g->n_outputs == 2 && g->outputs[1].ndim == -1);
  CHECK(g->n_value_info == 1 && !strcmp(g->value_info[0].name, "h"));
  /* File order: If (needs h and cond, made later), Relu, Greater, Kinds: not sorted. */
  CHECK(!g->sorted && order_valid(g));
  size_t i_if = 0, i_relu = 0, i_gt = 0;
  const cp_onnx_node *nif = node_named(g, "if", &i_if), *kinds = node_named(g, "kinds", NULL);
  CHECK(nif && node_named(g, "relu", &i_relu) && node_named(g, "gt", &i_gt) && kinds);
  if (!nif || !kinds) goto done;
  size_t pos_if = 0, pos_relu = 0, pos_gt = 0;
  for (size_t k = 0; k < g->n_nodes; k++) {
    if (g->order[k] == i_if) pos_if = k;
    if (g->order[k] == i_relu) pos_relu = k;
    if (g->order[k] == i_gt) pos_gt = k;
  }
  /* The If waits for Relu (its subgraphs read h, an outer name) and for Greater (its input). */
  CHECK(pos_relu < pos_if && pos_gt < pos_if);
  const cp_onnx_attribute *a = cp_onnx_node_attr(nif, "then_branch");
  CHECK(a && a->type == CP_ONNX_ATYPE_GRAPH && a->g && a->g->depth == 1 && !strcmp(a->g->name, "then"));
  if (a && a->g) CHECK(a->g->n_nodes == 1 && !strcmp(a->g->nodes[0].op_type, "Add") && a->g->order[0] == 0);
  CHECK(!strcmp(kinds->domain, "test.ctxpatch") && kinds->n_attrs == 10);
  a = cp_onnx_node_attr(kinds, "f");
  CHECK(a && a->type == CP_ONNX_ATYPE_FLOAT && a->f == 0.5f);
  a = cp_onnx_node_attr(kinds, "i");
  CHECK(a && a->type == CP_ONNX_ATYPE_INT && a->i == -7);
  a = cp_onnx_node_attr(kinds, "s");
  CHECK(a && a->type == CP_ONNX_ATYPE_STRING && a->s.len == 4 && !memcmp(a->s.data, "text", 4));
  a = cp_onnx_node_attr(kinds, "t");
  int64_t iv[3] = {0};
  CHECK(a && a->type == CP_ONNX_ATYPE_TENSOR && a->t->numel == 3 && cp_onnx_tensor_i64(iv, a->t) == 0 &&
        iv[0] == 0 && iv[2] == 2);
  a = cp_onnx_node_attr(kinds, "floats");
  CHECK(a && a->type == CP_ONNX_ATYPE_FLOATS && a->n == 2 && a->floats[1] == -2.0f);
  a = cp_onnx_node_attr(kinds, "ints");
  CHECK(a && a->type == CP_ONNX_ATYPE_INTS && a->n == 3 && a->ints[2] == 3);
  a = cp_onnx_node_attr(kinds, "strings");
  CHECK(a && a->type == CP_ONNX_ATYPE_STRINGS && a->n == 2 && a->strings[1].len == 2 && !memcmp(a->strings[1].data, "bc", 2));
  a = cp_onnx_node_attr(kinds, "tensors");
  float fv = 0;
  CHECK(a && a->type == CP_ONNX_ATYPE_TENSORS && a->n == 1 && cp_onnx_tensor_f32(&fv, &a->tensors[0]) == 0 && fv == 2.0f);
  a = cp_onnx_node_attr(kinds, "graphs");
  CHECK(a && a->type == CP_ONNX_ATYPE_GRAPHS && a->n == 1 && !strcmp(a->graphs[0].name, "else"));
  a = cp_onnx_node_attr(kinds, "g");
  CHECK(a && a->type == CP_ONNX_ATYPE_GRAPH && a->g->n_outputs == 1);
  CHECK(cp_onnx_graph_initializer(g, "w") && cp_onnx_graph_initializer(g, "w")->numel == 4 &&
        !cp_onnx_graph_initializer(g, "nope"));
done:
  cp_onnx_model_free(m);
  /* The same graph with require_sorted: refused, naming the If and the node it waits for. */
  cp_onnx_read_params p;
  cp_onnx_read_params_init(&p);
  p.require_sorted = true;
  m = NULL;
  CHECK_RC(CP_EONNX_GRAPH, cp_onnx_model_open(&m, path_of("good/structure.onnx"), &p));
  CHECK(!m && strstr(cp_error_message(), "node 'if' uses an output of node") &&
        strstr(cp_error_message(), "not in topological order"));
}

static bool read_bin(void *dst, size_t n, const char *rel) {
  FILE *f = fopen(path_of(rel), "rb");
  if (!f) return false;
  bool ok = fread(dst, 1, n, f) == n;
  fclose(f);
  return ok;
}

static void test_elements(void) {
  cp_onnx_model *m = NULL;
  CHECK_RC(0, cp_onnx_model_open(&m, path_of("good/elements/model.onnx"), NULL));
  FILE *tsv = fopen(path_of("good/elements/elements.tsv"), "r");
  CHECK(m && tsv);
  if (!m || !tsv) goto done;
  CHECK(m->n_data_files == 2 && !strcmp(m->data_files[0], "model.onnx.data") && !strcmp(m->data_files[1], "big.bin"));
  char name[128], rel[256];
  unsigned long numel;
  int is_int, n = 0;
  while (fscanf(tsv, "%127s %lu %d", name, &numel, &is_int) == 3) {
    n++;
    const cp_onnx_tensor *t = cp_onnx_graph_initializer(m->graph, name);
    CHECK_MSG(t && t->numel == numel, "%s", name);
    if (!t || numel > 16) continue;
    float got[16], want[16];
    snprintf(rel, sizeof rel, "good/elements/%s.f32", name);
    CHECK_MSG(read_bin(want, numel * 4, rel), "%s", rel);
    CHECK_RC(0, cp_onnx_tensor_f32(got, t));
    CHECK_MSG(!memcmp(got, want, numel * 4), "%s: elements differ from numpy's (first %g vs %g)", name,
              numel ? got[0] : 0.0, numel ? want[0] : 0.0);
    if (is_int) {
      int64_t gi[16], wi[16];
      snprintf(rel, sizeof rel, "good/elements/%s.i64", name);
      CHECK_MSG(read_bin(wi, numel * 8, rel), "%s", rel);
      CHECK_RC(0, cp_onnx_tensor_i64(gi, t));
      CHECK_MSG(!memcmp(gi, wi, numel * 8), "%s: int64 elements differ", name);
    } else if (numel) {
      int64_t gi[16];
      CHECK_RC(CP_EONNX_DTYPE, cp_onnx_tensor_i64(gi, t)); /* floats are not integers */
    }
  }
  CHECK(n >= 20);
  const cp_onnx_tensor *big = cp_onnx_graph_initializer(m->graph, "f32_past_2gib");
  CHECK(big && big->storage == CP_ONNX_STORE_EXTERNAL && big->offset == ((uint64_t)5 << 29) && big->data &&
        ((uintptr_t)big->data % 4) == 0);
  const cp_onnx_tensor *raw = cp_onnx_graph_initializer(m->graph, "f16_raw");
  CHECK(raw && raw->storage == CP_ONNX_STORE_RAW && raw->has_dtype && raw->dtype == CP_F16 && raw->nbytes == 8);
  const cp_onnx_tensor *typed = cp_onnx_graph_initializer(m->graph, "bf16_typed");
  CHECK(typed && typed->storage == CP_ONNX_STORE_TYPED && !typed->data && typed->dtype == CP_BF16);
  const cp_onnx_tensor *empty = cp_onnx_graph_initializer(m->graph, "empty");
  CHECK(empty && empty->storage == CP_ONNX_STORE_NONE && empty->numel == 0 && empty->ndim == 2);
done:
  if (tsv) fclose(tsv);
  cp_onnx_model_free(m);
}

int main(void) {
  const char *py = getenv("CTXPATCH_PYTHON"), *src = getenv("CTXPATCH_SOURCE_DIR"), *build = getenv("CTXPATCH_BUILD_DIR");
  if (!py || !src || !build) test_skip("CTXPATCH_PYTHON / SOURCE_DIR / BUILD_DIR not set (run under ctest)");
  char cmd[9000];
  snprintf(cmd, sizeof cmd, "'%s' -c 'import onnx, numpy' 2>/dev/null", py);
  if (system(cmd) != 0) test_skip("python3 lacks onnx/numpy (Debian python3-onnx)");
  snprintf(dir, sizeof dir, "%s/onnx_graph_cases", build);
  snprintf(cmd, sizeof cmd, "'%s' '%s/tests/onnx/make_onnx_cases.py' '%s' >/dev/null", py, src, dir);
  CHECK(system(cmd) == 0);
  test_structure();
  test_elements();
  return test_finish();
}
