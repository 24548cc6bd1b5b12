/* ctxpatch patch IN.onnx OUT.onnx: the rule spliced into a third-party ONNX graph in place
 * (converters/onnx_rewrite.h), the external data files it references placed beside OUT, and a
 * one-line report of what changed. docs/onnx.md "Patching a third-party graph in place". */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/converters/model.h"
#include "ctxpatch/converters/onnx_rewrite.h"
#include "ctxpatch/formats/onnx_graph.h"

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

static bool is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The model file of IN: IN itself (a .onnx file), or IN/model.onnx, or IN/onnx/model.onnx. */
static bool model_file(char out[PATH_MAX], const char *in) {
  struct stat st;
  if (stat(in, &st) != 0) return false;
  if (S_ISREG(st.st_mode)) return ends_with(in, ".onnx") && snprintf(out, PATH_MAX, "%s", in) < PATH_MAX;
  if (!S_ISDIR(st.st_mode)) return false;
  if (snprintf(out, PATH_MAX, "%s/model.onnx", in) < PATH_MAX && is_file(out)) return true;
  return snprintf(out, PATH_MAX, "%s/onnx/model.onnx", in) < PATH_MAX && is_file(out);
}

bool cli_patch_is_rewrite(const char *in, const char *out) {
  char p[PATH_MAX];
  return ends_with(out, ".onnx") && model_file(p, in);
}

/* The folder of a path (".": none), in buf[PATH_MAX]. */
static const char *folder_of(char buf[PATH_MAX], const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return strcpy(buf, ".");
  size_t n = (size_t)(slash - path) + (slash == path);
  if (n >= PATH_MAX) n = PATH_MAX - 1;
  memcpy(buf, path, n), buf[n] = 0;
  return buf;
}

/* Each external data file of m, copied (atomically) into OUT's folder unless it is the same
 * folder; an existing file of that name is replaced only when its bytes differ and --force. */
static int place_data_files(const cp_onnx_model *m, const char *out, bool force) {
  char din[PATH_MAX], dout[PATH_MAX], rin[PATH_MAX], rout[PATH_MAX];
  folder_of(din, m->path), folder_of(dout, out);
  if (!realpath(din, rin) || !realpath(dout, rout))
    return cp_error_set(CP_EIO, "%s: cannot resolve the output folder", out);
  if (!strcmp(rin, rout) || m->n_data_files == 0) return 0;
  for (size_t k = 0; k < m->n_data_files; k++) {
    const char *loc = m->data_files[k];
    char src[PATH_MAX], dst[PATH_MAX], hs[65], hd[65];
    if (strchr(loc, '/'))
      return cp_error_set(CP_EUNSUPPORTED, "%s: external data '%s' lies in a subfolder: write OUT beside IN or copy "
                          "the folder first", m->path, loc);
    if (snprintf(src, sizeof src, "%s/%s", din, loc) >= PATH_MAX || snprintf(dst, sizeof dst, "%s/%s", dout, loc) >= PATH_MAX)
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

int cli_patch_rewrite(const char *in, const char *out, const cp_rule *rule, bool no_verify, bool force) {
  char path[PATH_MAX];
  if (!model_file(path, in)) return cli_report(cp_error_set(CP_ENOTFOUND, "%s: no .onnx model file", in));
  cp_onnx_model *m = NULL;
  int rc = cp_onnx_model_open(&m, path, NULL);
  if (rc < 0) return cli_report(rc);
  int status = CLI_FAIL;
  if (!no_verify) {
    /* Certification runs the C engine on the model the graph describes: only possible when that
     * model can be recovered, and the in-place path does not run it yet. */
    cp_model *cm = NULL;
    int mrc = cp_model_open(&cm, path);
    cp_model_free(cm);
    if (mrc == 0)
      fprintf(stderr, "ctxpatch patch: %s: the certificate of an in-place rewrite cannot be produced yet; "
              "`ctxpatch patch %s DIR --to onnx` exports a certified graph of the same model; pass --no-verify to "
              "write the rewritten graph uncertified. Nothing written.\n", path, path);
    else
      fprintf(stderr, "ctxpatch patch: %s: no model description can be recovered from this graph, so no certificate "
              "can be produced; pass --no-verify to write the rewritten graph uncertified. Nothing written.\n", path);
    goto done;
  }
  cp_output kind;
  if ((rc = cp_output_kind(&kind, out, 0)) < 0) goto report;
  if (kind == CP_OUTPUT_REPLACE && !force) {
    rc = cp_error_set(CP_EEXIST, "%s: exists (--force replaces it)", out);
    goto report;
  }
  const char *keys[] = {"ctxpatch.certified", "ctxpatch.certificate_sha256"}, *values[] = {"false", ""};
  cp_onnx_rewrite_params p = {keys, values, 2};
  cp_onnx_rewrite_report rep;
  /* The graph is rewritten in memory (every refusal) before any file is placed. */
  if ((rc = cp_onnx_rewrite(&rep, m, rule, NULL, &p)) < 0 || (rc = place_data_files(m, out, force)) < 0 ||
      (rc = cp_onnx_rewrite(&rep, m, rule, out, &p)) < 0)
    goto report;
  printf("rewrote %zu attention sites (%zu Softmax, %zu contrib): %zu nodes added, %zu changed, %zu initializers "
         "added; everything else kept byte for byte\n",
         rep.n_softmax + rep.n_contrib, rep.n_softmax, rep.n_contrib, rep.n_nodes_added, rep.n_nodes_changed,
         rep.n_initializers_added);
  printf("wrote %s (NOT certified: --no-verify)\n", out);
  status = CLI_OK;
  goto done;
report:
  status = cli_report(rc);
done:
  cp_onnx_model_free(m);
  return status;
}
