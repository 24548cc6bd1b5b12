/* Private to converters/onnx_rewrite.c and converters/onnx_sites.c: the facts about a graph's
 * attention sites the in-place rewriter needs besides cp_onnx_find_sites
 * (include/ctxpatch/converters/onnx_rewrite.h). */
#ifndef CTXPATCH_CONVERTERS_ONNX_SITES_H
#define CTXPATCH_CONVERTERS_ONNX_SITES_H

#include <stdbool.h>
#include <stddef.h>

#include "ctxpatch/converters/onnx_rewrite.h"
#include "ctxpatch/formats/onnx_graph.h"

/* "node 'NAME' (DOMAIN OP)" or "node INDEX (DOMAIN OP)", quoted for messages, in buf[300]. */
const char *cp_onnx_site_label(char buf[300], const cp_onnx_node *n, size_t index);
/* Whether g computes rotary embeddings (a *Rotary* op, GroupQueryAttention with do_rotary, or
 * default-domain Sin / Cos nodes as ctxpatch's own RoPE exports); *at gets the first such node. */
bool cp_onnx_graph_rotary(const cp_onnx_graph *g, size_t *at);
/* Node n's INT attribute `name`, or dflt when it has none of that type. */
int64_t cp_onnx_attr_i(const cp_onnx_node *n, const char *name, int64_t dflt);
/* The values of a float32 or float64 tensor of at most 1024 elements, in double. */
int cp_onnx_values_f64(double *out /* [t->numel] */, const cp_onnx_tensor *t);
/* The ALiBi slopes constants upstream of the Softmax sites s[0..n): found[k] for initializer k. */
int cp_onnx_find_slopes(bool *found /* [g->n_initializers] */, const cp_onnx_graph *g, const cp_onnx_site *s, size_t n,
                        const char *path);

#endif
