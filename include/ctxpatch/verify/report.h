/* The verify report: one self-contained HTML file (inline CSS and SVG, no scripts, no external
 * resources) drawn from a certificate (docs/certificate.md): depth x length heatmaps for the
 * patched model and the baseline, accuracy against length, and P_max / entropy against length
 * (the dispersed-attention picture). Deterministic: the same certificate gives the same bytes. */
#ifndef CTXPATCH_REPORT_H
#define CTXPATCH_REPORT_H

#include <cjson/cJSON.h>

/* Renders `certificate` to a heap string (caller frees). */
int cp_report_html(char **out, const cJSON *certificate);
/* Renders and writes atomically to `path`. */
int cp_report_write(const char *path, const cJSON *certificate);

#endif
