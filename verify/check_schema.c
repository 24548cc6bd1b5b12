/* The certificate's schema (docs/certificate.md, plus the "patch" object of an artifact's
 * certificate), checked field by field: one failure line per violation, kind "cert-schema".
 * Unknown keys are allowed (older certificates carry run.wall_seconds). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/base/num.h"
#include "ctxpatch/verify/sequential.h"
#include "ctxpatch/verify/stats.h"
#include "ctxpatch/verify/verify.h"
#include "verify/check_int.h"

#define CERT "certificate.json"

typedef struct {
  cp_check_report *r;
  int rc;
} sv;

static void bad(sv *s, const char *path, const char *what) {
  if (s->rc == 0) s->rc = check_fail(s->r, "cert-schema", CERT ": %s: %s", path, what);
}

/* obj.key when it has one of the cJSON `types` (a mask); NULL and a failure otherwise. */
static const cJSON *need(sv *s, const cJSON *obj, const char *path, const char *key, int types) {
  char full[160];
  snprintf(full, sizeof full, "%s%s%s", path, *path ? "." : "", key);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) bad(s, full, "missing");
  else if (!(v->type & types)) {
    bad(s, full, types == cJSON_Object ? "expected an object" : types == cJSON_Array ? "expected an array" :
                 types == cJSON_String ? "expected a string" : "expected a number");
    return NULL;
  }
  return v;
}

static bool is_int_in(const cJSON *v, double lo, double hi) {
  return cJSON_IsNumber(v) && v->valuedouble >= lo && v->valuedouble <= hi && v->valuedouble == floor(v->valuedouble);
}

/* An integer field within [lo, hi]; its value, or -1. */
static double need_int(sv *s, const cJSON *obj, const char *path, const char *key, double lo, double hi) {
  const cJSON *v = need(s, obj, path, key, cJSON_Number);
  if (!v) return -1;
  if (!is_int_in(v, lo, hi)) {
    char full[160], what[96];
    snprintf(full, sizeof full, "%s.%s", path, key);
    snprintf(what, sizeof what, "expected an integer in [%g, %g]", lo, hi);
    bad(s, full, what);
    return -1;
  }
  return v->valuedouble;
}

static bool is_sha256(const char *h) {
  if (strlen(h) != 64) return false;
  for (int i = 0; i < 64; i++)
    if (!isxdigit((unsigned char)h[i]) || isupper((unsigned char)h[i])) return false;
  return true;
}

static void model_block(sv *s, const cJSON *c) {
  const cJSON *m = need(s, c, "", "model", cJSON_Object), *f;
  if (!m) return;
  need(s, m, "model", "family", cJSON_String);
  need(s, m, "model", "train_len", cJSON_Number | cJSON_NULL);
  const cJSON *src = cJSON_GetObjectItemCaseSensitive(m, "train_len_source"); /* optional: where train_len came from */
  if (src && !cJSON_IsString(src)) bad(s, "model.train_len_source", "expected a string");
  const cJSON *files = need(s, m, "model", "files", cJSON_Array);
  cJSON_ArrayForEach(f, files) {
    const cJSON *p = need(s, f, "model.files[]", "path", cJSON_String), *h = need(s, f, "model.files[]", "sha256", cJSON_String);
    if (p && (!*p->valuestring || p->valuestring[0] == '/' || strstr(p->valuestring, "..")))
      bad(s, "model.files[].path", "empty, absolute or with '..'");
    if (h && !is_sha256(h->valuestring)) bad(s, "model.files[].sha256", "expected 64 lowercase hex digits");
  }
}

/* probes: names, lengths, depths, samples, seed, max_new_tokens. Returns the counts used by results. */
static void probes_block(sv *s, const cJSON *c, int *n_lengths, int *n_depths, double *samples) {
  const cJSON *p = need(s, c, "", "probes", cJSON_Object), *v;
  *n_lengths = *n_depths = -1;
  *samples = -1;
  if (!p) return;
  const cJSON *names = need(s, p, "probes", "names", cJSON_Array);
  cJSON_ArrayForEach(v, names) {
    cp_probe_kind k;
    if (!cJSON_IsString(v) || cp_probe_from_name(&k, v->valuestring) < 0) bad(s, "probes.names[]", "not a known probe");
  }
  const cJSON *ppl = cJSON_GetObjectItemCaseSensitive(p, "ppl");
  if (names && cJSON_GetArraySize(names) == 0 && !ppl) bad(s, "probes.names", "empty (and no ppl probe)");
  if (ppl) {
    need(s, ppl, "probes.ppl", "corpus", cJSON_String);
    const cJSON *h = need(s, ppl, "probes.ppl", "corpus_sha256", cJSON_String);
    if (h && !is_sha256(h->valuestring)) bad(s, "probes.ppl.corpus_sha256", "expected 64 lowercase hex digits");
    need(s, ppl, "probes.ppl", "delimiter", cJSON_String);
    need_int(s, ppl, "probes.ppl", "windows", 1, 10000);
    need_int(s, ppl, "probes.ppl", "buckets", 1, 1024);
  }
  const cJSON *lengths = need(s, p, "probes", "lengths", cJSON_Array), *depths = need(s, p, "probes", "depths", cJSON_Array);
  cJSON_ArrayForEach(v, lengths) if (!is_int_in(v, 1, 1 << 20)) bad(s, "probes.lengths[]", "expected an integer in [1, 2^20]");
  cJSON_ArrayForEach(v, depths) if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 1))
    bad(s, "probes.depths[]", "expected a number in [0, 1]");
  if ((lengths && !cJSON_GetArraySize(lengths)) || (depths && !cJSON_GetArraySize(depths)))
    bad(s, "probes", "lengths and depths must not be empty");
  *samples = need_int(s, p, "probes", "samples", 1, 100000);
  need_int(s, p, "probes", "seed", 0, 18446744073709551615.0);
  need_int(s, p, "probes", "max_new_tokens", 1, 4096);
  if (lengths) *n_lengths = cJSON_GetArraySize(lengths);
  if (depths) *n_depths = cJSON_GetArraySize(depths);
}

/* results.<side>.<probe>: one entry per length, accuracy = correct / (samples x depths), or
 * correct / prompts where a sequential cell records the prompts it ran (fewer, when it stopped). */
static void side_block(sv *s, const cJSON *side, const char *name, const cJSON *probes, int n_lengths, int n_depths,
                       double samples) {
  const cJSON *pn, *lengths = cJSON_GetObjectItemCaseSensitive(probes, "lengths");
  char path[96];
  cJSON_ArrayForEach(pn, cJSON_GetObjectItemCaseSensitive(probes, "names")) {
    if (!cJSON_IsString(pn)) continue;
    snprintf(path, sizeof path, "results.%s", name);
    const cJSON *cells = need(s, side, path, pn->valuestring, cJSON_Array), *cell;
    snprintf(path, sizeof path, "results.%s.%s", name, pn->valuestring);
    if (cells && cJSON_GetArraySize(cells) != n_lengths) bad(s, path, "one entry per probes.lengths expected");
    int l = 0;
    cJSON_ArrayForEach(cell, cells) {
      const cJSON *len = need(s, cell, path, "length", cJSON_Number), *acc = need(s, cell, path, "accuracy", cJSON_Number);
      const cJSON *by = need(s, cell, path, "correct_by_depth", cJSON_Array), *d;
      const cJSON *want = cJSON_GetArrayItem(lengths, l++);
      if (len && want && len->valuedouble != want->valuedouble) bad(s, path, "length differs from probes.lengths");
      double ok = 0;
      cJSON_ArrayForEach(d, by) {
        if (!is_int_in(d, 0, samples)) bad(s, path, "correct_by_depth entry not an integer in [0, samples]");
        else ok += d->valuedouble;
      }
      const cJSON *pr = cJSON_GetObjectItemCaseSensitive(cell, "prompts");
      double n = samples * n_depths;
      if (pr && !is_int_in(pr, 1, n)) bad(s, path, "prompts is not an integer in [1, samples x depths]");
      else if (pr) n = pr->valuedouble;
      if (ok > n) bad(s, path, "more correct answers than prompts");
      const cJSON *pd = cJSON_GetObjectItemCaseSensitive(cell, "prompts_by_depth"), *x;
      double ran = 0;
      int k = 0;
      if (pd && (!pr || !cJSON_IsArray(pd) || cJSON_GetArraySize(pd) != n_depths))
        bad(s, path, "prompts_by_depth needs the cell's prompts and one count per depth");
      else if (pd) {
        cJSON_ArrayForEach(x, pd) {
          const cJSON *cd = cJSON_GetArrayItem(by, k++);
          if (!is_int_in(x, 0, samples) || (cd && cJSON_IsNumber(cd) && cd->valuedouble > x->valuedouble))
            bad(s, path, "prompts_by_depth entry not an integer in [0, samples] at or above correct_by_depth");
          else ran += x->valuedouble;
        }
        if (ran != n) bad(s, path, "prompts_by_depth does not add up to prompts");
      }
      if (by && cJSON_GetArraySize(by) != n_depths) bad(s, path, "correct_by_depth needs one count per depth");
      /* written at CP_NUM_JSON_DIGITS (base/num.h); certificates before that hold the exact ratio */
      else if (acc && samples > 0 && acc->valuedouble != ok / n && acc->valuedouble != cp_num_round(ok / n, CP_NUM_JSON_DIGITS))
        bad(s, path, "accuracy is not correct_by_depth / (samples x depths, or the cell's prompts)");
      const cJSON *ci = cJSON_GetObjectItemCaseSensitive(cell, "accuracy_ci95"); /* absent before statistics */
      if (ci && !(cJSON_GetArraySize(ci) == 2 && cJSON_IsNumber(ci->child) && cJSON_IsNumber(ci->child->next) &&
                  ci->child->valuedouble >= 0 && ci->child->next->valuedouble <= 1 && acc &&
                  ci->child->valuedouble <= acc->valuedouble && acc->valuedouble <= ci->child->next->valuedouble))
        bad(s, path, "accuracy_ci95 is not [lo, hi] within [0, 1] around the accuracy");
    }
  }
}

static void results_block(sv *s, const cJSON *c, int n_lengths, int n_depths, double samples) {
  const cJSON *res = need(s, c, "", "results", cJSON_Object), *probes = cJSON_GetObjectItemCaseSensitive(c, "probes");
  if (!res || n_lengths < 0 || n_depths < 0 || samples < 1) return;
  const cJSON *patched = need(s, res, "results", "patched", cJSON_Object);
  if (patched) side_block(s, patched, "patched", probes, n_lengths, n_depths, samples);
  const cJSON *base = cJSON_GetObjectItemCaseSensitive(res, "baseline");
  if (base && !cJSON_IsObject(base)) bad(s, "results.baseline", "expected an object");
  else if (base) side_block(s, base, "baseline", probes, n_lengths, n_depths, samples);
}

/* Lengths of a sequential run whose stops check recomputes (a verify run has a handful), and gain
 * cells up to which the gain part of a gain cell's futility or curtailed stop is recomputed (each
 * costs sign tests over the pooled prompts; a run has a few). */
#define SEQ_MAX_LENGTHS 4096
#define SEQ_MAX_LENGTHS_TEXT "4096"
#define SEQ_MAX_GAIN_RECOMPUTED 64

/* The pooled gain test as the run's looks saw it (verify/verify_seq.c): the gain cells in run order
 * (probes outer, lengths inner), the pairs of those already passed, and whether a boundary or the
 * gain-futility rule decided the gain before the cell at hand. */
typedef struct {
  bool judged, has_ppl; /* thresholds.require_gain; ppl measured (a corpus gain may still come) */
  bool failed;          /* verdict fail: a cell may have stopped on an earlier failure */
  const cJSON *lengths; /* statistics.gain.lengths */
  int cells, seen;      /* gain cells in all, and before the cell at hand */
  int64_t lost, gained; /* the pairs of those before */
  bool decided;
} seq_gain;

/* A cell of `probe` whose length the gain test pooled (its first occurrence). */
static bool is_gain_cell(const seq_gain *g, const cJSON *probe, const cJSON *cell) {
  const cJSON *len = cJSON_GetObjectItemCaseSensitive(cell, "length"), *x;
  bool listed = false;
  if (!cJSON_IsNumber(len)) return false;
  cJSON_ArrayForEach(x, g->lengths) listed |= cJSON_IsNumber(x) && x->valuedouble == len->valuedouble;
  for (x = probe->child; listed && x && x != cell; x = x->next) {
    const cJSON *other = cJSON_GetObjectItemCaseSensitive(x, "length");
    listed = !(cJSON_IsNumber(other) && other->valuedouble == len->valuedouble);
  }
  return listed;
}

/* The pooled gain test at a gain cell's look after n_j prompts with b lost and c gained (an interim
 * look, the cell's own boundary crossed or not): whether it was decided (a boundary, gain futility
 * before, or settled by curtailment), and if not, *futile: the gain-futility rule stops it. */
static bool gain_decided(const cp_seq_design *d, const seq_gain *g, bool crossed, int64_t n_j, int64_t b, int64_t c,
                         bool *futile) {
  *futile = false;
  if (g->decided || crossed) return true;
  int64_t rest = d->n_max - n_j + d->n_max * (g->cells - g->seen - 1), lost = g->lost + b, gained = g->gained + c;
  double a = cp_seq_gain_final_alpha(d);
  if (cp_sign_test_p_value(lost + rest, gained) < a) return true;
  if (!g->has_ppl && !(cp_sign_test_p_value(lost, gained + rest) < a)) return true;
  *futile = cp_seq_gain_futile(d, lost, gained, rest);
  return false;
}

/* One comparison cell of a sequential run: its looks [prompts, lost, gained] end at its pairs,
 * lost and gained, and its stop is what the design decides on the last look's counts (a gain
 * cell's gain-futility stop also on the pooled pairs before it, g). */
static void sequential_cell(sv *s, const cp_seq_design *d, const cJSON *cell, const char *path, seq_gain *g,
                            bool gain_cell) {
  const cJSON *looks = need(s, cell, path, "looks", cJSON_Array), *stop = need(s, cell, path, "stop", cJSON_String), *lk;
  const cJSON *gb = need(s, cell, path, "gain_boundary", cJSON_True | cJSON_False);
  int j = 0;
  double last[3] = {0, 0, 0};
  cJSON_ArrayForEach(lk, looks) {
    bool ok = cJSON_GetArraySize(lk) == 3 && j < d->n_looks;
    for (int i = 0; ok && i < 3; i++) ok = is_int_in(cJSON_GetArrayItem(lk, i), 0, 1e9);
    if (ok) {
      for (int i = 0; i < 3; i++) last[i] = cJSON_GetArrayItem(lk, i)->valuedouble;
      ok = last[0] == (double)cp_seq_look_prompts(d, j) && last[1] + last[2] <= last[0];
    }
    if (!ok) {
      bad(s, path, "looks[] is not [prompts, lost, gained] at the design's looks");
      return;
    }
    j++;
  }
  const cJSON *pairs = cJSON_GetObjectItemCaseSensitive(cell, "pairs"), *lost = cJSON_GetObjectItemCaseSensitive(cell, "lost");
  const cJSON *gained = cJSON_GetObjectItemCaseSensitive(cell, "gained");
  if (!j || !cJSON_IsNumber(pairs) || !cJSON_IsNumber(lost) || !cJSON_IsNumber(gained) || pairs->valuedouble != last[0] ||
      lost->valuedouble != last[1] || gained->valuedouble != last[2])
    {
      bad(s, path, "the last look is not the cell's pairs, lost and gained");
      return;
    }
  if (!stop) return;
  int64_t b = (int64_t)last[1], c = (int64_t)last[2];
  const char *why = stop->valuestring;
  bool fails = cp_seq_fails(d, j - 1, b, c), consistent = false, futile = false;
  /* a gain cell stops before its last look only once the pooled gain is decided, or by the rule
   * (recomputed where the sign tests over the pooled prompts stay cheap: gamma > 0 bounds them) */
  bool gain_checked = g->cells <= SEQ_MAX_GAIN_RECOMPUTED && !g->failed, rule = !strcmp(why, "gain-futility");
  bool gain_open = gain_cell && g->judged && j < d->n_looks && !fails &&
                   ((gain_checked && !rule) || (rule && d->gain_gamma > 0)) &&
                   !gain_decided(d, g, cJSON_IsTrue(gb), (int64_t)last[0], b, c, &futile);
  if (!strcmp(why, "regression")) consistent = fails;
  else if (!strcmp(why, "last look")) consistent = !fails && j == d->n_looks;
  else if (!strcmp(why, "futility")) consistent = !fails && cp_seq_futile(d, j - 1, b, c) && !(gain_open && gain_checked);
  else if (!strcmp(why, "curtailed")) consistent = !fails && j < d->n_looks && !(gain_open && gain_checked);
  else if (rule)
    consistent = gain_open && futile && (cp_seq_cannot_fail(d, j - 1, b, c) || cp_seq_futile(d, j - 1, b, c));
  else {
      bad(s, path, "stop is not 'last look', 'regression', 'futility', 'curtailed' or 'gain-futility'");
      return;
    }
  if (!consistent) bad(s, path, "stop is not what the design decides on the last look's pairs");
  if (!gain_cell) return;
  g->seen++;
  g->lost += b;
  g->gained += c;
  g->decided |= cJSON_IsTrue(gb) || !strcmp(why, "gain-futility");
}

/* statistics.sequential.gain_futility: the rule the design makes (absent before it: none). */
static void gain_futility_block(sv *s, const cJSON *q, cp_seq_design *d) {
  const cJSON *gf = cJSON_GetObjectItemCaseSensitive(q, "gain_futility");
  if (!gf) {
    d->gain_gamma = 0;
    return;
  }
  const cJSON *gamma = cJSON_GetObjectItemCaseSensitive(gf, "gamma"), *gained = cJSON_GetObjectItemCaseSensitive(gf, "gained");
  bool same_target = isnan(d->gain_target) ? cJSON_IsNull(gained)
                                            : cJSON_IsNumber(gained) &&
                                                  gained->valuedouble == cp_num_round(d->gain_target, CP_NUM_JSON_DIGITS);
  if (!cJSON_IsObject(gf) || !cJSON_IsNumber(gamma) || gamma->valuedouble != d->gain_gamma || !same_target)
    bad(s, "statistics.sequential.gain_futility", "not the design's rule (gamma, gained)");
}

/* statistics.sequential (a sequential run; docs/certificate.md, "Sequential verdicts"): the design
 * read back, and every comparison cell's looks and stop against it. */
static void sequential_block(sv *s, const cJSON *c, const cJSON *st) {
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(st, "sequential"), *probe, *cell;
  if (!q) return;
  if (!cJSON_IsObject(q)) {
      bad(s, "statistics.sequential", "expected an object");
      return;
    }
  need(s, q, "statistics.sequential", "design", cJSON_String);
  double every = need_int(s, q, "statistics.sequential", "looks_every", 1, CP_SEQ_MAX_PROMPTS);
  double n_max = need_int(s, q, "statistics.sequential", "prompts_max", 1, CP_SEQ_MAX_PROMPTS);
  double cells = need_int(s, q, "statistics.sequential", "gain_cells", 0, 1e6);
  const cJSON *fd = need(s, q, "statistics.sequential", "futility_drop", cJSON_Number);
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(st, "alpha"), *m = cJSON_GetObjectItemCaseSensitive(st, "margin");
  const cJSON *pairs = cJSON_GetObjectItemCaseSensitive(st, "pairs");
  if (every < 1 || n_max < 1 || cells < 0 || !fd || !cJSON_IsNumber(a) || !cJSON_IsNumber(m)) return;
  if (!cJSON_IsNumber(pairs) || pairs->valuedouble != n_max) {
      bad(s, "statistics.sequential.prompts_max", "not statistics.pairs");
      return;
    }
  cp_seq_design d;
  if (cp_seq_design_init(&d, (int64_t)n_max, (int64_t)every, a->valuedouble, m->valuedouble, fd->valuedouble, (int)cells) < 0) {
    cp_error_clear();
    {
      bad(s, "statistics.sequential", "not a design this tool makes");
      return;
    }
  }
  gain_futility_block(s, q, &d);
  const cJSON *gain = cJSON_GetObjectItemCaseSensitive(st, "gain");
  const cJSON *th = cJSON_GetObjectItemCaseSensitive(c, "thresholds");
  const cJSON *verdict = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "verdict"), "result");
  seq_gain g = {.judged = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(th, "require_gain")),
                .failed = !cJSON_IsString(verdict) || !strcmp(verdict->valuestring, "fail"),
                .has_ppl = cJSON_GetObjectItemCaseSensitive(gain, "ppl_nll_saved") != NULL,
                .lengths = cJSON_GetObjectItemCaseSensitive(gain, "lengths")};
  const cJSON *comparison = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "results"), "comparison");
  /* is_gain_cell compares each cell with the ones before it: bound that work */
  bool few = cJSON_GetArraySize(g.lengths) <= SEQ_MAX_LENGTHS;
  cJSON_ArrayForEach(probe, comparison) few &= cJSON_GetArraySize(probe) <= SEQ_MAX_LENGTHS;
  if (!few) {
    bad(s, "statistics.sequential", "more than " SEQ_MAX_LENGTHS_TEXT " lengths, more than check recomputes");
    return;
  }
  cJSON_ArrayForEach(probe, comparison) cJSON_ArrayForEach(cell, probe) g.cells += is_gain_cell(&g, probe, cell);
  if (g.cells != (int)cells) {
    bad(s, "statistics.sequential.gain_cells", "not the comparison cells at statistics.gain.lengths");
    return;
  }
  char path[96];
  cJSON_ArrayForEach(probe, comparison) {
    snprintf(path, sizeof path, "results.comparison.%s[]", probe->string ? probe->string : "?");
    cJSON_ArrayForEach(cell, probe) sequential_cell(s, &d, cell, path, &g, is_gain_cell(&g, probe, cell));
  }
}

static void tail_blocks(sv *s, const cJSON *c) {
  const cJSON *th = need(s, c, "", "thresholds", cJSON_Object), *v = NULL;
  if (th) {
    need(s, th, "thresholds", "min_accuracy", cJSON_Number | cJSON_NULL);
    need(s, th, "thresholds", "no_regression_at", cJSON_Array);
    /* absent before the gain and power criteria (docs/certificate.md, "Verdicts") */
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(th, "require_gain");
    if (g && !cJSON_IsBool(g)) bad(s, "thresholds.require_gain", "expected true or false");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(th, "max_detectable_drop");
    if (d && !cJSON_IsNull(d) && !(cJSON_IsNumber(d) && d->valuedouble > 0 && d->valuedouble <= 1))
      bad(s, "thresholds.max_detectable_drop", "expected a number in (0, 1] or null");
  }
  const cJSON *verdict = need(s, c, "", "verdict", cJSON_Object);
  if (verdict) {
    const cJSON *r = need(s, verdict, "verdict", "result", cJSON_String), *why = need(s, verdict, "verdict", "reasons", cJSON_Array);
    static const char *const results[] = {"pass", "fail", "no effect", "inconclusive", "none"};
    bool known = false;
    for (size_t i = 0; r && i < sizeof results / sizeof *results; i++) known |= !strcmp(r->valuestring, results[i]);
    if (r && !known) bad(s, "verdict.result", "not 'pass', 'fail', 'no effect', 'inconclusive' or 'none'");
    cJSON_ArrayForEach(v, why) if (!cJSON_IsString(v)) bad(s, "verdict.reasons[]", "expected a string");
    if (r && why && !strcmp(r->valuestring, "pass") && cJSON_GetArraySize(why) > 0) bad(s, "verdict", "a pass with reasons");
  }
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(c, "statistics"); /* absent before statistics */
  if (st && !cJSON_IsObject(st)) bad(s, "statistics", "expected an object");
  else if (st) {
    need(s, st, "statistics", "interval", cJSON_String);
    need(s, st, "statistics", "test", cJSON_String);
    const cJSON *m = need(s, st, "statistics", "margin", cJSON_Number), *a = need(s, st, "statistics", "alpha", cJSON_Number);
    if (m && !(m->valuedouble >= 0 && m->valuedouble < 1)) bad(s, "statistics.margin", "not in [0, 1)");
    if (a && !(a->valuedouble > 0 && a->valuedouble < 1)) bad(s, "statistics.alpha", "not in (0, 1)");
    need_int(s, st, "statistics", "pairs", 1, 1e12);
    need(s, st, "statistics", "detectable_drop", cJSON_Number | cJSON_NULL);
    sequential_block(s, c, st);
  }
  const cJSON *run = need(s, c, "", "run", cJSON_Object);
  if (run) {
    need(s, run, "run", "engine", cJSON_String);
    need(s, run, "run", "device", cJSON_String);
    need_int(s, run, "run", "threads", 1, 1024);
    need(s, run, "run", "tokens", cJSON_Number);
    /* optional: the baseline side was read from a baseline cache (docs/certificate.md) */
    const cJSON *bc = cJSON_GetObjectItemCaseSensitive(run, "baseline_from_cache");
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(c, "results");
    if (bc && !cJSON_IsObject(bc)) bad(s, "run.baseline_from_cache", "expected an object");
    else if (bc && !cJSON_GetObjectItemCaseSensitive(res, "baseline"))
      bad(s, "run.baseline_from_cache", "present without results.baseline");
    for (int i = 0; bc && cJSON_IsObject(bc) && i < 2; i++) {
      const char *key = i ? "file_sha256" : "key_sha256";
      const cJSON *h = need(s, bc, "run.baseline_from_cache", key, cJSON_String);
      if (h && !is_sha256(h->valuestring)) bad(s, i ? "run.baseline_from_cache.file_sha256" : "run.baseline_from_cache.key_sha256",
                                               "expected 64 lowercase hex digits");
    }
    if (bc && cJSON_IsObject(bc)) need_int(s, bc, "run.baseline_from_cache", "prompts_read", 0, 1e12);
  }
  const cJSON *patch = need(s, c, "", "patch", cJSON_Object);
  if (patch) {
    need(s, patch, "patch", "method", cJSON_String);
    need(s, patch, "patch", "fidelity", cJSON_String);
    need(s, patch, "patch", "rule", cJSON_Object);
    need(s, patch, "patch", "baked_rule", cJSON_Object);
    need(s, patch, "patch", "baseline", cJSON_String);
    /* Optional (certificates before the runtime table lack them): the format written and the
     * runtimes that execute it, or ["ctxpatch"] alone (docs/patching.md, "Runtimes"). */
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(patch, "format");
    if (fmt && (!cJSON_IsString(fmt) || (strcmp(fmt->valuestring, "safetensors") && strcmp(fmt->valuestring, "gguf") &&
                                          strcmp(fmt->valuestring, "onnx"))))
      bad(s, "patch.format", "expected \"safetensors\", \"gguf\" or \"onnx\"");
    const cJSON *eff = cJSON_GetObjectItemCaseSensitive(patch, "effective_in"), *e;
    if (eff && (!cJSON_IsArray(eff) || cJSON_GetArraySize(eff) == 0)) bad(s, "patch.effective_in", "expected a non-empty array");
    if (cJSON_IsArray(eff)) cJSON_ArrayForEach(e, eff) if (!cJSON_IsString(e) || !*e->valuestring)
      bad(s, "patch.effective_in[]", "expected a runtime name");
  }
}

/* `patch --method auto`'s comparison (docs/certificate.md "auto"); absent on other certificates. */
static void auto_block(sv *s, const cJSON *c) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(c, "auto"), *e;
  if (!a) return;
  if (!cJSON_IsObject(a)) {
    bad(s, "auto", "expected an object");
    return;
  }
  need(s, a, "auto", "criterion", cJSON_String);
  need(s, a, "auto", "target_lengths", cJSON_Array);
  const cJSON *cands = need(s, a, "auto", "candidates", cJSON_Array);
  int n = cJSON_GetArraySize(cands);
  const cJSON *w = need(s, a, "auto", "winner", cJSON_Number | cJSON_NULL);
  if (w && cJSON_IsNumber(w) && !is_int_in(w, 0, n - 1)) bad(s, "auto.winner", "not a candidate index");
  cJSON_ArrayForEach(e, cands) {
    if (!cJSON_IsObject(e)) {
      bad(s, "auto.candidates[]", "expected an object");
      continue;
    }
    need(s, e, "auto.candidates[]", "method", cJSON_String);
    need(s, e, "auto.candidates[]", "options", cJSON_String);
    need(s, e, "auto.candidates[]", "status", cJSON_String);
    need(s, e, "auto.candidates[]", "mean_accuracy", cJSON_Number | cJSON_NULL);
  }
  if (w && cJSON_IsNumber(w) && is_int_in(w, 0, n - 1)) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cands, (int)w->valuedouble), "status");
    if (!cJSON_IsString(st) || strcmp(st->valuestring, "pass")) bad(s, "auto.winner", "the winner did not pass");
  }
}

int check_certificate_schema(cp_check_report *r, const cJSON *c) {
  sv s = {r, 0};
  const cJSON *v = need(&s, c, "", "certificate_version", cJSON_Number);
  if (v && v->valuedouble != 1) bad(&s, "certificate_version", "not 1 (the only version this tool reads)");
  const cJSON *tool = need(&s, c, "", "tool", cJSON_Object);
  if (tool) {
    const cJSON *name = need(&s, tool, "tool", "name", cJSON_String);
    if (name && strcmp(name->valuestring, "ctxpatch")) bad(&s, "tool.name", "not 'ctxpatch'");
    need(&s, tool, "tool", "version", cJSON_String);
  }
  model_block(&s, c);
  need(&s, c, "", "rule", cJSON_Object);
  int n_lengths, n_depths;
  double samples;
  probes_block(&s, c, &n_lengths, &n_depths, &samples);
  results_block(&s, c, n_lengths, n_depths, samples);
  tail_blocks(&s, c);
  auto_block(&s, c);
  return s.rc;
}
