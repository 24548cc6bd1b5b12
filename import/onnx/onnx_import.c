/* ONNX decoder graph -> the family's Hugging Face tensors and config (include/ctxpatch/import/
 * onnx_import.h): ctxpatch's own exports by their initializer names (docs/onnx.md; by role in
 * ctxpatch/model/onnx_names.h, as export/onnx/ writes them), any other graph recovered from its
 * nodes (onnx_contrib.c, onnx_pattern*.c). The model loader then reads the result as any
 * checkpoint. */
#include "ctxpatch/import/onnx_import.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/strbuf.h"
#include "ctxpatch/import/names.h"
#include "ctxpatch/model/onnx_names.h"
#include "ctxpatch/formats/onnx_graph.h"
#include "import/onnx/onnx_import_priv.h"

#define CONFIG_MAX ((size_t)1 << 20) /* config.json bytes read at most */

/* ---------------------------------------------------------------- tensors */

static const cp_onnx_tensor *find_init(cp_onnx_import *im, const char *name) {
  const cp_onnx_graph *g = im->om->graph;
  const cp_onnx_tensor *t = cp_onnx_graph_initializer(g, name);
  if (!t && im->ctxpatch) { /* --dtype fp16|bf16: NAME.stored, Cast to float in the graph */
    char stored[CP_TENSOR_NAME_MAX + 8];
    snprintf(stored, sizeof stored, "%s.stored", name);
    t = cp_onnx_graph_initializer(g, stored);
  }
  if (t) cp_oi_use(im, t);
  return t;
}

void cp_oi_use(cp_onnx_import *im, const cp_onnx_tensor *t) {
  const cp_onnx_graph *g = im->om->graph;
  if (t >= g->initializers && t < g->initializers + g->n_initializers) im->used[t - g->initializers] = true;
}

int cp_oi_prov(cp_onnx_import *im, const char *key, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  int rc = CP_ARRAY_RESERVE(im->prov, im->cap_prov, 2 * (im->n_prov + 1), im->path);
  if (rc) return rc;
  char *k = strdup(key), *v = strdup(buf);
  if (!k || !v) {
    free(k);
    free(v);
    return cp_nomem("%s", im->path);
  }
  im->prov[2 * im->n_prov] = k;
  im->prov[2 * im->n_prov + 1] = v;
  im->n_prov++;
  return 0;
}

/* The elements of t as a new float buffer (caller frees). */
int cp_oi_read_f32(float **out, const cp_onnx_import *im, const cp_onnx_tensor *t) {
  size_t bytes;
  *out = NULL;
  if (t->numel > SIZE_MAX / sizeof(float) || !cp_size_mul(&bytes, (size_t)t->numel, sizeof(float)))
    return cp_error_set(CP_EOVERFLOW, "%s: initializer '%s' is too large", im->path, t->name);
  float *buf = malloc(bytes ? bytes : 1);
  if (!buf) return cp_nomem("%s: initializer '%s'", im->path, t->name);
  int rc = cp_onnx_tensor_f32(buf, t);
  if (rc < 0) {
    free(buf);
    return rc;
  }
  *out = buf;
  return 0;
}

/* Adds `data` (taken over) as tensor `name` of shape [d0] (ndim 1), [d0, d1] (2) or a scalar (0). */
int cp_oi_add(cp_onnx_import *im, const char *name, float *data, int ndim, int64_t d0, int64_t d1) {
  int rc = CP_ARRAY_RESERVE(im->t, im->cap_t, im->n_t + 1, im->path);
  cp_oi_tensor *o = rc ? NULL : &im->t[im->n_t];
  char *copy = rc ? NULL : strdup(name);
  if (rc == 0 && !copy) rc = cp_nomem("%s", im->path);
  if (rc) {
    free(data);
    return rc;
  }
  memset(o, 0, sizeof *o);
  o->name = copy;
  o->data = data;
  o->view = (cp_tensor){.name = copy, .dtype = CP_F32, .ndim = ndim, .shape = {d0, d1}, .data = data};
  o->view.nbytes = (uint64_t)(ndim == 0 ? 1 : ndim == 1 ? d0 : d0 * d1) * sizeof(float);
  im->n_t++;
  return 0;
}

/* Initializer `src` as HF tensor `dst`, transposed from [in, out] to [out, in] when `transpose`. */
int cp_oi_take(cp_onnx_import *im, const char *dst, const cp_onnx_tensor *src, bool transpose) {
  float *buf = NULL;
  cp_oi_use(im, src);
  int rc = cp_oi_read_f32(&buf, im, src);
  if (rc) return rc;
  if (src->ndim > 2) {
    free(buf);
    return cp_error_set(CP_EONNX_RECOVER, "%s: initializer '%s' has %d dims; model tensors have at most 2", im->path,
                        src->name, src->ndim);
  }
  if (!transpose || src->ndim != 2)
    return cp_oi_add(im, dst, buf, src->ndim, src->ndim ? src->shape[0] : 0, src->ndim > 1 ? src->shape[1] : 0);
  int64_t rows = src->shape[0], cols = src->shape[1]; /* [in, out] */
  float *t = malloc((size_t)src->numel * sizeof *t + 1);
  if (!t) {
    free(buf);
    return cp_nomem("%s: initializer '%s'", im->path, src->name);
  }
  for (int64_t i = 0; i < rows; i++)
    for (int64_t o = 0; o < cols; o++) t[o * rows + i] = buf[i * cols + o];
  free(buf);
  return cp_oi_add(im, dst, t, 2, cols, rows);
}

/* ---------------------------------------------------------------- ctxpatch's own names */

/* The exported parts (q, k, v; or Phi-3's gate, up) of `layer` fused into the family's HF tensor
 * `dst` (families.h): rows part after part, or for q, k, v per head [H, 3, dh] when the layout is
 * interleaved; GPT-2's Conv1D keeps [in, out] columns. */
static int fuse_rows(cp_onnx_import *im, const cp_family_layout *fl, const cp_hf_config *c, const char *dst,
                     int layer, const char *suffix, bool gate_up) {
  static const cp_tensor_role qkv_roles[3] = {CP_ROLE_Q, CP_ROLE_K, CP_ROLE_V}, ffn_roles[2] = {CP_ROLE_GATE, CP_ROLE_UP};
  const cp_tensor_role *roles = gate_up ? ffn_roles : qkv_roles;
  const int n = gate_up ? 2 : 3;
  const cp_onnx_tensor *src[3];
  float *part[3] = {NULL, NULL, NULL}, *out = NULL;
  char name[CP_TENSOR_NAME_MAX];
  bool bias = !strcmp(suffix, ".bias");
  int rc = 0, nin = bias ? 1 : -1;
  int64_t rows[3], total = 0;
  for (int p = 0; p < n; p++) {
    cp_onnx_name(name, fl->family, roles[p], CP_STACK_DECODER, layer, suffix);
    if (!(src[p] = find_init(im, name))) {
      if (bias && p == 0) return 0; /* no biases */
      rc = cp_error_set(CP_EMODEL_TENSOR, "%s: initializer '%s' is missing", im->path, name);
      goto done;
    }
    int64_t in = bias ? 1 : src[p]->ndim == 2 ? src[p]->shape[0] : -1;
    if (src[p]->ndim != (bias ? 1 : 2) || (nin >= 0 && in != nin)) {
      rc = cp_error_set(CP_EONNX_RECOVER, "%s: initializer '%s': shape does not fuse with %s's into %s", im->path,
                        name, gate_up ? "the gate" : "q", dst);
      goto done;
    }
    nin = (int)in;
    rows[p] = bias ? src[p]->shape[0] : src[p]->shape[1];
    total += rows[p];
    if ((rc = cp_oi_read_f32(&part[p], im, src[p]))) goto done;
  }
  bool interleaved = !gate_up && fl->qkv == CP_QKV_INTERLEAVED;
  if (interleaved && (rows[0] != rows[1] || rows[0] != rows[2] || rows[0] % c->d_head)) {
    rc = cp_error_set(CP_EONNX_RECOVER, "%s: %s: q, k, v of %lld, %lld, %lld rows do not interleave per head of %d",
                      im->path, dst, (long long)rows[0], (long long)rows[1], (long long)rows[2], c->d_head);
    goto done;
  }
  CP_CHECK_ALLOC_GOTO(out = malloc((size_t)(total * nin) * sizeof *out + 1), im->path);
  int64_t dh = c->d_head, at = 0;
  for (int p = 0; p < n; p++) {
    for (int64_t r = 0; r < rows[p]; r++, at++) {
      int64_t row = interleaved ? (r / dh) * 3 * dh + p * dh + r % dh : at; /* HF output row */
      for (int64_t i = 0; i < nin; i++) {
        float v = part[p][i * rows[p] + r]; /* [in, out] (a bias: [out]) */
        if (fl->conv1d) out[i * total + row] = v;
        else out[row * nin + i] = v;
      }
    }
  }
  rc = bias ? cp_oi_add(im, dst, out, 1, total, 0)
            : fl->conv1d ? cp_oi_add(im, dst, out, 2, nin, total) : cp_oi_add(im, dst, out, 2, total, nin);
  out = NULL;
done:
  for (int p = 0; p < n; p++) free(part[p]);
  free(out);
  return rc;
}

/* FIRE MLP `k` of `layers` hidden layers (HF base name `base`, export base `ebase`): w1 [W] ->
 * [W, 1], the middle (two layers) and output matrices transposed back ([W, W] and [W, H] ->
 * [H, W]), biases as they are, c and L from `ctxpatch.fire`. */
static int take_fire(cp_onnx_import *im, const char *base, const char *ebase, int k, int layers) {
  const char *parts[6] = {"." CP_FIRE_IN ".weight", "." CP_FIRE_IN ".bias", cp_fire_out_part(layers, false),
                          cp_fire_out_part(layers, true), "." CP_FIRE_MID ".weight", "." CP_FIRE_MID ".bias"};
  char src[CP_TENSOR_NAME_MAX], dst[CP_TENSOR_NAME_MAX];
  for (int p = 0; p < (layers == 2 ? 6 : 4); p++) {
    if (snprintf(src, sizeof src, "%s%s", ebase, parts[p]) >= (int)sizeof src ||
        snprintf(dst, sizeof dst, "%s%s", base, parts[p]) >= (int)sizeof dst)
      return cp_error_set(CP_EOVERFLOW, "%s: tensor name '%s%s' is too long", im->path, ebase, parts[p]);
    const cp_onnx_tensor *t = find_init(im, src);
    if (!t) return cp_error_set(CP_EMODEL_TENSOR, "%s: initializer '%s' is missing", im->path, src);
    int rc = cp_oi_take(im, dst, t, p == 2 || p == 4);
    if (rc) return rc;
    if (p == 0) im->t[im->n_t - 1].view.ndim = 2, im->t[im->n_t - 1].view.shape[1] = 1;
  }
  const char *meta = cp_onnx_model_meta(im->om, CP_ONNX_META_FIRE), *s = meta;
  for (int i = 0; s && i < k; i++) s = (s = strchr(s, ';')) ? s + 1 : NULL;
  float v[2];
  char *end = NULL;
  if (s) v[0] = strtof(s, &end);
  if (s && end != s) v[1] = strtof(s = end, &end);
  if (!s || end == s || (*end && *end != ';'))
    return cp_error_set(CP_EONNX_METADATA, "%s: metadata_props '%s': no \"c L\" pair for FIRE MLP %d", im->path,
                        CP_ONNX_META_FIRE, k);
  static const char *const scal[2] = {"." CP_FIRE_C, "." CP_FIRE_L};
  for (int p = 0; p < 2; p++) {
    float *x = malloc(sizeof *x);
    CP_CHECK_ALLOC(x, im->path);
    *x = v[p];
    if (snprintf(dst, sizeof dst, "%s%s", base, scal[p]) >= (int)sizeof dst) {
      free(x);
      return cp_error_set(CP_EOVERFLOW, "%s: tensor name '%s%s' is too long", im->path, base, scal[p]);
    }
    int rc = cp_oi_add(im, dst, x, 0, 0, 0);
    if (rc) return rc;
  }
  return 0;
}

/* One row of the family table, in `layer`: its .weight (and .bias when exported). */
static int take_row(cp_onnx_import *im, const cp_names *nm, const cp_family_tensor *row, const cp_hf_config *c,
                    int layer) {
  char dst[CP_TENSOR_NAME_MAX], src[CP_TENSOR_NAME_MAX];
  static const char *const suffix[2] = {".weight", ".bias"};
  if (row->role == CP_ROLE_FIRE) {
    cp_names_row(dst, nm, row, layer, "");
    char ebase[CP_TENSOR_NAME_MAX];
    cp_onnx_name(ebase, c->family, CP_ROLE_FIRE, CP_STACK_DECODER, c->fire_shared ? CP_ONNX_NO_LAYER : layer, "");
    return take_fire(im, dst, ebase, c->fire_shared ? 0 : layer, c->fire_mlp_layers);
  }
  for (int s = 0; s < 2; s++) {
    cp_names_row(dst, nm, row, layer, suffix[s]);
    if (row->role == CP_ROLE_QKV || row->role == CP_ROLE_GATE_UP) {
      int rc = fuse_rows(im, nm->fl, c, dst, layer, suffix[s], row->role == CP_ROLE_GATE_UP);
      if (rc) return rc;
      continue;
    }
    if (!cp_onnx_name(src, c->family, row->role, row->stack, layer, suffix[s])) continue;
    const cp_onnx_tensor *t = find_init(im, src);
    if (!t) {
      if (s == 1 || (row->role == CP_ROLE_LM_HEAD && c->tie_word_embeddings)) continue;
      return cp_error_set(CP_EMODEL_TENSOR, "%s: initializer '%s' is missing", im->path, src);
    }
    bool linear = row->cols != CP_DIM_NONE && row->role != CP_ROLE_EMBED && row->role != CP_ROLE_POS_EMBED &&
                  row->role != CP_ROLE_LM_HEAD;
    int rc = cp_oi_take(im, dst, t, linear && !nm->fl->conv1d && s == 0);
    if (rc) return rc;
  }
  return 0;
}

static int recover_ctxpatch(cp_onnx_import *im, const cp_hf_config *c) {
  cp_names nm = {.fl = cp_family_layout_of(c->family), .fire_shared = c->fire_shared, .qk_norm = c->qk_norm,
                 .sandwich = c->sandwich_norms,
                 .gated = c->family == CP_FAMILY_LLAMA || c->family == CP_FAMILY_FIRE || c->family == CP_FAMILY_PHI3 ||
                          c->family == CP_FAMILY_GEMMA || c->family == CP_FAMILY_OLMO2};
  nm.prefix = nm.fl->prefixes[0];
  bool fire_done = false;
  for (size_t i = 0; i < nm.fl->n_tensors; i++) {
    const cp_family_tensor *row = &nm.fl->tensors[i];
    if (row->stack != CP_STACK_DECODER || !cp_names_row_applies(&nm, row)) continue;
    bool per_layer = strstr(row->hf, "%d") != NULL;
    if (row->role == CP_ROLE_FIRE && !per_layer && fire_done) continue;
    for (int l = 0; l < (per_layer ? c->n_layers : 1); l++) {
      int rc = take_row(im, &nm, row, c, l);
      if (rc) return rc;
    }
    fire_done |= row->role == CP_ROLE_FIRE;
  }
  return 0;
}

/* ---------------------------------------------------------------- HF names */

/* The body prefix under which `family`'s embedding is an initializer of g, or NULL. */
static const char *hf_prefix(const cp_onnx_graph *g, cp_family family) {
  char n[CP_TENSOR_NAME_MAX];
  const cp_family_layout *fl = cp_family_layout_of(family);
  for (int p = 0; p < 2 && fl->prefixes[p]; p++)
    for (size_t i = 0; i < fl->n_tensors; i++)
      if (fl->tensors[i].role == CP_ROLE_EMBED) {
        snprintf(n, sizeof n, "%s%s.weight", fl->prefixes[p], fl->tensors[i].hf);
        if (cp_onnx_graph_initializer(g, n)) return fl->prefixes[p];
      }
  return NULL;
}

/* Whether some decoder family's embedding is there under its HF name. */
static bool hf_named(const cp_onnx_graph *g) {
  for (int f = 0; f < CP_FAMILY_COUNT; f++)
    if (f != CP_FAMILY_T5 && hf_prefix(g, (cp_family)f)) return true;
  return false;
}

/* ctxpatch's export names all start so (cp_onnx_name_own); `const/N` are its graph constants and
 * `ctxpatch/rewrite/...` the constants an in-place rewrite added (export/onnx/rewrite/onnx_rewrite.c). */
static const char *first_foreign_name(const cp_onnx_graph *g) {
  for (size_t i = 0; i < g->n_initializers; i++) {
    const char *n = g->initializers[i].name;
    if (!cp_onnx_name_own(n) && strncmp(n, "const/", 6) && strncmp(n, "ctxpatch/rewrite/", 17))
      return n;
  }
  return NULL;
}

/* ---------------------------------------------------------------- config */

int cp_oi_config_beside(const cp_onnx_import *im, char **text, size_t *len, char **source) {
  char *dir = strdup(im->path), *slash, *path = NULL;
  int rc = 1;
  CP_CHECK_ALLOC(dir, im->path);
  slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else strcpy(dir, ".");
  for (int up = 0; up < 2 && rc == 1; up++) {
    struct stat st;
    free(path);
    CP_CHECK_ALLOC_GOTO(path = cp_path_join(dir, up ? "../config.json" : "config.json"), im->path);
    if (stat(path, &st) != 0) continue;
    if ((rc = cp_read_file(text, len, path, CONFIG_MAX)) == 0) {
      cp_input_note(path);
      *source = path;
      path = NULL;
    }
  }
done:
  free(path);
  free(dir);
  return rc;
}

static int read_config_file(cp_onnx_import *im) {
  return cp_oi_config_beside(im, &im->config_text, &im->config_len, &im->config_source);
}

/* An own export's config: metadata_props, else config.json beside (exports made before the key). */
static int find_config(cp_onnx_import *im) {
  const char *meta = cp_onnx_model_meta(im->om, CP_ONNX_META_CONFIG);
  if (meta) {
    CP_CHECK_ALLOC(im->config_text = strdup(meta), im->path);
    im->config_len = strlen(meta);
    CP_CHECK_ALLOC(im->config_source = strdup("metadata_props " CP_ONNX_META_CONFIG), im->path);
    return 0;
  }
  int rc = read_config_file(im);
  if (rc != 1) return rc;
  return cp_error_set(CP_ENOTFOUND, "%s: no hyper-parameters: no metadata_props '" CP_ONNX_META_CONFIG "', no "
                      "config.json beside the model or in its parent folder (num_attention_heads cannot be read from "
                      "the tensors' shapes)", im->path);
}

int cp_onnx_import_config(cp_hf_config **out, const cp_onnx_import *im) {
  char what[700];
  snprintf(what, sizeof what, "%s: %s", im->path, im->config_source);
  int rc = cp_hf_config_parse(out, im->config_text, im->config_len, what);
  const char *rule = cp_onnx_model_meta(im->om, "ctxpatch.rule"), *fid = cp_onnx_model_meta(im->om, "ctxpatch.fidelity");
  /* An in-place rewrite (fidelity "graph-rewrite") computes its rule in the graph too. */
  if (rc == 0 && rule && (im->ctxpatch || (fid && !strcmp(fid, "graph-rewrite")))) {
    snprintf(what, sizeof what, "%s: metadata_props 'ctxpatch.rule'", im->path);
    if ((rc = cp_rule_parse(&(*out)->ctxpatch_rule, rule, strlen(rule), what)) < 0) {
      cp_hf_config_free(*out);
      *out = NULL;
    }
  }
  return rc;
}

/* ---------------------------------------------------------------- entry points */

/* Whether t could be a weight of a model of width d_model: a float matrix with a d_model side. */
static bool weight_like(const cp_onnx_tensor *t, int d_model) {
  if (t->ndim < 2 || !t->has_dtype || !cp_dtype_is_float(t->dtype)) return false;
  for (int d = 0; d < t->ndim; d++)
    if (t->shape[d] == d_model) return true;
  return false;
}

/* Initializers not used are listed (own graph constants, recovered graphs' constant tables); one that
 * could be a weight (weight_like) refuses: the graph computes with a tensor the model would lack. */
static int check_unused(cp_onnx_import *im, int d_model) {
  const cp_onnx_graph *g = im->om->graph;
  for (size_t i = 0; i < g->n_initializers; i++) {
    const cp_onnx_tensor *t = &g->initializers[i];
    if (im->used[i]) continue;
    bool recovered = strcmp(im->naming, "ctxpatch") != 0;
    if (recovered && weight_like(t, d_model))
      return cp_error_set(CP_EONNX_RECOVER, "%s: initializer '%s' has a d_model (%d) side but no role in the "
                          "recovered model (%s recovery; a weight the model would lack)", im->path, t->name,
                          d_model, im->naming);
    if (!(im->ctxpatch && !strncmp(t->name, "const/", 6)) && weight_like(t, d_model))
      return cp_error_set(CP_EONNX_RECOVER, "%s: initializer '%s' is not a name ctxpatch recognises (ctxpatch export "
                          "names; anonymous names need graph pattern matching, not supported)", im->path, t->name);
    int rc = CP_ARRAY_RESERVE(im->ignored, im->cap_ignored, im->n_ignored + 1, im->path);
    if (rc) return rc;
    im->ignored[im->n_ignored++] = t->name;
  }
  return 0;
}

/* Why a graph with no ctxpatch metadata, no HF names and no token embedding Gather holds no model:
 * no weight initializer at all (single-op test graphs; training graphs, whose weights are graph
 * inputs), or no embedding. */
static int no_model(cp_onnx_import *im) {
  const cp_onnx_graph *g = im->om->graph;
  for (size_t i = 0; i < g->n_nodes; i++) { /* an embedding lookup of a weight fed as an input */
    const cp_onnx_node *n = &g->nodes[i];
    if (n->n_inputs < 2 || (strcmp(n->op_type, "Gather") && strcmp(n->op_type, "ATen"))) continue;
    for (size_t k = 0; k < g->n_inputs && k < 64; k++) {
      const cp_onnx_value *v = &g->inputs[k];
      if (!strcmp(v->name, n->inputs[0]) && v->is_tensor && v->ndim == 2 && v->dims[0].value > 0 &&
          (v->elem_type == 1 || v->elem_type == 10 || v->elem_type == 16) && !cp_onnx_graph_initializer(g, v->name))
        return cp_error_set(CP_EONNX_RECOVER, "%s: '%s' [%lld, %lld], which node '%s' (%s) looks up, is a graph "
                            "input fed at run time, not a stored initializer: the file stores no weights (a training "
                            "or op test graph)", im->path, v->name, (long long)v->dims[0].value,
                            (long long)v->dims[1].value, n->name, n->op_type);
    }
  }
  for (size_t i = 0; i < g->n_initializers; i++) {
    const cp_onnx_tensor *t = &g->initializers[i];
    if (t->ndim >= 2 && t->has_dtype && cp_dtype_is_float(t->dtype))
      return cp_error_set(CP_EONNX_RECOVER, "%s: no token embedding to recover a model from: no Gather of a 2-D float "
                          "initializer by a graph input (no ctxpatch metadata_props, no family's Hugging Face "
                          "names; first weight '%s')", im->path, t->name);
  }
  char fed[CP_TENSOR_NAME_MAX + 160] = "";
  for (size_t i = 0; i < g->n_inputs && !fed[0]; i++) {
    const cp_onnx_value *v = &g->inputs[i];
    if (v->is_tensor && v->ndim == 2 && (v->elem_type == 1 || v->elem_type == 10 || v->elem_type == 16) &&
        v->dims[0].value > 0 && v->dims[1].value > 0)
      snprintf(fed, sizeof fed, "; 2-D float inputs such as '%.500s' [%lld, %lld] are fed at run time (a training or "
               "op test graph)", v->name, (long long)v->dims[0].value, (long long)v->dims[1].value);
  }
  return cp_error_set(CP_EONNX_RECOVER, "%s: no float weight initializer of 2+ dims (%zu node%s, first '%s'): nothing "
                      "stored to recover a model from%s", im->path, g->n_nodes, g->n_nodes == 1 ? "" : "s",
                      g->n_nodes ? g->nodes[0].op_type : "", fed);
}

/* A graph without ctxpatch's metadata: onnxruntime's contrib ops first, then the plain-op pattern.
 * Hugging Face initializer names (with or without a config.json beside) say what each weight is,
 * not what the nodes compute (issue 33: a Mul by 0 on every attention output was read by its
 * names as the unmodified model), so such a graph is read only when a recovery accounts for its
 * nodes; its config.json is then a cross-check (onnx_hf_check.c). 0: recovered from the graph
 * (config_text made); negative: refused. */
static int recover_foreign(cp_onnx_import *im) {
  const cp_onnx_graph *g = im->om->graph;
  int rc = cp_onnx_recover_contrib(im);
  if (rc != 1) return rc;
  rc = cp_onnx_recover_pattern(im);
  if (rc == 0) return 0;
  if (rc < 0 && im->unexplained) return rc; /* the graph computes what no pattern explains: refused as it is */
  if (hf_named(g)) {
    char why[600];
    snprintf(why, sizeof why, "%s", rc == 1 ? "no token embedding Gather" : cp_error_message());
    const char *at = strstr(why, ": "); /* drop the repeated path */
    free(im->config_text); /* whatever a failed recovery left */
    im->config_text = NULL;
    return cp_error_set(CP_EONNX_RECOVER, "%s: a graph with Hugging Face initializer names is read only when its "
                        "nodes are recovered (the names say what each weight is, not what the graph computes), and "
                        "no recovery explains this one (%s)", im->path,
                        rc != 1 && at && !strncmp(why, im->path, strlen(im->path)) ? at + 2 : why);
  }
  if (rc != 1) return rc;
  return no_model(im);
}

int cp_onnx_import_open(cp_onnx_import **out, const char *path) { return cp_onnx_import_open_graph(out, path, NULL); }

int cp_onnx_import_open_graph(cp_onnx_import **out, const char *path, const cp_onnx_model *graph) {
  *out = NULL;
  cp_onnx_import *im = calloc(1, sizeof *im);
  cp_hf_config *c = NULL;
  int rc = 0;
  CP_CHECK_ALLOC(im, path);
  CP_CHECK_ALLOC_GOTO(im->path = strdup(path), path);
  if (!graph && (rc = cp_onnx_model_open(&im->om_owned, path, NULL)) < 0) goto done;
  im->om = graph ? graph : im->om_owned;
  const cp_onnx_graph *g = im->om->graph;
  CP_CHECK_ALLOC_GOTO(im->used = calloc(g->n_initializers + 1, sizeof *im->used), path);
  im->ctxpatch = cp_onnx_model_meta(im->om, "ctxpatch.version") != NULL;
  if (cp_onnx_t5_named(g)) { /* T5: encoder_model.onnx + decoder_model_merged.onnx (onnx_import_t5.c) */
    rc = cp_onnx_import_t5(im);
    goto done;
  }
  const char *foreign = im->ctxpatch ? first_foreign_name(g) : NULL;
  if (foreign) {
    rc = cp_error_set(CP_EONNX_RECOVER, "%s: initializer '%s' is not a name ctxpatch recognises (ctxpatch export "
                      "names; anonymous names need graph pattern matching, not supported)", path, foreign);
    goto done;
  }
  if (!im->ctxpatch) { /* recovered from the graph: config_text made by the recoverer */
    if ((rc = recover_foreign(im)) == 0 && (rc = cp_onnx_import_config(&c, im)) == 0 &&
        (rc = cp_onnx_genai_check(im, c)) == 0 && (!hf_named(g) || (rc = cp_onnx_hf_config_check(im, c)) == 0))
      rc = check_unused(im, c->d_model);
    goto done;
  }
  im->naming = "ctxpatch";
  if ((rc = find_config(im)) < 0 || (rc = cp_onnx_import_config(&c, im)) < 0) goto done;
  if (c->family == CP_FAMILY_T5) {
    rc = cp_onnx_t5_refuse_foreign(path);
    goto done;
  }
  rc = recover_ctxpatch(im, c);
  if (rc == 0) rc = check_unused(im, c->d_model);
done:
  cp_hf_config_free(c);
  if (rc < 0) cp_onnx_import_free(im);
  else *out = im;
  return rc;
}

void cp_onnx_import_free(cp_onnx_import *im) {
  if (!im) return;
  for (size_t i = 0; i < im->n_t; i++) free(im->t[i].name), free(im->t[i].data);
  free(im->t);
  free(im->used);
  free(im->ignored);
  free(im->config_text);
  free(im->config_source);
  for (size_t i = 0; i < 2 * im->n_prov; i++) free(im->prov[i]);
  free(im->prov);
  cp_onnx_model_free(im->om_owned);
  cp_onnx_model_free(im->pair);
  free(im->path);
  free(im);
}

const char *cp_onnx_import_naming(const cp_onnx_import *im) { return im->naming; }
const cp_onnx_model *cp_onnx_import_graph(const cp_onnx_import *im) { return im->om; }
const cp_onnx_model *cp_onnx_import_pair(const cp_onnx_import *im) { return im->pair; }

static cp_onnx_own_check_fn own_check; /* set once by the program before any model is opened */

void cp_onnx_set_own_check(cp_onnx_own_check_fn fn) { own_check = fn; }

int cp_onnx_run_own_check(const char *path, const cp_onnx_import *im, const cp_model *m) {
  return own_check && im->ctxpatch ? own_check(path, im, m) : 0;
}
size_t cp_onnx_import_provenance_count(const cp_onnx_import *im) { return im->n_prov; }
const char *cp_onnx_import_provenance(const cp_onnx_import *im, size_t i, const char **source) {
  assert(i < im->n_prov);
  *source = im->prov[2 * i + 1];
  return im->prov[2 * i];
}
const char *cp_onnx_import_config_source(const cp_onnx_import *im) { return im->config_source; }
size_t cp_onnx_import_count(const cp_onnx_import *im) { return im->n_t; }
const cp_tensor *cp_onnx_import_tensor(const cp_onnx_import *im, size_t i) {
  assert(i < im->n_t);
  return &im->t[i].view;
}
size_t cp_onnx_import_ignored_count(const cp_onnx_import *im) { return im->n_ignored; }
const char *cp_onnx_import_ignored(const cp_onnx_import *im, size_t i) {
  assert(i < im->n_ignored);
  return im->ignored[i];
}

char *cp_onnx_fire_meta(const cp_model *m) {
  cp_strbuf b = {0};
  for (int i = 0; i < m->n_fire; i++)
    cp_strbuf_printf(&b, "%s%.9g %.9g", i ? ";" : "", (double)(float)m->fire[i].c, (double)(float)m->fire[i].L);
  if (b.oom || !b.s) {
    cp_strbuf_free(&b);
    return NULL;
  }
  return b.s;
}
