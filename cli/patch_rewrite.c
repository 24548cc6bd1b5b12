/* ctxpatch patch IN.onnx OUT.onnx: the rule spliced into a third-party ONNX graph in place
 * (ctxpatch/export/onnx_rewrite.h), the external data files it references placed beside OUT, and a
 * one-line report of what changed. docs/onnx.md "Patching a third-party graph in place". */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/checkpoint.h"
#include "ctxpatch/import/gguf_model.h"
#include "ctxpatch/export/onnx_rewrite.h"
#include "ctxpatch/formats/onnx_graph.h"

_Static_assert(CLI_PATH_MAX >= PATH_MAX, "realpath needs PATH_MAX bytes");

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

static const char *folder_of(char buf[CLI_PATH_MAX], const char *path);

static bool is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The model file of IN: IN itself (a .onnx file), or IN/model.onnx, or IN/onnx/model.onnx. */
static bool model_file(char out[CLI_PATH_MAX], const char *in) {
  struct stat st;
  if (stat(in, &st) != 0) return false;
  if (S_ISREG(st.st_mode)) return ends_with(in, ".onnx") && snprintf(out, CLI_PATH_MAX, "%s", in) < CLI_PATH_MAX;
  if (!S_ISDIR(st.st_mode)) return false;
  if (snprintf(out, CLI_PATH_MAX, "%s/model.onnx", in) < CLI_PATH_MAX && is_file(out)) return true;
  return snprintf(out, CLI_PATH_MAX, "%s/onnx/model.onnx", in) < CLI_PATH_MAX && is_file(out);
}

bool cli_patch_rewrite_model(char model[CLI_PATH_MAX], const char *in, const char *out) {
  return ends_with(out, ".onnx") && model_file(model, in);
}

const char *cli_patch_rewrite_tokenizer(char buf[CLI_PATH_MAX], const char *model) {
  char dir[CLI_PATH_MAX];
  const char *d = folder_of(dir, model);
  if (snprintf(buf, CLI_PATH_MAX, "%s/tokenizer.json", d) < CLI_PATH_MAX && is_file(buf)) return buf;
  if (snprintf(buf, CLI_PATH_MAX, "%s/../tokenizer.json", d) < CLI_PATH_MAX && is_file(buf)) return buf;
  return NULL;
}

/* The folder of a path (".": none), in buf[CLI_PATH_MAX]. */
static const char *folder_of(char buf[CLI_PATH_MAX], const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return strcpy(buf, ".");
  size_t n = (size_t)(slash - path) + (slash == path);
  if (n >= CLI_PATH_MAX) n = CLI_PATH_MAX - 1;
  memcpy(buf, path, n), buf[n] = 0;
  return buf;
}

/* Each external data file of m, copied (atomically) into OUT's folder unless it is the same
 * folder; an existing file of that name is replaced only when its bytes differ and --force. */
static int place_data_files(const cp_onnx_model *m, const char *out, bool force) {
  char din[CLI_PATH_MAX], dout[CLI_PATH_MAX], rin[CLI_PATH_MAX], rout[CLI_PATH_MAX];
  folder_of(din, m->path), folder_of(dout, out);
  if (!realpath(din, rin) || !realpath(dout, rout))
    return cp_error_set(CP_EIO, "%s: cannot resolve the output folder", out);
  if (!strcmp(rin, rout) || m->n_data_files == 0) return 0;
  for (size_t k = 0; k < m->n_data_files; k++) {
    const char *loc = m->data_files[k];
    char src[CLI_PATH_MAX], dst[CLI_PATH_MAX], hs[65], hd[65];
    if (strchr(loc, '/'))
      return cp_error_set(CP_EONNX_EXTERNAL, "%s: external data '%s' lies in a subfolder: write OUT beside IN or copy "
                          "the folder first", m->path, loc);
    if (snprintf(src, sizeof src, "%s/%s", din, loc) >= CLI_PATH_MAX || snprintf(dst, sizeof dst, "%s/%s", dout, loc) >= CLI_PATH_MAX)
      return cp_error_set(CP_EARG, "%s: path too long", loc);
    if (is_file(dst)) {
      int rc = cp_sha256_file(hs, src);
      if (rc == 0) rc = cp_sha256_file(hd, dst);
      if (rc < 0) return rc;
      if (!strcmp(hs, hd)) continue;
      if (!force) return cp_error_set(CP_EEXIST, "%s: exists with other bytes than %s (--force replaces it)", dst, src);
    }
    int rc = cp_copy_file_atomic(NULL, dst, src, SIZE_MAX);
    if (rc < 0) return rc;
  }
  return 0;
}

int cli_patch_rewrite(const char *model, const char *out, const cp_rule *rule, int64_t train_len, const char *cert_sha256,
                      const char *cert_text, bool force, bool dry_run) {
  bool cert = cert_sha256 != NULL;
  cp_onnx_model *m = NULL;
  int rc = cp_onnx_model_open(&m, model, NULL);
  if (rc < 0) return rc;
  cp_output kind;
  if ((rc = cp_output_kind(&kind, out, 0)) < 0) goto done;
  if (kind == CP_OUTPUT_REPLACE && !force) {
    rc = cp_error_set(CP_EEXIST, "%s: exists (--force replaces it)", out);
    goto done;
  }
  const char *keys[] = {"ctxpatch.certified", "ctxpatch.certificate_sha256", "ctxpatch.certificate"};
  const char *values[] = {cert ? "true" : "false", cert ? cert_sha256 : "", cert && cert_text ? cert_text : ""};
  cp_onnx_rewrite_params p = {keys, values, cert ? 3 : 2, train_len};
  cp_onnx_rewrite_report rep;
  /* The graph is rewritten in memory (every refusal) before any file is placed. */
  if ((rc = cp_onnx_rewrite(&rep, m, rule, NULL, &p)) < 0 || dry_run) goto done;
  if ((rc = place_data_files(m, out, force)) < 0 || (rc = cp_onnx_rewrite(&rep, m, rule, out, &p)) < 0) goto done;
  printf("rewrote %zu attention sites (%zu Softmax, %zu contrib): %zu nodes added, %zu changed, %zu initializers "
         "added, %zu changed; everything else kept byte for byte\n",
         rep.n_softmax + rep.n_contrib, rep.n_softmax, rep.n_contrib, rep.n_nodes_added, rep.n_nodes_changed,
         rep.n_initializers_added, rep.n_initializers_changed);
  if (!cert) printf("wrote %s (NOT certified: --no-verify)\n", out);
done:
  cp_onnx_model_free(m);
  return rc;
}

/* The training length the certificate's engine run used (its model.train_len), or 0. */
static int64_t cert_train_len(const char *text) {
  cJSON *c = cJSON_Parse(text);
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "model"), "train_len");
  int64_t v = cJSON_IsNumber(t) && t->valuedouble >= 1 && t->valuedouble <= (double)CLI_MAX_TOKENS ? (int64_t)t->valuedouble : 0;
  cJSON_Delete(c);
  return v;
}

int cli_patch_rewrite_certified(cp_patch_outcome *out, const char *model, const char *out_path,
                                const cp_patch_options *o, const cp_patch_params *params) {
  /* Recovering the description is what can fail here; building the engine's model from it is
   * cp_patch_run's job (opening it twice would widen every weight twice). */
  cp_checkpoint *ck = NULL;
  cp_hf_config *cfg = NULL;
  int rc = cp_checkpoint_open(&ck, model);
  if (rc == 0) rc = cp_checkpoint_config(&cfg, ck, model);
  bool t5 = rc == 0 && cfg->family == CP_FAMILY_T5;
  cp_hf_config_free(cfg);
  cp_checkpoint_free(ck);
  if (rc < 0) {
    char why[300];
    snprintf(why, sizeof why, "%s", cp_error_message());
    return cp_error_set(CP_EONNX_RECOVER, "%s: no model description can be recovered from this graph (%s), so no "
                        "certificate can be produced; --no-verify writes the rewritten graph uncertified", model, why);
  }
  /* The model read back is both graphs of the export: a certificate of it would not be this graph's. */
  if (t5)
    return cp_error_set(CP_EONNX_RECOVER, "%s: one graph of a T5 export (encoder_model.onnx + "
                        "decoder_model_merged.onnx): the model it certifies is both graphs, and only this one is "
                        "rewritten; --no-verify writes the rewritten graph uncertified", model);
  char tmp_target[CLI_PATH_MAX], cert_dir[CLI_PATH_MAX];
  if (snprintf(tmp_target, sizeof tmp_target, "%s.ctxpatch-certify", out_path) >= (int)sizeof tmp_target)
    return cp_error_set(CP_EARG, "%s: path too long", out_path);
  cp_atomic_dir *d = NULL;
  char *text = NULL;
  if ((rc = cp_atomic_dir_open(&d, tmp_target, 0)) < 0) return rc;
  if (params->on_tmp_dir) params->on_tmp_dir(params->on_tmp_ctx, cp_atomic_dir_path(d));
  if (snprintf(cert_dir, sizeof cert_dir, "%s/cert", cp_atomic_dir_path(d)) >= (int)sizeof cert_dir) {
    rc = cp_error_set(CP_EARG, "%s: path too long", out_path);
    goto done;
  }
  cp_patch_params pp = *params;
  pp.replace = false;
  /* The certification writes the `patch --to onnx` artifact in the temporary folder: its
   * certificate is what the rewritten graph carries; the folder goes afterwards. */
  if ((rc = cp_patch_run(out, model, cert_dir, o, &pp)) < 0) {
    /* A recovered third-party graph usually comes without its tokenizer: say what to do. */
    if (rc == CP_ETOK_MISSING) {
      char why[400];
      snprintf(why, sizeof why, "%s", cp_error_message());
      rc = cp_error_set(rc, "%s; the probes need it to certify, --no-verify writes the rewritten graph uncertified",
                        why);
    }
    goto done;
  }
  if (!out->pass) goto done;
  out->written = false;
  /* The certificate's own bytes travel in the graph: their sha256 is the digest. */
  char path[CLI_PATH_MAX + 32];
  size_t len;
  snprintf(path, sizeof path, "%s/certificate.json", cert_dir);
  if ((rc = cp_read_file(&text, &len, path, (size_t)64 << 20)) < 0 ||
      (rc = cli_patch_rewrite(model, out_path, &out->patch.rule, cert_train_len(text), out->certificate_sha256, text,
                              params->replace, false)) < 0) {
    out->pass = false;
    goto done;
  }
  out->written = true;
done:
  free(text);
  cp_atomic_dir_abort(d);
  return rc;
}
