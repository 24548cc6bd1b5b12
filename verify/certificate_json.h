/* Private to verify/, patchers/, cli/ and tests (the repo root is on their include path): the
 * functions that take or make the certificate (docs/certificate.md) as a cJSON tree, kept out of
 * the public headers, which carry no third-party type.
 *
 * cp_certificate_build: verify/certificate.c. cp_report_html / cp_report_write: the verify report,
 * one self-contained HTML file (inline CSS and SVG, no scripts, no external resources): depth x
 * length heatmaps for the patched model and the baseline, accuracy against length, and P_max /
 * entropy against length (the dispersed-attention picture). Deterministic: the same certificate
 * gives the same bytes (verify/report_html.c, report_data.c, report_svg.c). */
#ifndef CTXPATCH_VERIFY_CERTIFICATE_JSON_H
#define CTXPATCH_VERIFY_CERTIFICATE_JSON_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "ctxpatch/verify/verify.h"

/* The certificate (docs/certificate.md): input files with SHA-256, model family and training
 * length, rule, probe set, per-cell accuracies, thresholds, verdict, engine and timing.
 * Everything but the "run" timing fields is a function of the inputs. Caller owns *out. */
int cp_certificate_build(cJSON **out, const cp_model *model, const cp_verify_result *r,
                         const cp_verify_thresholds *t, cp_verdict verdict, char **reasons, int n_reasons,
                         const cp_certificate_info *info);

/* Appends to `files` one {"path", "sha256"} per regular file of `path` (a folder: its files and
 * those of its subfolders one level down, sorted; hidden names skipped), as model.files lists
 * them. */
int cp_certificate_files(cJSON *files, const char *path);

/* Renders `certificate` to a heap string (caller frees). */
int cp_report_html(char **out, const cJSON *certificate);
/* Renders and writes atomically to `path`. */
int cp_report_write(const char *path, const cJSON *certificate);

#endif
