/* The report's inline SVG and markup escaping (verify/report_svg.h). */
#include "verify/report_svg.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/utf8.h"

#define SIDE_NAME REPORT_SIDE_NAME

/* ---- text */

void report_esc(cp_strbuf *b, const char *s) {
  const unsigned char *u = (const unsigned char *)(s ? s : "");
  const unsigned char *end = u + strlen((const char *)u);
  while (*u) {
    unsigned c = *u;
    const char *ent = NULL;
    switch (c) {
    case '&': ent = "&amp;"; break;
    case '<': ent = "&lt;"; break;
    case '>': ent = "&gt;"; break;
    case '"': ent = "&quot;"; break;
    case '\'': ent = "&#39;"; break;
    default: break;
    }
    if (ent) {
      cp_strbuf_str(b, ent);
      u++;
    } else if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) {
      cp_strbuf_str(b, "&#xFFFD;");
      u++;
    } else {
      uint32_t cp;
      size_t n = cp_utf8_decode(&cp, u, (size_t)(end - u));
      /* U+FFFD as the same entity as a bad byte: the certificate is written with each bad byte
       * replaced by U+FFFD (base/json_print.c), so the report rendered before writing and the one
       * `check` renders from the file read back agree. */
      if (n == 0 || cp == 0xFFFD) {
        if (n == 0) n = 1;
        cp_strbuf_str(b, "&#xFFFD;");
        u += n;
      } else {
        cp_strbuf_put(b, (const char *)u, n);
        u += n;
      }
    }
  }
}

/* Lengths on chart axes: 1024 multiples as "4K", others exact. */
static void fmt_len_short(char out[32], double len) {
  long long v = (long long)len;
  if (v >= 1024 && v % 1024 == 0) snprintf(out, 32, "%lldK", v / 1024);
  else snprintf(out, 32, "%lld", v);
}

/* ---- colours */

/* Accuracy 0 -> red, 0.5 -> pale yellow, 1 -> green (ColorBrewer RdYlGn end points). */
static void acc_colour(char out[8], double a) {
  static const int stops[5][3] = {
      {0xd7, 0x30, 0x27}, {0xf4, 0x6d, 0x43}, {0xfe, 0xe0, 0x8b}, {0x66, 0xbd, 0x63}, {0x1a, 0x98, 0x50}};
  if (isnan(a)) {
    snprintf(out, 8, "#e5e7eb");
    return;
  }
  if (a < 0) a = 0;
  if (a > 1) a = 1;
  double x = a * 4;
  int i = (int)x;
  if (i > 3) i = 3;
  double t = x - i;
  int rgb[3];
  for (int k = 0; k < 3; k++) rgb[k] = (int)lround(stops[i][k] + (stops[i + 1][k] - stops[i][k]) * t);
  snprintf(out, 8, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

/* Dark text on the light middle of the scale, white on the saturated ends. */
static const char *acc_text_colour(double a) {
  if (isnan(a)) return "#6b7280";
  return (a < 0.18 || a > 0.82) ? "#ffffff" : "#1f2937";
}

/* ---- colour scale and heatmaps */

void report_svg_scale(cp_strbuf *b) {
  cp_strbuf_str(b, "<div class=\"scale\">accuracy <svg width=\"220\" height=\"14\" viewBox=\"0 0 220 14\" role=\"img\" "
             "aria-label=\"colour scale\">");
  for (int i = 0; i <= 10; i++) {
    char col[8];
    acc_colour(col, i / 10.0);
    cp_strbuf_printf(b, "<rect x=\"%d\" y=\"0\" width=\"20\" height=\"14\" fill=\"%s\"/>", i * 20, col);
  }
  cp_strbuf_str(b, "</svg> 0 &rarr; 1 (grey: not run)</div>\n");
}

/* Heatmap: depth (rows) x length (columns); each cell is correct_by_depth / samples. */
enum { HM_LABEL_W = 58, HM_HEAD_H = 34, HM_CELL_W = 52, HM_CELL_H = 28 };

void report_svg_heatmap(cp_strbuf *b, const report_data *d, int side, int p) {
  const side_probe *sp = &d->side[side][p];
  int w = HM_LABEL_W + d->n_lengths * HM_CELL_W + 2, h = HM_HEAD_H + d->n_depths * HM_CELL_H + 2;
  cp_strbuf_printf(b, "<figure><figcaption>%s</figcaption>", side == 0 ? "patched" : "baseline");
  cp_strbuf_printf(b, "<svg class=\"heatmap\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
               "aria-label=\"%s accuracy by depth and length\">",
            w, h, w, h, SIDE_NAME[side]);
  cp_strbuf_printf(b, "<text x=\"%d\" y=\"11\" font-size=\"11\" fill=\"#6b7280\" text-anchor=\"middle\">length (tokens)</text>",
            HM_LABEL_W + d->n_lengths * HM_CELL_W / 2);
  cp_strbuf_printf(b, "<text x=\"4\" y=\"%d\" font-size=\"11\" fill=\"#6b7280\">depth</text>", HM_HEAD_H - 6);
  for (int l = 0; l < d->n_lengths; l++) {
    char lab[32];
    fmt_len_short(lab, d->lengths[l]);
    cp_strbuf_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#374151\" text-anchor=\"middle\">%s</text>",
              HM_LABEL_W + l * HM_CELL_W + HM_CELL_W / 2, HM_HEAD_H - 6, lab);
  }
  for (int k = 0; k < d->n_depths; k++) {
    int y = HM_HEAD_H + k * HM_CELL_H;
    cp_strbuf_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#374151\" text-anchor=\"end\">%.2f</text>",
              HM_LABEL_W - 8, y + HM_CELL_H / 2 + 4, d->depths[k]);
    for (int l = 0; l < d->n_lengths; l++) {
      double a = sp->cell[(size_t)l * d->n_depths + k];
      char col[8];
      acc_colour(col, a);
      int x = HM_LABEL_W + l * HM_CELL_W;
      double ran = sp->ran[(size_t)l * d->n_depths + k];
      cp_strbuf_printf(b, "<g class=\"hm-cell\"><title>%s, length %.0f, depth %.3f: %.0f of %.0f correct</title>",
                SIDE_NAME[side], d->lengths[l], d->depths[k], isnan(a) ? 0.0 : a * ran, ran);
      cp_strbuf_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\" stroke=\"#ffffff\" stroke-width=\"1.5\"/>",
                x, y, HM_CELL_W, HM_CELL_H, col);
      char val[16] = "-"; /* a sequential cell may have run no prompt at this depth */
      if (!isnan(a)) snprintf(val, sizeof val, "%.2f", a);
      cp_strbuf_printf(b, "<text x=\"%d\" y=\"%d\" font-size=\"12\" fill=\"%s\" text-anchor=\"middle\">%s</text></g>",
                x + HM_CELL_W / 2, y + HM_CELL_H / 2 + 4, acc_text_colour(a), val);
    }
  }
  cp_strbuf_str(b, "</svg></figure>");
}

/* ---- line charts on a log2 length axis */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

enum { CH_W = 540, CH_H = 290, CH_L = 56, CH_R = 16, CH_T = 34, CH_B = 44 };

/* The plot area and its scales: x is log2 of the length over every series, padded 4%. */
typedef struct {
  const chart_opts *o;
  double xmin, xmax, pw, ph;
} frame;

static double px(const frame *f, double v) { return CH_L + ((log2(v) - f->xmin) / (f->xmax - f->xmin)) * f->pw; }
static double py(const frame *f, double v) {
  return CH_T + (1 - (v - f->o->y_min) / (f->o->y_max - f->o->y_min)) * f->ph;
}

static frame chart_frame(const chart_opts *o, const series *s, int n_series) {
  double xmin = INFINITY, xmax = -INFINITY;
  for (int i = 0; i < n_series; i++)
    for (int k = 0; k < s[i].n; k++) {
      double v = log2(s[i].x[k]);
      if (v < xmin) xmin = v;
      if (v > xmax) xmax = v;
    }
  if (!(xmin <= xmax)) xmin = 0, xmax = 1;
  if (xmax - xmin < 1e-9) xmin -= 1, xmax += 1;
  double pad = (xmax - xmin) * 0.04;
  xmin -= pad, xmax += pad;
  return (frame){o, xmin, xmax, CH_W - CH_L - CH_R, CH_H - CH_T - CH_B};
}

/* y grid and labels, then x ticks at every length any series has, labels thinned so they never
 * overlap. */
static void chart_axes(cp_strbuf *b, const frame *f, const series *s, int n_series) {
  const chart_opts *o = f->o;
  double pw = f->pw, ph = f->ph;
  for (int t = 0; t <= o->y_ticks; t++) {
    double v = o->y_min + (o->y_max - o->y_min) * t / o->y_ticks;
    double y = py(f, v);
    if (t > 0 && t < o->y_ticks)
      cp_strbuf_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e7eb\"/>", CH_L, y, CH_L + pw, y);
    cp_strbuf_printf(b, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" fill=\"#4b5563\" text-anchor=\"end\">", CH_L - 6, y + 4);
    cp_strbuf_printf(b, o->y_fmt, v);
    cp_strbuf_str(b, "</text>");
  }
  cp_strbuf_printf(b, "<text transform=\"translate(14 %.1f) rotate(-90)\" font-size=\"11\" fill=\"#6b7280\" "
               "text-anchor=\"middle\">",
            CH_T + ph / 2);
  cp_strbuf_str(b, o->y_label_svg);
  cp_strbuf_str(b, "</text>");
  size_t n_ticks = 0, cap = 0;
  for (int i = 0; i < n_series; i++) cap += (size_t)s[i].n;
  double *ticks = malloc((cap ? cap : 1) * sizeof *ticks);
  if (!ticks) b->oom = true;
  for (int i = 0; ticks && i < n_series; i++)
    for (int k = 0; k < s[i].n; k++) ticks[n_ticks++] = s[i].x[k];
  if (ticks) qsort(ticks, n_ticks, sizeof *ticks, cmp_double);
  double last_label = -1e9;
  for (size_t k = 0; k < n_ticks; k++) {
    if (k > 0 && ticks[k] == ticks[k - 1]) continue;
    double x = px(f, ticks[k]);
    cp_strbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#9ca3af\"/>", x, CH_T + ph, x,
              CH_T + ph + 4);
    if (x - last_label >= 34) {
      char lab[32];
      fmt_len_short(lab, ticks[k]);
      cp_strbuf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#4b5563\" text-anchor=\"middle\">%s</text>", x,
                CH_T + ph + 17, lab);
      last_label = x;
    }
  }
  free(ticks);
  cp_strbuf_printf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" fill=\"#6b7280\" text-anchor=\"middle\">"
               "%s</text>",
            CH_L + pw / 2, CH_H - 6, f->o->x_label_svg ? f->o->x_label_svg : "prompt length (tokens, log2 scale)");
}

/* The training length (vertical) and the threshold (horizontal), when inside the plot. */
static void chart_reference_lines(cp_strbuf *b, const frame *f) {
  const chart_opts *o = f->o;
  if (!isnan(o->vline) && o->vline > 0 && log2(o->vline) >= f->xmin && log2(o->vline) <= f->xmax) {
    double x = px(f, o->vline);
    cp_strbuf_printf(b, "<line class=\"train-len\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#6b7280\" "
                 "stroke-dasharray=\"2 3\"/>",
              x, CH_T, x, CH_T + f->ph);
    cp_strbuf_printf(b, "<text x=\"%.1f\" y=\"%d\" font-size=\"10\" fill=\"#6b7280\">train length</text>", x + 3, CH_T + 11);
  }
  if (!isnan(o->hline) && o->hline >= o->y_min && o->hline <= o->y_max) {
    double y = py(f, o->hline);
    cp_strbuf_printf(b, "<line class=\"threshold\" x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#7e22ce\" "
                 "stroke-width=\"1.2\" stroke-dasharray=\"1 3\" stroke-linecap=\"round\"/>",
              CH_L, y, CH_L + f->pw, y);
    cp_strbuf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#7e22ce\" text-anchor=\"end\">", CH_L + f->pw - 4,
              y - 4);
    report_esc(b, o->hline_label);
    cp_strbuf_str(b, "</text>");
  }
}

/* One series: a path broken at NaN points, and a marker per point (values clamped to the axis). */
static void chart_series(cp_strbuf *b, const frame *f, const series *s) {
  const chart_opts *o = f->o;
  cp_strbuf path = {0};
  bool pen = false;
  for (int k = 0; k < s->n; k++) {
    double v = s->y[k];
    if (isnan(v)) {
      pen = false;
      continue;
    }
    if (v < o->y_min) v = o->y_min;
    if (v > o->y_max) v = o->y_max;
    cp_strbuf_printf(&path, "%s%.1f %.1f ", pen ? "L" : "M", px(f, s->x[k]), py(f, v));
    pen = true;
  }
  if (path.oom) b->oom = true;
  if (path.len) {
    path.s[path.len - 1] = '\0'; /* the trailing space */
    cp_strbuf_printf(b, "<path class=\"series\" d=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2.2\"%s "
                 "stroke-linejoin=\"round\"/>",
              path.s, s->colour, s->dashed ? " stroke-dasharray=\"7 4\"" : "");
  }
  cp_strbuf_free(&path);
  for (int k = 0; k < s->n; k++) {
    double v = s->y[k];
    if (isnan(v)) continue;
    if (v < o->y_min) v = o->y_min;
    if (v > o->y_max) v = o->y_max;
    if (s->dashed)
      cp_strbuf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"7\" height=\"7\" fill=\"#ffffff\" stroke=\"%s\" "
                   "stroke-width=\"1.8\"/>",
                px(f, s->x[k]) - 3.5, py(f, v) - 3.5, s->colour);
    else
      cp_strbuf_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.6\" fill=\"%s\"/>", px(f, s->x[k]), py(f, v), s->colour);
  }
}

/* Title and legend above the plot; legend entries are right-aligned, last series rightmost. */
static void chart_legend(cp_strbuf *b, const chart_opts *o, const series *s, int n_series) {
  cp_strbuf_printf(b, "<text x=\"%d\" y=\"14\" font-size=\"13\" font-weight=\"600\" fill=\"#1f2937\">", CH_L);
  cp_strbuf_str(b, o->title_svg);
  cp_strbuf_str(b, "</text>");
  double lx = CH_W - CH_R;
  for (int i = n_series - 1; i >= 0; i--) {
    double tw = 7.0 * (double)strlen(s[i].label) + 34;
    lx -= tw;
    cp_strbuf_printf(b, "<g class=\"legend\"><line x1=\"%.1f\" y1=\"24\" x2=\"%.1f\" y2=\"24\" stroke=\"%s\" stroke-width=\"2.2\"%s/>",
              lx, lx + 22, s[i].colour, s[i].dashed ? " stroke-dasharray=\"5 3\"" : "");
    cp_strbuf_printf(b, "<text x=\"%.1f\" y=\"28\" font-size=\"11\" fill=\"#374151\">", lx + 26);
    report_esc(b, s[i].label);
    cp_strbuf_str(b, "</text></g>");
  }
}

void report_svg_chart(cp_strbuf *b, const char *cls, const chart_opts *o, const series *s, int n_series) {
  frame f = chart_frame(o, s, n_series);
  cp_strbuf_printf(b, "<svg class=\"%s\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"", cls,
            CH_W, CH_H, CH_W, CH_H);
  report_esc(b, o->title);
  cp_strbuf_str(b, "\">");
  cp_strbuf_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"#fbfcfd\" stroke=\"#d1d5db\"/>", CH_L,
            CH_T, f.pw, f.ph);
  chart_axes(b, &f, s, n_series);
  chart_reference_lines(b, &f);
  for (int i = 0; i < n_series; i++) chart_series(b, &f, &s[i]);
  chart_legend(b, o, s, n_series);
  cp_strbuf_str(b, "</svg>");
}
