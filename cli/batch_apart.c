/* ctxpatch batch: a recipe's outputs kept apart from its inputs (docs/batch.md, issue 33 item 3).
 * Every run writes each job's output, log and failure record again, so none of them may be, hold
 * or lie inside an input (the model folder's fingerprint would change on every run, even when
 * patch itself refuses), nor match an "inputs" glob, or any folder above it (the outputs would
 * become inputs of the next run: 1, 3, 7, ... jobs). Checked when the recipe is loaded, so
 * --validate refuses such a recipe too. */
#include <fnmatch.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/batch.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"

/* `path` with its longest existing leading part resolved (symlinks, "..") and the rest appended
 * as written: the name an output that does not exist yet will have. NULL when out of memory. */
static char *canonical(const char *path) {
  char *head = strdup(path), *out = NULL;
  if (!head) return NULL;
  size_t cut = strlen(path);
  while (cut > 1 && path[cut - 1] == '/') cut--;
  for (;;) {
    head[cut] = '\0';
    char *real = cut ? realpath(head, NULL) : realpath(path[0] == '/' ? "/" : ".", NULL);
    if (real) {
      const char *rest = path + cut;
      while (*rest == '/') rest++;
      if ((out = malloc(strlen(real) + strlen(rest) + 2)))
        sprintf(out, "%s%s%s", real, *rest && strcmp(real, "/") ? "/" : "", rest);
      free(real);
      break;
    }
    if (cut == 0) break;
    while (cut > 0 && path[cut - 1] != '/') cut--;
    while (cut > 0 && path[cut - 1] == '/') cut--;
  }
  free(head);
  return out;
}

/* A glob pattern with its leading folders without wildcards resolved, as canonical() does. */
static char *canonical_pattern(const char *pattern) {
  const char *w = strpbrk(pattern, "*?[");
  const char *slash = w ? w : pattern + strlen(pattern);
  while (slash > pattern && *slash != '/') slash--;
  if (!w || *slash != '/') return canonical(pattern);
  char *head = strndup(pattern, slash > pattern ? (size_t)(slash - pattern) : 1);
  char *ch = head ? canonical(head) : NULL, *out = NULL;
  if (ch && (out = malloc(strlen(ch) + strlen(slash) + 1))) sprintf(out, "%s%s", strcmp(ch, "/") ? ch : "", slash);
  free(head);
  free(ch);
  return out;
}

/* True when `outer` is `inner` or one of its folders. */
static bool contains(const char *outer, const char *inner) {
  size_t n = strlen(outer);
  return strncmp(outer, inner, n) == 0 && (inner[n] == '\0' || inner[n] == '/' || (n == 1 && outer[0] == '/'));
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The input (of the sorted in[0..n)) that the written path p is, holds or lies inside, or NULL. */
static const char *overlapping(const char *p, char *const *in, size_t n) {
  char *a = strdup(p);
  const char *hit = NULL;
  /* p or one of its folders is an input */
  for (char *s = a; a && !hit;) {
    char *const *f = bsearch(&a, in, n, sizeof *in, cmp_str);
    if (f) hit = *f;
    if (!(s = strrchr(a, '/')) || s == a) break;
    *s = '\0';
  }
  free(a);
  /* an input lies inside p: those starting with p are one run of the sorted list */
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (strcmp(in[mid], p) < 0) lo = mid + 1;
    else hi = mid;
  }
  for (size_t k = lo; !hit && k < n && !strncmp(in[k], p, strlen(p)); k++)
    if (contains(p, in[k])) hit = in[k];
  return hit;
}

/* Whether p or one of its folders matches pattern `pat` (as glob(3) would list it): *match. */
static int matching(char **match, const char *p, const char *pat) {
  char *a = strdup(p);
  *match = NULL;
  if (!a) return cp_nomem("%s", p);
  for (char *s;;) {
    if (fnmatch(pat, a, FNM_PATHNAME | FNM_PERIOD) == 0) {
      *match = a;
      return 0;
    }
    if (!(s = strrchr(a, '/')) || s == a) break;
    *s = '\0';
  }
  free(a);
  return 0;
}

int batch_check_apart(const batch_recipe *r, const char *const *patterns, int n_patterns) {
  int rc = 0;
  char **pats = calloc((size_t)n_patterns + 1, sizeof *pats), **in = calloc(r->n_jobs + 1, sizeof *in), *p = NULL;
  size_t n_in = 0;
  CP_CHECK_ALLOC_GOTO(pats && in ? pats : NULL, r->path);
  for (int i = 0; i < n_patterns; i++) CP_CHECK_ALLOC_GOTO(pats[i] = canonical_pattern(patterns[i]), r->path);
  for (size_t k = 0; k < r->n_jobs; k++) in[n_in++] = r->jobs[k].input; /* real paths */
  qsort(in, n_in, sizeof *in, cmp_str);
  for (size_t k = 0; k < r->n_jobs && rc == 0; k++) {
    const batch_job *j = &r->jobs[k];
    char *stamp = malloc(strlen(j->out) + sizeof ".batch.json");
    CP_CHECK_ALLOC_GOTO(stamp, r->path);
    sprintf(stamp, "%s.batch.json", j->out);
    const char *written[] = {j->out, j->log, j->failed, strcmp(j->format, "gguf") ? NULL : stamp};
    for (size_t w = 0; w < sizeof written / sizeof *written && rc == 0; w++) {
      if (!written[w]) continue;
      free(p);
      if (!(p = canonical(written[w]))) {
        rc = cp_nomem("%s", r->path);
        break;
      }
      /* Against every job's input: one job's log inside another's model folder changes it too. */
      const char *hit = overlapping(p, in, n_in);
      if (hit)
        rc = cp_error_set(CP_EOVERLAP, "%s: output.dir: %s %s the input %s, and batch writes it on every run", r->path,
                          written[w],
                          !strcmp(p, hit)    ? "is"
                          : contains(p, hit) ? "contains"
                                             : "lies inside",
                          hit);
      for (int i = 0; i < n_patterns && rc == 0; i++) {
        char *m = NULL;
        if ((rc = matching(&m, p, pats[i])) == 0 && m)
          rc = cp_error_set(CP_EOVERLAP,
                            "%s: output.dir: %s%s%s matches the inputs entry '%s': the outputs would be "
                            "inputs of the next run",
                            r->path, m, strcmp(m, p) ? ", a folder of " : "", strcmp(m, p) ? written[w] : "",
                            patterns[i]);
        free(m);
      }
    }
    free(stamp);
  }
done:
  free(p);
  for (int i = 0; pats && i < n_patterns; i++) free(pats[i]);
  free(pats);
  free(in);
  return rc;
}
