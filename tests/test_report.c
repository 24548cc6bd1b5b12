/* The HTML verify report (verify/certificate_json.h) from hand-built certificates: structure
 * (heatmap cells per side, charts present only with their data), escaping of hostile strings,
 * no script anywhere, deterministic bytes, atomic write, and refusal of malformed input with
 * the offending key named.
 *
 * With an argument, writes a sample report (baseline, attention, hostile names) to that path
 * and prints "cells N" (the heatmap cell count to expect); tests/test_report_chromium.sh uses it. */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ctxpatch/base/io.h"
#include "verify/certificate_json.h"
#include "test.h"

#define N_LENGTHS 5
#define N_DEPTHS 5
#define SAMPLES 4
static const double LENGTHS[N_LENGTHS] = {512, 1024, 2048, 4096, 8192};
static const double DEPTHS[N_DEPTHS] = {0, 0.25, 0.5, 0.75, 1};
static const char *const PROBES[2] = {"passkey", "needle"};

#define HOSTILE_RULE "</pre><script>alert('rule')</script> & \"q\""
#define HOSTILE_FILE "<script>alert(1)</script>&model.safetensors"
#define HOSTILE_REASON "passkey at 8192: 0.250 < 0.5 <img src=x onerror=alert(2)>"

/* Correct samples per cell. The patched side fades gently with length; the baseline is
 * perfect up to the training length (2048) and then fails, deeper answers first. */
static int correct(bool baseline, int p, int l, int d) {
  if (baseline) return l <= 2 ? SAMPLES : (l == 3 ? (d < 2 ? 2 : 0) : 0);
  int v = SAMPLES - (l * (d + 1 + p)) / 5;
  return v < 0 ? 0 : v;
}

static cJSON *side(bool baseline, bool attention) {
  cJSON *obj = cJSON_CreateObject();
  for (int p = 0; p < 2; p++) {
    cJSON *arr = cJSON_AddArrayToObject(obj, PROBES[p]);
    for (int l = 0; l < N_LENGTHS; l++) {
      cJSON *e = cJSON_CreateObject();
      cJSON_AddNumberToObject(e, "length", LENGTHS[l]);
      cJSON *by = cJSON_AddArrayToObject(e, "correct_by_depth");
      int sum = 0;
      for (int d = 0; d < N_DEPTHS; d++) {
        int c = correct(baseline, p, l, d);
        sum += c;
        cJSON_AddItemToArray(by, cJSON_CreateNumber(c));
      }
      cJSON_AddNumberToObject(e, "accuracy", (double)sum / (SAMPLES * N_DEPTHS));
      cJSON_AddItemToArray(arr, e);
    }
  }
  if (attention) {
    cJSON *att = cJSON_AddArrayToObject(obj, "attention");
    for (int l = 0; l < N_LENGTHS; l++) {
      cJSON *e = cJSON_CreateObject();
      cJSON_AddNumberToObject(e, "length", LENGTHS[l]);
      /* baseline disperses past the training length; the patched side holds */
      double over = l > 2 ? l - 2 : 0;
      cJSON_AddNumberToObject(e, "pmax", baseline ? 0.62 - 0.17 * over : 0.64 - 0.01 * l);
      cJSON_AddNumberToObject(e, "entropy", baseline ? 2.1 + 0.69 * over : 2.0 + 0.05 * l);
      cJSON_AddItemToArray(att, e);
    }
  }
  return obj;
}

static cJSON *make_cert(bool baseline, bool attention, bool hostile) {
  cJSON *c = cJSON_CreateObject();
  cJSON_AddNumberToObject(c, "certificate_version", 1);
  cJSON *tool = cJSON_AddObjectToObject(c, "tool");
  cJSON_AddStringToObject(tool, "name", "ctxpatch");
  cJSON_AddStringToObject(tool, "version", "0.1.0");
  cJSON *m = cJSON_AddObjectToObject(c, "model");
  cJSON_AddStringToObject(m, "family", "llama");
  cJSON_AddNumberToObject(m, "train_len", 2048);
  cJSON *files = cJSON_AddArrayToObject(m, "files");
  const char *names[2] = {"config.json", hostile ? HOSTILE_FILE : "model.safetensors"};
  for (int i = 0; i < 2; i++) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "path", names[i]);
    cJSON_AddStringToObject(f, "sha256",
                            i ? "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
                              : "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    cJSON_AddItemToArray(files, f);
  }
  cJSON *rule = cJSON_AddObjectToObject(c, "rule");
  cJSON_AddStringToObject(rule, "kind", hostile ? HOSTILE_RULE : "scaled_softmax");
  cJSON_AddNumberToObject(rule, "train_len", 2048);
  cJSON_AddStringToObject(rule, "scale", "log_n");

  cJSON *probes = cJSON_AddObjectToObject(c, "probes");
  cJSON_AddItemToObject(probes, "names", cJSON_CreateStringArray(PROBES, 2));
  cJSON_AddItemToObject(probes, "lengths", cJSON_CreateDoubleArray(LENGTHS, N_LENGTHS));
  cJSON_AddItemToObject(probes, "depths", cJSON_CreateDoubleArray(DEPTHS, N_DEPTHS));
  cJSON_AddNumberToObject(probes, "samples", SAMPLES);
  cJSON_AddNumberToObject(probes, "seed", 7);
  cJSON_AddNumberToObject(probes, "max_new_tokens", 10);

  cJSON *results = cJSON_AddObjectToObject(c, "results");
  cJSON_AddItemToObject(results, "patched", side(false, attention));
  if (baseline) cJSON_AddItemToObject(results, "baseline", side(true, attention));

  cJSON *th = cJSON_AddObjectToObject(c, "thresholds");
  cJSON_AddNumberToObject(th, "min_accuracy", 0.5);
  cJSON_AddItemToObject(th, "no_regression_at", cJSON_CreateDoubleArray(LENGTHS + 2, 1));
  cJSON *v = cJSON_AddObjectToObject(c, "verdict");
  cJSON_AddStringToObject(v, "result", hostile ? "fail" : "pass");
  cJSON *why = cJSON_AddArrayToObject(v, "reasons");
  if (hostile) cJSON_AddItemToArray(why, cJSON_CreateString(HOSTILE_REASON));
  cJSON *run = cJSON_AddObjectToObject(c, "run");
  cJSON_AddStringToObject(run, "engine", "cpu-fp32");
  cJSON_AddStringToObject(run, "device", "cpu");
  cJSON_AddNumberToObject(run, "threads", 2);
  cJSON_AddNumberToObject(run, "wall_seconds", 12.5);
  cJSON_AddNumberToObject(run, "tokens", 123456);
  cJSON_AddNumberToObject(run, "tokens_per_second", 9876.48);
  return c;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

static bool contains_ci(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (const char *p = hay; *p; p++) {
    size_t i = 0;
    while (i < n && p[i] && tolower((unsigned char)p[i]) == tolower((unsigned char)needle[i])) i++;
    if (i == n) return true;
  }
  return false;
}

static bool valid_utf8(const unsigned char *s) {
  while (*s) {
    int n = *s < 0x80 ? 1 : (*s & 0xE0) == 0xC0 ? 2 : (*s & 0xF0) == 0xE0 ? 3 : (*s & 0xF8) == 0xF0 ? 4 : 0;
    if (!n) return false;
    for (int i = 1; i < n; i++)
      if ((s[i] & 0xC0) != 0x80) return false;
    s += n;
  }
  return true;
}

static char *render(const cJSON *c) {
  char *html = NULL;
  int rc = cp_report_html(&html, c);
  CHECK_MSG(rc == 0 && html, "render: %s (%s)", cp_err_name(rc), cp_error_message());
  return html;
}

#define CELLS_PER_SIDE (2 * N_LENGTHS * N_DEPTHS)

static void test_full(void) {
  cJSON *c = make_cert(true, true, false);
  char *html = render(c);
  if (!html) goto done;
  CHECK(strncmp(html, "<!DOCTYPE html>", 15) == 0);
  CHECK(strstr(html, "<meta charset=\"utf-8\">") != NULL);
  CHECK_MSG(count(html, "class=\"hm-cell\"") == 2 * CELLS_PER_SIDE, "%d cells", count(html, "class=\"hm-cell\""));
  CHECK(count(html, "class=\"heatmap\"") == 4);
  CHECK(count(html, "class=\"chart accuracy\"") == 2);
  CHECK(count(html, "class=\"chart pmax\"") == 1 && count(html, "class=\"chart entropy\"") == 1);
  /* accuracy chart: patched and baseline line per probe; attention charts: both sides each */
  CHECK(count(html, "class=\"series\"") == 2 * 2 + 2 * 2);
  CHECK(count(html, "class=\"train-len\"") == 4);
  CHECK(count(html, "class=\"threshold\"") == 2);
  CHECK(strstr(html, "PASS") && strstr(html, "verdict pass"));
  CHECK(strstr(html, ">llama<") != NULL);
  CHECK(strstr(html, "training length 2048") != NULL);
  /* one cell checked by value: baseline needle at 4096, depth 0.25: 2 of 4 */
  CHECK(strstr(html, "<title>baseline, length 4096, depth 0.250: 2 of 4 correct</title>") != NULL);
  /* patched passkey at 8192, depth 1: 4 - (4*5)/5 = 0 correct, drawn red with "0.00" */
  CHECK(strstr(html,
               "<title>patched, length 8192, depth 1.000: 0 of 4 correct</title><rect x=\"266\" y=\"146\" "
               "width=\"52\" height=\"28\" fill=\"#d73027\"") != NULL);
  CHECK(strstr(html, "fill=\"#1a9850\"") != NULL); /* accuracy 1 is green */
  /* per-length table: patched passkey 512 all correct; baseline at 8192 all wrong */
  CHECK(strstr(html, "<tr><td>512</td><td class=\"n\">1.000</td><td class=\"n\">1.000</td>") != NULL);
  CHECK(strstr(html, "<td class=\"n\">0.000</td><td class=\"n\" style=\"color:#15803d\">+") != NULL);
  CHECK(strstr(html, "threads: 2") && strstr(html, "wall_seconds: 12.500") && strstr(html, "ctxpatch 0.1.0"));
  /* the rule, pretty-printed */
  CHECK(strstr(html, "<pre class=\"rule\">{\n\t&quot;kind&quot;:\t&quot;scaled_softmax&quot;,") != NULL);
  /* self-contained: no scripts, no external resources */
  CHECK(!contains_ci(html, "<script"));
  CHECK(!contains_ci(html, "src=") && !contains_ci(html, "href=") && !contains_ci(html, "url(") &&
        !contains_ci(html, "@import") && !contains_ci(html, "http:") && !contains_ci(html, "https:"));
  CHECK(valid_utf8((const unsigned char *)html));

  /* deterministic: twice, and through a print/parse round trip of the certificate */
  char *again = render(c);
  CHECK(again && strcmp(html, again) == 0);
  char *text = cJSON_PrintUnformatted(c);
  cJSON *back = cJSON_Parse(text);
  char *third = back ? render(back) : NULL;
  CHECK(third && strcmp(html, third) == 0);
  free(again);
  free(text);
  free(third);
  cJSON_Delete(back);

  /* atomic write gives the same bytes; a missing folder is refused and nothing is left */
  const char *dir = test_env("CTXPATCH_BUILD_DIR");
  const char *path = test_path(dir, "test_report.html");
  CHECK_RC(0, cp_report_write(path, c));
  char *file = NULL;
  size_t len = 0;
  CHECK_RC(0, cp_read_file(&file, &len, path, 1 << 24));
  CHECK(file && len == strlen(html) && memcmp(file, html, len) == 0);
  free(file);
  unlink(path);
  const char *bad = test_path(dir, "no-such-folder/r.html");
  CHECK(cp_report_write(bad, c) < 0);
  CHECK(access(bad, F_OK) != 0);
done:
  free(html);
  cJSON_Delete(c);
}

static void test_no_baseline_no_attention(void) {
  cJSON *c = make_cert(false, false, false);
  char *html = render(c);
  if (html) {
    CHECK_MSG(count(html, "class=\"hm-cell\"") == CELLS_PER_SIDE, "%d cells", count(html, "class=\"hm-cell\""));
    CHECK(count(html, "class=\"heatmap\"") == 2);
    CHECK(strstr(html, "no baseline in this certificate") != NULL);
    CHECK(count(html, "class=\"series\"") == 2);
    CHECK(strstr(html, "<th class=\"n\">baseline</th>") == NULL);
    CHECK(strstr(html, "class=\"chart pmax\"") == NULL && strstr(html, "Attention dispersion") == NULL);
    free(html);
  }
  cJSON_Delete(c);

  /* attention measured on the baseline only: the chart shows that side */
  c = make_cert(true, true, false);
  cJSON_DeleteItemFromObject(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "results"), "patched"), "attention");
  html = render(c);
  if (html) {
    CHECK(count(html, "class=\"chart pmax\"") == 1);
    CHECK(count(html, "class=\"series\"") == 4 + 2);
    free(html);
  }
  cJSON_Delete(c);

  /* the bare minimum: probes and patched results only */
  c = make_cert(false, false, false);
  const char *drop[] = {"tool", "model", "rule", "thresholds", "verdict", "run", "certificate_version"};
  for (size_t i = 0; i < sizeof drop / sizeof *drop; i++) cJSON_DeleteItemFromObject(c, drop[i]);
  html = render(c);
  if (html) {
    CHECK(count(html, "class=\"hm-cell\"") == CELLS_PER_SIDE);
    CHECK(strstr(html, "NO VERDICT") && strstr(html, "unknown family") && strstr(html, "training length unknown"));
    CHECK(strstr(html, "class=\"train-len\"") == NULL && strstr(html, "class=\"threshold\"") == NULL);
    free(html);
  }
  cJSON_Delete(c);

  /* a baseline that lacks a probe: that probe shows the patched side only */
  c = make_cert(true, false, false);
  cJSON_DeleteItemFromObject(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "results"), "baseline"), "needle");
  html = render(c);
  if (html) {
    CHECK(count(html, "class=\"hm-cell\"") == CELLS_PER_SIDE + CELLS_PER_SIDE / 2);
    CHECK(strstr(html, "the baseline has no results for this probe") != NULL);
    free(html);
  }
  cJSON_Delete(c);
}

static void test_hostile(void) {
  cJSON *c = make_cert(true, true, true);
  /* hostile family, probe name, run string and invalid UTF-8 too */
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(c, "model"), "family", cJSON_CreateString("t5<SCRIPT src=//x>"));
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(c, "run"), "device", cJSON_CreateString("cpu\xff\xfe</footer>\x01"));
  cJSON *names = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "probes"), "names");
  cJSON_ReplaceItemInArray(names, 1, cJSON_CreateString("<b>needle</b>"));
  cJSON *patched = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "results"), "patched");
  cJSON *baseline = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "results"), "baseline");
  cJSON_AddItemToObject(patched, "<b>needle</b>", cJSON_DetachItemFromObject(patched, "needle"));
  cJSON_AddItemToObject(baseline, "<b>needle</b>", cJSON_DetachItemFromObject(baseline, "needle"));
  char *html = render(c);
  if (html) {
    CHECK(!contains_ci(html, "<script"));
    CHECK(!contains_ci(html, "<img") && !contains_ci(html, "<b>") && !contains_ci(html, "</footer>\x01"));
    CHECK(strstr(html, "&lt;script&gt;alert(1)&lt;/script&gt;&amp;model.safetensors") != NULL);
    CHECK(strstr(html, "&lt;/pre&gt;&lt;script&gt;alert(&#39;rule&#39;)&lt;/script&gt; &amp; \\&quot;q\\&quot;") !=
          NULL);
    CHECK(strstr(html, "&lt;img src=x onerror=alert(2)&gt;") != NULL);
    CHECK(strstr(html, "Probe: &lt;b&gt;needle&lt;/b&gt;") != NULL);
    CHECK(strstr(html, "t5&lt;SCRIPT src=//x&gt;") != NULL);
    CHECK(strstr(html, "cpu&#xFFFD;&#xFFFD;&lt;/footer&gt;&#xFFFD;") != NULL);
    CHECK(strstr(html, "FAIL") && strstr(html, "verdict fail") && strstr(html, "1 threshold failed"));
    CHECK(count(html, "<pre") == 1 && count(html, "</pre>") == 1);
    CHECK(count(html, "</footer>") == 1);
    CHECK(valid_utf8((const unsigned char *)html));
    CHECK(count(html, "class=\"hm-cell\"") == 2 * CELLS_PER_SIDE);
    free(html);
  }
  cJSON_Delete(c);
}

/* A patch certificate's page: the title names the model (the last step of patch.baseline), the
 * method and the runtimes of patch.effective_in; the line under it the format and fidelity. */
static void test_patch_title(void) {
  static const char *const runtimes[3] = {"transformers", "vLLM", "TGI"}, *const only[1] = {"ctxpatch"};
  for (int k = 0; k < 3; k++) {
    cJSON *c = make_cert(true, false, false);
    cJSON *p = cJSON_AddObjectToObject(c, "patch");
    cJSON_AddStringToObject(p, "method", k == 2 ? "<i>m</i>" : "temperature");
    cJSON_AddStringToObject(p, "fidelity", k == 0 ? "exact-weights" : "ctxpatch-metadata");
    cJSON_AddStringToObject(p, "baseline", k == 0 ? "/models/rope-probe/" : k == 1 ? "rp/onnx/model.onnx" : "/m/<x>&y");
    cJSON_AddStringToObject(p, "format", "safetensors");
    cJSON_AddItemToObject(p, "effective_in",
                          k == 0 ? cJSON_CreateStringArray(runtimes, 3) : cJSON_CreateStringArray(only, 1));
    char *html = render(c);
    if (html && k == 0) {
      CHECK(strstr(html, "<title>ctxpatch report: rope-probe, temperature, for transformers, vLLM and TGI</title>"));
      CHECK(strstr(html,
                   "<h1>ctxpatch report: <span class=\"title\">rope-probe, temperature, for transformers, vLLM "
                   "and TGI</span></h1>"));
      CHECK(strstr(html,
                   "llama, training length 2048 tokens &middot; safetensors artifact &middot; fidelity <span "
                   "class=\"fidelity\">exact-weights</span> &middot; <span class=\"effective\">executed by "
                   "transformers, vLLM and TGI</span>"));
    } else if (html && k == 1) {
      /* the steps that name the file layout (onnx/, model.onnx) are passed over */
      CHECK(strstr(html, "<span class=\"title\">rp, temperature, for ctxpatch only</span>"));
      CHECK(strstr(html, "<span class=\"effective\"><strong>effective in ctxpatch only</strong></span>"));
    } else if (html) {
      CHECK(strstr(html, "<span class=\"title\">&lt;x&gt;&amp;y, &lt;i&gt;m&lt;/i&gt;, for ctxpatch only</span>"));
      CHECK(!contains_ci(html, "<x>") && !contains_ci(html, "<i>"));
    }
    free(html);
    cJSON_Delete(c);
  }
}

/* `patch --method auto`'s table: the original's row, labelled columns, whether each passing
 * candidate helps, "Ship the original" when the winner does not; a block from before the
 * original's row renders without it. */
static cJSON *auto_candidate(const char *options, const char *status, double acc, bool helps) {
  cJSON *e = cJSON_CreateObject();
  cJSON_AddStringToObject(e, "method", "temperature");
  cJSON_AddStringToObject(e, "options", options);
  cJSON_AddStringToObject(e, "status", status);
  cJSON_AddNullToObject(e, "reason");
  cJSON_AddNumberToObject(e, "mean_accuracy", acc);
  cJSON_AddNullToObject(e, "ppl_nll");
  cJSON_AddBoolToObject(e, "helps", helps);
  return e;
}

static void test_auto(void) {
  static const double targets[2] = {4096, 8192};
  for (int k = 0; k < 3; k++) { /* 0: ship the original; 1: the winner helps; 2: an older block */
    cJSON *c = make_cert(true, false, false);
    cJSON *a = cJSON_AddObjectToObject(c, "auto");
    cJSON_AddStringToObject(a, "criterion", "the criterion");
    cJSON_AddItemToObject(a, "target_lengths", cJSON_CreateDoubleArray(targets, 2));
    cJSON_AddNumberToObject(a, "winner", 0);
    if (k < 2) {
      cJSON *o = cJSON_AddObjectToObject(a, "original");
      cJSON_AddNumberToObject(o, "mean_accuracy", 0.5);
      cJSON_AddNullToObject(o, "ppl_nll");
      cJSON_AddStringToObject(a, "helps", "a candidate helps when ...");
      cJSON_AddBoolToObject(a, "ship_original", k == 0);
    }
    cJSON *cs = cJSON_AddArrayToObject(a, "candidates");
    cJSON_AddItemToArray(cs, auto_candidate("--method temperature --tau 0.9", "pass", k == 0 ? 0.5 : 0.75, k == 1));
    cJSON_AddItemToArray(cs, auto_candidate("--method rope-pi --factor 2", "fail", 0.25, false));
    char *html = render(c);
    if (html) {
      CHECK(strstr(html,
                   "<th class=\"n\">mean accuracy at 4096, 8192</th><th class=\"n\">mean ppl NLL at 4096, "
                   "8192</th>"));
      bool original = strstr(html,
                             "<tr class=\"original\"><td>&ndash;</td><td>original (unpatched)</td><td "
                             "class=\"n\">0.500</td><td class=\"n\">\xE2\x80\x93</td>") != NULL;
      CHECK_MSG(original == (k < 2), "case %d: original row %d", k, original);
      CHECK((strstr(html, "<strong>Ship the original</strong>") != NULL) == (k == 0));
      CHECK((strstr(html, "<th>helps</th>") != NULL) == (k < 2));
      if (k < 2) /* the winner: helps no / yes; the failing candidate: no verdict to help with */
        CHECK(strstr(html, k == 0 ? "<td>no</td><td>pass (winner)" : "<td>yes</td><td>pass (winner)") &&
              strstr(html, "<td>&ndash;</td><td>fail"));
    }
    free(html);
    cJSON_Delete(c);
  }
}

/* Applies `edit` to a fresh certificate and expects `want` with `key` in the message. */
static void refuse(int want, const char *key, void (*edit)(cJSON *c)) {
  cJSON *c = make_cert(true, true, false);
  edit(c);
  char *html = (char *)1;
  int rc = cp_report_html(&html, c);
  CHECK_MSG(rc == want, "%s: got %s (%s)", key, cp_err_name(rc), cp_error_message());
  CHECK(html == NULL);
  CHECK_MSG(strstr(cp_error_message(), key) != NULL, "message '%s' lacks '%s'", cp_error_message(), key);
  CHECK(strchr(cp_error_message(), '\n') == NULL);
  cJSON_Delete(c);
}

static cJSON *results_of(cJSON *c, const char *side_name, const char *probe) {
  return cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "results"), side_name), probe);
}

static void e_no_lengths(cJSON *c) { cJSON_DeleteItemFromObject(cJSON_GetObjectItem(c, "probes"), "lengths"); }
static void e_names_type(cJSON *c) {
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(c, "probes"), "names", cJSON_CreateString("passkey"));
}
static void e_samples(cJSON *c) {
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(c, "probes"), "samples", cJSON_CreateNumber(0));
}
static void e_depth_range(cJSON *c) {
  cJSON_ReplaceItemInArray(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "probes"), "depths"), 2, cJSON_CreateNumber(1.5));
}
static void e_no_patched(cJSON *c) { cJSON_DeleteItemFromObject(cJSON_GetObjectItem(c, "results"), "patched"); }
static void e_patched_probe(cJSON *c) {
  cJSON_DeleteItemFromObject(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "results"), "patched"), "needle");
}
static void e_short_side(cJSON *c) { cJSON_DeleteItemFromArray(results_of(c, "baseline", "passkey"), 4); }
static void e_length_mismatch(cJSON *c) {
  cJSON_ReplaceItemInObject(cJSON_GetArrayItem(results_of(c, "patched", "needle"), 1), "length",
                            cJSON_CreateNumber(1000));
}
static void e_count_over(cJSON *c) {
  cJSON *by = cJSON_GetObjectItem(cJSON_GetArrayItem(results_of(c, "patched", "passkey"), 2), "correct_by_depth");
  cJSON_ReplaceItemInArray(by, 3, cJSON_CreateNumber(SAMPLES + 1));
}
static void e_depth_count(cJSON *c) {
  cJSON *by = cJSON_GetObjectItem(cJSON_GetArrayItem(results_of(c, "baseline", "needle"), 0), "correct_by_depth");
  cJSON_AddItemToArray(by, cJSON_CreateNumber(1));
}
static void e_accuracy_type(cJSON *c) {
  cJSON_ReplaceItemInObject(cJSON_GetArrayItem(results_of(c, "patched", "passkey"), 0), "accuracy",
                            cJSON_CreateString("1.0"));
}
static void e_attention_pmax(cJSON *c) {
  cJSON_DeleteItemFromObject(cJSON_GetArrayItem(results_of(c, "baseline", "attention"), 3), "pmax");
}
static void e_family(cJSON *c) {
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(c, "model"), "family", cJSON_CreateNumber(5));
}
static void e_reasons(cJSON *c) {
  cJSON_AddItemToArray(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "verdict"), "reasons"), cJSON_CreateNumber(1));
}
static void e_rule(cJSON *c) { cJSON_ReplaceItemInObject(c, "rule", cJSON_CreateString("{}")); }
static void e_file(cJSON *c) {
  cJSON_DeleteItemFromObject(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "model"), "files"), 1),
                             "path");
}
static void e_version(cJSON *c) { cJSON_ReplaceItemInObject(c, "certificate_version", cJSON_CreateNumber(2)); }

static void test_refusals(void) {
  char *html = (char *)1;
  cJSON *arr = cJSON_CreateArray();
  CHECK_RC(CP_EARG, cp_report_html(&html, arr));
  CHECK(html == NULL);
  cJSON_Delete(arr);
  refuse(CP_EARG, "'probes.lengths'", e_no_lengths);
  refuse(CP_EARG, "'probes.names'", e_names_type);
  refuse(CP_EARG, "'probes.samples'", e_samples);
  refuse(CP_EARG, "'probes.depths[2]'", e_depth_range);
  refuse(CP_EARG, "'results.patched'", e_no_patched);
  refuse(CP_EARG, "'results.patched.needle'", e_patched_probe);
  refuse(CP_EARG, "'results.baseline.passkey'", e_short_side);
  refuse(CP_EARG, "'results.patched.needle[1].length'", e_length_mismatch);
  refuse(CP_EARG, "'results.patched.passkey[2].correct_by_depth[3]'", e_count_over);
  refuse(CP_EARG, "'results.baseline.needle[0].correct_by_depth'", e_depth_count);
  refuse(CP_EARG, "'results.patched.passkey[0].accuracy'", e_accuracy_type);
  refuse(CP_EARG, "'results.baseline.attention[3].pmax'", e_attention_pmax);
  refuse(CP_EARG, "'model.family'", e_family);
  refuse(CP_EARG, "'verdict.reasons'", e_reasons);
  refuse(CP_EARG, "'rule'", e_rule);
  refuse(CP_EARG, "'model.files[1]'", e_file);
  refuse(CP_EUNSUPPORTED, "'certificate_version'", e_version);
}

int main(int argc, char **argv) {
  if (argc == 2) {
    cJSON *c = make_cert(true, true, true);
    int rc = cp_report_write(argv[1], c);
    cJSON_Delete(c);
    if (rc < 0) {
      fprintf(stderr, "%s\n", cp_error_message());
      return 1;
    }
    printf("cells %d\n", 2 * CELLS_PER_SIDE);
    return 0;
  }
  test_full();
  test_no_baseline_no_attention();
  test_hostile();
  test_patch_title();
  test_auto();
  test_refusals();
  return test_finish();
}
