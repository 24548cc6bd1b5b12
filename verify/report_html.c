/* The verify report (verify/certificate_json.h): one self-contained HTML5 page drawn from a
 * certificate (docs/certificate.md). No scripts and no external resources: CSS is inline and
 * every chart is inline SVG (verify/report_svg.c). Every string taken from the certificate is
 * escaped (it holds file names and rule JSON), invalid UTF-8 becomes U+FFFD, and numbers use
 * fixed formats, so the same certificate always gives the same bytes. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/strbuf.h"
#include "verify/certificate_json.h"
#include "verify/report_data.h"
#include "verify/report_runtime.h"
#include "verify/report_svg.h"

#define SIDE_NAME REPORT_SIDE_NAME

/* ---- number formats (fixed, so output is deterministic) -------------------------------- */

/* Integers as integers, other numbers with three decimals, NaN as an en dash. */
static void fmt_num(char out[48], double v) {
  if (isnan(v)) snprintf(out, 48, "\xE2\x80\x93");
  else if (fabs(v) < 1e18 && v == floor(v)) snprintf(out, 48, "%.0f", v);
  else if (fabs(v) < 1e15) snprintf(out, 48, "%.3f", v);
  else snprintf(out, 48, "%.6g", v);
}

/* ---- page parts ------------------------------------------------------------------------ */

static const char *get_str(const cJSON *obj, const char *name) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);
  return cJSON_IsString(it) ? it->valuestring : NULL;
}

static const char CSS[] =
    "*{box-sizing:border-box}"
    "body{margin:0;background:#f6f7f9;color:#1f2937;font:14px/1.45 system-ui,-apple-system,'Segoe UI',"
    "Roboto,'DejaVu Sans',Arial,sans-serif}"
    "main{max-width:1160px;margin:0 auto;padding:20px 24px 8px}"
    "h1{font-size:22px;margin:0 0 2px}"
    "h2{font-size:17px;margin:0 0 10px}"
    "h3{font-size:14px;margin:0 0 6px;color:#374151}"
    ".sub{color:#6b7280;margin:0 0 14px}"
    ".card{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:14px 16px;margin:0 0 16px}"
    ".verdict{border-radius:8px;padding:10px 16px;margin:0 0 16px;font-weight:600;border:1px solid}"
    ".verdict.pass{background:#e8f6ec;border-color:#8fd19e;color:#14532d}"
    ".verdict.fail{background:#fdecec;border-color:#f1a7a7;color:#7f1d1d}"
    ".verdict.none{background:#f3f4f6;border-color:#d1d5db;color:#374151}"
    ".verdict.weak{background:#fef7e6;border-color:#f2cf7c;color:#713f12}"
    ".verdict .big{font-size:18px;letter-spacing:.04em;margin-right:10px}"
    ".verdict ul{margin:6px 0 0;padding-left:20px;font-weight:400}"
    ".grid{display:flex;flex-wrap:wrap;gap:16px}"
    ".grid>*{flex:1 1 340px;min-width:0}"
    "table{border-collapse:collapse;font-variant-numeric:tabular-nums}"
    "th,td{padding:3px 10px;text-align:left;border-bottom:1px solid #eef0f3;vertical-align:top}"
    "th{color:#6b7280;font-weight:600}"
    "td.n{text-align:right}"
    "tr.winner td{background:#e8f6ec;font-weight:600}"
    "tr.original td{background:#f3f4f6;font-style:italic}"
    ".ship{background:#fff7e6;border:1px solid #f5c26b;border-radius:6px;padding:6px 10px;margin:0 0 8px}"
    "table.kv th{width:150px}"
    "pre{margin:0;background:#f8fafc;border:1px solid #e5e7eb;border-radius:6px;padding:8px 10px;"
    "font:12px/1.4 ui-monospace,'DejaVu Sans Mono',monospace;max-height:220px;overflow:auto;white-space:pre-wrap;tab-size:4;"
    "word-break:break-all}"
    ".mono{font-family:ui-monospace,'DejaVu Sans Mono',monospace;font-size:12px;word-break:break-all}"
    ".maps{display:flex;flex-wrap:wrap;gap:8px 24px;margin:0 0 8px}"
    ".maps figure{margin:0}"
    ".maps figcaption{font-weight:600;font-size:13px;margin:0 0 2px}"
    "svg{display:block;max-width:100%;height:auto}"
    "svg text{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',Arial,sans-serif}"
    ".note{color:#6b7280;font-size:13px;margin:4px 0}"
    ".scale{display:flex;align-items:center;gap:6px;color:#6b7280;font-size:12px;margin:0 0 10px}"
    "footer{max-width:1160px;margin:0 auto;padding:4px 24px 24px;color:#6b7280;font-size:12px}"
    "footer span{margin-right:14px}";

/* The patch object of an artifact's certificate (`patch`), or of a re-verified artifact (`artifact`). */
static const cJSON *patch_of(const cJSON *c) {
  const cJSON *patch = cJSON_GetObjectItemCaseSensitive(c, "patch");
  return patch ? patch : cJSON_GetObjectItemCaseSensitive(c, "artifact");
}

/* Whether a path step names the file layout rather than the model: onnx/, model.onnx,
 * decoder_model_merged.onnx, encoder_model.onnx, model.safetensors, ... */
static bool generic_step(const char *s, size_t n) {
  static const char *const generic[] = {"onnx", "model", "encoder_model", "decoder_model", "decoder_model_merged"};
  const char *dot = memchr(s, '.', n);
  size_t stem = dot ? (size_t)(dot - s) : n;
  for (size_t i = 0; i < sizeof generic / sizeof *generic; i++)
    if (stem == strlen(generic[i]) && !strncmp(s, generic[i], stem)) return true;
  return false;
}

/* The model's name: the last step of patch.baseline (the input patch read) that names more than
 * the file layout (rpx/onnx/model.onnx -> rpx), else the family. */
static void put_model_name(cp_strbuf *b, const cJSON *c) {
  const char *in = get_str(cJSON_GetObjectItemCaseSensitive(c, "patch"), "baseline");
  const char *family = get_str(cJSON_GetObjectItemCaseSensitive(c, "model"), "family");
  size_t end = in ? strlen(in) : 0, start = end, last_start = 0, last_end = 0;
  for (bool first = true; end > 0; first = false) {
    while (end > 0 && in[end - 1] == '/') end--;
    start = end;
    while (start > 0 && in[start - 1] != '/') start--;
    if (end == start) break;
    if (first) last_start = start, last_end = end;
    if (!generic_step(in + start, end - start)) break;
    end = start;
  }
  if (end == start) start = last_start, end = last_end; /* every step generic: the last one */
  if (end > start) {
    cp_strbuf name = {0};
    cp_strbuf_put(&name, in + start, end - start);
    if (name.oom) b->oom = true;
    else report_esc(b, name.s);
    cp_strbuf_free(&name);
  } else {
    report_esc(b, family ? family : "model");
  }
}

/* Who the artifact is for: the runtimes of patch.effective_in, "ctxpatch only" when that is all. */
static void put_runtimes(cp_strbuf *b, const cJSON *eff) {
  const cJSON *e;
  int i = 0, n = cJSON_GetArraySize(eff);
  if (n == 1 && cJSON_IsString(eff->child) && !strcmp(eff->child->valuestring, "ctxpatch")) {
    cp_strbuf_str(b, "ctxpatch only");
    return;
  }
  cJSON_ArrayForEach(e, eff) if (cJSON_IsString(e)) {
    cp_strbuf_str(b, i == 0 ? "" : i == n - 1 ? " and " : ", ");
    report_esc(b, e->valuestring);
    i++;
  }
}

/* Title: model, method and target runtime (patch certificates); family for a plain verify. The
 * line under it: family, training length, format, fidelity and who executes the patch. */
static void put_header(cp_strbuf *b, const cJSON *c) {
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(c, "model"), *patch = patch_of(c);
  const char *family = get_str(model, "family"), *method = get_str(patch, "method");
  const char *format = get_str(patch, "format"), *fidelity = get_str(patch, "fidelity");
  const cJSON *tl = cJSON_GetObjectItemCaseSensitive(model, "train_len");
  const cJSON *eff = cJSON_GetObjectItemCaseSensitive(patch, "effective_in");
  bool has_eff = cJSON_IsArray(eff) && eff->child;
  cp_strbuf title = {0};
  if (method) {
    put_model_name(&title, c);
    cp_strbuf_str(&title, ", ");
    report_esc(&title, method);
    if (has_eff) {
      cp_strbuf_str(&title, ", for ");
      put_runtimes(&title, eff);
    }
  } else {
    report_esc(&title, family ? family : "unknown family");
  }
  if (title.oom) b->oom = true;
  const char *t = title.s ? title.s : "";
  cp_strbuf_str(b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                   "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                   "style-src 'unsafe-inline'\">\n"
                   "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>ctxpatch ");
  cp_strbuf_printf(b, "%s: %s</title>\n<style>", method ? "report" : "verify", t);
  cp_strbuf_str(b, CSS);
  cp_strbuf_printf(b, "</style>\n</head>\n<body>\n<main>\n<h1>ctxpatch %s: <span class=\"title\">%s</span></h1>\n",
                   method ? "report" : "verify report", t);
  cp_strbuf_free(&title);
  cp_strbuf_str(b, "<p class=\"sub\">");
  if (method) {
    report_esc(b, family ? family : "unknown family");
    cp_strbuf_str(b, ", ");
  }
  cp_strbuf_str(b, "training length ");
  if (cJSON_IsNumber(tl)) cp_strbuf_printf(b, "%.0f", tl->valuedouble);
  else cp_strbuf_str(b, "unknown");
  cp_strbuf_str(b, " tokens");
  if (format) {
    cp_strbuf_str(b, " &middot; ");
    report_esc(b, format);
    cp_strbuf_str(b, " artifact");
  }
  if (fidelity) {
    cp_strbuf_str(b, " &middot; fidelity <span class=\"fidelity\">");
    report_esc(b, fidelity);
    cp_strbuf_str(b, "</span>");
  }
  if (has_eff) {
    cp_strbuf_str(b, " &middot; <span class=\"effective\">");
    bool only = cJSON_GetArraySize(eff) == 1 && cJSON_IsString(eff->child) && !strcmp(eff->child->valuestring, "ctxpatch");
    if (only) cp_strbuf_str(b, "<strong>effective in ctxpatch only</strong>");
    else {
      cp_strbuf_str(b, "executed by ");
      put_runtimes(b, eff);
    }
    cp_strbuf_str(b, "</span>");
  }
  cp_strbuf_str(b, " &middot; accuracy of long-context retrieval probes, patched model");
  if (cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "results"), "baseline"))
    cp_strbuf_str(b, " against the unpatched baseline");
  cp_strbuf_str(b, "</p>\n");
}

static void put_verdict(cp_strbuf *b, const cJSON *c) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, "verdict");
  const char *result = get_str(v, "result");
  bool pass = result && !strcmp(result, "pass"), fail = result && !strcmp(result, "fail");
  /* "no effect" and "inconclusive" certify nothing, but nothing was seen to break either */
  bool weak = result && (!strcmp(result, "no effect") || !strcmp(result, "inconclusive"));
  const char *cls = pass ? "pass" : fail ? "fail" : weak ? "weak" : "none";
  cp_strbuf_printf(b, "<section class=\"verdict %s\"><span class=\"big\">", cls);
  if (!result) cp_strbuf_str(b, "NO VERDICT");
  else if (pass) cp_strbuf_str(b, "PASS");
  else if (fail) cp_strbuf_str(b, "FAIL");
  else if (weak) cp_strbuf_str(b, !strcmp(result, "no effect") ? "NO EFFECT" : "INCONCLUSIVE");
  else report_esc(b, result);
  cp_strbuf_str(b, "</span>");
  const cJSON *reasons = cJSON_GetObjectItemCaseSensitive(v, "reasons");
  int n = cJSON_GetArraySize(reasons);
  if (!result) cp_strbuf_str(b, "the certificate records no verdict");
  else if (n == 0 && pass) cp_strbuf_str(b, "every threshold was met");
  else if (n == 0) cp_strbuf_str(b, "no reasons recorded");
  else {
    if (weak && !strcmp(result, "no effect"))
      cp_strbuf_str(b, "not certified: nothing broke, but the patch showed no gain past the training length<ul>");
    else if (weak) cp_strbuf_str(b, "not certified: too few prompts to see a harm<ul>");
    else cp_strbuf_printf(b, "%d threshold%s failed<ul>", n, n == 1 ? "" : "s");
    const cJSON *r;
    cJSON_ArrayForEach(r, reasons) {
      cp_strbuf_str(b, "<li>");
      report_esc(b, r->valuestring);
      cp_strbuf_str(b, "</li>");
    }
    cp_strbuf_str(b, "</ul>");
  }
  cp_strbuf_str(b, "</section>\n");
}

static void put_num_list(cp_strbuf *b, const double *v, int n) {
  for (int i = 0; i < n; i++) {
    char s[48];
    fmt_num(s, v[i]);
    cp_strbuf_printf(b, "%s%s", i ? ", " : "", s);
  }
}

/* A rule object pretty-printed by cJSON (deterministic) and escaped. */
static void put_rule_json(cp_strbuf *b, const cJSON *rule) {
  char *text = cJSON_Print(rule);
  if (!text) {
    b->oom = true;
    return;
  }
  cp_strbuf_str(b, "<pre class=\"rule\">");
  report_esc(b, text);
  cp_strbuf_str(b, "</pre>");
  free(text);
}

/* The runtimes that execute a patch certificate's artifact (patch.effective_in), or that it is
 * effective in ctxpatch only (--for ctxpatch, or a family no other runtime loads). */
static void put_effective_in(cp_strbuf *b, const cJSON *eff) {
  const cJSON *e;
  int i = 0;
  if (!cJSON_IsArray(eff) || !eff->child) return;
  if (!eff->child->next && cJSON_IsString(eff->child) && !strcmp(eff->child->valuestring, "ctxpatch")) {
    cp_strbuf_str(b, "<p class=\"note\"><strong>effective in ctxpatch only</strong>: no runtime of this format "
                     "executes the patch</p>");
    return;
  }
  cp_strbuf_str(b, "<p class=\"note\">executed by: ");
  cJSON_ArrayForEach(e, eff) if (cJSON_IsString(e)) {
    if (i++) cp_strbuf_str(b, ", ");
    report_esc(b, e->valuestring);
  }
  cp_strbuf_str(b, "</p>");
}

static void put_settings(cp_strbuf *b, const cJSON *c, const report_data *d) {
  const cJSON *probes = cJSON_GetObjectItemCaseSensitive(c, "probes");
  const cJSON *th = cJSON_GetObjectItemCaseSensitive(c, "thresholds");
  cp_strbuf_str(b, "<div class=\"grid\">\n<section class=\"card\"><h2>Probe settings</h2><table class=\"kv\">");
  cp_strbuf_str(b, "<tr><th>probes</th><td>");
  for (int p = 0; p < d->n_probes; p++) {
    if (p) cp_strbuf_str(b, ", ");
    report_esc(b, d->probe_names[p]);
  }
  cp_strbuf_str(b, "</td></tr><tr><th>lengths (tokens)</th><td>");
  put_num_list(b, d->lengths, d->n_lengths);
  cp_strbuf_str(b, "</td></tr><tr><th>depths</th><td>");
  for (int i = 0; i < d->n_depths; i++) cp_strbuf_printf(b, "%s%.3f", i ? ", " : "", d->depths[i]);
  cp_strbuf_printf(b, "</td></tr><tr><th>samples per cell</th><td>%.0f</td></tr>", d->samples);
  static const char *const keys[2] = {"seed", "max_new_tokens"};
  static const char *const labels[2] = {"seed", "max new tokens"};
  for (int k = 0; k < 2; k++) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(probes, keys[k]);
    if (!it) continue;
    char s[48];
    fmt_num(s, it->valuedouble);
    cp_strbuf_printf(b, "<tr><th>%s</th><td>%s</td></tr>", labels[k], s);
  }
  const cJSON *ma = cJSON_GetObjectItemCaseSensitive(th, "min_accuracy");
  cp_strbuf_str(b, "<tr><th>min accuracy</th><td>");
  if (cJSON_IsNumber(ma)) cp_strbuf_printf(b, "%.3f", ma->valuedouble);
  else cp_strbuf_str(b, "none");
  cp_strbuf_str(b, "</td></tr><tr><th>no regression at</th><td>");
  const cJSON *nr = cJSON_GetObjectItemCaseSensitive(th, "no_regression_at");
  if (cJSON_GetArraySize(nr) == 0) cp_strbuf_str(b, "none");
  int i = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, nr) {
    char s[48];
    fmt_num(s, it->valuedouble);
    cp_strbuf_printf(b, "%s%s", i++ ? ", " : "", s);
  }
  cp_strbuf_str(b, "</td></tr></table></section>\n");

  /* the rule, pretty-printed by cJSON (deterministic) and escaped */
  cp_strbuf_str(b, "<section class=\"card\"><h2>Attention rule (patched side)</h2>");
  const cJSON *rule = cJSON_GetObjectItemCaseSensitive(c, "rule");
  /* A `ctxpatch patch` certificate also says what was baked into the weights: then the rule the
   * engine applied can be empty while the patched side still differs from the original. */
  const cJSON *patch = patch_of(c);
  const cJSON *baked = cJSON_GetObjectItemCaseSensitive(patch, "baked_rule");
  if (cJSON_IsObject(baked) && baked->child) {
    const cJSON *fidelity = cJSON_GetObjectItemCaseSensitive(patch, "fidelity");
    cp_strbuf_str(b, "<p class=\"note\">baked into the artifact");
    if (cJSON_IsString(fidelity)) {
      cp_strbuf_str(b, " (");
      report_esc(b, fidelity->valuestring);
      cp_strbuf_str(b, ")");
    }
    cp_strbuf_str(b, ":</p>");
    put_rule_json(b, baked);
    if (rule && rule->child) cp_strbuf_str(b, "<p class=\"note\">applied by the engine from the metadata:</p>");
  }
  if (rule && rule->child) put_rule_json(b, rule);
  else if (!(cJSON_IsObject(baked) && baked->child))
    cp_strbuf_str(b, "<p class=\"note\">none: the patched side ran the model's own attention</p>");
  put_effective_in(b, cJSON_GetObjectItemCaseSensitive(patch, "effective_in"));
  cp_strbuf_str(b, "</section>\n</div>\n");
}

/* " [lo, hi]" of results.<side>.<probe>[l].accuracy_ci95, when the certificate has it. */
static void put_ci(cp_strbuf *b, const cJSON *c, const char *side, const char *probe, int l) {
  const cJSON *res = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "results"), side);
  const cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(res, probe), l);
  const cJSON *ci = cJSON_GetObjectItemCaseSensitive(e, "accuracy_ci95");
  if (cJSON_GetArraySize(ci) == 2 && cJSON_IsNumber(ci->child) && cJSON_IsNumber(ci->child->next))
    cp_strbuf_printf(b, " <span class=\"note\">[%.2f, %.2f]</span>", ci->child->valuedouble, ci->child->next->valuedouble);
}

/* The paired test's p-value cell of results.comparison.<probe>[l] ("&ndash;" without one). */
static void put_p(cp_strbuf *b, const cJSON *c, const char *probe, int l) {
  const cJSON *cmp = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "results"), "comparison");
  const cJSON *pv = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cmp, probe), l),
                                                     "p_value");
  if (cJSON_IsNumber(pv)) cp_strbuf_printf(b, "<td class=\"n\">%.2g</td>", pv->valuedouble);
  else cp_strbuf_str(b, "<td class=\"n\">&ndash;</td>");
}

static void put_probe(cp_strbuf *b, const cJSON *c, const report_data *d, int p) {
  const side_probe *pat = &d->side[0][p];
  const side_probe *base = d->has_baseline && d->side[1][p].present ? &d->side[1][p] : NULL;
  cp_strbuf_str(b, "<section class=\"card probe\"><h2>Probe: ");
  report_esc(b, d->probe_names[p]);
  cp_strbuf_str(b, "</h2>\n<div class=\"maps\">");
  report_svg_heatmap(b, d, 0, p);
  if (base) report_svg_heatmap(b, d, 1, p);
  cp_strbuf_str(b, "</div>\n");
  if (!d->has_baseline) cp_strbuf_str(b, "<p class=\"note\">no baseline in this certificate (run verify with --baseline)</p>\n");
  else if (!base) cp_strbuf_str(b, "<p class=\"note\">the baseline has no results for this probe</p>\n");

  const cJSON *model = cJSON_GetObjectItemCaseSensitive(c, "model");
  const cJSON *tl = cJSON_GetObjectItemCaseSensitive(model, "train_len");
  const cJSON *ma = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "thresholds"), "min_accuracy");
  series s[2] = {{"patched", C_PATCHED, false, d->n_lengths, d->lengths, pat->acc},
                 {"baseline", C_BASELINE, true, d->n_lengths, d->lengths, base ? base->acc : NULL}};
  chart_opts o = {"Accuracy against length", "Accuracy against length", "accuracy", "%.2f", 0, 1, 4,
                  cJSON_IsNumber(ma) ? ma->valuedouble : NAN, "min accuracy",
                  cJSON_IsNumber(tl) ? tl->valuedouble : NAN, NULL};
  cp_strbuf_str(b, "<div class=\"grid\"><div>");
  report_svg_chart(b, "chart accuracy", &o, s, base ? 2 : 1);
  cp_strbuf_str(b, "</div><div><table class=\"acc\"><tr><th>length</th><th class=\"n\">patched [95% CI]</th>");
  if (base) cp_strbuf_str(b, "<th class=\"n\">baseline [95% CI]</th><th class=\"n\">&Delta;</th><th class=\"n\">p</th>");
  cp_strbuf_str(b, "</tr>");
  for (int l = 0; l < d->n_lengths; l++) {
    char a[48];
    fmt_num(a, d->lengths[l]);
    cp_strbuf_printf(b, "<tr><td>%s</td>", a);
    if (isnan(pat->acc[l])) cp_strbuf_str(b, "<td class=\"n\">&ndash;</td>");
    else {
      cp_strbuf_printf(b, "<td class=\"n\">%.3f", pat->acc[l]);
      put_ci(b, c, "patched", d->probe_names[p], l);
      cp_strbuf_str(b, "</td>");
    }
    if (base) {
      if (isnan(base->acc[l])) cp_strbuf_str(b, "<td class=\"n\">&ndash;</td><td class=\"n\">&ndash;</td>");
      else {
        cp_strbuf_printf(b, "<td class=\"n\">%.3f", base->acc[l]);
        put_ci(b, c, "baseline", d->probe_names[p], l);
        cp_strbuf_str(b, "</td>");
        double delta = pat->acc[l] - base->acc[l];
        if (isnan(delta)) cp_strbuf_str(b, "<td class=\"n\">&ndash;</td>");
        else {
          /* %+.3f would print "-0.000" for tiny negatives; round first so equal reads as 0.000 */
          double r = round(delta * 1000) / 1000;
          const char *colour = r > 0 ? "#15803d" : r < 0 ? "#b91c1c" : "#6b7280";
          if (r == 0) cp_strbuf_printf(b, "<td class=\"n\" style=\"color:%s\">0.000</td>", colour);
          else cp_strbuf_printf(b, "<td class=\"n\" style=\"color:%s\">%+.3f</td>", colour, r);
        }
      }
    }
    if (base) put_p(b, c, d->probe_names[p], l);
    cp_strbuf_str(b, "</tr>");
  }
  cp_strbuf_str(b, "</table></div></div>\n</section>\n");
}

static void put_attention(cp_strbuf *b, const cJSON *c, const report_data *d) {
  if (!d->att[0].present && !d->att[1].present) return;
  const cJSON *tl = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "model"), "train_len");
  double vline = cJSON_IsNumber(tl) ? tl->valuedouble : NAN;
  cp_strbuf_str(b, "<section class=\"card attention\"><h2>Attention dispersion</h2>"
             "<p class=\"note\">Mean largest attention weight (P<sub>max</sub>) and mean entropy of the self-attention "
             "softmaxes on one probe prompt per length. Unpatched attention spreads thinner as the prompt grows "
             "(P<sub>max</sub> falls, entropy rises); a working patch keeps both near their training-length values."
             "</p>\n<div class=\"grid\"><div>");
  series sp[2], se[2];
  int n = 0;
  double emax = 0;
  for (int s = 0; s < 2; s++) {
    const side_attention *a = &d->att[s];
    if (!a->present) continue;
    for (int i = 0; i < a->n; i++)
      if (!isnan(a->entropy[i]) && a->entropy[i] > emax) emax = a->entropy[i];
    sp[n] = (series){SIDE_NAME[s], s ? C_BASELINE : C_PATCHED, s == 1, a->n, a->len, a->pmax};
    se[n] = (series){SIDE_NAME[s], s ? C_BASELINE : C_PATCHED, s == 1, a->n, a->len, a->entropy};
    n++;
  }
  /* entropy axis: 0 to the next whole nat above the largest value */
  double etop = ceil(emax * 1.05);
  if (etop < 1) etop = 1;
  int eticks = etop <= 8 ? (int)etop : 4;
#define PMAX_SVG "P<tspan font-size=\"75%\" dy=\"3\">max</tspan><tspan dy=\"-3\"> </tspan>"
  chart_opts op = {"P_max against length", PMAX_SVG "against length", "mean " PMAX_SVG, "%.2f", 0, 1, 4, NAN, "", vline, NULL};
  chart_opts oe = {"Entropy against length", "Entropy against length", "mean entropy (nats)", "%.1f", 0, etop, eticks, NAN, "", vline, NULL};
  report_svg_chart(b, "chart pmax", &op, sp, n);
  cp_strbuf_str(b, "</div><div>");
  report_svg_chart(b, "chart entropy", &oe, se, n);
  cp_strbuf_str(b, "</div></div>\n</section>\n");
}

/* The lengths the auto criterion averages over, as "512, 1024" (after " at "), or nothing. */
static void put_target_lengths(cp_strbuf *b, const cJSON *a) {
  const cJSON *e, *tl = cJSON_GetObjectItemCaseSensitive(a, "target_lengths");
  int i = 0;
  if (cJSON_GetArraySize(tl) == 0) return;
  cp_strbuf_str(b, " at ");
  cJSON_ArrayForEach(e, tl) if (cJSON_IsNumber(e)) {
    char s[48];
    fmt_num(s, e->valuedouble);
    cp_strbuf_printf(b, "%s%s", i++ ? ", " : "", s);
  }
}

/* The number cells of one row of the auto table: mean accuracy and ppl NLL (an en dash when null). */
static void put_auto_nums(cp_strbuf *b, const cJSON *e) {
  char acc[48], nll[48];
  const cJSON *ma = cJSON_GetObjectItemCaseSensitive(e, "mean_accuracy"), *pn = cJSON_GetObjectItemCaseSensitive(e, "ppl_nll");
  fmt_num(acc, cJSON_IsNumber(ma) ? ma->valuedouble : NAN);
  fmt_num(nll, cJSON_IsNumber(pn) ? pn->valuedouble : NAN);
  cp_strbuf_printf(b, "<td class=\"n\">%s</td><td class=\"n\">%s</td>", acc, nll);
}

/* `--to gguf`: llama.cpp's own options (context shift, RoPE scaling flags) as rows after the
 * candidates, never written; "ship the original and pass these flags" where one does as well. */
static void put_runtime_options(cp_strbuf *b, const cJSON *a, bool helps) {
  const cJSON *rows = cJSON_GetObjectItemCaseSensitive(a, "runtime_options"), *e;
  int i = 0;
  cJSON_ArrayForEach(e, rows) {
    const char *v = get_str(e, "verdict");
    cp_strbuf_printf(b, "<tr class=\"runtime\"><td>r%d</td><td>", ++i);
    report_esc(b, get_str(e, "name"));
    cp_strbuf_str(b, "</td>");
    put_auto_nums(b, e);
    if (helps)
      cp_strbuf_printf(b, "<td>%s</td>", !v || strcmp(v, "pass")                              ? "&ndash;"
                                         : cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "helps")) ? "yes"
                                                                                                       : "no");
    cp_strbuf_str(b, "<td>");
    report_esc(b, v ? v : "not run");
    if (get_str(e, "reason")) {
      cp_strbuf_str(b, ": ");
      report_esc(b, get_str(e, "reason"));
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "as_good")))
      cp_strbuf_str(b, "; <strong>does as well: ship the original and pass these flags</strong>");
    cp_strbuf_str(b, "</td><td class=\"mono\">");
    report_esc(b, get_str(e, "flags"));
    cp_strbuf_str(b, "</td></tr>");
  }
}

/* `patch --method auto`: the original's row (when the block has it), every candidate in the fixed
 * order, the winner marked, and "ship the original" when no candidate helps (docs/patching.md). */
static void put_auto(cp_strbuf *b, const cJSON *c) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(c, "auto"), *e;
  const cJSON *cands = cJSON_GetObjectItemCaseSensitive(a, "candidates"), *win = cJSON_GetObjectItemCaseSensitive(a, "winner");
  const cJSON *orig = cJSON_GetObjectItemCaseSensitive(a, "original");
  const char *helps = get_str(a, "helps");
  if (!cJSON_IsArray(cands)) return;
  cp_strbuf_str(b, "<section class=\"card auto\"><h2>Candidates compared (patch --method auto)</h2>");
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "ship_original")))
    cp_strbuf_str(b, "<p class=\"ship\"><strong>Ship the original</strong>: no candidate helps over the unpatched "
                     "model (the winner below is certified, not an improvement)</p>");
  cp_strbuf_str(b, "<p class=\"note\">criterion: ");
  report_esc(b, get_str(a, "criterion"));
  if (helps) {
    cp_strbuf_str(b, "; ");
    report_esc(b, helps);
  }
  cp_strbuf_str(b, "</p><table><tr><th>#</th><th>candidate</th><th class=\"n\">mean accuracy");
  put_target_lengths(b, a);
  cp_strbuf_str(b, "</th><th class=\"n\">mean ppl NLL");
  put_target_lengths(b, a);
  cp_strbuf_str(b, "</th>");
  if (helps) cp_strbuf_str(b, "<th>helps</th>");
  cp_strbuf_str(b, "<th>status</th><th>rule</th></tr>");
  if (cJSON_IsObject(orig)) {
    cp_strbuf_str(b, "<tr class=\"original\"><td>&ndash;</td><td>original (unpatched)</td>");
    put_auto_nums(b, orig);
    if (helps) cp_strbuf_str(b, "<td>&ndash;</td>");
    cp_strbuf_str(b, "<td>the baseline every candidate is compared with</td><td></td></tr>");
  }
  int i = 0;
  cJSON_ArrayForEach(e, cands) {
    bool winner = cJSON_IsNumber(win) && win->valuedouble == i;
    cp_strbuf_printf(b, "<tr%s><td>%d</td><td class=\"mono\">", winner ? " class=\"winner\"" : "", ++i);
    report_esc(b, get_str(e, "options"));
    cp_strbuf_str(b, "</td>");
    put_auto_nums(b, e);
    if (helps) {
      const cJSON *h = cJSON_GetObjectItemCaseSensitive(e, "helps");
      const char *st = get_str(e, "status");
      cp_strbuf_printf(b, "<td>%s</td>", !st || strcmp(st, "pass") ? "&ndash;" : cJSON_IsTrue(h) ? "yes" : "no");
    }
    cp_strbuf_str(b, "<td>");
    report_esc(b, get_str(e, "status"));
    if (winner) cp_strbuf_str(b, " (winner)");
    if (get_str(e, "reason")) {
      cp_strbuf_str(b, ": ");
      report_esc(b, get_str(e, "reason"));
    }
    cp_strbuf_str(b, "</td><td>");
    const cJSON *rule = cJSON_GetObjectItemCaseSensitive(e, "rule"), *rf = cJSON_GetObjectItemCaseSensitive(e, "rope_factor");
    if (cJSON_IsNumber(rf)) cp_strbuf_printf(b, "rope_scaling linear %.6g", rf->valuedouble);
    else if (cJSON_IsObject(rule)) put_rule_json(b, rule);
    cp_strbuf_str(b, "</td></tr>");
  }
  put_runtime_options(b, a, helps != NULL);
  cp_strbuf_str(b, "</table></section>\n");
}

static void put_files(cp_strbuf *b, const cJSON *c) {
  const cJSON *files = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "model"), "files");
  if (cJSON_GetArraySize(files) == 0) return;
  cp_strbuf_str(b, "<section class=\"card files\"><h2>Model files</h2><table><tr><th>path</th><th>SHA-256</th></tr>");
  const cJSON *f;
  cJSON_ArrayForEach(f, files) {
    cp_strbuf_str(b, "<tr><td class=\"mono\">");
    report_esc(b, get_str(f, "path"));
    cp_strbuf_str(b, "</td><td class=\"mono\">");
    const char *h = get_str(f, "sha256");
    if (h) report_esc(b, h);
    else cp_strbuf_str(b, "&ndash;");
    cp_strbuf_str(b, "</td></tr>");
  }
  cp_strbuf_str(b, "</table></section>\n");
}

static void put_footer(cp_strbuf *b, const cJSON *c) {
  const cJSON *tool = cJSON_GetObjectItemCaseSensitive(c, "tool");
  const char *name = get_str(tool, "name"), *version = get_str(tool, "version");
  cp_strbuf_str(b, "</main>\n<footer><span>");
  report_esc(b, name ? name : "ctxpatch");
  cp_strbuf_str(b, " ");
  report_esc(b, version ? version : "(version unknown)");
  cp_strbuf_str(b, "</span>");
  const cJSON *run = cJSON_GetObjectItemCaseSensitive(c, "run");
  const cJSON *it;
  cJSON_ArrayForEach(it, run) {
    cp_strbuf_str(b, "<span>");
    report_esc(b, it->string);
    cp_strbuf_str(b, ": ");
    if (cJSON_IsString(it)) {
      report_esc(b, it->valuestring);
    } else if (cJSON_IsNumber(it)) {
      char s[48];
      fmt_num(s, it->valuedouble);
      cp_strbuf_str(b, s);
    } else {
      char *text = cJSON_PrintUnformatted(it);
      if (!text) b->oom = true;
      else report_esc(b, text);
      free(text);
    }
    cp_strbuf_str(b, "</span>");
  }
  cp_strbuf_str(b, "</footer>\n</body>\n</html>\n");
}

/* The ppl probe: NLL against position for every length, patched solid and baseline dashed (the
 * LM-Infinite paper's figure), read defensively from results.<side>.ppl. */
#define PPL_MAX_SERIES 16
static void put_ppl(cp_strbuf *b, const cJSON *c) {
  const cJSON *res = cJSON_GetObjectItemCaseSensitive(c, "results");
  series s[PPL_MAX_SERIES];
  double xs[PPL_MAX_SERIES][64], ys[PPL_MAX_SERIES][64], lo = INFINITY, hi = -INFINITY;
  char labels[PPL_MAX_SERIES][48];
  int n = 0;
  for (int side = 0; side < 2; side++) {
    const cJSON *e, *arr = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(res, REPORT_SIDE_NAME[side]), "ppl");
    cJSON_ArrayForEach(e, arr) {
      const cJSON *len = cJSON_GetObjectItemCaseSensitive(e, "length"), *by = cJSON_GetObjectItemCaseSensitive(e, "nll_by_bucket");
      int nb = cJSON_GetArraySize(by), k = 0;
      if (n == PPL_MAX_SERIES || !cJSON_IsNumber(len) || !(len->valuedouble >= 1) || nb < 1 || nb > 64) continue;
      const cJSON *v;
      cJSON_ArrayForEach(v, by) {
        xs[n][k] = (k + 0.5) * len->valuedouble / nb;
        ys[n][k] = cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : NAN;
        if (!isnan(ys[n][k])) lo = fmin(lo, ys[n][k]), hi = fmax(hi, ys[n][k]);
        k++;
      }
      snprintf(labels[n], sizeof labels[n], "%s %.0f", REPORT_SIDE_NAME[side], len->valuedouble);
      s[n] = (series){labels[n], side ? C_BASELINE : C_PATCHED, side == 1, nb, xs[n], ys[n]};
      n++;
    }
  }
  if (n == 0 || !(lo <= hi)) return;
  double pad = fmax(0.05, (hi - lo) * 0.1);
  chart_opts o = {"NLL against position", "NLL against position", "NLL (nats per token)", "%.2f", floor((lo - pad) * 10) / 10,
                  ceil((hi + pad) * 10) / 10, 4, NAN, "", NAN, "position in the window (tokens, log2 scale)"};
  cp_strbuf_str(b, "<section class=\"card probe\"><h2>Probe: ppl</h2>\n");
  report_svg_chart(b, "chart ppl", &o, s, n);
  cp_strbuf_str(b, "</section>\n");
}

int cp_report_html(char **out, const cJSON *certificate) {
  *out = NULL;
  report_data d = {0};
  cp_strbuf b = {0};
  int rc = report_data_parse(&d, certificate);
  if (rc < 0) goto done;
  put_header(&b, certificate);
  put_verdict(&b, certificate);
  report_runtime(&b, certificate);
  put_settings(&b, certificate, &d);
  put_auto(&b, certificate);
  report_svg_scale(&b);
  for (int p = 0; p < d.n_probes; p++) put_probe(&b, certificate, &d, p);
  put_ppl(&b, certificate);
  put_attention(&b, certificate, &d);
  put_files(&b, certificate);
  put_footer(&b, certificate);
  if (b.oom) {
    rc = cp_nomem("report");
    goto done;
  }
  *out = b.s;
  b.s = NULL;
done:
  free(b.s);
  report_data_free(&d);
  return rc;
}

int cp_report_write(const char *path, const cJSON *certificate) {
  char *html = NULL;
  cp_atomic_file *f = NULL;
  int rc = cp_report_html(&html, certificate);
  if (rc < 0) goto done;
  if ((rc = cp_atomic_open(&f, path)) < 0) goto done;
  if ((rc = cp_atomic_write(f, html, strlen(html))) < 0) goto done;
  rc = cp_atomic_commit(f);
  f = NULL; /* commit frees the handle, also on error */
done:
  cp_atomic_abort(f);
  free(html);
  return rc;
}
