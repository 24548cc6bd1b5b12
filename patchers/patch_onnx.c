/* Floor: patchers. `ctxpatch patch IN.onnx OUT.onnx` as one library call
 * (ctxpatch/patchers/patch_onnx.h): the graph read once (the rewriter's edit and the recovered
 * model both come from it), edited once, certified through cp_patch_run, written with the
 * certificate held in memory. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/quote.h"
#include "ctxpatch/formats/onnx_data.h"
#include "ctxpatch/formats/onnx_digest.h"
#include "ctxpatch/import/checkpoint.h"
#include "ctxpatch/import/gguf_model.h"
#include "ctxpatch/patchers/patch_onnx.h"
#include "patchers/patch_json.h"

/* Paths as long as realpath's. */
#define PO_PATH_MAX PATH_MAX

void cp_patch_onnx_result_free(cp_patch_onnx_result *r) {
  if (!r) return;
  cp_patch_outcome_free(&r->outcome);
  memset(r, 0, sizeof *r);
}

/* The folder of a path (".": none), in buf[PO_PATH_MAX]. */
static const char *folder_of(char buf[PO_PATH_MAX], const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return strcpy(buf, ".");
  size_t n = (size_t)(slash - path) + (slash == path);
  if (n >= PO_PATH_MAX) n = PO_PATH_MAX - 1;
  memcpy(buf, path, n), buf[n] = 0;
  return buf;
}

/* The tokenizer.json beside the graph or in its parent folder (the onnx/ layout), in buf, or NULL. */
static const char *tokenizer_beside(char buf[PO_PATH_MAX], const char *model) {
  char dir[PO_PATH_MAX];
  const char *d = folder_of(dir, model);
  if (snprintf(buf, PO_PATH_MAX, "%s/tokenizer.json", d) < PO_PATH_MAX && cp_path_is_file(buf)) return buf;
  if (snprintf(buf, PO_PATH_MAX, "%s/../tokenizer.json", d) < PO_PATH_MAX && cp_path_is_file(buf)) return buf;
  return NULL;
}

/* Whether OUT lies in another folder than IN's graph (its data files are then copied beside OUT):
 * *other, with the two folders in din and dout. */
static int other_folder(bool *other, char din[PO_PATH_MAX], char dout[PO_PATH_MAX], const cp_onnx_model *m,
                        const char *out) {
  char rin[PO_PATH_MAX], rout[PO_PATH_MAX];
  folder_of(din, m->path), folder_of(dout, out);
  if (!realpath(din, rin) || !realpath(dout, rout))
    return cp_error_set(CP_EIO, "%s: cannot resolve the output folder", out);
  *other = strcmp(rin, rout) != 0;
  return 0;
}

/* Before any work: OUT in another folder must not take the name of a data file copied beside it
 * (the graph would be written over the copy, and read itself as weights). */
static int check_names(const cp_onnx_model *m, const char *out) {
  char din[PO_PATH_MAX], dout[PO_PATH_MAX], q[128];
  bool other = false;
  int rc = m->n_data_files ? other_folder(&other, din, dout, m, out) : 0;
  const char *base = strrchr(out, '/') ? strrchr(out, '/') + 1 : out;
  for (size_t k = 0; rc == 0 && other && k < m->n_data_files; k++)
    if (!strcmp(m->data_files[k], base))
      rc = cp_error_set(CP_EOVERLAP,
                        "%s: output takes the name of the external data file '%s' of %s, which is "
                        "copied beside it: name OUT otherwise",
                        out, cp_quote(q, sizeof q, base, strlen(base)), m->path);
  return rc;
}

/* Each external data file of m, copied (atomically) into OUT's folder unless it is the same
 * folder, so that OUT's folder always holds the old pair or the new one (docs/reliability.md): a
 * file there of that name with the same bytes is kept; with other bytes (replaced only with
 * `force`) it stays for the old graph, IN's bytes are copied under a name made from their digest
 * (LOC.<16 hex digits>) and the edit's references moved to it, and the old file's path goes into
 * displaced[k], removed once the new graph is in place. fresh (may be NULL) gets the path of each
 * file written here (the caller's to remove when nothing else is written). */
static int place_data_files(char **displaced, char **fresh, cp_onnx_edit *e, const cp_onnx_model *m, const char *out,
                            bool force) {
  char din[PO_PATH_MAX], dout[PO_PATH_MAX], digest[65] = "";
  bool other = false;
  int rc = m->n_data_files ? other_folder(&other, din, dout, m, out) : 0;
  if (rc < 0 || !other) return rc;
  for (size_t k = 0; k < m->n_data_files; k++) {
    const char *loc = m->data_files[k];
    char dst[PO_PATH_MAX], named[PO_PATH_MAX], q[128];
    if (strchr(loc, '/'))
      return cp_error_set(CP_EONNX_EXTERNAL,
                          "%s: external data '%s' lies in a subfolder: write OUT beside IN or copy "
                          "the folder first",
                          m->path, cp_quote(q, sizeof q, loc, strlen(loc)));
    if (snprintf(dst, sizeof dst, "%s/%s", dout, loc) >= PO_PATH_MAX)
      return cp_error_set(CP_EARG, "%s: path too long", out);
    /* Only the ranges IN's tensors use are read and written (formats/onnx_data.h): a file there
     * holding the same bytes in those ranges is kept, a missing one written. */
    bool written = false;
    if ((rc = cp_onnx_data_place(&written, m, k, dst, false)) != CP_EEXIST) {
      if (rc < 0) return rc;
      if (written && fresh && !fresh[k]) CP_CHECK_ALLOC(fresh[k] = strdup(dst), out);
      continue;
    }
    if (!force) return rc;
    /* The old graph keeps reading dst until the new one is renamed over it: IN's bytes go under a
     * name made from IN's graph digest (over the ranges it uses), LOC.<16 hex digits>. */
    if (!digest[0]) {
      cp_onnx_model *again = NULL;
      rc = cp_onnx_file_digest(digest, &again, m->path);
      cp_onnx_model_free(again);
      if (rc < 0) return rc;
    }
    if (snprintf(named, sizeof named, "%s.%.16s", dst, digest) >= PO_PATH_MAX || (rc = cp_atomic_name_check(named)) < 0)
      return rc < 0 ? rc : cp_error_set(CP_EARG, "%s: path too long", out);
    /* one left by an earlier run cut short is reused when it holds those bytes */
    if ((rc = cp_onnx_data_place(&written, m, k, named, false)) < 0)
      return rc == CP_EEXIST
                 ? cp_error_set(CP_EEXIST, "%s: exists with other bytes than %s's; remove it", named, m->path)
                 : rc;
    if (written && fresh && !fresh[k]) CP_CHECK_ALLOC(fresh[k] = strdup(named), out);
    size_t moved = 0;
    if ((rc = cp_onnx_edit_set_location(&moved, e, loc, strrchr(named, '/') + 1)) < 0) return rc;
    CP_CHECK_ALLOC(displaced[k] = strdup(dst), out);
  }
  return 0;
}

/* An existing OUT is replaced only with `replace`. */
static int check_out(const char *out, bool replace) {
  cp_output kind;
  int rc = cp_output_kind(&kind, out, 0);
  if (rc == 0) rc = cp_input_check_output(out, 0); /* the graph, its data files, tokenizer, config */
  if (rc == 0) rc = cp_patch_report_check(out, replace);
  if (rc < 0) return rc;
  if (kind == CP_OUTPUT_REPLACE && !replace) return cp_error_set(CP_EEXIST, "%s: exists (--force replaces it)", out);
  return 0;
}

/* The training length the certificate's engine run used (its model.train_len), or 0. */
static int64_t cert_train_len(const char *text) {
  cJSON *c = cJSON_Parse(text);
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "model"), "train_len");
  /* as the CLI bounds a length (CLI_MAX_TOKENS) */
  bool ok = cJSON_IsNumber(t) && t->valuedouble >= 1 && t->valuedouble <= (double)(1ll << 20);
  int64_t v = ok ? (int64_t)t->valuedouble : 0;
  cJSON_Delete(c);
  return v;
}

/* Whether the edit made under `a` (train_len 0) is the one `b` with train_len would make: the
 * same rule, and no runtime ALiBi taking the training length from outside the rule. */
static int same_edit(bool *same, const cp_rule *a, const cp_rule *b) {
  char *sa = cp_rule_to_string(a), *sb = cp_rule_to_string(b);
  int rc = sa && sb ? 0 : cp_nomem("rule");
  bool runtime = b->alibi_mode == CP_ALIBI_DYNAMIC || b->alibi_mode == CP_ALIBI_PROGRESSIVE;
  *same = rc == 0 && !strcmp(sa, sb) && (!runtime || b->train_len > 0);
  free(sa);
  free(sb);
  return rc;
}

/* The edit `e` with the certificate entries (sha256 NULL: uncertified) into OUT, external data
 * first; the data files the new graph no longer reads removed once it is in place. */
static int write_graph(cp_onnx_edit *e, const cp_onnx_model *m, const char *out, const char *sha256, const char *text,
                       bool force) {
  bool cert = sha256 != NULL;
  const char *keys[] = {"ctxpatch.certified", "ctxpatch.certificate_sha256", "ctxpatch.certificate"};
  const char *values[] = {cert ? "true" : "false", cert ? sha256 : "", cert && text ? text : ""};
  char **displaced = calloc(m->n_data_files + 1, sizeof *displaced);
  CP_CHECK_ALLOC(displaced, out);
  int rc = place_data_files(displaced, NULL, e, m, out, force);
  for (size_t k = 0; k < (cert ? 3u : 2u) && rc == 0; k++) rc = cp_onnx_edit_set_meta(e, keys[k], values[k]);
  if (rc == 0) rc = cp_patch_report_drop(out);
  if (rc == 0) rc = cp_onnx_edit_write_digested(NULL, e, out);
  for (size_t k = 0; k < m->n_data_files; k++) {
    if (rc == 0 && displaced[k]) unlink(displaced[k]); /* stale now; a leftover would only cost space */
    free(displaced[k]);
  }
  free(displaced);
  if (rc == 0 && cert && text) rc = cp_patch_report_write(out, text, strlen(text)); /* after the graph */
  return rc;
}

/* patch IN.onnx OUT.onnx's graph for onnxruntime before the certificate exists (cp_patch_inplace):
 * the rewrite under the certified rule (kept in *e for the final write) written to
 * OUT.ctxpatch-runtime.onnx beside OUT, so that it reads the data files OUT will read; OUT differs
 * from it only by the certificate's metadata_props, which no runtime reads. */
typedef struct {
  cp_onnx_edit **e;
  cp_onnx_rewrite_report *rep;
  const cp_onnx_model *m;
  const cp_rule *asked; /* the rule the options named (may be NULL) */
  const char *out;
  bool force;
  bool final;                /* *e is the certified rule's edit */
  char **fresh;              /* [m->n_data_files]: data files written beside OUT (removed if OUT is not) */
  const cp_patch_params *pp; /* its on_tmp_dir: the CLI's watchdog removes the graph after a kill -9 */
  char path[PO_PATH_MAX];    /* the graph written ("" when none) */
} inplace_ctx;

static int inplace_write(void *ctx, const char **path, const cp_rule *rule, int64_t train_len) {
  inplace_ctx *c = ctx;
  bool same = false;
  int rc = *c->e && c->asked ? same_edit(&same, c->asked, rule) : 0;
  if (rc == 0 && !same) {
    cp_onnx_edit_free(*c->e);
    *c->e = NULL;
    rc = cp_onnx_rewrite_edit(c->e, c->rep, c->m, rule, train_len);
  }
  if (rc < 0) return rc;
  c->final = true;
  char **displaced = calloc(c->m->n_data_files + 1, sizeof *displaced);
  CP_CHECK_ALLOC(displaced, c->out);
  if (snprintf(c->path, sizeof c->path, "%s.ctxpatch-runtime.onnx", c->out) >= (int)sizeof c->path)
    rc = cp_error_set(CP_EARG, "%s: path too long", c->out);
  if (rc == 0) rc = cp_input_check_output(c->path, 0);
  if (rc == 0 && c->pp->on_tmp_dir) c->pp->on_tmp_dir(c->pp->on_tmp_ctx, c->path);
  /* the old OUT keeps the displaced files until the final write replaces it */
  if (rc == 0) rc = place_data_files(displaced, c->fresh, *c->e, c->m, c->out, c->force);
  if (rc == 0) rc = cp_onnx_edit_write_digested(NULL, *c->e, c->path);
  for (size_t k = 0; k < c->m->n_data_files; k++) free(displaced[k]);
  free(displaced);
  if (rc < 0) c->path[0] = 0;
  *path = c->path;
  return rc;
}

static void inplace_drop(void *ctx) {
  inplace_ctx *c = ctx;
  if (c->path[0]) unlink(c->path);
  c->path[0] = 0;
}

/* How the graph stores its matrices (the runtime check's tolerance): its first 2-D float initializer's type. */
static const char *graph_weights(const cp_onnx_model *m) {
  for (size_t i = 0; i < m->graph->n_initializers; i++) {
    const cp_onnx_tensor *t = &m->graph->initializers[i];
    if (t->ndim != 2) continue;
    if (t->elem_type == 10) return "f16";  /* TensorProto.FLOAT16 */
    if (t->elem_type == 16) return "bf16"; /* BFLOAT16 */
    if (t->elem_type == 1) return "f32";
  }
  return "f32";
}

/* The refusal of a graph whose model cannot be recovered, the reason being the error just set. */
static int no_description(const char *model) {
  char why[300];
  snprintf(why, sizeof why, "%s", cp_error_message());
  return cp_error_set(CP_EONNX_RECOVER,
                      "%s: no model description can be recovered from this graph (%s), so no "
                      "certificate can be produced; --no-verify writes the rewritten graph uncertified",
                      model, why);
}

/* The model `graph` describes, recovered from it as a checkpoint (*ck, the caller's) that can be
 * certified: not one graph of a T5 pair. */
static int recover(cp_checkpoint **ck, const char *model, const cp_onnx_model *graph) {
  cp_hf_config *cfg = NULL;
  int rc = cp_checkpoint_open_onnx(ck, model, graph);
  if (rc == 0) rc = cp_checkpoint_config(&cfg, *ck, model);
  bool t5 = rc == 0 && cfg->family == CP_FAMILY_T5;
  cp_hf_config_free(cfg);
  if (rc < 0) rc = no_description(model);
  /* The model read back is both graphs of the export: a certificate of it would not be this graph's. */
  else if (t5)
    rc = cp_error_set(CP_EONNX_RECOVER,
                      "%s: one graph of a T5 export (encoder_model.onnx + "
                      "decoder_model_merged.onnx): the model it certifies is both graphs, and only this one is "
                      "rewritten; --no-verify writes the rewritten graph uncertified",
                      model);
  if (rc < 0) cp_checkpoint_free(*ck), *ck = NULL;
  return rc;
}

/* The certification of the model `ck` holds (taken): cp_patch_run --to onnx into the hidden
 * folder OUT.ctxpatch-certify (its certificate lists that artifact's files), removed afterwards
 * whatever the verdict. */
static int certify(cp_patch_outcome *oc, const char *model, cp_checkpoint *ck, const char *out_path,
                   const cp_patch_onnx_params *p, const cp_patch_inplace *ip) {
  char tmp_target[PO_PATH_MAX], cert_dir[PO_PATH_MAX], tok[PO_PATH_MAX];
  cp_atomic_dir *d = NULL;
  int rc = 0;
  if (snprintf(tmp_target, sizeof tmp_target, "%s.ctxpatch-certify", out_path) >= (int)sizeof tmp_target) {
    rc = cp_error_set(CP_EARG, "%s: path too long", out_path);
    goto done;
  }
  if ((rc = cp_atomic_dir_open(&d, tmp_target, 0)) < 0) goto done;
  if (p->patch->on_tmp_dir) p->patch->on_tmp_dir(p->patch->on_tmp_ctx, cp_atomic_dir_path(d));
  if (snprintf(cert_dir, sizeof cert_dir, "%s/cert", cp_atomic_dir_path(d)) >= (int)sizeof cert_dir) {
    rc = cp_error_set(CP_EARG, "%s: path too long", out_path);
    goto done;
  }
  cp_onnx_export_params ep; /* certified as `patch --to onnx` certifies: the C engine under the whole rule */
  cp_onnx_export_params_init(&ep);
  cp_patch_params pp = *p->patch;
  pp.replace = false;
  pp.onnx = &ep;
  pp.checkpoint = ck;
  pp.inplace = ip;
  ck = NULL; /* cp_patch_run's now */
  if (!pp.tokenizer_path) pp.tokenizer_path = tokenizer_beside(tok, model);
  if ((rc = cp_patch_run(oc, model, cert_dir, p->options, &pp)) < 0 && rc == CP_ETOK_MISSING) {
    /* A recovered third-party graph usually comes without its tokenizer: say what to do. */
    char why[400];
    snprintf(why, sizeof why, "%s", cp_error_message());
    rc = cp_error_set(rc, "%s; the probes need it to certify, --no-verify writes the rewritten graph uncertified", why);
  }
  /* The folder was committed inside the hidden one: nothing of it is read back. */
  oc->written = false;
done:
  cp_checkpoint_free(ck);
  cp_atomic_dir_abort(d);
  return rc;
}

int cp_patch_onnx(cp_patch_onnx_result *out, const char *in, const char *out_path, const cp_patch_onnx_params *p) {
  memset(out, 0, sizeof *out);
  cp_onnx_model *m = NULL;
  cp_checkpoint *ck = NULL;
  cp_onnx_edit *e = NULL;
  char *cert_text = NULL, **fresh = NULL;
  bool verify = p->patch->verify != NULL, force = p->patch->replace;
  int rc = 0;
  if (!verify && !p->rule) return cp_error_set(CP_EARG, "%s: an uncertified rewrite needs the rule", in);
  /* The graph is read once: the rewriter edits it, the certification recovers the model from it,
   * and what is certified is what is rewritten. Without a rule the recovery comes first and says
   * why a graph cannot be read. */
  if ((rc = cp_onnx_model_open(&m, in, NULL)) < 0) {
    if (verify && !p->rule) rc = no_description(in);
    goto done;
  }
  /* Every refusal of the rewriter before any model runs. */
  if ((rc = check_names(m, out_path)) < 0) goto done;
  if (p->rule &&
      ((rc = check_out(out_path, force)) < 0 || (rc = cp_onnx_rewrite_edit(&e, &out->rewrite, m, p->rule, 0)) < 0))
    goto done;
  if (!verify) {
    out->outcome.pass = true;
    if ((rc = write_graph(e, m, out_path, NULL, NULL, force)) < 0) goto done;
    out->outcome.written = true;
    goto done;
  }
  if ((rc = recover(&ck, in, m)) < 0) goto done;
  CP_CHECK_ALLOC_GOTO(fresh = calloc(m->n_data_files + 1, sizeof *fresh), in);
  inplace_ctx ic = {&e, &out->rewrite, m, p->rule, out_path, force, false, fresh, p->patch, ""};
  cp_patch_inplace ip = {m->path, graph_weights(m), inplace_write, inplace_drop, &ic};
  rc = certify(&out->outcome, in, ck, out_path, p, &ip);
  ck = NULL; /* taken */
  if (rc < 0 || !out->outcome.pass) goto done;
  /* The certificate.json text the digest covers: the JSON and its newline. */
  const char *cj = out->outcome.certificate_json;
  if (!cj) { /* a passing verdict always has one */
    rc = cp_error_set(CP_EARG, "%s: the certification kept no certificate", in);
    goto fail;
  }
  CP_CHECK_ALLOC_GOTO(cert_text = malloc(strlen(cj) + 2), in);
  strcat(strcpy(cert_text, cj), "\n");
  const cp_rule *rule = &out->outcome.patch.rule;
  bool same = false;
  if ((rc = check_out(out_path, force)) < 0 || (e && p->rule && (rc = same_edit(&same, p->rule, rule)) < 0)) goto fail;
  if (!same && !ic.final) { /* else the edit onnxruntime ran is the one written */
    cp_onnx_edit_free(e);
    e = NULL;
    if ((rc = cp_onnx_rewrite_edit(&e, &out->rewrite, m, rule, cert_train_len(cj))) < 0) goto fail;
  }
  if ((rc = write_graph(e, m, out_path, out->outcome.certificate_sha256, cert_text, force)) < 0) goto fail;
  out->outcome.written = out->certified = true;
  goto done;
fail:
  out->outcome.pass = false;
done:
  for (size_t k = 0; fresh && k < m->n_data_files; k++) {
    if (fresh[k] && !out->outcome.written) unlink(fresh[k]); /* copied for onnxruntime; OUT was not written */
    free(fresh[k]);
  }
  free(fresh);
  free(cert_text);
  cp_onnx_edit_free(e);
  cp_checkpoint_free(ck);
  cp_onnx_model_free(m);
  return rc;
}
