/* ctxpatch forward: run the CPU reference engine on token ids; write logits (and statistics). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "base/json_strict.h"
#include "ctxpatch/engine/engine.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/model/rule.h"
#include "ctxpatch/formats/tensor.h"

static void help(FILE *out) {
  fprintf(out,
          "usage: ctxpatch forward MODEL --ids 3,17,5 [--decoder-ids 0,4] [--rule RULE.json]\n"
          "                        [--threads T] [--device cpu|cuda] [--out FILE] [--stats FILE.json]\n"
          "                        [--generate N [--stop-at-eos] [--step-logits FILE]] [--on-top]\n\n"
          "Runs the float32 CPU reference engine on MODEL (a checkpoint folder) under an attention\n"
          "rule (default: none) and writes the logits of every position of the last stack (the\n"
          "decoder for T5) to FILE as float32 little-endian, row-major [positions x vocab].\n\n"
          "  --ids LIST          prompt (decoder-only) or encoder input (T5), comma-separated;\n"
          "                      @FILE reads them from FILE (commas or whitespace)\n"
          "  --decoder-ids LIST  T5 decoder input (default: [decoder_start_token_id])\n"
          "  --rule FILE         attention rule JSON (../shared/spec/attention-rules.md)\n"
          "  --threads T         worker threads (default: every CPU)\n"
          "  --device cpu|cuda   where the engine runs (default cpu; cuda needs a -DCTXPATCH_CUDA=ON\n"
          "                      build and a device, else exit 2)\n"
          "  --out FILE          logits output (required unless --generate is given)\n"
          "  --stats FILE        attention statistics per module and head as JSON:\n"
          "                      {\"modules\":[{\"kind\",\"layer\",\"pmax\":[H],\"entropy\":[H]}]}\n"
          "  --generate N        also decode N tokens greedily with the KV cache and print them\n"
          "                      comma-separated on stdout\n"
          "  --stop-at-eos       stop generating after the model's eos token\n"
          "  --step-logits FILE  the logits each generated token was chosen from, [N x vocab] as --out\n"
          "                      (the prompt's last row, then one row per step through the cache)\n"
          "  --on-top            apply a --rule temperature although MODEL is an artifact whose\n"
          "                      weights already carry one (refused otherwise)\n\n"
          "Outputs are written atomically; on any error nothing is written.\n");
}

static int write_logits(const char *path, const float *x, size_t count) {
  cp_atomic_file *f = NULL;
  int rc = cp_atomic_open(&f, path);
  if (rc) return rc;
  /* Little-endian on disk: every supported host is little-endian (checked at compile time). */
  _Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "big-endian hosts are not supported");
  rc = cp_atomic_write(f, x, count * sizeof *x);
  if (rc) {
    cp_atomic_abort(f);
    return rc;
  }
  return cp_atomic_commit(f);
}

static int write_stats(const char *path, const cp_engine_stats *st) {
  cJSON *root = cJSON_CreateObject(), *mods = NULL;
  char *text = NULL;
  cp_atomic_file *f = NULL;
  int rc = 0;
  if (!root || !(mods = cJSON_AddArrayToObject(root, "modules"))) goto nomem;
  for (int i = 0; i < st->n_modules; i++) {
    cJSON *mo = cJSON_CreateObject();
    if (!mo) goto nomem;
    cJSON_AddItemToArray(mods, mo);
    cJSON *pm = cJSON_CreateArray(), *en = cJSON_CreateArray();
    if (!pm || !en || !cJSON_AddStringToObject(mo, "kind", cp_attn_kind_name(st->kind[i])) ||
        !cJSON_AddNumberToObject(mo, "layer", st->layer[i])) {
      cJSON_Delete(pm);
      cJSON_Delete(en);
      goto nomem;
    }
    cJSON_AddItemToObject(mo, "pmax", pm);
    cJSON_AddItemToObject(mo, "entropy", en);
    for (int h = 0; h < st->n_heads; h++) {
      cJSON *a = cJSON_CreateNumber(st->pmax[(size_t)i * st->n_heads + h]);
      cJSON *b = cJSON_CreateNumber(st->entropy[(size_t)i * st->n_heads + h]);
      if (!a || !b) {
        cJSON_Delete(a);
        cJSON_Delete(b);
        goto nomem;
      }
      cJSON_AddItemToArray(pm, a);
      cJSON_AddItemToArray(en, b);
    }
  }
  if (!(text = cp_json_print(root, false))) goto nomem;
  if ((rc = cp_atomic_open(&f, path))) goto done;
  if ((rc = cp_atomic_write(f, text, strlen(text))) || (rc = cp_atomic_write(f, "\n", 1))) {
    cp_atomic_abort(f);
    goto done;
  }
  rc = cp_atomic_commit(f);
  goto done;
nomem:
  rc = cp_nomem("%s", path);
done:
  free(text);
  cJSON_Delete(root);
  return rc;
}

int cmd_forward(int argc, char **argv) {
  const char *cmd = "forward";
  const char *model_path = NULL, *ids_text = NULL, *dec_text = NULL, *rule_path = NULL;
  const char *out_path = NULL, *stats_path = NULL, *steps_path = NULL;
  unsigned long long threads = 0, n_gen = 0;
  cp_device device = CP_DEVICE_CPU;
  char device_desc[512];
  bool generate = false, stop_at_eos = false, on_top = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (cli_is_help(a)) {
      help(stdout);
      return CLI_OK;
    }
    bool takes = !strcmp(a, "--ids") || !strcmp(a, "--decoder-ids") || !strcmp(a, "--rule") ||
                 !strcmp(a, "--threads") || !strcmp(a, "--out") || !strcmp(a, "--stats") ||
                 !strcmp(a, "--generate") || !strcmp(a, "--device") || !strcmp(a, "--step-logits");
    if (takes && i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", a);
    if (!strcmp(a, "--ids")) ids_text = argv[++i];
    else if (!strcmp(a, "--decoder-ids")) dec_text = argv[++i];
    else if (!strcmp(a, "--rule")) rule_path = argv[++i];
    else if (!strcmp(a, "--out")) out_path = argv[++i];
    else if (!strcmp(a, "--stats")) stats_path = argv[++i];
    else if (!strcmp(a, "--step-logits")) steps_path = argv[++i];
    else if (!strcmp(a, "--threads")) {
      if (!cli_parse_u64_in(cmd, a, argv[++i], 1, 1024, &threads)) return CLI_USAGE;
    } else if (!strcmp(a, "--device")) {
      if (!cli_parse_device(cmd, argv[++i], &device)) return CLI_USAGE;
    } else if (!strcmp(a, "--generate")) {
      if (!cli_parse_u64_in(cmd, a, argv[++i], 0, CLI_MAX_TOKENS, &n_gen)) return CLI_USAGE;
      generate = true;
    } else if (!strcmp(a, "--stop-at-eos")) stop_at_eos = true;
    else if (!strcmp(a, "--on-top")) on_top = true;
    else if (a[0] == '-' && a[1]) return cli_usage_error(cmd, "unknown option '%s'", a);
    else if (!model_path) model_path = a;
    else return cli_usage_error(cmd, "unexpected argument '%s'", a);
  }
  if (!model_path) return cli_usage_error(cmd, "missing MODEL");
  if (!ids_text) return cli_usage_error(cmd, "missing --ids");
  if (!out_path && !generate) return cli_usage_error(cmd, "missing --out (or --generate)");
  if (stats_path && !out_path) return cli_usage_error(cmd, "--stats needs --out");
  if (steps_path && !generate) return cli_usage_error(cmd, "--step-logits needs --generate");
  if (cli_device_ready(cmd, device, device_desc, sizeof device_desc) != CLI_OK) return CLI_USAGE;

  int64_t *ids = NULL, *dec = NULL, *gen = NULL, n_ids = 0, n_dec = 0, n_out = 0;
  float *logits = NULL, *steps = NULL;
  cp_model *model = NULL;
  cp_engine *eng = NULL;
  cp_rule rule;
  int rc;
  cp_rule_init(&rule);
  const char *ins[] = {model_path, rule_path, ids_text[0] == '@' ? ids_text + 1 : NULL,
                       dec_text && dec_text[0] == '@' ? dec_text + 1 : NULL};
  const char *outs[] = {out_path, stats_path, steps_path};
  if ((rc = cli_check_outputs(ins, 4, outs, 3, false))) goto done;
  if ((rc = cli_parse_ids(&ids, &n_ids, "--ids", ids_text))) goto done;
  if (dec_text && (rc = cli_parse_ids(&dec, &n_dec, "--decoder-ids", dec_text))) goto done;
  if (rule_path && (rc = cp_rule_load(&rule, rule_path))) goto done;
  if ((rc = cp_model_open_stored(&model, model_path)) || (rc = cp_model_check_rule_on_top(model, &rule, on_top))) goto done;
  /* Every file the model was read from is known now (a graph's data file, its config). */
  if ((rc = cli_check_outputs(ins, 4, outs, 3, false))) goto done;
  /* Check ids before any work so that bad input writes nothing. */
  if ((rc = cp_model_check_ids(model, ids, n_ids, "--ids"))) goto done;
  if (dec && (rc = cp_model_check_ids(model, dec, n_dec, "--decoder-ids"))) goto done;
  cp_engine_params params;
  cp_engine_params_init(&params);
  params.threads = (int)threads;
  params.device = device;
  params.stats = stats_path != NULL;
  if ((rc = cp_engine_create(&eng, model, &rule, &params))) goto done;
  if (out_path) {
    int64_t rows = cp_engine_output_rows(eng, n_ids, n_dec);
    uint64_t count;
    if (!cp_mul_u64(&count, (uint64_t)rows, (uint64_t)model->vocab) || count > SIZE_MAX / sizeof(float)) {
      rc = cp_error_set(CP_EOVERFLOW, "logits of %lld rows are too large", (long long)rows);
      goto done;
    }
    if (!(logits = malloc((size_t)count * sizeof *logits))) {
      rc = cp_nomem("%llu logits", (unsigned long long)count);
      goto done;
    }
    if ((rc = cp_engine_forward(eng, logits, ids, n_ids, dec, n_dec))) goto done;
  }
  if (generate) {
    CP_CHECK_ALLOC_GOTO(gen = malloc((n_gen ? n_gen : 1) * sizeof *gen), "generated ids");
    uint64_t count;
    if (steps_path && (!cp_mul_u64(&count, n_gen ? n_gen : 1, (uint64_t)model->vocab) || count > SIZE_MAX / sizeof(float) ||
                       !(steps = malloc((size_t)count * sizeof *steps)))) {
      rc = cp_nomem("the logits of %llu steps", n_gen);
      goto done;
    }
    if ((rc = cp_engine_generate(eng, gen, &n_out, steps, ids, n_ids, dec, n_dec, (int)n_gen, stop_at_eos))) goto done;
  }
  if (out_path) {
    cp_engine_stats st;
    cp_engine_get_stats(&st, eng);
    if ((rc = write_logits(out_path, logits, (size_t)cp_engine_output_rows(eng, n_ids, n_dec) * model->vocab)))
      goto done;
    if (stats_path && (rc = write_stats(stats_path, &st))) goto done;
  }
  if (steps_path && (rc = write_logits(steps_path, steps, (size_t)n_out * model->vocab))) goto done;
  if (generate) {
    for (int64_t i = 0; i < n_out; i++) printf("%s%lld", i ? "," : "", (long long)gen[i]);
    printf("\n");
  }
done:
  cp_engine_free(eng);
  cp_model_free(model);
  free(ids);
  free(dec);
  free(gen);
  free(logits);
  free(steps);
  return rc ? cli_report(rc) : CLI_OK;
}
