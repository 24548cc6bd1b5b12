/* Private to the recovery of third-party ONNX graphs (onnx_pattern.c, onnx_contrib.c): an index of
 * who produces and who consumes each value of the main graph, bounded searches along the data
 * flow, constants, and the model description both recoverers fill (cp_rec) with the one emitter
 * that turns it into the family's Hugging Face tensors and config.json text. Not installed. */
#ifndef CTXPATCH_IMPORT_ONNX_WALK_H
#define CTXPATCH_IMPORT_ONNX_WALK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "import/onnx/onnx_import_priv.h"
#include "ctxpatch/model/families.h"
#include "ctxpatch/model/hf_config.h"

#define CP_REC_MAX_LAYERS 1024  /* layers recovered at most */
#define CP_REC_MAX_VISIT 4096   /* nodes one forward or backward search visits at most */
#define CP_REC_MAX_NODES 4000000 /* graphs with more nodes are not walked */

typedef struct {
  const char *name;
  size_t node;
} cp_ow_edge;

typedef struct {
  const char *path;
  const cp_onnx_graph *g;
  cp_ow_edge *prod, *cons; /* sorted by name (then node); prod: a name several Constants define maps to
                              the last in file order, as the reader and onnxruntime take it */
  size_t n_prod, n_cons;
  unsigned char *seen;     /* [n_nodes] scratch of the searches, all zero between them */
  unsigned char *dyn;      /* [n_nodes] 1: the node's outputs depend on a graph input's values (not only
                              on shapes: Shape and Size end the dependence) */
  unsigned char *mark;     /* [n_nodes] 1: a pattern explained the node (cp_ow_explain) */
  const char **inputs;     /* [n_inputs] sorted names of the graph inputs that are not initializers */
  size_t n_inputs;
  bool *unexplained;       /* set when a refusal names a node no pattern explains (may be NULL) */
} cp_ow;

/* Input / output k of n, "" when absent; whether n is default-domain op `op`. */
static inline const char *cp_ow_in(const cp_onnx_node *n, size_t k) { return k < n->n_inputs ? n->inputs[k] : ""; }
static inline const char *cp_ow_out(const cp_onnx_node *n, size_t k) { return k < n->n_outputs ? n->outputs[k] : ""; }
static inline bool cp_ow_is(const cp_onnx_node *n, const char *op) { return !strcmp(n->op_type, op) && !n->domain[0]; }

int cp_ow_init(cp_ow *w, const char *path, const cp_onnx_graph *g);
void cp_ow_free(cp_ow *w);
const cp_onnx_node *cp_ow_producer(const cp_ow *w, const char *name);
/* The consumers of `name`, up to `max` in *out; returns how many there are, counting at most
 * max + 1 (so "exactly one" can be asked with max 1). */
size_t cp_ow_consumers(const cp_ow *w, const char *name, const cp_onnx_node **out, size_t max);
/* The first consumer of `name` with op_type `op` (any domain) taking it as input `slot` (-1: any),
 * among its first CP_REC_MAX_VISIT consumers. */
const cp_onnx_node *cp_ow_consumer(const cp_ow *w, const char *name, const char *op, int slot);
/* Whether `name` is a graph output. */
bool cp_ow_is_output(const cp_ow *w, const char *name);
/* Whether n has an output that is a graph output (a cp_ow_pred; ctx unused). */
bool cp_ow_makes_output(const cp_ow *w, const cp_onnx_node *n, void *ctx);
/* The initializer named `name`, or NULL. */
const cp_onnx_tensor *cp_ow_init_of(const cp_ow *w, const char *name);
/* The one element of a constant (initializer or Constant node's value) as double: 0, or 1 when
 * `name` is not a one-element constant. */
int cp_ow_scalar(const cp_ow *w, const char *name, double *out);
/* The initializer `name` is, directly or through at most 4 Cast / Identity nodes (torch.onnx
 * writes a shared tensor once and the other uses as Identity of it), or NULL. */
const cp_onnx_tensor *cp_ow_const(const cp_ow *w, const char *name);
/* A float weight initializer of `ndim` dims feeding input `slot` of n (cp_ow_const), or NULL. */
const cp_onnx_tensor *cp_ow_weight(const cp_ow *w, const cp_onnx_node *n, size_t slot, int ndim);
/* A node's name for messages: its name, else its op_type and index. */
const char *cp_ow_label(const cp_ow *w, const cp_onnx_node *n, char buf[96]);
/* The one-line refusal "PATH: node 'LABEL' (OP): why" (CP_EONNX_RECOVER). */
int cp_ow_bad(const cp_ow *w, const cp_onnx_node *n, const char *why);
/* ---------------------------------------------------------------- accounting
 * Recovery accounts for every node on the path from the graph's inputs to the logits: each node a
 * pattern reads is marked explained; cp_ow_account then walks back from the logits through the
 * values that depend on graph inputs and refuses any node no pattern explained, except layout
 * ops that move values without computing (cp_ow_layout). Values computed from constants and
 * shapes alone (masks, shape tensors) are read by the patterns where they use them. */

typedef bool (*cp_ow_pred)(const cp_ow *w, const cp_onnx_node *n, void *ctx);

/* Marks n explained (n may be NULL: nothing). */
void cp_ow_explain(const cp_ow *w, const cp_onnx_node *n);
/* Marks the producers of token ids `v` back to the graph input explained: Reshape, Slice, Cast,
 * Unsqueeze, Squeeze, Identity, Flatten, at most 32 steps. */
void cp_ow_explain_ids(const cp_ow *w, const char *v);
/* Where a pattern stops on values `v` and `v2` (either may be NULL): "; value 'V' feeds node 'N'
 * (OP, index I), which no pattern explains" for a consumer of either that is neither explained nor
 * a layout op, preferring one with a single input that depends on graph inputs (an inserted
 * `x op constant`, rather than the node of the pattern it feeds), else "" (buf[320]). */
const char *cp_ow_stray(const cp_ow *w, const char *v, const char *v2, char *buf);
/* cp_ow_bad with cp_ow_stray of v, v2 appended. */
int cp_ow_bad_on(const cp_ow *w, const cp_onnx_node *n, const char *why, const char *v, const char *v2);
/* Whether value `name` depends on a graph input's values. */
bool cp_ow_dynamic(const cp_ow *w, const char *name);
/* Whether n only moves or reshapes its input (Reshape, Transpose, Squeeze, Unsqueeze, Identity,
 * Dropout, Flatten, Split, Concat, a Cast to float, a Gather of a graph input by a constant:
 * the past cache split per layer), accepted on the path without a pattern's mark. */
bool cp_ow_layout(const cp_ow *w, const cp_onnx_node *n);
/* The value `v` feeds through at most 8 single-consumer layout nodes (each marked explained)
 * into a consumer of op `op` (default domain) at input `slot`; that consumer, or NULL. */
const cp_onnx_node *cp_ow_next(const cp_ow *w, const char *v, const char *op, size_t slot);
/* The scores chain from value `from` (the scaled scores) to the Softmax `sm`: walked back from
 * the Softmax, every node is a layout op or a mask step (Where / Add / Sub / Mul whose other
 * inputs are constant-only and reach a causal piece, `causal` on a backward search not passing
 * `no_pass`), each marked explained. The first node that is neither is left unmarked for
 * cp_ow_account to name. */
void cp_ow_mask_chain(const cp_ow *w, const char *from, const cp_onnx_node *sm, cp_ow_pred causal,
                      cp_ow_pred no_pass, void *ctx);
/* The elementwise nodes between value `from` and input 0 of node `to` compute activation `act`
 * (HF name: gelu_new, gelu, silu, relu): evaluated on sample points in double against the
 * formula; each marked explained. 0, or the refusal naming `to` (CP_EONNX_RECOVER). */
int cp_ow_check_act(const cp_ow *w, const char *from, const cp_onnx_node *to, const char *act);
/* Walks back from the graph output that value `logits` reaches (itself, or through later nodes)
 * and refuses the first node on the way that depends on a graph input and that no pattern
 * explained and is not a layout op: "PATH: node 'NAME' (OP, index I) is on the path to the logits
 * '...' but no part of the recovered model ...". `how`: the recovery's name for the message. */
int cp_ow_account(const cp_ow *w, const char *logits, const char *how);

/* Breadth-first along the data flow from the consumers of `from` (forward) or the producers of
 * n's inputs (backward), visiting at most CP_REC_MAX_VISIT nodes: the first node `stop` accepts
 * ends the search and is returned (NULL: none); every other node visited goes to `visit` (may be
 * NULL), and the search does not pass a node for which it returns true. */
const cp_onnx_node *cp_ow_forward(const cp_ow *w, const char *from, cp_ow_pred stop, cp_ow_pred visit, void *ctx);
const cp_onnx_node *cp_ow_backward(const cp_ow *w, const cp_onnx_node *n, cp_ow_pred stop, cp_ow_pred visit,
                                   void *ctx);

/* ---------------------------------------------------------------- the recovered description */

typedef struct {
  const cp_onnx_tensor *w; /* [in, out], or [out, in] when out_in */
  const cp_onnx_tensor *b; /* [out] or NULL */
  bool out_in;
} cp_rec_lin;

typedef struct {
  const cp_onnx_tensor *w, *b; /* [D]; b NULL for RMSNorm */
} cp_rec_norm;

typedef struct {
  cp_rec_norm attn_norm, ffn_norm;
  cp_rec_lin qkv;              /* GPT-2: fused [D, 3D] */
  cp_rec_lin q, k, v;          /* Llama */
  cp_rec_lin o, up, gate, down; /* GPT-2: up = c_fc, down = mlp.c_proj */
} cp_rec_layer;

typedef struct {
  cp_family family;            /* CP_FAMILY_GPT2 or CP_FAMILY_LLAMA */
  int64_t vocab, d_model, n_heads, n_kv_heads, d_head, d_ff, train_len;
  double eps, rope_theta;
  const char *act;             /* HF activation name */
  const cp_onnx_tensor *embed, *pos_embed; /* [V, D], [P, D] */
  cp_rec_norm final_norm;
  cp_rec_lin head;             /* w NULL: no head in the graph (tied to the embedding) */
  cp_rec_layer *layers;        /* [n_layers] */
  int n_layers;
  size_t cap_layers;
} cp_rec;

/* The SiLU-gated MLP read from norm output y: two weight MatMuls of y, the gate's output through
 * Sigmoid and Mul(gate, sigmoid), that times the up projection, then the down MatMul (*o its
 * output); l->gate/up/down set, and on the first layer r->act, r->d_ff with their provenance.
 * `at` names the refusal when y does not feed such a pair. */
int cp_rec_swiglu(cp_onnx_import *im, const cp_ow *w, cp_rec *r, const char *y, const cp_onnx_node *at,
                  cp_rec_layer *l, const char **o);
/* The state of a plain-op pattern walk (onnx_pattern.c, onnx_pattern_llama.c). */
typedef struct {
  cp_onnx_import *im;
  cp_ow w;
  cp_rec r;
  char lab[96]; /* the last node label made for a message */
  const char *logits; /* the head's output, or the final norm's when the graph has no head */
} cp_rec_walk;

/* A new layer at the end of r (zeroed); NULL after setting the error when over CP_REC_MAX_LAYERS. */
cp_rec_layer *cp_rec_push(cp_rec *r, const char *path);
/* Checks the shapes of every weight against r's sizes and adds the family's HF tensors and the
 * config.json text to im. `naming`: "pattern" or "contrib". */
int cp_rec_emit(cp_onnx_import *im, const cp_rec *r, const char *naming);

/* The plain-op Llama from token embedding Gather `tok` (import/onnx/onnx_pattern_llama.c): 0 with
 * im filled, or negative with the refusal set. */
int cp_onnx_recover_pattern_llama(cp_onnx_import *im, const cp_onnx_node *tok);

#endif
