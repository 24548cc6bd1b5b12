/* Private to export/onnx/rewrite/onnx_rewrite.c and export/onnx/rewrite/onnx_sites.c: the facts about a graph's
 * attention sites the in-place rewriter needs besides cp_onnx_find_sites
 * (include/ctxpatch/export/onnx_rewrite.h). */
#ifndef CTXPATCH_EXPORT_ONNX_SITES_H
#define CTXPATCH_EXPORT_ONNX_SITES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/export/onnx_rewrite.h"
#include "ctxpatch/formats/onnx_graph.h"

/* cp_onnx_find_sites, adding to *work (may be NULL) one per node visit: the main loop's, the
 * MatMul search's (each (node, steps left) once), the consumers read for a logits type, the
 * steps of a contrib query's walk. Linear in the graph: tests/test_onnx_sites_work.c counts it. */
int cp_onnx_find_sites_counted(cp_onnx_site **out, size_t *n_out, const cp_onnx_model *m, uint64_t *work);

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

/* Where the ALiBi term enters a Softmax site's logits: an Add (or Sub, the term second) on the
 * chain from the Softmax up to its q.k MatMul, one input from the slopes constants and the other
 * from the MatMul. */
typedef struct {
  size_t node;         /* the Add / Sub (SIZE_MAX: a contrib site, none looked for) */
  size_t bias_input;   /* its input from the slopes */
  size_t scores_input; /* its input from the q.k MatMul ([..., S, T]) */
} cp_onnx_alibi_entry;
/* The entry of each Softmax site s[k] in out[k]; CP_EONNX_SITE naming the node, with `what`
 * (the rule) in the line, when a site has none or its term is not proportional to the slopes
 * (added to another term on the way). */
int cp_onnx_alibi_entries(cp_onnx_alibi_entry *out /* [n] */, const cp_onnx_graph *g, const cp_onnx_site *s, size_t n,
                          const bool *found, const char *path, const char *what);

#endif
