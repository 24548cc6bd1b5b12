/* The ONNX reader's memory bounds (formats/onnx_wire.c, issue 33 item 7) on models written here
 * byte by byte: a flood of 1M empty NodeProtos (2 MB) is refused during the wire walk, naming the
 * file, the offset and the node's index, with the process's peak memory grown by under 64 MB (the
 * old reader unpacked it, about 400 MB, and accepted it); a node whose op_type is set and then
 * cleared (the last occurrence counts) is refused the same way; a model of 20,000 well-formed
 * nodes reads, and is refused (CP_EOVERFLOW, the byte counts in the line) under a
 * CTXPATCH_MEMORY_LIMIT below what its fields call for. */
#include <stdint.h>
#include <sys/resource.h>

#include "ctxpatch/formats/onnx_graph.h"
#include "test.h"

typedef struct {
  uint8_t *b;
  size_t n, cap;
} buf;

static void put(buf *x, const void *p, size_t n) {
  if (x->n + n > x->cap) {
    x->cap = (x->n + n) * 2;
    x->b = realloc(x->b, x->cap);
  }
  memcpy(x->b + x->n, p, n), x->n += n;
}

static void varint(buf *x, uint64_t v) {
  uint8_t t[10];
  size_t n = 0;
  do {
    t[n] = (uint8_t)(v & 0x7f), v >>= 7;
    if (v) t[n] |= 0x80;
    n++;
  } while (v);
  put(x, t, n);
}

/* Field `field`, wire type 2, holding p[0..n). */
static void ld(buf *x, unsigned field, const void *p, size_t n) {
  varint(x, field << 3 | 2), varint(x, n), put(x, p, n);
}

/* A ModelProto: ir_version 8, opset 17, graph (field 7) = g. */
static buf model_of(const buf *g) {
  buf m = {0}, os = {0};
  varint(&m, 1 << 3), varint(&m, 8);
  ld(&m, 7, g->b, g->n);
  varint(&os, 2 << 3), varint(&os, 17);
  ld(&m, 8, os.b, os.n);
  free(os.b);
  return m;
}

static long peak_kb(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

static void test_empty_nodes(void) {
  buf g = {0};
  for (size_t k = 0; k < ((size_t)1 << 20); k++) ld(&g, 1, "", 0); /* GraphProto.node, an empty NodeProto */
  buf m = model_of(&g);
  cp_onnx_model *om = NULL;
  long before = peak_kb();
  CHECK_RC(CP_EONNX_GRAPH, cp_onnx_model_open_bytes(&om, "flood.onnx", m.b, m.n, NULL));
  CHECK_MSG(strstr(cp_error_message(), "flood.onnx: offset ") && strstr(cp_error_message(),
                                                                        "node 0 of its graph has "
                                                                        "an empty op_type"),
            "%s", cp_error_message());
  long grown = peak_kb() - before;
  CHECK_MSG(grown < 64 * 1024, "peak memory grew by %ld kB reading a 2 MB flood of empty nodes", grown);
  cp_onnx_model_free(om);
  free(g.b), free(m.b);

  /* Node 2 empty after two good ones; node 0 whose op_type is set, then set again to "". */
  buf n = {0}, g2 = {0};
  ld(&n, 4, "Relu", 4);
  ld(&g2, 1, n.b, n.n), ld(&g2, 1, n.b, n.n), ld(&g2, 1, "", 0);
  m = model_of(&g2);
  CHECK_RC(CP_EONNX_GRAPH, cp_onnx_model_open_bytes(&om, "third.onnx", m.b, m.n, NULL));
  CHECK_MSG(strstr(cp_error_message(), "node 2 of its graph has an empty op_type"), "%s", cp_error_message());
  free(g2.b), free(m.b);
  g2 = (buf){0};
  ld(&n, 4, "", 0);
  ld(&g2, 1, n.b, n.n);
  m = model_of(&g2);
  CHECK_RC(CP_EONNX_GRAPH, cp_onnx_model_open_bytes(&om, "cleared.onnx", m.b, m.n, NULL));
  CHECK_MSG(strstr(cp_error_message(), "node 0 of its graph has an empty op_type"), "%s", cp_error_message());
  free(n.b), free(g2.b), free(m.b);
}

static void test_memory_limit(void) {
  buf n = {0}, g = {0};
  ld(&n, 4, "NoOp", 4);
  ld(&n, 7, "test.ctxpatch", 13); /* a custom domain: no outputs, nothing for the order to check */
  for (int k = 0; k < 20000; k++) ld(&g, 1, n.b, n.n);
  buf m = model_of(&g);
  cp_onnx_model *om = NULL;
  unsetenv("CTXPATCH_MEMORY_LIMIT");
  CHECK_RC(0, cp_onnx_model_open_bytes(&om, "many.onnx", m.b, m.n, NULL));
  CHECK(om && om->graph->n_nodes == 20000);
  cp_onnx_model_free(om), om = NULL;
  setenv("CTXPATCH_MEMORY_LIMIT", "1000000", 1); /* 1 MB: 20,000 nodes call for more */
  CHECK_RC(CP_EOVERFLOW, cp_onnx_model_open_bytes(&om, "many.onnx", m.b, m.n, NULL));
  CHECK_MSG(strstr(cp_error_message(), "many.onnx: unpacking its ") &&
                strstr(cp_error_message(), "over the limit of 1000000 (CTXPATCH_MEMORY_LIMIT"),
            "%s", cp_error_message());
  CHECK(om == NULL);
  unsetenv("CTXPATCH_MEMORY_LIMIT");
  free(n.b), free(g.b), free(m.b);
}

int main(void) {
  test_empty_nodes();
  test_memory_limit();
  return test_finish();
}
