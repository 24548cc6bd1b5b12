/* Private to formats/onnx_*.c: what the full ONNX reader (include/ctxpatch/formats/onnx_graph.h)
 * keeps behind cp_onnx_model, and the steps its files share. The unpacked proto stays alive with
 * the model so that a later rewriter can re-serialise it (unknown fields included). */
#ifndef CTXPATCH_FORMATS_ONNX_GRAPH_PRIV_H
#define CTXPATCH_FORMATS_ONNX_GRAPH_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/base/arena.h"
#include "ctxpatch/formats/onnx_graph.h"
#include "onnx.pb-c.h"

typedef struct {
  char *location;  /* as written in the model (relative) */
  const void *map; /* read-only map of the whole file; NULL when empty */
  uint64_t size;
  cp_onnx_range *ranges; /* [n_ranges] the bytes tensors use: in use order while reading, then
                            sorted and merged (cp_onnx_external_finish) */
  size_t n_ranges, cap_ranges;
} cp_onnx_datafile;

struct cp_onnx_model_priv {
  Onnx__ModelProto *proto;
  cp_arena arena;            /* every view, array and copied string */
  cp_onnx_read_params params;
  int dirfd;                 /* the model's folder while reading; -1 after */
  cp_onnx_datafile *files;   /* [n_files], first use first */
  size_t n_files, cap_files;
};

/* Fills *t from tp (dtype, shape, sizes, storage, external data mapped and checked). `what`
 * names the tensor in messages ("initializer 'w'", "node 'n' attribute 'value'"). */
int cp_onnx_tensor_build(cp_onnx_model *m, cp_onnx_tensor *t, const Onnx__TensorProto *tp, const char *what);

/* Maps (once) the external data file `location` relative to the model's folder, after the
 * location checks; *file is borrowed from m. `what` names the tensor in messages. */
int cp_onnx_external_map(const cp_onnx_datafile **file, cp_onnx_model *m, const char *location, const char *what);
void cp_onnx_external_free(cp_onnx_model_priv *p);
/* Records that a tensor uses bytes [off, off + len) of file f (bounds already checked). */
int cp_onnx_external_use(cp_onnx_model *m, const cp_onnx_datafile *f, uint64_t off, uint64_t len);
/* Sorts and merges every file's ranges, once the whole model is read. */
void cp_onnx_external_finish(cp_onnx_model_priv *p);

/* SSA names, inputs defined, cycles and the topological order (g->order, g->sorted) of the main
 * graph g and of its subgraphs (formats/onnx_order.c). */
int cp_onnx_graph_order(cp_onnx_model *m, cp_onnx_graph *g);

/* A printable, bounded copy of an untrusted name for messages (base/quote.h) in buf[128]. */
const char *cp_onnx_q(char buf[128], const char *s);
/* "node 'NAME'", or "node INDEX (OP)" for an unnamed node, in buf[160]. */
const char *cp_onnx_node_label(char buf[160], const cp_onnx_node *n, size_t index);

#endif
