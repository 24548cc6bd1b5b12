/* Private to import/onnx/onnx_import.c and the recovery of third-party graphs beside it
 * (onnx_walk.c, onnx_pattern.c, onnx_contrib.c): the import being built and the helpers that add
 * recovered tensors to it. Not installed. */
#ifndef CTXPATCH_IMPORT_ONNX_IMPORT_PRIV_H
#define CTXPATCH_IMPORT_ONNX_IMPORT_PRIV_H

#include <stdbool.h>
#include <stddef.h>

#include "ctxpatch/base/strbuf.h"
#include "ctxpatch/model/hf_config.h"
#include "ctxpatch/import/onnx_import.h"
#include "ctxpatch/formats/onnx_graph.h"

typedef struct {
  cp_tensor view;
  char *name;
  float *data;
} cp_oi_tensor;

struct cp_onnx_import {
  char *path;
  const cp_onnx_model *om; /* the graph: om_owned, or the caller's (cp_onnx_import_open_graph) */
  cp_onnx_model *om_owned;
  cp_onnx_model *pair; /* T5: the export's other graph (import/onnx/onnx_import_t5.c), else NULL */
  bool ctxpatch;      /* own export naming */
  const char *naming; /* "ctxpatch", "pattern" (plain ops) or "contrib" (onnxruntime's fused ops) */
  char *config_text;  /* owned */
  size_t config_len;
  char *config_source;
  cp_oi_tensor *t;
  size_t n_t, cap_t;
  bool *used;         /* [n_initializers] */
  const char **ignored;
  size_t n_ignored, cap_ignored;
  bool unexplained;   /* a recovery refused a node no pattern explains: a refusal, not a missing config */
  char **prov;        /* [2 n_prov]: hyper-parameter, where its value came from (recovered graphs) */
  size_t n_prov, cap_prov;
};

/* Marks initializer `t` of the main graph used. */
void cp_oi_use(cp_onnx_import *im, const cp_onnx_tensor *t);
/* The elements of t as a new float buffer (caller frees). */
int cp_oi_read_f32(float **out, const cp_onnx_import *im, const cp_onnx_tensor *t);
/* Adds `data` (taken over, also on error) as tensor `name` of shape [d0] (ndim 1), [d0, d1] (2)
 * or a scalar (0). */
int cp_oi_add(cp_onnx_import *im, const char *name, float *data, int ndim, int64_t d0, int64_t d1);
/* Initializer `src` (marked used) as tensor `dst`, transposed from [in, out] to [out, in] when
 * `transpose`. */
int cp_oi_take(cp_onnx_import *im, const char *dst, const cp_onnx_tensor *src, bool transpose);
/* Records where hyper-parameter `key` came from (printf-style). */
int cp_oi_prov(cp_onnx_import *im, const char *key, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Recovery of graphs whose initializers carry no usable names (docs/onnx.md "Recovering
 * third-party graphs"). Each returns 0 with im's tensors, naming and config_text (a config.json
 * the model loader parses) filled, 1 when the graph is not of its kind (nothing changed), or a
 * negative cp_err naming the node that does not fit. */
int cp_onnx_recover_contrib(cp_onnx_import *im);
int cp_onnx_recover_pattern(cp_onnx_import *im);
/* onnxruntime-genai's genai_config.json beside the graph, when there: every size it states must
 * equal c's (else CP_EONNX_METADATA naming the key); the agreement goes into the provenance. */
int cp_onnx_genai_check(cp_onnx_import *im, const cp_hf_config *c);

/* config.json in the model's folder, else in its parent: its text, length and path (the caller's;
 * noted as an input). 0 when found, 1 when neither exists, negative when unreadable. */
int cp_oi_config_beside(const cp_onnx_import *im, char **text, size_t *len, char **source);
/* The config.json beside a graph with Hugging Face names that was recovered from its nodes (the
 * layout Optimum and transformers.js keep): its family and every size it states must equal c's
 * (else CP_EONNX_METADATA naming the key; one that does not parse: its own code); the agreement
 * goes into the provenance. 0 also when there is none. */
int cp_onnx_hf_config_check(cp_onnx_import *im, const cp_hf_config *c);

/* ctxpatch's own T5 export (import/onnx/onnx_import_t5.c). Whether g holds T5's names (`shared.weight`,
 * or `.stored` under --dtype fp16|bf16); the import of both graphs of the export im->om belongs to
 * (im->pair opened beside it; config, tensors and the ignored list filled), refused in one line when
 * the graph is not ctxpatch's (cp_onnx_t5_refuse_foreign), the other graph is missing or from
 * another export, or an initializer is not one of the export's names. */
bool cp_onnx_t5_named(const cp_onnx_graph *g);
int cp_onnx_import_t5(cp_onnx_import *im);
/* The refusal of a T5 graph that is not ctxpatch's own export (CP_EONNX_RECOVER, naming path). */
int cp_onnx_t5_refuse_foreign(const char *path);

#endif
