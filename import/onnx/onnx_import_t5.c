/* ctxpatch's own T5 ONNX export read back as a checkpoint (include/ctxpatch/import/onnx_import.h):
 * encoder_model.onnx + decoder_model_merged.onnx (export/onnx/onnx_t5.c) read together, their
 * initializers taken by the names onnx_t5.c writes and renamed to the HF T5 tensors of the family
 * table, after checking that both graphs come from one export. Also where an export folder's graph
 * file is found (cp_onnx_export_graph). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import/onnx/onnx_import_priv.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/names.h"
#include "ctxpatch/model/onnx_names.h"

#define T5_ENCODER_FILE "encoder_model.onnx"
#define T5_DECODER_FILE "decoder_model_merged.onnx"

/* ---------------------------------------------------------------- the export folder */

char *cp_onnx_export_graph(const char *dir) {
  static const char *const names[] = {"model.onnx", T5_DECODER_FILE, T5_ENCODER_FILE};
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  /* dir itself when it is the export's onnx/ folder */
  bool onnx_dir = (n == 4 || (n > 4 && dir[n - 5] == '/')) && !strncmp(dir + n - 4, "onnx", 4);
  for (int sub = 0; sub < 2; sub++) {
    if (sub == 1 && !onnx_dir) break;
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
      char rel[64];
      snprintf(rel, sizeof rel, "%s%s", sub ? "" : "onnx/", names[k]);
      char *p = cp_path_join(dir, rel);
      if (!p || cp_path_is_file(p)) return p;
      free(p);
    }
  }
  return NULL;
}

/* ---------------------------------------------------------------- the two graphs */

typedef struct {
  const char *path;
  const cp_onnx_graph *g;
  bool *used; /* [n_initializers] */
} t5_graph;

typedef struct {
  cp_onnx_import *im;
  t5_graph enc, dec;
} t5_pair;

bool cp_onnx_t5_named(const cp_onnx_graph *g) {
  char name[CP_TENSOR_NAME_MAX], stored[CP_TENSOR_NAME_MAX + 8];
  cp_onnx_name(name, CP_FAMILY_T5, CP_ROLE_EMBED, CP_STACK_DECODER, 0, ".weight");
  snprintf(stored, sizeof stored, "%s.stored", name);
  return cp_onnx_graph_initializer(g, name) || cp_onnx_graph_initializer(g, stored);
}

int cp_onnx_t5_refuse_foreign(const char *path) {
  return cp_error_set(CP_EONNX_RECOVER, "%s: a T5 graph that is not ctxpatch's own export (metadata_props "
                      "'ctxpatch.version', T5 initializer names) is not read back: third-party T5 graphs are not "
                      "recovered by their weights' role; ctxpatch's " T5_ENCODER_FILE " + " T5_DECODER_FILE " are", path);
}

static bool has_output(const cp_onnx_graph *g, const char *name) {
  for (size_t i = 0; i < g->n_outputs; i++)
    if (!strcmp(g->outputs[i].name, name)) return true;
  return false;
}

/* 0: ctxpatch's T5 encoder graph, 1: its merged decoder, -1: neither. */
static int graph_role(const cp_onnx_graph *g) {
  bool enc = has_output(g, "last_hidden_state"), dec = has_output(g, "logits");
  return enc == dec ? -1 : dec;
}

/* Initializer `name` of gr (under --dtype fp16|bf16: NAME.stored, Cast to float in the graph), marked used. */
static const cp_onnx_tensor *find(t5_graph *gr, const char *name) {
  const cp_onnx_tensor *t = cp_onnx_graph_initializer(gr->g, name);
  if (!t) {
    char stored[CP_TENSOR_NAME_MAX + 8];
    snprintf(stored, sizeof stored, "%s.stored", name);
    t = cp_onnx_graph_initializer(gr->g, stored);
  }
  if (t) gr->used[t - gr->g->initializers] = true;
  return t;
}

/* Metadata both graphs of one export carry alike (export/onnx/onnx_export.c add_metadata). */
static int same_metadata(const t5_pair *p) {
  static const char *const keys[] = {"ctxpatch.version", CP_ONNX_META_CONFIG, "ctxpatch.rule", "ctxpatch.fidelity",
                                     "ctxpatch.certificate_sha256"};
  const cp_onnx_import *im = p->im;
  for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
    const char *a = cp_onnx_model_meta(im->om, keys[k]), *b = cp_onnx_model_meta(im->pair, keys[k]);
    if ((a || b) && (!a || !b || strcmp(a, b)))
      return cp_error_set(CP_EONNX_METADATA, "%s: metadata_props '%s' is not the same in %s (the two graphs come from "
                          "different exports)", im->path, keys[k], im->pair->path);
  }
  return 0;
}

/* Whether a and b hold the same type, shape and element bytes. */
static int same_tensor(bool *same, const cp_onnx_import *im, const cp_onnx_tensor *a, const cp_onnx_tensor *b) {
  *same = a->elem_type == b->elem_type && a->ndim == b->ndim && a->numel == b->numel &&
          !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape);
  if (!*same) return 0;
  if (a->data && b->data) {
    *same = !memcmp(a->data, b->data, a->nbytes);
    return 0;
  }
  float *x = NULL, *y = NULL; /* typed storage (float_data, int32_data): compare the elements' bits */
  int rc = cp_oi_read_f32(&x, im, a);
  if (rc == 0 && (rc = cp_oi_read_f32(&y, im, b)) == 0) *same = !memcmp(x, y, (size_t)a->numel * sizeof *x);
  free(x);
  free(y);
  return rc;
}

/* ---------------------------------------------------------------- names */

/* Initializer `name` (found in gr as t) is also in the other graph: it must be byte-equal there. */
static int check_shared(t5_pair *p, t5_graph *gr, const cp_onnx_tensor *t, const char *name) {
  t5_graph *other = gr == &p->enc ? &p->dec : &p->enc;
  const cp_onnx_tensor *o = find(other, name);
  bool same = true;
  int rc = o ? same_tensor(&same, p->im, t, o) : 0;
  if (rc == 0 && !same)
    rc = cp_error_set(CP_EONNX_RECOVER, "%s: initializer '%s' is not byte-equal in %s and %s (the two graphs come from "
                      "different exports)", p->im->path, name, p->enc.path, p->dec.path);
  return rc;
}

/* One row of the family's T5 table, every layer: from the graph of its stack, as its HF name. */
static int take_row(t5_pair *p, const cp_names *nm, const cp_family_tensor *row, const cp_hf_config *c) {
  const char *pattern = cp_onnx_name_pattern(CP_FAMILY_T5, row->role, row->stack, false);
  /* a projection's matrix is stored transposed ([in, out], MatMul's layout) */
  bool linear = row->cols != CP_DIM_NONE && row->role != CP_ROLE_EMBED && row->role != CP_ROLE_LM_HEAD &&
                row->role != CP_ROLE_REL_BIAS;
  t5_graph *gr = row->stack == CP_STACK_ENCODER ? &p->enc : &p->dec;
  char src[CP_TENSOR_NAME_MAX], dst[CP_TENSOR_NAME_MAX];
  if (!pattern)
    return cp_error_set(CP_EONNX_RECOVER, "%s: T5 tensor '%s' has no ONNX export name", p->im->path, row->hf);
  for (int l = 0; l < cp_names_layers(c, row); l++) {
    cp_onnx_name(src, CP_FAMILY_T5, row->role, row->stack, l, ".weight");
    cp_names_row(dst, nm, row, l, ".weight");
    const cp_onnx_tensor *t = find(gr, src);
    if (!t) {
      if (row->role == CP_ROLE_LM_HEAD && c->tie_word_embeddings) continue;
      return cp_error_set(CP_EMODEL_TENSOR, "%s: initializer '%s' is missing", gr->path, src);
    }
    int rc = cp_oi_take(p->im, dst, t, linear);
    if (rc == 0) rc = check_shared(p, gr, t, src);
    if (rc) return rc;
  }
  return 0;
}

static int take_tensors(t5_pair *p, const cp_hf_config *c) {
  cp_names nm = {.fl = cp_family_layout_of(CP_FAMILY_T5), .gated = !strncmp(c->activation, "gated-", 6)};
  nm.prefix = nm.fl->prefixes[0];
  bool embed_done = false;
  for (size_t i = 0; i < nm.fl->n_tensors; i++) {
    const cp_family_tensor *row = &nm.fl->tensors[i];
    if (!cp_names_row_applies(&nm, row) || (row->role == CP_ROLE_EMBED && embed_done)) continue;
    embed_done |= row->role == CP_ROLE_EMBED; /* "shared" first: the export writes no encoder.embed_tokens */
    int rc = take_row(p, &nm, row, c);
    if (rc) return rc;
  }
  return 0;
}

/* Every initializer a graph holds is a weight taken above or one of its graph constants
 * (`const/N`, listed as ignored); anything else is refused by name. */
static int check_unused(t5_pair *p, t5_graph *gr) {
  cp_onnx_import *im = p->im;
  for (size_t i = 0; i < gr->g->n_initializers; i++) {
    const char *n = gr->g->initializers[i].name;
    if (gr->used[i]) continue;
    if (strncmp(n, "const/", 6))
      return cp_error_set(CP_EONNX_RECOVER, "%s: initializer '%s' is not a name ctxpatch recognises (ctxpatch T5 %s "
                          "names)", gr->path, n, gr == &p->enc ? "encoder" : "decoder");
    int rc = CP_ARRAY_RESERVE(im->ignored, im->cap_ignored, im->n_ignored + 1, im->path);
    if (rc) return rc;
    im->ignored[im->n_ignored++] = n;
  }
  return 0;
}

/* ---------------------------------------------------------------- entry point */

/* Opens the other graph of the export beside im->path (im->om is of `role`) into im->pair. */
static int open_pair(cp_onnx_import *im, int role) {
  const char *slash = strrchr(im->path, '/');
  char *dir = slash ? strndup(im->path, (size_t)(slash - im->path) + (slash == im->path)) : strdup(".");
  char *path = dir ? cp_path_join(dir, role ? T5_ENCODER_FILE : T5_DECODER_FILE) : NULL;
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(path, im->path);
  if (!cp_path_is_file(path)) {
    rc = cp_error_set(CP_ENOTFOUND, "%s: the export's other graph %s is missing (ctxpatch writes T5 as "
                      T5_ENCODER_FILE " + " T5_DECODER_FILE " in one folder)", im->path, path);
    goto done;
  }
  if ((rc = cp_onnx_model_open(&im->pair, path, NULL)) < 0) goto done;
  if (graph_role(im->pair->graph) != !role || !cp_onnx_t5_named(im->pair->graph))
    rc = cp_error_set(CP_EONNX_RECOVER, "%s: is not the T5 %s graph of ctxpatch's export (no output '%s' or no "
                      "initializer 'shared.weight')", path, role ? "encoder" : "decoder",
                      role ? "last_hidden_state" : "logits");
done:
  free(path);
  free(dir);
  return rc;
}

int cp_onnx_import_t5(cp_onnx_import *im) {
  if (!im->ctxpatch) return cp_onnx_t5_refuse_foreign(im->path);
  int role = graph_role(im->om->graph), rc;
  if (role < 0)
    return cp_error_set(CP_EONNX_RECOVER, "%s: holds T5's 'shared.weight' but is neither ctxpatch's T5 encoder (output "
                        "'last_hidden_state') nor its merged decoder (output 'logits')", im->path);
  if ((rc = open_pair(im, role)) < 0) return rc;
  t5_graph given = {im->path, im->om->graph, im->used}, other = {im->pair->path, im->pair->graph, NULL};
  t5_pair p = {.im = im, .enc = role ? other : given, .dec = role ? given : other};
  t5_graph *po = role ? &p.enc : &p.dec;
  cp_hf_config *c = NULL;
  CP_CHECK_ALLOC_GOTO(po->used = calloc(po->g->n_initializers + 1, sizeof *po->used), im->path);
  if ((rc = same_metadata(&p)) < 0) goto done;
  const char *meta = cp_onnx_model_meta(im->om, CP_ONNX_META_CONFIG);
  if (!meta) {
    rc = cp_error_set(CP_ENOTFOUND, "%s: no hyper-parameters: no metadata_props '" CP_ONNX_META_CONFIG "'", im->path);
    goto done;
  }
  CP_CHECK_ALLOC_GOTO(im->config_text = strdup(meta), im->path);
  im->config_len = strlen(meta);
  CP_CHECK_ALLOC_GOTO(im->config_source = strdup("metadata_props " CP_ONNX_META_CONFIG), im->path);
  if ((rc = cp_onnx_import_config(&c, im)) < 0) goto done;
  if (c->family != CP_FAMILY_T5) {
    rc = cp_error_set(CP_EONNX_METADATA, "%s: metadata_props '" CP_ONNX_META_CONFIG "' says family %s but the graphs "
                      "hold T5's names", im->path, cp_family_name(c->family));
    goto done;
  }
  im->naming = "ctxpatch";
  if ((rc = take_tensors(&p, c)) == 0 && (rc = check_unused(&p, &p.enc)) == 0) rc = check_unused(&p, &p.dec);
done:
  cp_hf_config_free(c);
  free(po->used);
  return rc;
}
