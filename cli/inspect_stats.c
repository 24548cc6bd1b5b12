/* ctxpatch inspect MODEL --attention-stats --lengths ...: P_max and entropy against length. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/engine/profile.h"
#include "ctxpatch/model/rule.h"

static const cp_attn_kind kinds[] = {CP_ATTN_ENCODER_SELF, CP_ATTN_DECODER_SELF, CP_ATTN_CROSS};

static void print_table(const cp_profile_point *pts, int n, int64_t train_len) {
  printf("%8s %7s", "length", "x train");
  for (size_t k = 0; k < 3; k++)
    if (!isnan(cp_profile_mean(&pts[0], kinds[k], 0)))
      printf("  %14s %-8s %-8s", cp_attn_kind_name(kinds[k]), "P_max", "entropy");
  printf("\n");
  for (int i = 0; i < n; i++) {
    char ratio[32] = "-";
    if (train_len > 0) snprintf(ratio, sizeof ratio, "%.2f", (double)pts[i].length / (double)train_len);
    printf("%8lld %7s", (long long)pts[i].length, ratio);
    for (size_t k = 0; k < 3; k++) {
      double pm = cp_profile_mean(&pts[i], kinds[k], 0);
      if (!isnan(pm)) printf("  %14s %-8.4f %-8.4f", "", pm, cp_profile_mean(&pts[i], kinds[k], 1));
    }
    printf("\n");
  }
}

static int print_json(const cp_profile_point *pts, int n, const char *path, int64_t train_len) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "model", path);
  if (train_len > 0) cJSON_AddNumberToObject(root, "train_len", (double)train_len);
  cJSON *arr = cJSON_AddArrayToObject(root, "lengths");
  for (int i = 0; i < n; i++) {
    cJSON *pt = cJSON_CreateObject();
    cJSON_AddNumberToObject(pt, "length", (double)pts[i].length);
    cJSON *mean = cJSON_AddObjectToObject(pt, "mean");
    for (size_t k = 0; k < 3; k++) {
      double pm = cp_profile_mean(&pts[i], kinds[k], 0);
      if (isnan(pm)) continue;
      cJSON *o = cJSON_AddObjectToObject(mean, cp_attn_kind_name(kinds[k]));
      cJSON_AddNumberToObject(o, "pmax", pm);
      cJSON_AddNumberToObject(o, "entropy", cp_profile_mean(&pts[i], kinds[k], 1));
    }
    cJSON *mods = cJSON_AddArrayToObject(pt, "modules");
    for (int m = 0; m < pts[i].n_modules; m++) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "kind", cp_attn_kind_name(pts[i].kind[m]));
      cJSON_AddNumberToObject(o, "layer", pts[i].layer[m]);
      cJSON_AddItemToObject(o, "pmax", cJSON_CreateFloatArray(pts[i].pmax + (size_t)m * pts[i].n_heads, pts[i].n_heads));
      cJSON_AddItemToObject(o, "entropy",
                            cJSON_CreateFloatArray(pts[i].entropy + (size_t)m * pts[i].n_heads, pts[i].n_heads));
      cJSON_AddItemToArray(mods, o);
    }
    cJSON_AddItemToArray(arr, pt);
  }
  cli_json_round(root, NULL);
  int status = cli_print_json(root);
  cJSON_Delete(root);
  return status;
}

int inspect_attention_stats(const char *path, const int64_t *lengths, int n_lengths, const char *rule_path,
                            const char *ids_text, unsigned long long seed, int threads, bool json) {
  cp_model *model = NULL;
  cp_rule rule;
  cp_rule_init(&rule);
  int64_t *ids = NULL, n_ids = 0;
  cp_profile_point *pts = calloc((size_t)n_lengths, sizeof *pts);
  int rc = pts ? 0 : cp_nomem("inspect --stats");
  if (rc == 0 && rule_path) rc = cp_rule_load(&rule, rule_path);
  if (rc == 0 && ids_text) rc = cli_parse_ids(&ids, &n_ids, "--ids", ids_text);
  if (rc == 0) rc = cp_model_open_stored(&model, path);
  if (rc == 0 && ids) rc = cp_model_check_ids(model, ids, n_ids, "--ids");
  if (rc == 0) {
    cp_profile_params pp;
    cp_profile_params_init(&pp);
    pp.ids = ids;
    pp.n_ids = n_ids;
    pp.seed = seed;
    pp.threads = threads;
    rc = cp_attention_profile(pts, model, rule_path ? &rule : NULL, lengths, n_lengths, &pp);
  }
  int status = CLI_OK;
  if (rc < 0) {
    status = cli_report(rc);
  } else {
    int64_t train_len = cp_model_config(model)->train_len;
    if (json) status = print_json(pts, n_lengths, path, train_len);
    else print_table(pts, n_lengths, train_len);
  }
  for (int i = 0; pts && i < n_lengths; i++) cp_profile_point_free(&pts[i]);
  free(pts);
  free(ids);
  cp_model_free(model);
  return status;
}
