/* The JSON form of a calibration table (patchers/calibrate_json.h): what `calibrate --json`
 * prints and `patch` stores in its metadata. */
#include "patchers/calibrate_json.h"

#include <math.h>

static cJSON *num_or_null(double v) { return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(); }

cJSON *cp_calib_table_to_json(const cp_calib_table *t) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddNumberToObject(o, "train_len", (double)t->train_len);
  cJSON_AddStringToObject(o, "scope", t->scope ? t->scope : "");
  cJSON_AddNumberToObject(o, "layers", t->n_layers);
  cJSON_AddStringToObject(o, "inputs", t->inputs == CP_CAL_INPUTS_PROBE ? "probe" : "random");
  cJSON_AddNumberToObject(o, "samples", t->samples);
  cJSON *grid = cJSON_AddArrayToObject(o, "grid");
  if (grid) {
    cJSON_AddItemToArray(grid, cJSON_CreateNumber(t->grid_hi));
    cJSON_AddItemToArray(grid, cJSON_CreateNumber(t->grid_lo));
    cJSON_AddItemToArray(grid, cJSON_CreateNumber(t->grid_step));
  }
  cJSON_AddBoolToObject(o, "refine", t->refine);
  cJSON_AddBoolToObject(o, "per_layer", t->per_layer);
  if (t->sigma_ex) {
    cJSON *l0 = cJSON_AddObjectToObject(o, "layer0");
    if (l0) {
      cJSON_AddItemToObject(l0, "pmax_tr", num_or_null(t->pmax_tr0));
      cJSON_AddItemToObject(l0, "sigma_tr", num_or_null(t->sigma_tr));
      cJSON *se = cJSON_AddArrayToObject(l0, "sigma_ex");
      for (int i = 0; se && i < t->n_lengths; i++) cJSON_AddItemToArray(se, num_or_null(t->sigma_ex[i]));
    }
  }
  cJSON *arr = cJSON_AddArrayToObject(o, "entries");
  for (int i = 0; arr && i < t->n_methods * t->n_lengths; i++) {
    const cp_calib_entry *en = &t->entries[i];
    cJSON *e = cJSON_CreateObject();
    if (!e) break;
    cJSON_AddStringToObject(e, "method", cp_cal_method_name(en->method));
    cJSON_AddNumberToObject(e, "length", (double)en->length);
    cJSON_AddItemToObject(e, "tau", num_or_null(en->tau));
    if (en->n_layer_tau > 0) {
      cJSON *lt = cJSON_AddArrayToObject(e, "layer_tau");
      for (int l = 0; lt && l < en->n_layer_tau; l++) cJSON_AddItemToArray(lt, num_or_null(en->layer_tau[l]));
    }
    if (en->method == CP_CAL_PMAX || en->method == CP_CAL_ENTROPY) {
      cJSON_AddItemToObject(e, "target", num_or_null(en->target));
      cJSON_AddItemToObject(e, "at_tau_1", num_or_null(en->at_one));
      cJSON_AddItemToObject(e, "achieved", num_or_null(en->achieved));
      cJSON_AddBoolToObject(e, "clipped", en->clipped);
    }
    if (en->method == CP_CAL_PROP1) cJSON_AddItemToObject(e, "other_root", num_or_null(en->other_root));
    if (en->note) cJSON_AddStringToObject(e, "note", en->note);
    cJSON_AddItemToArray(arr, e);
  }
  cJSON_AddNumberToObject(o, "forwards", (double)t->forwards);
  return o;
}
