/* Private to verify/report_*.c: the report's inline SVG (colour scale, depth x length heatmaps,
 * line charts on a log2 length axis) and the escaping of certificate text into markup. Output
 * is appended to a cp_strbuf (out of memory: its oom flag) and is deterministic. */
#ifndef CTXPATCH_VERIFY_REPORT_SVG_H
#define CTXPATCH_VERIFY_REPORT_SVG_H

#include <stdbool.h>

#include "ctxpatch/base/strbuf.h"
#include "verify/report_data.h"

#define C_PATCHED "#1f6feb"
#define C_BASELINE "#d9480f"

typedef struct {
  const char *label, *colour;
  bool dashed;
  int n;
  const double *x, *y; /* x: lengths; y: NaN = gap */
} series;

typedef struct {
  /* title: plain text (the aria-label); title_svg, y_label_svg: SVG markup fragments, always
   * constants of this file, never certificate text */
  const char *title, *title_svg, *y_label_svg, *y_fmt;
  double y_min, y_max;
  int y_ticks;
  double hline;      /* NaN = none (e.g. the min_accuracy threshold) */
  const char *hline_label;
  double vline;      /* NaN = none (the training length) */
  const char *x_label_svg; /* NULL: "prompt length (tokens, log2 scale)"; else a constant of this file */
} chart_opts;

/* Text or attribute content (NULL: nothing): markup characters become entities, control
 * characters other than tab and newline and invalid UTF-8 become U+FFFD. */
void report_esc(cp_strbuf *b, const char *s);
/* The accuracy colour scale, 0 -> 1. */
void report_svg_scale(cp_strbuf *b);
/* Depth (rows) x length (columns) accuracy of probe p on one side (0 patched, 1 baseline). */
void report_svg_heatmap(cp_strbuf *b, const report_data *d, int side, int p);
/* A line chart of n_series series against length (log2 axis); cls is its CSS class. */
void report_svg_chart(cp_strbuf *b, const char *cls, const chart_opts *o, const series *s, int n_series);

#endif
