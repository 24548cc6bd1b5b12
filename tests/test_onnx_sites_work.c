/* The in-place rewriter's site finder (export/onnx/rewrite/onnx_sites.c, issue 33 item 12) does
 * work linear in the graph, counted in node visits (cp_onnx_find_sites_counted), not timed. The
 * graphs, packed here with protobuf-c: one q.k MatMul s = x @ x2 whose output every site reads
 * (N Div consumers of it, none with a constant: the logits' type search reads them all), a value
 * dead end of 7 Adds each reading the previous one twice (2^7 paths the MatMul search walks
 * without memoisation) on every site's way up, N value_info entries, and per site
 * Softmax(Add(dead_7, Div(s, x))). Found: N sites, each with the MatMul, in under 24 visits per
 * node for N = 64 and N = 500 alike (the old search: a value_info and a whole-graph scan per site,
 * 2^7 dead-end paths per site). 600 such sites are refused as the 513th is found (the old finder
 * found all 600 and left the refusal to the rewriter), naming it: node 1546, after the 8 shared
 * nodes and 512 sites of 3. */
#include <stdint.h>
#include <unistd.h>

#include "ctxpatch/base/io.h"
#include "ctxpatch/export/onnx_rewrite.h"
#include "ctxpatch/formats/onnx_graph.h"
#include "export/onnx/rewrite/onnx_sites.h"
#include "onnx.pb-c.h"
#include "test.h"

static char tmpdir[] = "/tmp/ctxpatch-test-onnx-sites-XXXXXX";

typedef struct {
  Onnx__NodeProto *nodes;
  size_t n;
  char **strings; /* every name made, freed at the end */
  size_t n_strings;
} graph_b;

static char *name(graph_b *b, const char *fmt, int k) {
  char buf[64];
  snprintf(buf, sizeof buf, fmt, k);
  b->strings = realloc(b->strings, (b->n_strings + 1) * sizeof *b->strings);
  return b->strings[b->n_strings++] = strdup(buf);
}

static void node(graph_b *b, const char *op, char *out, char *in0, char *in1) {
  Onnx__NodeProto *n = &b->nodes[b->n++];
  onnx__node_proto__init(n);
  n->op_type = (char *)op;
  n->input = malloc(2 * sizeof *n->input), n->output = malloc(sizeof *n->output);
  n->input[0] = in0, n->input[1] = in1, n->n_input = in1 ? 2 : 1;
  n->output[0] = out, n->n_output = 1;
}

/* The graph of the header with `sites` sites, written to `path`; the number of nodes. */
static size_t write_graph(const char *path, int sites) {
  graph_b b = {calloc((size_t)sites * 3 + 16, sizeof(Onnx__NodeProto)), 0, NULL, 0};
  char *x = name(&b, "x", 0), *x2 = name(&b, "x2", 0), *s = name(&b, "s", 0);
  node(&b, "MatMul", s, x, x2);
  char *dead = x;
  for (int k = 1; k <= 7; k++) {
    char *d = name(&b, "dead_%d", k);
    node(&b, "Add", d, dead, dead);
    dead = d;
  }
  Onnx__ValueInfoProto *vi = calloc((size_t)sites + 2, sizeof *vi), **vip = calloc((size_t)sites + 2, sizeof *vip);
  for (int k = 0; k < sites; k++) {
    char *dv = name(&b, "div_%d", k), *a = name(&b, "add_%d", k), *p = name(&b, "p_%d", k);
    node(&b, "Div", dv, s, x);
    node(&b, "Add", a, dead, dv);
    node(&b, "Softmax", p, a, NULL);
    onnx__value_info_proto__init(&vi[k]), vi[k].name = name(&b, "unrelated_%d", k), vip[k] = &vi[k];
  }
  Onnx__ValueInfoProto in[3], *inp[3], out = ONNX__VALUE_INFO_PROTO__INIT, *outp = &out;
  char *in_names[2] = {x, x2};
  for (int k = 0; k < 2; k++) onnx__value_info_proto__init(&in[k]), in[k].name = in_names[k], inp[k] = &in[k];
  out.name = name(&b, "p_%d", 0);
  Onnx__NodeProto **np = malloc(b.n * sizeof *np);
  for (size_t k = 0; k < b.n; k++) np[k] = &b.nodes[k];
  Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
  g.name = "g", g.node = np, g.n_node = b.n, g.input = inp, g.n_input = 2, g.output = &outp, g.n_output = 1;
  g.value_info = vip, g.n_value_info = (size_t)sites;
  Onnx__OperatorSetIdProto os = ONNX__OPERATOR_SET_ID_PROTO__INIT, *osp = &os;
  os.has_version = 1, os.version = 17;
  Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
  m.has_ir_version = 1, m.ir_version = 8, m.graph = &g, m.opset_import = &osp, m.n_opset_import = 1;
  size_t len = protobuf_c_message_get_packed_size(&m.base);
  uint8_t *buf = malloc(len);
  protobuf_c_message_pack(&m.base, buf);
  CHECK_RC(0, cp_write_file_atomic(NULL, path, buf, len));
  size_t n_nodes = b.n;
  free(buf), free(np), free(vi), free(vip);
  for (size_t k = 0; k < b.n; k++) free(b.nodes[k].input), free(b.nodes[k].output);
  for (size_t k = 0; k < b.n_strings; k++) free(b.strings[k]);
  free(b.strings), free(b.nodes);
  return n_nodes;
}

static void test_linear(int sites) {
  char path[256];
  snprintf(path, sizeof path, "%s/g%d.onnx", tmpdir, sites);
  size_t n_nodes = write_graph(path, sites);
  cp_onnx_model *m = NULL;
  CHECK_RC(0, cp_onnx_model_open(&m, path, NULL));
  if (!m) return;
  cp_onnx_site *s = NULL;
  size_t n = 0;
  uint64_t work = 0;
  CHECK_RC(0, cp_onnx_find_sites_counted(&s, &n, m, &work));
  CHECK_MSG(n == (size_t)sites, "%zu sites of %d", n, sites);
  bool all = n == (size_t)sites;
  for (size_t k = 0; k < n; k++)
    all = all && s[k].kind == CP_ONNX_SITE_SOFTMAX && s[k].matmul == 0 && s[k].elem_type == 1;
  CHECK(all);
  CHECK_MSG(work > 0 && work <= 24 * (uint64_t)n_nodes, "%d sites, %zu nodes: %llu visits (at most 24 per node)", sites,
            n_nodes, (unsigned long long)work);
  printf("%d sites, %zu nodes: %llu visits\n", sites, n_nodes, (unsigned long long)work);
  free(s);
  cp_onnx_model_free(m);
  unlink(path);
}

static void test_limit(void) {
  char path[256];
  snprintf(path, sizeof path, "%s/g600.onnx", tmpdir);
  write_graph(path, 600);
  cp_onnx_model *m = NULL;
  CHECK_RC(0, cp_onnx_model_open(&m, path, NULL));
  if (!m) return;
  cp_onnx_site *s = NULL;
  size_t n = 0;
  uint64_t work = 0;
  CHECK_RC(CP_EONNX_SITE, cp_onnx_find_sites_counted(&s, &n, m, &work));
  CHECK_MSG(strstr(cp_error_message(),
                   "g600.onnx: more than 512 attention sites (at most 512 layers): node 1546 "
                   "(Softmax) is one more"),
            "%s", cp_error_message());
  CHECK(s == NULL && n == 0);
  cp_onnx_model_free(m);
  unlink(path);
}

int main(void) {
  if (!mkdtemp(tmpdir)) test_skip("no temporary folder");
  test_linear(64);
  test_linear(500);
  test_limit();
  rmdir(tmpdir);
  return test_finish();
}
