/* Floor: patchers. The HTML report beside a one-file output (patch --to gguf, patch IN.onnx
 * OUT.onnx): OUT + CP_REPORT_SUFFIX, rendered from the certificate text the file carries, so that
 * `check OUT` renders the same page from the same text (patchers/patch_json.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/json_strict.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/verify/check.h"
#include "patchers/patch_json.h"
#include "verify/certificate_json.h"

static char *report_path(const char *out) {
  char *p = malloc(strlen(out) + sizeof CP_REPORT_SUFFIX);
  if (p) sprintf(p, "%s" CP_REPORT_SUFFIX, out);
  return p;
}

int cp_patch_report_check(const char *out, bool replace) {
  char *path = report_path(out);
  cp_output kind;
  CP_CHECK_ALLOC(path, out);
  int rc = cp_atomic_name_check(path); /* a long OUT leaves no room for the report's temporary */
  if (rc == 0) rc = cp_output_kind(&kind, path, 0);
  if (rc == 0) rc = cp_input_check_output(path, 0);
  if (rc == 0 && kind == CP_OUTPUT_REPLACE && !replace)
    rc = cp_error_set(CP_EEXIST, "%s: the report of %s already exists (remove it or pass --force)", path, out);
  free(path);
  return rc;
}

int cp_patch_report_drop(const char *out) {
  char *path = report_path(out);
  CP_CHECK_ALLOC(path, out);
  int rc = 0;
  if (unlink(path) != 0 && errno != ENOENT)
    rc = cp_error_set(CP_EIO, "%s: cannot remove the earlier output's report: %s", path, strerror(errno));
  free(path);
  return rc;
}

int cp_patch_report_write(const char *out, const char *cert_text, size_t cert_len) {
  cJSON *cert = NULL;
  char *path = report_path(out);
  CP_CHECK_ALLOC(path, out);
  /* parsed as check parses it, so both render from the same numbers */
  int rc = cp_json_parse_strict(&cert, cert_text, cert_len, out, 64, CP_EARG, CP_EARG, CP_EARG, CP_EARG);
  if (rc == 0) rc = cp_report_write(path, cert);
  cJSON_Delete(cert);
  free(path);
  return rc;
}
