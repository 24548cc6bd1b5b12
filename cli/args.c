/* Parsing helpers shared by several subcommands. */
#include <errno.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "base/json_strict.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/num.h"
#include "ctxpatch/engine/cuda.h"
#include "ctxpatch/verify/verify.h"

/* "3,17,5" -> heap array; junk or an empty list is CP_EMODEL_INPUT. In a file (`from` names it)
 * whitespace also separates ids. */
static int parse_list(int64_t **out, int64_t *n_out, const char *opt, const char *from, const char *text) {
  *out = NULL;
  *n_out = 0;
  bool file = from != NULL;
  size_t cap = 1;
  for (const char *p = text; *p; p++) cap += *p == ',' || (file && (*p == ' ' || *p == '\n'));
  int64_t *ids = malloc(cap * sizeof *ids);
  CP_CHECK_ALLOC(ids, "ids");
  const char *p = text;
  int64_t n = 0;
  for (;;) {
    while (file && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
    if (!*p && file && n > 0) break;
    char *end = NULL;
    errno = 0;
    if (*p < '0' || *p > '9') goto bad;
    long long v = strtoll(p, &end, 10);
    if (errno || end == p) goto bad;
    ids[n++] = v;
    p = end;
    while (file && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
    if (*p == '\0') break;
    if (*p == ',') p++;
    else if (!file || p == end) goto bad;
  }
  *out = ids;
  *n_out = n;
  return 0;
bad:
  free(ids);
  if (!n && !*p) return cp_error_set(CP_EMODEL_INPUT, "%s: empty id list", file ? from : opt);
  return cp_error_set(CP_EMODEL_INPUT, "%s: entry %lld is not a non-negative integer (at '%.20s')",
                      file ? from : opt, (long long)n, p);
}

/* A list on the command line, or "@FILE" to read it from FILE. */
int cli_parse_ids(int64_t **out, int64_t *n_out, const char *opt, const char *text) {
  if (text[0] != '@') return parse_list(out, n_out, opt, NULL, text);
  char *buf = NULL;
  size_t len = 0;
  int rc = cp_read_file(&buf, &len, text + 1, (size_t)1 << 30);
  if (rc == 0) rc = parse_list(out, n_out, opt, text + 1, buf);
  free(buf);
  return rc;
}


bool cli_parse_u64_in(const char *cmd, const char *opt, const char *text, unsigned long long lo,
                      unsigned long long hi, unsigned long long *out) {
  if (!cli_parse_u64(cmd, opt, text, out)) return false;
  if (*out >= lo && *out <= hi) return true;
  cli_usage_error(cmd, "%s must be in [%llu, %llu], got %llu", opt, lo, hi, *out);
  return false;
}

bool cli_no_repeated_options(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], "--", 2) != 0 || !argv[i][2]) continue;
    for (int j = 1; j < i; j++)
      if (!strcmp(argv[i], argv[j])) {
        cli_usage_error(argv[0], "%s given more than once", argv[i]);
        return false;
      }
  }
  return true;
}

bool cli_parse_lengths(const char *cmd, const char *text, int64_t **out, int *n_out) {
  *out = NULL;
  *n_out = 0;
  int cap = 1;
  for (const char *p = text; *p; p++) cap += *p == ',';
  int64_t *v = malloc((size_t)cap * sizeof *v);
  if (!v) return false;
  const char *p = text;
  int n = 0;
  while (*p) {
    char *end = NULL;
    errno = 0;
    long long x = (*p >= '0' && *p <= '9') ? strtoll(p, &end, 10) : -1;
    if (x <= 0 || errno || (*end && *end != ',')) {
      free(v);
      cli_usage_error(cmd, "--lengths expects positive integers like 256,1024,4096; got '%s'", text);
      return false;
    }
    if (x > CLI_MAX_TOKENS) {
      free(v);
      cli_usage_error(cmd, "--lengths: %lld is over the limit of %lld tokens", x, CLI_MAX_TOKENS);
      return false;
    }
    v[n++] = x;
    p = *end ? end + 1 : end;
  }
  if (n == 0) {
    free(v);
    cli_usage_error(cmd, "--lengths is empty");
    return false;
  }
  *out = v;
  *n_out = n;
  return true;
}

int cli_parse_depths(double **out, int *n, const char *text) {
  *out = NULL;
  *n = 0;
  double a, b;
  int count;
  char tail;
  if (sscanf(text, "%lf:%lf:%d%c", &a, &b, &count, &tail) == 3) {
    if (count < 1 || count > 1000 || !(a >= 0 && a <= 1 && b >= 0 && b <= 1)) return -1;
    double *d = malloc((size_t)count * sizeof *d);
    if (!d) return -1;
    for (int i = 0; i < count; i++) d[i] = count == 1 ? a : a + (b - a) * i / (count - 1);
    *out = d;
    *n = count;
    return 0;
  }
  int cap = 1;
  for (const char *p = text; *p; p++) cap += *p == ',';
  double *d = malloc((size_t)cap * sizeof *d);
  if (!d) return -1;
  const char *p = text;
  while (*p) {
    char *end;
    double v = strtod(p, &end);
    if (end == p || !(v >= 0 && v <= 1) || (*end && *end != ',')) {
      free(d);
      return -1;
    }
    d[(*n)++] = v;
    p = *end ? end + 1 : end;
  }
  if (*n == 0) {
    free(d);
    return -1;
  }
  *out = d;
  return 0;
}

int cli_parse_probe_set(cp_probe_kind **out, int *n, bool *ppl, const char *text) {
  char *copy = strdup(text);
  int cap = 1;
  for (const char *p = text; *p; p++) cap += *p == ',';
  cp_probe_kind *k = malloc((size_t)cap * sizeof *k);
  int rc = copy && k ? 0 : cp_nomem("probe set");
  *n = 0;
  if (ppl) *ppl = false;
  for (char *save = NULL, *tok = rc ? NULL : strtok_r(copy, ",", &save); tok && rc == 0;
       tok = strtok_r(NULL, ",", &save)) {
    if (ppl && !strcmp(tok, "ppl")) *ppl = true;
    else rc = cp_probe_from_name(&k[(*n)++], tok);
  }
  if (rc == 0 && *n == 0 && !(ppl && *ppl)) rc = cp_error_set(CP_EVERIFY_PROBE, "--probe: no probe named");
  free(copy);
  if (rc < 0) {
    free(k);
    return rc;
  }
  *out = k;
  return 0;
}

int cli_parse_probes(cp_probe_kind **out, int *n, const char *text) { return cli_parse_probe_set(out, n, NULL, text); }

bool cli_progress_wanted(void) { return isatty(STDERR_FILENO); }

void cli_progress_note(void *ctx, const char *what) {
  (void)ctx;
  if (what) fprintf(stderr, "\r\033[K%s", what);
  else fputc('\n', stderr);
}

int cli_print_json(const cJSON *doc) {
  char *text = doc ? cp_json_print(doc, true) : NULL;
  if (!text) return cli_report(cp_nomem("--json: the JSON document"));
  puts(text);
  free(text);
  return fflush(stdout) == 0 ? CLI_OK : CLI_FAIL;
}

static bool exact_key(const char *key, const char *const *exact) {
  size_t kl = key ? strlen(key) : 0;
  if (kl >= 4 && !strcmp(key + kl - 4, "rule")) return true;
  for (; key && exact && *exact; exact++)
    if (!strcmp(key, *exact)) return true;
  return false;
}

void cli_json_round(cJSON *doc, const char *const *exact) {
  if (cJSON_IsNumber(doc)) {
    cJSON_SetNumberValue(doc, cp_num_round(doc->valuedouble, CP_NUM_JSON_DIGITS));
    return;
  }
  for (cJSON *c = doc ? doc->child : NULL; c; c = c->next)
    if (!exact_key(c->string, exact)) cli_json_round(c, exact);
}

void cli_progress_bar(void *ctx, int64_t done, int64_t total) {
  (void)ctx;
  int width = 40, filled = (int)(width * done / (total ? total : 1));
  fprintf(stderr, "\r[%.*s%*s] %lld/%lld", filled, "========================================", width - filled, "",
          (long long)done, (long long)total);
  if (done == total) fputc('\n', stderr);
}

int cli_check_outputs(const char *const *ins, int n_in, const char *const *outs, int n_out, bool folder) {
  for (int o = 0; o < n_out; o++) {
    if (!outs[o]) continue;
    cp_output kind;
    int rc = cp_output_kind(&kind, outs[o], folder);
    for (int i = 0; rc == 0 && i < n_in; i++)
      if (ins[i]) rc = cp_output_outside_input(outs[o], ins[i], folder);
    if (rc == 0) rc = cp_input_check_output(outs[o], folder);
    if (rc < 0) return rc;
  }
  return 0;
}

int cli_check_output_name(const char *cmd, const char *out) {
  if (cp_atomic_name_check(out) < 0) return cli_usage_error(cmd, "%s", cp_error_message());
  return CLI_OK;
}

bool cli_parse_onnx_dtype(cp_dtype *out, const char *text) {
  if (!text || !strcmp(text, "fp32")) *out = CP_F32;
  else if (!strcmp(text, "fp16")) *out = CP_F16;
  else if (!strcmp(text, "bf16")) *out = CP_BF16;
  else return false;
  return true;
}

bool cli_parse_device(const char *cmd, const char *text, cp_device *out) {
  if (text && !strcmp(text, "cpu")) *out = CP_DEVICE_CPU;
  else if (text && !strcmp(text, "cuda")) *out = CP_DEVICE_CUDA;
  else return cli_usage_error(cmd, "--device expects cpu or cuda, got '%s'", text ? text : ""), false;
  return true;
}

int cli_device_ready(const char *cmd, cp_device d, char *desc, size_t n) {
  char why[400] = "";
  if (d == CP_DEVICE_CPU) {
    snprintf(desc, n, "cpu");
    return CLI_OK;
  }
  if (!cp_cuda_built()) {
    fprintf(stderr, "ctxpatch %s: --device cuda: this build has no CUDA (configure with -DCTXPATCH_CUDA=ON)\n", cmd);
    return CLI_USAGE;
  }
  if (!cp_cuda_available(why, sizeof why)) {
    fprintf(stderr, "ctxpatch %s: --device cuda: no CUDA device present (%s)\n", cmd, why);
    return CLI_USAGE;
  }
  snprintf(desc, n, "cuda: %s", why);
  return CLI_OK;
}
