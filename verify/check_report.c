/* `check`'s binding of the HTML report to the certificate (verify/check_int.h): the report is a
 * function of the certificate alone (verify/report_html.c), so check renders it again from the
 * certificate it has validated and compares the bytes. A digest of the report inside the
 * certificate would be recomputable like SHA256SUMS (the certificate's own digest fields are
 * hashed as zeros); a rendering is not: to change a number on the page, the certificate's number
 * must change, which the schema, the verdict and --rerun judge. docs/certificate.md, "Report". */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "verify/certificate_json.h"
#include "verify/check_int.h"

/* A page larger than this is not one ctxpatch wrote (the largest certificates render to a few MiB). */
#define REPORT_MAX ((size_t)64 << 20)

/* The 1-based line and column of the first byte where a and b differ (one of them may end first). */
static void first_difference(size_t *line, size_t *col, const char *a, size_t na, const char *b, size_t nb) {
  size_t i = 0;
  *line = 1, *col = 1;
  for (; i < na && i < nb && a[i] == b[i]; i++) {
    if (a[i] == '\n') (*line)++, *col = 1;
    else (*col)++;
  }
}

int check_report(check_ctx *c, const char *path, const char *name) {
  struct stat st;
  char *have = NULL, *want = NULL;
  size_t have_len = 0;
  int rc = 0;
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT) return 0; /* a report is optional: no page, no claim */
    return check_fail(c->report, "unreadable", "%s: %s", name, strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return check_fail(c->report, "not-regular", "%s: is not a regular file", name);
  if (cp_read_file(&have, &have_len, path, REPORT_MAX) < 0) {
    rc = check_fail(c->report, "unreadable", "%s: %s", name, cp_error_message());
    goto done;
  }
  if (cp_report_html(&want, c->cert) < 0) {
    rc =
        check_fail(c->report, "report-mismatch", "%s: the certificate renders no report: %s", name, cp_error_message());
    goto done;
  }
  size_t want_len = strlen(want);
  if (have_len != want_len || memcmp(have, want, want_len) != 0) {
    size_t line, col;
    first_difference(&line, &col, have, have_len, want, want_len);
    rc = check_fail(c->report, "report-mismatch",
                    "%s: line %zu, column %zu: differs from the report of the certificate (edited, or rendered by "
                    "another ctxpatch version: patch again, or remove it: a report is optional)",
                    name, line, col);
  }
done:
  free(have);
  free(want);
  return rc;
}
