/* The CPU engine against the PyTorch goldens of tests/goldens/engine (format:
 * tests/reference/GOLDEN_FORMAT.md): logits and attention statistics within
 * max|a - b| / max|b| <= 1e-4, greedy continuations exactly. Every case runs twice: on the model
 * widened to float32 (cp_model_open) and on its matrices as stored (cp_model_open_stored: the
 * BF16 llama_rope2 and F16 t5_gated weights widened tile by tile inside the products). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ctxpatch/engine/engine.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/model.h"
#include "model/rule_json.h"
#include "ctxpatch/formats/safetensors.h"
#include "test.h"

#define TOL 1e-4


/* Copies a tensor of the case file (data may be unaligned) into a new buffer. */
static void *take(const cp_st_file *f, const char *name, cp_dtype dtype, uint64_t *numel) {
  const cp_tensor *t = cp_st_find(f, name);
  if (!t || t->dtype != dtype) return NULL;
  *numel = t->nbytes / cp_dtype_size(dtype);
  void *p = malloc(t->nbytes ? t->nbytes : 1);
  if (p && t->nbytes) memcpy(p, t->data, t->nbytes);
  return p;
}

static int run_case(const char *dir, const cJSON *entry, cp_model **model, char *model_name, size_t model_name_size,
                    bool stored) {
  const cJSON *jfile = cJSON_GetObjectItem(entry, "file"), *jmodel = cJSON_GetObjectItem(entry, "model");
  const cJSON *jcase = cJSON_GetObjectItem(entry, "case"), *jrule = cJSON_GetObjectItem(entry, "rule");
  const cJSON *jkind = cJSON_GetObjectItem(entry, "kind");
  if (!cJSON_IsString(jfile) || !cJSON_IsString(jmodel) || !cJSON_IsString(jcase) || !cJSON_IsObject(jrule) ||
      !cJSON_IsString(jkind)) {
    CHECK_MSG(0, "malformed MANIFEST entry");
    return 1;
  }
  const char *label = jfile->valuestring;
  if (strcmp(model_name, jmodel->valuestring) != 0) {
    cp_model_free(*model);
    *model = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/models/%s", dir, jmodel->valuestring);
    CHECK_RC(0, stored ? cp_model_open_stored(model, path) : cp_model_open(model, path));
    snprintf(model_name, model_name_size, "%s", jmodel->valuestring);
    if (!*model) {
      model_name[0] = '\0';
      return 1;
    }
    /* the stored path is the one under test: the 16-bit models must not have been widened */
    cp_dtype want = !stored ? CP_F32 : !strcmp(model_name, "llama_rope2") ? CP_BF16
                                     : !strcmp(model_name, "t5_gated") ? CP_F16 : CP_F32;
    const cp_stack *st = &(*model)->decoder;
    CHECK_MSG(st->n_layers > 0 && st->layers[0].o.dtype == want && (*model)->embed_dtype == want,
              "%s (%s): o.dtype %s, embed %s, expected %s", model_name, stored ? "stored" : "f32",
              cp_dtype_name(st->layers[0].o.dtype), cp_dtype_name((*model)->embed_dtype), cp_dtype_name(want));
  }
  cp_rule rule;
  CHECK_RC(0, cp_rule_from_json(&rule, jrule, label));

  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, jfile->valuestring);
  cp_st_file *f = NULL;
  CHECK_RC(0, cp_st_open(&f, path));
  if (!f) return 1;
  uint64_t n_ids = 0, n_dec = 0, n;
  int64_t *ids = take(f, "input_ids", CP_I64, &n_ids);
  int64_t *dec = take(f, "decoder_input_ids", CP_I64, &n_dec);
  CHECK_MSG(ids != NULL, "%s: no input_ids", label);

  cp_engine_params params;
  cp_engine_params_init(&params);
  params.threads = 2;
  params.stats = true;
  cp_engine *eng = NULL;
  CHECK_RC(0, cp_engine_create(&eng, *model, &rule, &params));
  if (eng && ids && !strcmp(jkind->valuestring, "forward")) {
    uint64_t n_logits = 0, n_pm = 0, n_en = 0;
    float *want = take(f, "logits", CP_F32, &n_logits);
    float *want_pm = take(f, "stats_pmax", CP_F32, &n_pm);
    float *want_en = take(f, "stats_entropy", CP_F32, &n_en);
    int64_t rows = cp_engine_output_rows(eng, (int64_t)n_ids, (int64_t)n_dec);
    CHECK_MSG(want && n_logits == (uint64_t)rows * (*model)->vocab, "%s: logits shape", label);
    float *got = malloc((size_t)rows * (*model)->vocab * sizeof *got);
    CHECK_RC(0, cp_engine_forward(eng, got, ids, (int64_t)n_ids, dec, (int64_t)n_dec));
    if (want && n_logits == (uint64_t)rows * (*model)->vocab) {
      double e = test_rel_err(got, want, (size_t)n_logits);
      cp_engine_stats st;
      cp_engine_get_stats(&st, eng);
      size_t ns = (size_t)st.n_modules * st.n_heads;
      double ep = -1, ee = -1;
      CHECK_MSG(want_pm && want_en && n_pm == ns && n_en == ns, "%s: stats shape (%llu, want %zu)", label,
                (unsigned long long)n_pm, ns);
      if (want_pm && want_en && n_pm == ns && n_en == ns) {
        ep = test_rel_err(st.pmax, want_pm, ns);
        ee = test_rel_err(st.entropy, want_en, ns);
      }
      printf("%-48s logits %.2e  pmax %.2e  entropy %.2e\n", label, e, ep, ee);
      CHECK_MSG(e <= TOL, "%s: logits relative error %.3g", label, e);
      CHECK_MSG(ep >= 0 && ep <= TOL, "%s: pmax relative error %.3g", label, ep);
      CHECK_MSG(ee >= 0 && ee <= TOL, "%s: entropy relative error %.3g", label, ee);
    }
    free(got);
    free(want);
    free(want_pm);
    free(want_en);
  } else if (eng && ids) {
    int64_t *want = take(f, "generated", CP_I64, &n);
    CHECK_MSG(want != NULL, "%s: no generated ids", label);
    if (want) {
      int64_t *got = calloc(n + 1, sizeof *got), n_out = 0;
      CHECK_RC(0, cp_engine_generate(eng, got, &n_out, NULL, ids, (int64_t)n_ids, dec, (int64_t)n_dec, (int)n, false));
      bool same = n_out == (int64_t)n && memcmp(got, want, n * sizeof *got) == 0;
      printf("%-48s generated %s\n", label, same ? "equal" : "DIFFERENT");
      if (!same) {
        fprintf(stderr, "%s: got", label);
        for (int64_t i = 0; i < n_out; i++) fprintf(stderr, " %lld", (long long)got[i]);
        fprintf(stderr, ", want");
        for (uint64_t i = 0; i < n; i++) fprintf(stderr, " %lld", (long long)want[i]);
        fprintf(stderr, "\n");
      }
      CHECK_MSG(same, "%s: generated ids differ", label);
      free(got);
    }
    free(want);
  }
  cp_engine_free(eng);
  free(ids);
  free(dec);
  cp_st_free(f);
  return 0;
}

int main(void) {
  const char *src = test_env("CTXPATCH_SOURCE_DIR");
  char dir[2048], manifest[2200];
  snprintf(dir, sizeof dir, "%.1900s/tests/goldens/engine", src);
  snprintf(manifest, sizeof manifest, "%s/MANIFEST.json", dir);
  struct stat sb;
  if (stat(manifest, &sb) != 0) test_skip("tests/goldens/engine/MANIFEST.json is absent (run tests/reference/make_engine_goldens.py)");
  char *text = NULL;
  size_t len = 0;
  CHECK_RC(0, cp_read_file(&text, &len, manifest, (size_t)64 << 20));
  cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
  const cJSON *cases = cJSON_GetObjectItem(root, "cases");
  CHECK_MSG(cJSON_IsArray(cases) && cJSON_GetArraySize(cases) > 0, "MANIFEST has no cases");
  const cJSON *fv = cJSON_GetObjectItem(root, "format_version");
  CHECK_MSG(cJSON_IsNumber(fv) && fv->valueint == 1, "MANIFEST format_version is not 1");
  cp_model *model = NULL;
  char model_name[256] = "";
  int n_cases = 0;
  const cJSON *entry;
  for (int stored = 0; stored < 2; stored++) {
    cJSON_ArrayForEach(entry, cases) {
      run_case(dir, entry, &model, model_name, sizeof model_name, stored);
      n_cases++;
    }
    cp_model_free(model);
    model = NULL;
    model_name[0] = '\0';
  }
  printf("%d cases (each as float32 and as stored)\n", n_cases / 2);
  cJSON_Delete(root);
  free(text);
  return test_finish();
}
