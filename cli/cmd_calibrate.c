/* ctxpatch calibrate: softmax temperature per length (include/ctxpatch/patchers/calibrate.h). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "ctxpatch/patchers/calibrate.h"
#include "patchers/calibrate_json.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/import/gguf_model.h"
#include "ctxpatch/tokenizers/tokenizer.h"

static void help(FILE *out) {
  fprintf(out,
          "usage: ctxpatch calibrate MODEL --method pmax|entropy|log|prop1|prop2|all[,...]\n"
          "                          --lengths 1024,2048,... [--train-len N] [--per-layer]\n"
          "                          [--grid 1.0:0.5:0.05] [--refine] [--samples K]\n"
          "                          [--inputs random|probe] [--tokenizer PATH] [--seed S]\n"
          "                          [--threads T] [--device cpu|cuda] [--work-budget N] [--json]\n"
          "                          [--schedule [--out RULE.json] [--no-train-point]]\n\n"
          "Finds the softmax temperature tau for each length (the T5 seed's Algorithm 1 and its\n"
          "closed forms; docs/calibration.md). The softmaxes in scope are T5's encoder\n"
          "self-attention and every self-attention layer of a decoder-only model.\n\n"
          "  --method M        pmax: match the mean P_max at the length under tau to its value at\n"
          "                    the training length with tau = 1; entropy: the same with entropy;\n"
          "                    log: log(L_tr)/log(L_ex); prop1, prop2: the closed forms of\n"
          "                    Propositions 1 and 2 from layer-0 logit statistics; all: every one.\n"
          "                    A comma-separated list runs several.\n"
          "  --lengths LIST    target lengths, each longer than the training length\n"
          "  --train-len N     training length (default: the model's config)\n"
          "  --per-layer       pmax/entropy: one tau per layer, aligned bottom-up\n"
          "  --grid HI:LO:STEP grid searched from HI down to LO (default 1.0:0.5:0.05)\n"
          "  --refine          bisect between the grid points bracketing the target to 1e-4\n"
          "  --samples K       sequences per length (default 4)\n"
          "  --inputs KIND     random ids, or passkey probe prompts (default: probe when the model\n"
          "                    folder or --tokenizer has a tokenizer, else random)\n"
          "  --tokenizer PATH  tokenizer for probe inputs (default: the model folder's)\n"
          "  --seed S          input seed (default 0)\n"
          "  --threads T       engine threads (default: every CPU)\n"
          "  --work-budget N   the most work the calibration may plan, in attention pairs (default\n"
          "                    1e10, docs/reliability.md); a plan over it is refused before it runs\n"
          "  --device cpu|cuda where the engine runs (default cpu; cuda needs a -DCTXPATCH_CUDA=ON build\n"
          "                    and a device, else exit 2)\n"
          "  --json            print the table as one JSON document on stdout (taus exact, measured\n"
          "                    statistics to 6 significant digits)\n"
          "  --schedule        also make a temperature_schedule rule of the one --method's taus at\n"
          "                    --lengths, with [train length, 1] as its first point (inputs up to\n"
          "                    the training length keep tau 1); printed, or written to --out\n"
          "  --out FILE        write the schedule rule there (atomically; needs --schedule)\n"
          "  --no-train-point  leave the [train length, 1] point out of the schedule: tau(T) is then\n"
          "                    the shortest length's tau for every T up to it\n");
}

static int parse_methods(cp_cal_method *out, int *n, const char *text) {
  *n = 0;
  char buf[256];
  if (strlen(text) >= sizeof buf) return -1;
  strcpy(buf, text);
  bool seen[CP_CAL_METHOD_COUNT] = {false};
  for (char *tok = buf, *next; tok; tok = next) { /* empty entries ("pmax,,log") are refused */
    if ((next = strchr(tok, ','))) *next++ = '\0';
    if (!strcmp(tok, "all")) {
      for (int m = 0; m < CP_CAL_METHOD_COUNT; m++) seen[m] = true;
      continue;
    }
    cp_cal_method m;
    if (cp_cal_method_from_name(&m, tok)) return -1;
    seen[m] = true;
  }
  for (int m = 0; m < CP_CAL_METHOD_COUNT; m++)
    if (seen[m]) out[(*n)++] = (cp_cal_method)m;
  return *n > 0 ? 0 : -1;
}

static bool parse_grid(const char *text, double *hi, double *lo, double *step) {
  char *end = NULL;
  errno = 0;
  *hi = strtod(text, &end);
  if (errno || end == text || *end != ':') return false;
  const char *p = end + 1;
  *lo = strtod(p, &end);
  if (errno || end == p || *end != ':') return false;
  p = end + 1;
  *step = strtod(p, &end);
  if (errno || end == p || *end) return false;
  return isfinite(*hi) && isfinite(*lo) && isfinite(*step) && *lo > 0 && *hi >= *lo && *step > 0;
}

static void print_tau(double tau) {
  if (isnan(tau)) printf("  %8s", "n/a");
  else printf("  %8.4f", tau);
}

static void print_text(const cp_calib_table *t, const char *model_path) {
  cli_printf(stdout, "model %s: scope %s (%d layers), L_tr = %lld, %s inputs x %d, grid %g:%g:%g%s%s\n", model_path, t->scope,
         t->n_layers, (long long)t->train_len, t->inputs == CP_CAL_INPUTS_PROBE ? "probe" : "random", t->samples,
         t->grid_hi, t->grid_lo, t->grid_step, t->refine ? ", refined" : "", t->per_layer ? ", per layer" : "");
  /* Tables 9-12 of the seed: methods down, lengths across. */
  printf("\n%-12s", "tau \\ length");
  for (int i = 0; i < t->n_lengths; i++) printf("  %8lld", (long long)t->lengths[i]);
  printf("\n");
  for (int k = 0; k < t->n_methods; k++) {
    const cp_calib_entry *row = &t->entries[k * t->n_lengths];
    if (row->n_layer_tau > 0) { /* per-layer: one row per layer */
      for (int l = 0; l < row->n_layer_tau; l++) {
        char label[32];
        snprintf(label, sizeof label, "%s[%d]", cp_cal_method_name(t->methods[k]), l);
        printf("%-12s", label);
        for (int i = 0; i < t->n_lengths; i++) print_tau(row[i].layer_tau[l]);
        printf("\n");
      }
      continue;
    }
    printf("%-12s", cp_cal_method_name(t->methods[k]));
    for (int i = 0; i < t->n_lengths; i++) print_tau(row[i].tau);
    printf("\n");
  }
  bool measured = false;
  for (int k = 0; k < t->n_methods; k++) measured |= t->methods[k] == CP_CAL_PMAX || t->methods[k] == CP_CAL_ENTROPY;
  if (measured) {
    printf("\n%-8s  %8s  %-22s  %10s  %10s  %10s\n", "method", "length", "tau", "target", "at tau=1", "achieved");
    for (int k = 0; k < t->n_methods; k++) {
      if (t->methods[k] != CP_CAL_PMAX && t->methods[k] != CP_CAL_ENTROPY) continue;
      for (int i = 0; i < t->n_lengths; i++) {
        const cp_calib_entry *e = &t->entries[k * t->n_lengths + i];
        char taus[23] = "";
        if (e->n_layer_tau > 0) {
          size_t o = 0;
          for (int l = 0; l < e->n_layer_tau && o < sizeof taus; l++)
            o += (size_t)snprintf(taus + o, sizeof taus - o, "%s%.4g", l ? "," : "", e->layer_tau[l]);
          if (o >= sizeof taus) strcpy(taus + sizeof taus - 4, "...");
        } else {
          snprintf(taus, sizeof taus, "%.4f", e->tau);
        }
        printf("%-8s  %8lld  %-22s  %10.6f  %10.6f  %10.6f%s\n", cp_cal_method_name(e->method), (long long)e->length,
               taus, e->target, e->at_one, e->achieved, e->clipped ? "  (clipped: target outside the grid)" : "");
        if (e->n_layer_tau > 0 && strstr(taus, "...")) {
          printf("          layer taus:");
          for (int l = 0; l < e->n_layer_tau; l++) printf(" %.4g", e->layer_tau[l]);
          printf("\n");
        }
      }
    }
  }
  if (t->sigma_ex) {
    printf("\nlayer 0: P_max(L_tr) = %.6f, sigma(L_tr) = %.6f; sigma(L_ex):", t->pmax_tr0, t->sigma_tr);
    for (int i = 0; i < t->n_lengths; i++) printf(" %.6f", t->sigma_ex[i]);
    printf("\n");
  }
  for (int k = 0; k < t->n_methods * t->n_lengths; k++) {
    const cp_calib_entry *e = &t->entries[k];
    if (e->method == CP_CAL_PROP1 && !isnan(e->tau) && e->tau > 1 && !isnan(e->other_root))
      printf("note: prop1 at %lld: the larger root (the paper's choice) is %.4f; the smaller is %.4f\n",
             (long long)e->length, e->tau, e->other_root);
    else if (e->note && isnan(e->tau) && e->n_layer_tau == 0)
      printf("note: %s at %lld: %s\n", cp_cal_method_name(e->method), (long long)e->length, e->note);
  }
  printf("\n%lld forward passes, %.1f s\n", (long long)t->forwards, t->seconds);
}

/* The schedule rule of `method` as canonical JSON text (*out, owned), written to out_path
 * (atomically, with a newline) unless NULL. */
static int schedule_text(char **out, const cp_calib_table *t, cp_cal_method method, bool train_point,
                         const char *out_path) {
  cp_rule rule;
  int rc = cp_calib_schedule_rule(&rule, t, method, train_point);
  if (rc) return rc;
  CP_CHECK_ALLOC(*out = cp_rule_to_string(&rule), "calibrate: schedule");
  if (!out_path) return 0;
  size_t n = strlen(*out);
  char *line = malloc(n + 2);
  CP_CHECK_ALLOC(line, "calibrate: schedule file");
  memcpy(line, *out, n);
  memcpy(line + n, "\n", 2);
  char sha[65];
  rc = cp_write_file_atomic(sha, out_path, line, n + 1);
  free(line);
  return rc;
}

int cmd_calibrate(int argc, char **argv) {
  const char *cmd = "calibrate";
  const char *model_path = NULL, *methods_text = NULL, *lengths_text = NULL, *grid_text = NULL;
  const char *inputs_text = NULL, *tok_path = NULL, *out_path = NULL;
  unsigned long long train_len = 0, samples = 4, seed = 0, threads = 0, work_budget = 0;
  cp_device device = CP_DEVICE_CPU;
  char device_desc[512];
  bool per_layer = false, refine = false, json = false, schedule = false, train_point = true;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (cli_is_help(a)) {
      help(stdout);
      return CLI_OK;
    }
    bool takes = !strcmp(a, "--method") || !strcmp(a, "--lengths") || !strcmp(a, "--train-len") ||
                 !strcmp(a, "--grid") || !strcmp(a, "--samples") || !strcmp(a, "--inputs") ||
                 !strcmp(a, "--tokenizer") || !strcmp(a, "--seed") || !strcmp(a, "--threads") ||
                 !strcmp(a, "--out") || !strcmp(a, "--device") || !strcmp(a, "--work-budget");
    if (takes && i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", a);
    if (!strcmp(a, "--method")) methods_text = argv[++i];
    else if (!strcmp(a, "--lengths")) lengths_text = argv[++i];
    else if (!strcmp(a, "--grid")) grid_text = argv[++i];
    else if (!strcmp(a, "--inputs")) inputs_text = argv[++i];
    else if (!strcmp(a, "--tokenizer")) tok_path = argv[++i];
    else if (!strcmp(a, "--out")) out_path = argv[++i];
    else if (!strcmp(a, "--train-len")) {
      /* below CLI_MAX_TOKENS: every length must be longer */
      if (!cli_parse_u64_in(cmd, a, argv[++i], 2, CLI_MAX_TOKENS - 1, &train_len)) return CLI_USAGE;
    } else if (!strcmp(a, "--samples")) {
      if (!cli_parse_u64_in(cmd, a, argv[++i], 1, 1000, &samples)) return CLI_USAGE;
    } else if (!strcmp(a, "--seed")) {
      if (!cli_parse_u64(cmd, a, argv[++i], &seed)) return CLI_USAGE;
    } else if (!strcmp(a, "--threads")) {
      if (!cli_parse_u64_in(cmd, a, argv[++i], 1, 1024, &threads)) return CLI_USAGE;
    } else if (!strcmp(a, "--work-budget")) {
      if (!cli_parse_u64_in(cmd, a, argv[++i], 1, UINT64_MAX, &work_budget)) return CLI_USAGE;
    } else if (!strcmp(a, "--device")) {
      if (!cli_parse_device(cmd, argv[++i], &device)) return CLI_USAGE;
    } else if (!strcmp(a, "--per-layer")) per_layer = true;
    else if (!strcmp(a, "--refine")) refine = true;
    else if (!strcmp(a, "--json")) json = true;
    else if (!strcmp(a, "--schedule")) schedule = true;
    else if (!strcmp(a, "--no-train-point")) train_point = false;
    else if (a[0] == '-' && a[1]) return cli_usage_error(cmd, "unknown option '%s'", a);
    else if (!model_path) model_path = a;
    else return cli_usage_error(cmd, "unexpected argument '%s'", a);
  }
  if (!model_path) return cli_usage_error(cmd, "missing MODEL");
  if (!methods_text) return cli_usage_error(cmd, "missing --method");
  if (!lengths_text) return cli_usage_error(cmd, "missing --lengths");
  if ((out_path || !train_point) && !schedule) return cli_usage_error(cmd, "--out and --no-train-point need --schedule");
  if (cli_device_ready(cmd, device, device_desc, sizeof device_desc) != CLI_OK) return CLI_USAGE;

  cp_cal_method methods[CP_CAL_METHOD_COUNT];
  int n_methods = 0;
  if (parse_methods(methods, &n_methods, methods_text))
    return cli_usage_error(cmd, "--method expects pmax, entropy, log, prop1, prop2 or all (comma-separated); got '%s'",
                           methods_text);
  if (schedule && n_methods != 1)
    return cli_usage_error(cmd, "--schedule needs exactly one --method (a schedule holds one tau per length)");
  cp_calib_params p;
  cp_calib_params_init(&p);
  if (grid_text && !parse_grid(grid_text, &p.grid_hi, &p.grid_lo, &p.grid_step))
    return cli_usage_error(cmd, "--grid expects HI:LO:STEP with HI >= LO > 0 and STEP > 0, like 1.0:0.5:0.05; got '%s'",
                           grid_text);
  if (inputs_text) {
    if (!strcmp(inputs_text, "random")) p.inputs = CP_CAL_INPUTS_RANDOM;
    else if (!strcmp(inputs_text, "probe")) p.inputs = CP_CAL_INPUTS_PROBE;
    else return cli_usage_error(cmd, "--inputs expects random or probe; got '%s'", inputs_text);
  }
  int64_t *lengths = NULL;
  int n_lengths = 0;
  if (!cli_parse_lengths(cmd, lengths_text, &lengths, &n_lengths)) return CLI_USAGE;
  for (int i = 0; train_len && i < n_lengths; i++)
    if ((unsigned long long)lengths[i] <= train_len) {
      long long bad = (long long)lengths[i];
      free(lengths);
      return cli_usage_error(cmd, "length %lld is not longer than --train-len %llu", bad, train_len);
    }
  p.train_len = (int64_t)train_len;
  p.per_layer = per_layer;
  p.refine = refine;
  p.samples = (int)samples;
  p.seed = seed;
  p.threads = (int)threads;
  p.device = device;
  p.work_budget = work_budget;

  cp_model *model = NULL;
  cp_tokenizer *tok = NULL;
  cp_calib_table t = {0};
  cJSON *j = NULL;
  char *rule_text = NULL;
  int rc = 0, status = CLI_OK;
  if (out_path && (rc = cli_check_outputs((const char *const[]){model_path, tok_path}, 2, &out_path, 1, false)))
    goto done;
  if ((rc = cp_model_open_stored(&model, model_path))) goto done;
  /* The calibration's reference length (p.train_len) is the option itself; the model's own is
   * restated too, except on learned positions, whose table length is a shape that calibrating at a
   * shorter reference does not change. */
  if (train_len && !model->pos_embed &&
      (rc = cp_model_set_train_len(model, (int64_t)train_len, CP_TRAIN_LEN_OPTION)))
    goto done;
  if (p.inputs != CP_CAL_INPUTS_RANDOM) {
    rc = cp_model_tokenizer_open(&tok, tok_path ? tok_path : model_path);
    if (rc == CP_ETOK_MISSING && !tok_path && p.inputs == CP_CAL_INPUTS_AUTO) rc = 0; /* random ids */
    else if (rc) goto done;
    p.tokenizer = tok;
  }
  /* Every file the model and tokenizer were read from is known now. */
  if (out_path && (rc = cli_check_outputs((const char *const[]){model_path, tok_path}, 2, &out_path, 1, false)))
    goto done;
  if (cli_progress_wanted()) p.progress = cli_progress_note;
  rc = cp_calibrate(&t, model, methods, n_methods, lengths, n_lengths, &p);
  if (p.progress) cli_progress_note(NULL, NULL);
  if (rc) goto done;
  if (schedule && (rc = schedule_text(&rule_text, &t, methods[0], train_point, out_path))) goto done;
  if (json) {
    const char *tl_src = cp_model_config(model)->train_len_key;
    if (!(j = cp_calib_table_to_json(&t)) || !cJSON_AddStringToObject(j, "model", model_path) ||
        (*tl_src && !cJSON_AddStringToObject(j, "train_len_source", tl_src)) ||
        (rule_text && !cJSON_AddItemToObject(j, "schedule_rule", cJSON_Parse(rule_text)))) {
      rc = cp_nomem("calibrate: the JSON output");
      goto done;
    }
    /* Measured statistics at a readable precision; taus exact (they go into rules). */
    static const char *const taus[] = {"tau", "layer_tau", "other_root", NULL};
    cli_json_round(j, taus);
    status = cli_print_json(j);
  } else {
    print_text(&t, model_path);
    if (rule_text) printf("\nschedule (%s): %s\n", cp_cal_method_name(methods[0]), rule_text);
  }
  if (out_path) cli_printf(stderr, "wrote %s\n", out_path);
done:
  free(rule_text);
  cJSON_Delete(j);
  cp_calib_table_free(&t);
  cp_tokenizer_free(tok);
  cp_model_free(model);
  free(lengths);
  return rc ? cli_report(rc) : status;
}
