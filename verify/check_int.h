/* Private to verify/check*.c: the state one `cp_check_artifact` call shares between the manifest,
 * schema, metadata and re-run checks (include/ctxpatch/verify/check.h), and the per-format table. */
#ifndef CTXPATCH_VERIFY_CHECK_INT_H
#define CTXPATCH_VERIFY_CHECK_INT_H

#include <cjson/cJSON.h>

#include "ctxpatch/base/file_list.h"
#include "ctxpatch/verify/check.h"

/* One place where an artifact carries its ctxpatch metadata, normalised to the keys of config.json's
 * "ctxpatch" block: tool_version, fidelity, rule, certificate_sha256 (required); method,
 * baked_rule, certified (compared when present). */
typedef struct {
  char *where;  /* "config.json: ctxpatch", owned */
  cJSON *block; /* owned */
} check_meta;

typedef struct {
  const char *path;         /* the artifact folder */
  cp_file_list files;       /* everything under it */
  cJSON *cert;              /* certificate.json, NULL when absent or unreadable */
  check_meta *meta;         /* [n_meta] */
  size_t n_meta, cap_meta;
  cp_check_report *report;
  char *cert_text;          /* a single-file artifact's embedded certificate (GGUF ctxpatch.certificate),
                               owned; NULL: certificate.json in the folder */
  size_t cert_len;
} check_ctx;

/* Records a failure (one line); returns 0, or CP_ENOMEM after setting report->oom. */
int check_fail(cp_check_report *r, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Adds a metadata record (takes `block`, copies `where`). */
int check_meta_add(check_ctx *c, const char *where, cJSON *block);

/* An output format: recognised by its files; `read_meta` adds its metadata records (and failures
 * for what it cannot read). NULL read_meta = not supported yet. `read_file` is the same for an
 * artifact that is one file (c->path), and also sets c->cert_text; NULL = only folders.
 * verify/check_formats.c. */
typedef struct {
  const char *name;
  bool (*detect)(const cp_file_list *files);
  int (*read_meta)(check_ctx *c);
  int (*read_file)(check_ctx *c);
} check_format;

/* The format of a listed artifact folder, or NULL. */
const check_format *check_format_detect(const cp_file_list *files);
/* The format a single file names by its extension (".onnx", ".gguf"), or NULL. */
const check_format *check_format_of_file(const char *path);

/* Schema of docs/certificate.md plus the artifact's "patch" object: one failure per violation. */
int check_certificate_schema(cp_check_report *r, const cJSON *cert);
/* The probes of the certificate run again on the artifact (check.h, point 4). */
int check_rerun(check_ctx *c, const cp_check_params *p);
/* The certificate's runtime_check: shape and consistency, and with p->rerun and a runtime folder
 * the comparison made again (check.h, point 5). verify/check_runtime.c. */
int check_runtime(check_ctx *c, const cp_check_params *p);
/* The HTML report at `path` (`name` in messages), when present, against the report c->cert renders:
 * byte for byte (report-mismatch). Absent is no failure. verify/check_report.c. */
int check_report(check_ctx *c, const char *path, const char *name);

/* The policy flags (check.h, point 7): min_prompts, require_gain, require_runtime, fidelity.
 * verify/check_policy.c. */
int check_policy(check_ctx *c, const cp_check_params *p);

#endif
