/* ctxpatch check: the CI gate for a patched artifact (include/ctxpatch/verify/check.h, docs/ci.md).
 * Exit 0 pass, 1 the artifact fails a check (every failure one line), 2 usage or unreadable input. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "cli/runtime_opts.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/verify/check.h"

static const char check_help[] =
    "usage: ctxpatch check ARTIFACT [--rerun [--work-budget N]] [--runtime-dir DIR] [--threads T] [--tolerance X]\n"
    "                      [--json] [--min-prompts N] [--require-gain] [--require-runtime NAME] [--fidelity F]\n\n"
    "Decides whether a patched artifact (what 'ctxpatch patch' writes) may ship: every file\n"
    "against SHA256SUMS (nothing extra or missing), certificate.json against its schema and a\n"
    "pass verdict, the certificate's file digests, tool version, method, fidelity and rules\n"
    "against the artifact's files and metadata. Each failure is one line 'FAIL KIND: message';\n"
    "all are listed.\n\n"
    "  --rerun        run the certificate's probes again with its seed; accuracies must be equal\n"
    "                 bit for bit, P_max / entropy within --tolerance (default 1e-4); made only\n"
    "                 when every other check passed\n"
    "  --work-budget N  with --rerun: the most work the certificate's probes may ask, in attention\n"
    "                 pairs (default 1e10; docs/reliability.md); over it the re-run fails unrun\n"
    "  --threads T    re-run engine threads (default the certificate's run.threads)\n"
    "  --runtime-dir DIR  with --rerun: a node_modules folder with node-llama-cpp / onnxruntime-node\n"
    "                 (default $CTXPATCH_RUNTIMES); the certificate's runtime comparison is made\n"
    "                 again on the artifact (for a .gguf file or an ONNX folder, only that)\n"
    "  --json         print the report as one JSON object instead\n"
    "policy (for CI; each failure 'FAIL policy-*'):\n"
    "  --min-prompts N       every probe and length compared with the original had at least N pairs\n"
    "  --require-gain        the verdict included the gain criterion (not --accept-no-gain) and found it\n"
    "  --require-runtime NAME  a runtime_check in NAME (llama.cpp, onnxruntime) with result 'equal'\n"
    "  --fidelity F          the certificate's patch.fidelity is F (exact = exact-weights,\n"
    "                        native-config, ctxpatch-metadata, graph)\n"
    "ARTIFACT may also be one file: a .gguf from 'patch --to gguf', or a .onnx graph 'patch IN.onnx\n"
    "OUT.onnx' rewrote (its certificate, digest, rule and fidelity from metadata_props).\n"
    "Exit status: 0 pass, 1 the artifact fails a check, 2 usage or unreadable input (also\n"
    "--rerun on a GGUF or ONNX artifact without a runtime folder: not supported).\n";

static int print_json(const char *path, const cp_check_report *r, bool rerun) {
  cJSON *o = cJSON_CreateObject(), *fails = NULL;
  if (!o) return cli_report(cp_nomem("check report"));
  cJSON_AddStringToObject(o, "artifact", path);
  cJSON_AddStringToObject(o, "format", r->format ? r->format : "");
  cJSON_AddStringToObject(o, "result", r->n_failures ? "fail" : "pass");
  cJSON_AddNumberToObject(o, "files", (double)r->n_files);
  cJSON_AddStringToObject(o, "certificate_sha256", r->certificate_sha256);
  if (rerun) {
    cJSON *rr = cJSON_AddObjectToObject(o, "rerun");
    cJSON_AddBoolToObject(rr, "done", r->reran);
    cJSON_AddNumberToObject(rr, "cells", r->rerun_cells);
    cJSON_AddBoolToObject(rr, "runtime", r->runtime_reran);
    if (r->runtime_reran && isfinite(r->runtime_max_diff))
      cJSON_AddNumberToObject(rr, "runtime_max_abs_logit_diff", r->runtime_max_diff);
    if (r->runtime_reran) cJSON_AddBoolToObject(rr, "runtime_same_prompts", !r->runtime_other_prompts);
  }
  fails = cJSON_AddArrayToObject(o, "failures");
  for (size_t i = 0; i < r->n_failures; i++) {
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "check", r->failures[i].kind);
    cJSON_AddStringToObject(f, "message", r->failures[i].message);
    cJSON_AddItemToArray(fails, f);
  }
  int status = cli_print_json(o);
  cJSON_Delete(o);
  return status != CLI_OK || r->n_failures ? CLI_FAIL : CLI_OK;
}

/* --json when the artifact cannot be judged (missing, unreadable, unsupported): still one JSON
 * document on stdout, so a CI step parsing it sees "error" rather than nothing. */
static void print_json_error(const char *path, int rc) {
  cJSON *o = cJSON_CreateObject(), *e = NULL;
  if (o) {
    cJSON_AddStringToObject(o, "artifact", path);
    cJSON_AddStringToObject(o, "result", "error");
    e = cJSON_AddObjectToObject(o, "error");
  }
  if (!e) {
    cJSON_Delete(o);
    return;
  }
  cJSON_AddStringToObject(e, "code", cp_err_name(rc));
  cJSON_AddStringToObject(e, "message", cp_error_message());
  (void)cli_print_json(o);
  cJSON_Delete(o);
}

static int print_text(const char *path, const cp_check_report *r, bool rerun) {
  for (size_t i = 0; i < r->n_failures; i++) printf("FAIL %s: %s\n", r->failures[i].kind, r->failures[i].message);
  if (r->n_failures) {
    cli_printf(stdout, "check: %s: %zu failure%s\n", path, r->n_failures, r->n_failures == 1 ? "" : "s");
    return CLI_FAIL;
  }
  cli_printf(stdout, "check: %s: pass (%s, %zu files, certificate sha256 %s", path, r->format, r->n_files,
             r->certificate_sha256);
  if (rerun && r->rerun_cells) printf(", re-run: %d cells equal", r->rerun_cells);
  if (rerun && r->runtime_reran)
    printf(", runtime re-run: equal, max |diff| %.3g%s", r->runtime_max_diff,
           r->runtime_other_prompts ? ", on other prompts than the certified ones (the file's tokenizer)" : "");
  printf(")\n");
  return CLI_OK;
}

int cmd_check(int argc, char **argv) {
  const char *path = NULL;
  bool json = false;
  const char *runtime_dir = NULL;
  unsigned long long threads = 0;
  cp_check_params p;
  cp_check_params_init(&p);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (cli_is_help(a)) {
      fputs(check_help, stdout);
      return CLI_OK;
    }
    if (!strcmp(a, "--rerun")) p.rerun = true;
    else if (!strcmp(a, "--json")) json = true;
    else if (!strcmp(a, "--require-gain")) p.require_gain = true;
    else if (!strcmp(a, "--min-prompts")) {
      unsigned long long n = 0;
      if (!v) return cli_usage_error("check", "%s needs a value", a);
      if (!cli_parse_u64_in("check", a, argv[++i], 1, 1000000, &n)) return CLI_USAGE;
      p.min_prompts = (int64_t)n;
    } else if (!strcmp(a, "--require-runtime")) {
      if (!v) return cli_usage_error("check", "%s needs a value", a);
      if (strcmp(v, "llama.cpp") && strcmp(v, "onnxruntime"))
        return cli_usage_error("check", "--require-runtime expects llama.cpp or onnxruntime, got '%s'", v);
      p.require_runtime = argv[++i];
    } else if (!strcmp(a, "--fidelity")) {
      static const char *const names[] = {"exact", "exact-weights", "native-config", "ctxpatch-metadata", "graph"};
      bool known = false;
      for (size_t k = 0; v && k < sizeof names / sizeof *names; k++) known |= !strcmp(v, names[k]);
      if (!known)
        return cli_usage_error("check",
                               "--fidelity expects exact, exact-weights, native-config, ctxpatch-metadata or "
                               "graph, got '%s'",
                               v ? v : "");
      p.fidelity = argv[++i];
    } else if (!strcmp(a, "--runtime-dir")) {
      if (!v) return cli_usage_error("check", "%s needs a value", a);
      runtime_dir = argv[++i];
    } else if (!strcmp(a, "--threads") || !strcmp(a, "--tolerance") || !strcmp(a, "--work-budget")) {
      if (!v) return cli_usage_error("check", "%s needs a value", a);
      i++;
      if (!strcmp(a, "--work-budget")) {
        unsigned long long u = 0;
        if (!cli_parse_u64_in("check", a, v, 1, UINT64_MAX, &u)) return CLI_USAGE;
        p.work_budget = u;
        continue;
      }
      if (!strcmp(a, "--threads")) {
        if (!cli_parse_u64_in("check", a, v, 1, 1024, &threads)) return CLI_USAGE;
        p.threads = (int)threads;
        continue;
      }
      char *end;
      p.tolerance = strtod(v, &end);
      if (*end || !(p.tolerance >= 0 && p.tolerance <= 1))
        return cli_usage_error("check", "--tolerance expects a number in [0, 1], got '%s'", v);
    } else if (a[0] == '-' && a[1]) return cli_usage_error("check", "unknown option '%s'", a);
    else if (path) return cli_usage_error("check", "unexpected argument '%s'", a);
    else path = a;
  }
  if (!path) return cli_usage_error("check", "missing ARTIFACT");
  if (runtime_dir && !p.rerun) return cli_usage_error("check", "--runtime-dir goes with --rerun");
  if (p.work_budget && !p.rerun) return cli_usage_error("check", "--work-budget goes with --rerun");
  cp_runtime_params rt;
  char rt_script[4096];
  cli_runtime_params(&rt, runtime_dir, rt_script);
  if (p.rerun) p.runtime = &rt;
  if (p.rerun && cli_progress_wanted()) p.progress = cli_progress_bar;
  cp_check_report r;
  int rc = cp_check_artifact(&r, path, &p), status;
  if (rc < 0) {
    status = CLI_USAGE; /* the artifact could not be judged at all */
    if (json) print_json_error(path, rc);
    cli_report(rc);
  } else status = json ? print_json(path, &r, p.rerun) : print_text(path, &r, p.rerun);
  cp_check_report_free(&r);
  return status;
}
