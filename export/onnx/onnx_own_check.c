/* A graph claiming to be ctxpatch's own ONNX export must be the graph ctxpatch writes for the
 * weights read from it (issue 33: an own export is read back by its initializer names, so any node
 * added, removed or changed would otherwise go unseen). The export is regenerated from the model
 * read back into a private temporary folder (its graph, rewritten in place again under the graph's
 * rule when its fidelity says `graph-rewrite`) and compared canonically with the graph given: every
 * node's op_type, domain, name, inputs, outputs and attributes, the graph inputs and outputs, and
 * every initializer's name, type, shape and bytes, in order. metadata_props are not compared (the
 * certificate and digests differ by design); ctxpatch/export/onnx_export.h, docs/onnx.md. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/export/onnx_export.h"
#include "ctxpatch/export/onnx_rewrite.h"
#include "ctxpatch/formats/onnx_graph.h"
#include "ctxpatch/import/onnx_import.h"

/* ---------------------------------------------------------------- comparison */

static bool tensor_eq(const cp_onnx_tensor *a, const cp_onnx_tensor *b) {
  if (a->elem_type != b->elem_type || a->ndim != b->ndim || a->numel != b->numel || a->nbytes != b->nbytes)
    return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return false;
  if (!a->nbytes) return true;
  if (!a->data || !b->data) return false; /* the exporter stores raw or external bytes: typed storage is other */
  return !memcmp(a->data, b->data, a->nbytes);
}

static bool attr_eq(const cp_onnx_attribute *a, const cp_onnx_attribute *b) {
  if (strcmp(a->name, b->name) || a->type != b->type || a->i != b->i || memcmp(&a->f, &b->f, sizeof a->f) ||
      a->n != b->n || a->s.len != b->s.len || (a->s.len && memcmp(a->s.data, b->s.data, a->s.len)))
    return false;
  if ((a->ints || b->ints) && (!a->ints || !b->ints || memcmp(a->ints, b->ints, a->n * sizeof *a->ints))) return false;
  if ((a->floats || b->floats) && (!a->floats || !b->floats || memcmp(a->floats, b->floats, a->n * sizeof *a->floats)))
    return false;
  if ((a->t || b->t) && (!a->t || !b->t || !tensor_eq(a->t, b->t))) return false;
  /* the exporter writes no subgraph, string list or tensor list */
  return !a->g && !b->g && !a->strings && !b->strings && !a->tensors && !b->tensors && !a->graphs && !b->graphs;
}

static bool names_eq(const char *const *a, size_t na, const char *const *b, size_t nb) {
  if (na != nb) return false;
  for (size_t i = 0; i < na; i++)
    if (strcmp(a[i], b[i])) return false;
  return true;
}

/* Why node a differs from b, or NULL. */
static const char *node_diff(const cp_onnx_node *a, const cp_onnx_node *b) {
  if (strcmp(a->op_type, b->op_type) || strcmp(a->domain, b->domain)) return "its op";
  if (strcmp(a->name, b->name)) return "its name";
  if (!names_eq(a->inputs, a->n_inputs, b->inputs, b->n_inputs)) return "its inputs";
  if (!names_eq(a->outputs, a->n_outputs, b->outputs, b->n_outputs)) return "its outputs";
  if (a->n_attrs != b->n_attrs) return "its attributes";
  for (size_t k = 0; k < a->n_attrs; k++)
    if (!attr_eq(&a->attrs[k], &b->attrs[k])) return "an attribute";
  return NULL;
}

static int differs(const char *path, const char *what) {
  return cp_error_set(CP_EONNX_RECOVER,
                      "%s: %s differs from the graph ctxpatch writes for the weights read from it: "
                      "the graph carries ctxpatch's export metadata but is not ctxpatch's export (edited after the "
                      "export?); it is not read back",
                      path, what);
}

/* g (the file at path) against want (regenerated). */
static int compare(const char *path, const cp_onnx_graph *g, const cp_onnx_graph *want) {
  char what[400];
  size_t n = g->n_nodes < want->n_nodes ? g->n_nodes : want->n_nodes;
  for (size_t i = 0; i < n; i++) {
    const char *why = node_diff(&g->nodes[i], &want->nodes[i]);
    if (why) {
      snprintf(what, sizeof what, "node '%.120s' (%.40s, index %zu): %s", g->nodes[i].name, g->nodes[i].op_type, i,
               why);
      return differs(path, what);
    }
  }
  if (g->n_nodes != want->n_nodes) {
    const cp_onnx_node *x = g->n_nodes > n ? &g->nodes[n] : NULL;
    if (x)
      snprintf(what, sizeof what, "node '%.120s' (%.40s, index %zu), one more than ctxpatch writes", x->name,
               x->op_type, n);
    else snprintf(what, sizeof what, "the graph's %zu nodes (ctxpatch writes %zu)", g->n_nodes, want->n_nodes);
    return differs(path, what);
  }
  bool io = g->n_inputs == want->n_inputs && g->n_outputs == want->n_outputs;
  for (size_t i = 0; io && i < g->n_inputs; i++) io = !strcmp(g->inputs[i].name, want->inputs[i].name);
  for (size_t i = 0; io && i < g->n_outputs; i++) io = !strcmp(g->outputs[i].name, want->outputs[i].name);
  if (!io) return differs(path, "the graph's inputs or outputs");
  if (g->n_initializers != want->n_initializers) {
    snprintf(what, sizeof what, "the graph's %zu initializers (ctxpatch writes %zu)", g->n_initializers,
             want->n_initializers);
    return differs(path, what);
  }
  for (size_t i = 0; i < g->n_initializers; i++)
    if (strcmp(g->initializers[i].name, want->initializers[i].name) ||
        !tensor_eq(&g->initializers[i], &want->initializers[i])) {
      snprintf(what, sizeof what, "initializer '%.200s' (index %zu)", g->initializers[i].name, i);
      return differs(path, what);
    }
  return 0;
}

/* ---------------------------------------------------------------- regeneration */

typedef struct {
  char dir[64], *sub, *files[6];
  size_t n_files;
} scratch;

static void scratch_free(scratch *s) {
  for (size_t i = 0; i < s->n_files; i++) {
    unlink(s->files[i]);
    free(s->files[i]);
  }
  if (s->sub) rmdir(s->sub);
  if (s->dir[0]) rmdir(s->dir);
  free(s->sub);
}

/* s->sub/name, remembered for removal (with its .data beside it). */
static char *scratch_file(scratch *s, const char *name) {
  char data[256];
  snprintf(data, sizeof data, "%s.data", name);
  char *p = cp_path_join(s->sub, name), *d = cp_path_join(s->sub, data);
  if (!p || !d || s->n_files + 2 > sizeof s->files / sizeof *s->files) {
    free(p);
    free(d);
    return NULL;
  }
  s->files[s->n_files++] = d;
  s->files[s->n_files++] = p;
  return p;
}

/* The stored weight dtype of an own export: the type of its `NAME.stored` initializers, else f32. */
static cp_dtype stored_dtype(const cp_onnx_graph *g) {
  for (size_t i = 0; i < g->n_initializers; i++)
    if (cp_path_has_suffix(g->initializers[i].name, ".stored") && g->initializers[i].has_dtype)
      return g->initializers[i].dtype;
  return CP_F32;
}

/* The regenerated graph `name` (a file of the export) rewritten again under m's rule when `rewrite`. */
static int regenerated(cp_onnx_model **out, scratch *s, const char *name, const cp_model *m, bool rewrite) {
  char *p = scratch_file(s, name), rw[128];
  if (!p) return cp_nomem("%s", s->sub);
  int rc = cp_onnx_model_open(out, p, NULL);
  if (rc < 0 || !rewrite) return rc;
  snprintf(rw, sizeof rw, "rewritten.%s", name);
  char *q = scratch_file(s, rw);
  if (!q) return cp_nomem("%s", s->sub);
  cp_onnx_rewrite_params rp = {.train_len = m->train_len};
  cp_onnx_rewrite_report rep;
  rc = cp_onnx_rewrite(&rep, *out, &m->metadata_rule, q, &rp);
  cp_onnx_model_free(*out);
  *out = NULL;
  return rc < 0 ? rc : cp_onnx_model_open(out, q, NULL);
}

int cp_onnx_own_check(const char *path, const cp_onnx_import *im, const cp_model *m) {
  const cp_onnx_model *om = cp_onnx_import_graph(im), *pair = cp_onnx_import_pair(im);
  const char *fid = cp_onnx_model_meta(om, "ctxpatch.fidelity");
  bool rewrite = fid && !strcmp(fid, "graph-rewrite");
  scratch s;
  memset(&s, 0, sizeof s);
  cp_onnx_model *want = NULL, *want2 = NULL;
  cp_folder_result files = {0};
  const char *tmp = getenv("TMPDIR");
  int rc = 0;
  snprintf(s.dir, sizeof s.dir, "%s/ctxpatch-own.XXXXXX", tmp && tmp[0] && strlen(tmp) < 32 ? tmp : "/tmp");
  if (!mkdtemp(s.dir)) {
    rc = cp_error_set(CP_EIO, "%s: checking the graph against ctxpatch's export: cannot create a folder in %s: %s",
                      path, tmp && tmp[0] ? tmp : "/tmp", strerror(errno));
    s.dir[0] = 0;
    goto done;
  }
  CP_CHECK_ALLOC_GOTO(s.sub = cp_path_join(s.dir, "onnx"), path);
  cp_onnx_export_params p;
  cp_onnx_export_params_init(&p);
  p.weight_dtype = stored_dtype(om->graph);
  cp_rule rule, identity;
  cp_rule_init(&identity);
  /* a rewritten export was exported without a rule (the rewrite refuses a graph that has one) */
  if (!rewrite && (rc = cp_onnx_export_rule(&rule, m, NULL)) < 0) goto done;
  if ((rc = cp_onnx_write_graph(&files, NULL, s.dir, m, rewrite ? &identity : &rule, &p)) < 0) goto done;
  if (m->family == CP_FAMILY_T5) {
    bool dec = false; /* which half the graph given is: the decoder has the logits */
    for (size_t i = 0; i < om->graph->n_outputs; i++) dec |= !strcmp(om->graph->outputs[i].name, "logits");
    if ((rc = regenerated(&want, &s, dec ? "decoder_model_merged.onnx" : "encoder_model.onnx", m, rewrite)) < 0 ||
        (rc = compare(path, om->graph, want->graph)) < 0)
      goto done;
    if (pair &&
        ((rc = regenerated(&want2, &s, dec ? "encoder_model.onnx" : "decoder_model_merged.onnx", m, rewrite)) < 0 ||
         (rc = compare(pair->path, pair->graph, want2->graph)) < 0))
      goto done;
  } else if ((rc = regenerated(&want, &s, "model.onnx", m, rewrite)) < 0 ||
             (rc = compare(path, om->graph, want->graph)) < 0) {
    goto done;
  }
done:
  cp_onnx_model_free(want);
  cp_onnx_model_free(want2);
  cp_folder_result_free(&files);
  scratch_free(&s);
  return rc;
}
