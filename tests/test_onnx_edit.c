/* The byte-preserving ONNX editor (include/ctxpatch/formats/onnx_edit.h) on a model packed here
 * with protobuf-c (plus an unknown top-level field appended by hand): a node spliced in before
 * another, an input renamed, an input set past a node's last, an attribute set, an initializer
 * added and one replaced in place, a metadata entry replaced in place and one appended. The
 * output unpacks to what the edits say, every untouched field (nodes, initializer, the unknown
 * field) occurs in it byte for byte, the full reader accepts it, and two serialisations are
 * equal. Refused: a truncated file, a model with two graph fields.
 * The graph digest (include/ctxpatch/formats/onnx_digest.h) of a model with an external
 * initializer, written by cp_onnx_edit_write_digested: the stored value is SHA-256 over the model
 * packed by protobuf-c without its ctxpatch.* entries, then 0, the location, 0 and the data file's
 * hex SHA-256 (the recipe, built here independently of the span walk); a flipped data byte changes
 * it; a model with two ctxpatch.graph_sha256 entries is refused, nothing written. */
#include <stdint.h>
#include <unistd.h>

#include "ctxpatch/base/io.h"
#include "ctxpatch/formats/onnx_digest.h"
#include "ctxpatch/formats/onnx_edit.h"
#include "ctxpatch/formats/onnx_graph.h"
#include "onnx.pb-c.h"
#include "test.h"

static char tmpdir[] = "/tmp/ctxpatch-test-onnx-edit-XXXXXX";

static const char *tpath(const char *name) {
  static char p[4][256];
  static int k;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
  return p[k];
}

/* Packs m into a heap buffer. */
static uint8_t *pack(const ProtobufCMessage *m, size_t *n) {
  *n = protobuf_c_message_get_packed_size(m);
  uint8_t *b = malloc(*n + 16);
  protobuf_c_message_pack(m, b);
  return b;
}

static bool contains(const uint8_t *hay, size_t n, const uint8_t *needle, size_t k) {
  for (size_t i = 0; k <= n && i + k <= n; i++)
    if (!memcmp(hay + i, needle, k)) return true;
  return false;
}

/* Three nodes x -Relu-> a -Softmax-> b -Identity-> y, initializer w = [1, 2], metadata
 * k = v and other = o; the model's bytes with an unknown varint field 99 = 7 appended. */
static uint8_t *make_model(size_t *n, uint8_t **node_bytes, size_t *node_len, uint8_t **init_bytes, size_t *init_len) {
  static char *in0[] = {"x"}, *out0[] = {"a"}, *in1[] = {"a"}, *out1[] = {"b"}, *in2[] = {"b"}, *out2[] = {"y"};
  Onnx__NodeProto nd[3] = {ONNX__NODE_PROTO__INIT, ONNX__NODE_PROTO__INIT, ONNX__NODE_PROTO__INIT}, *np[3];
  char *names[3] = {"relu", "softmax", "identity"}, *ops[3] = {"Relu", "Softmax", "Identity"};
  char **ins[3] = {in0, in1, in2}, **outs[3] = {out0, out1, out2};
  for (int k = 0; k < 3; k++) {
    nd[k].name = names[k], nd[k].op_type = ops[k], nd[k].input = ins[k], nd[k].n_input = 1;
    nd[k].output = outs[k], nd[k].n_output = 1, np[k] = &nd[k];
  }
  float w[2] = {1.0f, 2.0f};
  int64_t dims[1] = {2};
  Onnx__TensorProto t = ONNX__TENSOR_PROTO__INIT, *tp = &t;
  t.name = "w", t.has_data_type = 1, t.data_type = 1, t.dims = dims, t.n_dims = 1;
  t.has_raw_data = 1, t.raw_data.data = (uint8_t *)w, t.raw_data.len = sizeof w;
  Onnx__ValueInfoProto vx = ONNX__VALUE_INFO_PROTO__INIT, vy = ONNX__VALUE_INFO_PROTO__INIT, *vxp = &vx, *vyp = &vy;
  vx.name = "x", vy.name = "y";
  Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
  g.name = "g", g.node = np, g.n_node = 3, g.initializer = &tp, g.n_initializer = 1;
  g.input = &vxp, g.n_input = 1, g.output = &vyp, g.n_output = 1;
  Onnx__StringStringEntryProto m1 = ONNX__STRING_STRING_ENTRY_PROTO__INIT, m2 = ONNX__STRING_STRING_ENTRY_PROTO__INIT;
  m1.key = "k", m1.value = "v", m2.key = "other", m2.value = "o";
  Onnx__StringStringEntryProto *mp[2] = {&m1, &m2};
  Onnx__OperatorSetIdProto os = ONNX__OPERATOR_SET_ID_PROTO__INIT, *osp = &os;
  os.has_version = 1, os.version = 17;
  Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
  m.has_ir_version = 1, m.ir_version = 8, m.graph = &g, m.opset_import = &osp, m.n_opset_import = 1;
  m.metadata_props = mp, m.n_metadata_props = 2, m.producer_name = "test_onnx_edit";
  for (int k = 0; k < 3; k++) node_bytes[k] = pack(&nd[k].base, &node_len[k]);
  *init_bytes = pack(&t.base, init_len);
  uint8_t *b = pack(&m.base, n);
  b[(*n)++] = (uint8_t)((99 << 3) & 0x7f) | 0x80, b[(*n)++] = (uint8_t)(99 >> 4), b[(*n)++] = 7; /* field 99, varint 7 */
  return b;
}

static void test_edits(void) {
  uint8_t *nodes[3], *init;
  size_t node_len[3], init_len, n;
  uint8_t *model = make_model(&n, nodes, node_len, &init, &init_len);
  CHECK_RC(0, cp_write_file_atomic(NULL, tpath("in.onnx"), model, n));
  cp_onnx_edit *e = NULL;
  CHECK_RC(0, cp_onnx_edit_open(&e, tpath("in.onnx")));
  if (!e) goto done;
  CHECK(cp_onnx_edit_n_nodes(e) == 3);
  const char *mul_in[] = {"a", "c"}, *mul_out[] = {"a2"};
  cp_onnx_edit_node mul = {"mul", "Mul", NULL, mul_in, 2, mul_out, 1, NULL, 0};
  float c = 0.5f, w2[2] = {3.0f, 4.0f};
  int64_t two = 2;
  CHECK_RC(0, cp_onnx_edit_insert_node(e, 1, &mul));
  CHECK_RC(0, cp_onnx_edit_set_input(e, 1, 0, "a2"));
  CHECK_RC(0, cp_onnx_edit_set_input(e, 1, 2, "extra"));
  CHECK_RC(0, cp_onnx_edit_set_attr_float(e, 1, "scale", 0.25f));
  CHECK_RC(0, cp_onnx_edit_add_initializer(e, "c", 1, NULL, 0, &c));
  CHECK_RC(0, cp_onnx_edit_replace_initializer(e, "w", 1, &two, 1, w2));
  CHECK_RC(CP_ENOTFOUND, cp_onnx_edit_replace_initializer(e, "nope", 1, &two, 1, w2));
  CHECK_RC(0, cp_onnx_edit_set_meta(e, "k", "v2"));
  CHECK_RC(0, cp_onnx_edit_set_meta(e, "new", "x"));
  CHECK_RC(CP_EARG, cp_onnx_edit_set_input(e, 7, 0, "a"));
  uint8_t *out = NULL, *out2 = NULL;
  size_t len = 0, len2 = 0;
  CHECK_RC(0, cp_onnx_edit_serialize(&out, &len, e));
  CHECK_RC(0, cp_onnx_edit_serialize(&out2, &len2, e));
  CHECK(out && out2 && len == len2 && !memcmp(out, out2, len));
  /* Untouched: the first and last node, the unknown field (the last 3 bytes, still last). */
  CHECK(out && contains(out, len, nodes[0], node_len[0]) && contains(out, len, nodes[2], node_len[2]));
  CHECK(out && !contains(out, len, nodes[1], node_len[1]) && !contains(out, len, init, init_len));
  CHECK(out && contains(out, len, model + n - 3, 3));
  Onnx__ModelProto *mp = out ? onnx__model_proto__unpack(NULL, len, out) : NULL;
  CHECK(mp && mp->graph && mp->graph->n_node == 4);
  if (mp && mp->graph && mp->graph->n_node == 4) {
    Onnx__GraphProto *g = mp->graph;
    CHECK(!strcmp(g->node[0]->name, "relu") && !strcmp(g->node[1]->name, "mul") && !strcmp(g->node[2]->name, "softmax"));
    CHECK(g->node[2]->n_input == 3 && !strcmp(g->node[2]->input[0], "a2") && !strcmp(g->node[2]->input[1], "") &&
          !strcmp(g->node[2]->input[2], "extra"));
    CHECK(g->node[2]->n_attribute == 1 && g->node[2]->attribute[0]->f == 0.25f);
    CHECK(g->n_initializer == 2 && !strcmp(g->initializer[0]->name, "w") && !strcmp(g->initializer[1]->name, "c"));
    CHECK(g->initializer[0]->raw_data.len == 8 && !memcmp(g->initializer[0]->raw_data.data, w2, 8));
    CHECK(mp->n_metadata_props == 3 && !strcmp(mp->metadata_props[0]->key, "k") &&
          !strcmp(mp->metadata_props[0]->value, "v2") && !strcmp(mp->metadata_props[1]->key, "other") &&
          !strcmp(mp->metadata_props[2]->key, "new"));
    CHECK(mp->base.n_unknown_fields == 1);
  }
  if (mp) onnx__model_proto__free_unpacked(mp, NULL);
  /* The full reader accepts the written model (the Softmax's extra input dangles: drop it). */
  CHECK_RC(0, cp_onnx_edit_set_input(e, 1, 2, ""));
  CHECK_RC(0, cp_onnx_edit_write(e, tpath("out.onnx")));
  cp_onnx_model *m = NULL;
  CHECK_RC(0, cp_onnx_model_open(&m, tpath("out.onnx"), NULL));
  CHECK(m && m->graph->n_nodes == 4 && cp_onnx_model_meta(m, "new") && !strcmp(cp_onnx_model_meta(m, "k"), "v2"));
  cp_onnx_model_free(m);
  free(out), free(out2);
done:
  cp_onnx_edit_free(e);
  for (int k = 0; k < 3; k++) free(nodes[k]);
  free(init), free(model);
}

static void test_refusals(void) {
  uint8_t *nodes[3], *init;
  size_t node_len[3], init_len, n;
  uint8_t *model = make_model(&n, nodes, node_len, &init, &init_len);
  cp_onnx_edit *e = NULL;
  CHECK_RC(0, cp_write_file_atomic(NULL, tpath("trunc.onnx"), model, n - 5));
  CHECK_RC(CP_EONNX_WIRE, cp_onnx_edit_open(&e, tpath("trunc.onnx")));
  CHECK(e == NULL && strstr(cp_error_message(), "trunc.onnx: offset "));
  /* Two graph fields: the first model's bytes twice. */
  uint8_t *two = malloc(2 * n);
  memcpy(two, model, n - 3), memcpy(two + n - 3, model, n - 3);
  CHECK_RC(0, cp_write_file_atomic(NULL, tpath("two.onnx"), two, 2 * (n - 3)));
  CHECK_RC(CP_EONNX_GRAPH, cp_onnx_edit_open(&e, tpath("two.onnx")));
  CHECK(e == NULL && strstr(cp_error_message(), "2 graph fields"));
  free(two);
  for (int k = 0; k < 3; k++) free(nodes[k]);
  free(init), free(model);
}

/* Identity(w) -> y with w [2] float external in "w.bin"; metadata k = v, then the entries `own`
 * (keys, each with the value "1"). */
static uint8_t *make_external(size_t *n, const char *const *own, size_t n_own) {
  static char *in0[] = {"w"}, *out0[] = {"y"};
  Onnx__NodeProto nd = ONNX__NODE_PROTO__INIT, *np = &nd;
  nd.name = "id", nd.op_type = "Identity", nd.input = in0, nd.n_input = 1, nd.output = out0, nd.n_output = 1;
  Onnx__StringStringEntryProto loc = ONNX__STRING_STRING_ENTRY_PROTO__INIT, len = ONNX__STRING_STRING_ENTRY_PROTO__INIT;
  loc.key = "location", loc.value = "w.bin", len.key = "length", len.value = "8";
  Onnx__StringStringEntryProto *ext[2] = {&loc, &len};
  int64_t dims[1] = {2};
  Onnx__TensorProto t = ONNX__TENSOR_PROTO__INIT, *tp = &t;
  t.name = "w", t.has_data_type = 1, t.data_type = 1, t.dims = dims, t.n_dims = 1;
  t.external_data = ext, t.n_external_data = 2, t.has_data_location = 1;
  t.data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  Onnx__ValueInfoProto vy = ONNX__VALUE_INFO_PROTO__INIT, *vyp = &vy;
  vy.name = "y";
  Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
  g.name = "g", g.node = &np, g.n_node = 1, g.initializer = &tp, g.n_initializer = 1, g.output = &vyp, g.n_output = 1;
  Onnx__StringStringEntryProto e[4], *ep[4];
  for (size_t k = 0; k <= n_own && k < 4; k++) {
    Onnx__StringStringEntryProto init = ONNX__STRING_STRING_ENTRY_PROTO__INIT;
    e[k] = init, ep[k] = &e[k];
    e[k].key = k ? (char *)own[k - 1] : "k", e[k].value = k ? "1" : "v";
  }
  Onnx__OperatorSetIdProto os = ONNX__OPERATOR_SET_ID_PROTO__INIT, *osp = &os;
  os.has_version = 1, os.version = 17;
  Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
  m.has_ir_version = 1, m.ir_version = 8, m.graph = &g, m.opset_import = &osp, m.n_opset_import = 1;
  m.metadata_props = ep, m.n_metadata_props = n_own + 1;
  return pack(&m.base, n);
}

static void test_digest(void) {
  float w[2] = {0.5f, -3.0f};
  const char *own[] = {"ctxpatch.rule", "ctxpatch.x"};
  CHECK_RC(0, cp_write_file_atomic(NULL, tpath("w.bin"), w, sizeof w));
  size_t n_in, n_ref;
  uint8_t *in = make_external(&n_in, own, 2), *ref = make_external(&n_ref, NULL, 0);
  /* The recipe: the model without its ctxpatch.* entries (they are packed last), then the file. */
  char wh[65], want[65], got[65], again[65];
  cp_sha256_hex(wh, w, sizeof w);
  uint8_t buf[4096];
  size_t k = n_ref;
  memcpy(buf, ref, n_ref);
  memcpy(buf + k, "\0w.bin\0", 7), k += 7;
  memcpy(buf + k, wh, 64), k += 64;
  cp_sha256_hex(want, buf, k);
  CHECK_RC(0, cp_write_file_atomic(NULL, tpath("d_in.onnx"), in, n_in));
  cp_onnx_edit *e = NULL;
  cp_onnx_model *m = NULL;
  CHECK_RC(0, cp_onnx_edit_open(&e, tpath("d_in.onnx")));
  if (e) CHECK_RC(0, cp_onnx_edit_write_digested(got, e, tpath("d_out.onnx")));
  CHECK(!strcmp(got, want));
  CHECK_RC(0, cp_onnx_file_digest(again, &m, tpath("d_out.onnx")));
  CHECK(m && !strcmp(again, want) && cp_onnx_model_meta(m, CP_ONNX_GRAPH_DIGEST_KEY) &&
        !strcmp(cp_onnx_model_meta(m, CP_ONNX_GRAPH_DIGEST_KEY), want));
  cp_onnx_model_free(m), m = NULL;
  cp_onnx_edit_free(e), e = NULL;
  /* One bit of the data file flipped: another digest. */
  w[1] = -3.0000002f;
  CHECK_RC(0, cp_write_file_atomic(NULL, tpath("w.bin"), w, sizeof w));
  CHECK_RC(0, cp_onnx_file_digest(again, &m, tpath("d_out.onnx")));
  CHECK(strcmp(again, want) != 0);
  cp_onnx_model_free(m);
  /* Two digest entries: a reader taking the first would see the placeholder. */
  const char *twice[] = {CP_ONNX_GRAPH_DIGEST_KEY, CP_ONNX_GRAPH_DIGEST_KEY};
  free(in);
  in = make_external(&n_in, twice, 2);
  CHECK_RC(0, cp_write_file_atomic(NULL, tpath("d_two.onnx"), in, n_in));
  CHECK_RC(0, cp_onnx_edit_open(&e, tpath("d_two.onnx")));
  if (e) CHECK_RC(CP_EONNX_METADATA, cp_onnx_edit_write_digested(NULL, e, tpath("d_bad.onnx")));
  CHECK(strstr(cp_error_message(), "2 entries with a value") && access(tpath("d_bad.onnx"), F_OK) != 0);
  cp_onnx_edit_free(e);
  free(in), free(ref);
}

/* cp_onnx_edit_set_location (issue 33 item 4): the one external reference moved from w.bin to
 * w2.bin, the graph reading the new file, a location absent moves nothing, and a model-local
 * function mentioning the file is refused (its references could not be moved). */
static void test_location(void) {
  float w[2] = {0.25f, 2.0f};
  CHECK_RC(0, cp_write_file_atomic(NULL, tpath("w.bin"), w, sizeof w));
  CHECK_RC(0, cp_write_file_atomic(NULL, tpath("w2.bin"), w, sizeof w));
  size_t n;
  uint8_t *in = make_external(&n, NULL, 0);
  CHECK_RC(0, cp_write_file_atomic(NULL, tpath("l_in.onnx"), in, n));
  cp_onnx_edit *e = NULL;
  cp_onnx_model *m = NULL;
  size_t moved = 9;
  CHECK_RC(0, cp_onnx_edit_open(&e, tpath("l_in.onnx")));
  if (e) {
    CHECK_RC(0, cp_onnx_edit_set_location(&moved, e, "nothing.bin", "w3.bin"));
    CHECK(moved == 0);
    CHECK_RC(0, cp_onnx_edit_set_location(&moved, e, "w.bin", "w2.bin"));
    CHECK(moved == 1);
    CHECK_RC(0, cp_onnx_edit_write(e, tpath("l_out.onnx")));
  }
  cp_onnx_edit_free(e), e = NULL;
  CHECK_RC(0, cp_onnx_model_open(&m, tpath("l_out.onnx"), NULL));
  CHECK(m && m->n_data_files == 1 && !strcmp(m->data_files[0], "w2.bin"));
  cp_onnx_model_free(m);
  /* A FunctionProto (ModelProto field 25) whose bytes name w.bin, appended to the model. */
  Onnx__FunctionProto f = ONNX__FUNCTION_PROTO__INIT;
  f.name = "f", f.domain = "d", f.doc_string = "reads w.bin";
  size_t nf;
  uint8_t *fb = pack(&f.base, &nf), *with = malloc(n + nf + 3);
  if (fb && with && nf < 128) {
    memcpy(with, in, n);
    with[n] = 0xca, with[n + 1] = 0x01, with[n + 2] = (uint8_t)nf; /* field 25, length-delimited */
    memcpy(with + n + 3, fb, nf);
    CHECK_RC(0, cp_write_file_atomic(NULL, tpath("l_fn.onnx"), with, n + nf + 3));
    CHECK_RC(0, cp_onnx_edit_open(&e, tpath("l_fn.onnx")));
    if (e) CHECK_RC(CP_EUNSUPPORTED, cp_onnx_edit_set_location(&moved, e, "w.bin", "w2.bin"));
    cp_onnx_edit_free(e);
  } else {
    CHECK(!"packing the function");
  }
  free(fb), free(with), free(in);
}

int main(void) {
  if (!mkdtemp(tmpdir)) return 1;
  test_edits();
  test_refusals();
  test_digest();
  test_location();
  const char *names[] = {"in.onnx",    "out.onnx",   "trunc.onnx", "two.onnx",  "w.bin",      "d_in.onnx",
                         "d_out.onnx", "d_two.onnx", "w2.bin",     "l_in.onnx", "l_out.onnx", "l_fn.onnx"};
  for (size_t k = 0; k < sizeof names / sizeof *names; k++) unlink(tpath(names[k]));
  rmdir(tmpdir);
  return test_finish();
}
