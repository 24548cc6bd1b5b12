/* `ctxpatch check` and the certificate's runtime_check (docs/certificate.md, "Runtime check"): its
 * shape and consistency (a runtime that differs fails; the tolerance is the one its weights get;
 * a GGUF's comparison was made on this file's content), and with --rerun and a runtime folder the
 * comparison made again on the artifact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/formats/gguf.h"
#include "ctxpatch/formats/onnx_digest.h"
#include "ctxpatch/import/gguf_model.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/tokenizers/tokenizer.h"
#include "verify/check_int.h"
#include "verify/runtime_check.h"

#define WHERE "certificate.json: runtime_check"

static const char *str_of(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool int_at_least(const cJSON *o, const char *key, double lo) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) && v->valuedouble >= lo && v->valuedouble <= 1e9 && v->valuedouble == floor(v->valuedouble);
}

static bool is_hex64(const char *h) {
  if (!h || strlen(h) != 64) return false;
  for (int i = 0; i < 64; i++)
    if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f'))) return false;
  return true;
}

/* The GGUF's own ctxpatch.content_sha256 ("" when none). */
static void file_content(char hex[65], const char *path) {
  cp_gguf_file *g = NULL;
  const char *v = NULL;
  size_t len = 0;
  hex[0] = '\0';
  if (cp_gguf_open(&g, path) == 0 && cp_gguf_find_key(g, "ctxpatch.content_sha256") >= 0 &&
      cp_gguf_get_str(&v, &len, g, "ctxpatch.content_sha256") == 0 && len == 64) {
    memcpy(hex, v, 64);
    hex[64] = '\0';
  }
  cp_error_clear();
  cp_gguf_free(g);
}

/* A measured comparison ("equal" or "differs"): its fields and whether they agree with each other. */
static int measured(check_ctx *c, const cJSON *rc, const char *result, cp_runtime_kind kind) {
  cp_check_report *r = c->report;
  const char *weights = str_of(rc, "weights"), *sha = str_of(rc, "prompts_sha256");
  const cJSON *tol = cJSON_GetObjectItemCaseSensitive(rc, "tolerance");
  const cJSON *diff = cJSON_GetObjectItemCaseSensitive(rc, "max_abs_logit_diff");
  if (!str_of(rc, "version") || !weights || !is_hex64(sha) || !int_at_least(rc, "prompts", 1) ||
      !int_at_least(rc, "positions", 1) || !cJSON_IsNumber(tol) || !(cJSON_IsNumber(diff) || cJSON_IsNull(diff)))
    return check_fail(r, "cert-schema",
                      WHERE
                      ": version, weights, prompts, positions, prompts_sha256, tolerance and "
                      "max_abs_logit_diff expected");
  if (tol->valuedouble != cp_runtime_tolerance(weights))
    return check_fail(r, "cert-schema", WHERE ": tolerance %g is not the %g of %s weights", tol->valuedouble,
                      cp_runtime_tolerance(weights), weights);
  bool within = cJSON_IsNumber(diff) && diff->valuedouble >= 0 && diff->valuedouble <= tol->valuedouble;
  if (within != !strcmp(result, "equal"))
    return check_fail(r, "cert-schema", WHERE ": result '%s' disagrees with max_abs_logit_diff against tolerance %g",
                      result, tol->valuedouble);
  if (!within)
    return check_fail(r, "runtime-differs",
                      WHERE
                      ": %s computes other logits than the certified engine (%s): the "
                      "artifact runs something other than what was certified",
                      cp_runtime_name(kind), str_of(rc, "statement") ? str_of(rc, "statement") : "differs");
  if (kind == CP_RUNTIME_LLAMACPP) {
    const char *want = str_of(rc, "content_sha256");
    char have[65];
    file_content(have, c->path);
    if (!is_hex64(want) || strcmp(want, have) != 0)
      return check_fail(r, "runtime-content",
                        WHERE
                        ": content_sha256 %.12s... is not this file's ctxpatch.content_sha256 "
                        "%.12s...: the comparison was made on other weights",
                        want ? want : "(none)", have[0] ? have : "(none)");
  }
  return 0;
}

/* Shape and consistency; *kind and *result for the re-run. Absent: 0 and *result NULL. */
static int block(check_ctx *c, const cJSON *rc, cp_runtime_kind *kind, const char **result) {
  cp_check_report *r = c->report;
  *result = NULL;
  if (!rc) return 0;
  const char *name = str_of(rc, "runtime"), *res = str_of(rc, "result");
  if (!cJSON_IsObject(rc) || !name || !res || !str_of(rc, "statement"))
    return check_fail(r, "cert-schema", WHERE ": an object with runtime, result and statement expected");
  if (cp_runtime_from_name(kind, name) < 0) {
    cp_error_clear();
    return check_fail(r, "cert-schema", WHERE ".runtime: '%s' is not llama.cpp or onnxruntime", name);
  }
  const char *fmt = *kind == CP_RUNTIME_LLAMACPP ? "gguf" : "onnx";
  if (r->format && strcmp(r->format, fmt) != 0)
    return check_fail(r, "cert-schema", WHERE ".runtime: %s does not run %s artifacts", name, r->format);
  if (!strcmp(res, "not checked")) {
    *result = res;
    if (strcmp(str_of(rc, "statement"), CP_RUNTIME_NOT_CHECKED) != 0)
      return check_fail(r, "cert-schema", WHERE ".statement: a check not made must say '" CP_RUNTIME_NOT_CHECKED "'");
    return 0;
  }
  if (strcmp(res, "equal") != 0 && strcmp(res, "differs") != 0)
    return check_fail(r, "cert-schema", WHERE ".result: '%s' is not equal, differs or not checked", res);
  *result = res;
  return measured(c, rc, res, *kind);
}

/* The probes the comparison used, from the certificate (its schema already checked). */
static int prompts_of(cp_runtime_prompts *pr, cp_probe_kind probes[CP_PROBE_COUNT], int64_t **lengths,
                      const cJSON *cert, const cp_check_params *p) {
  const cJSON *pb = cJSON_GetObjectItemCaseSensitive(cert, "probes"), *v;
  const cJSON *names = cJSON_GetObjectItemCaseSensitive(pb, "names"),
              *ls = cJSON_GetObjectItemCaseSensitive(pb, "lengths");
  int nl = cJSON_GetArraySize(ls), np = 0;
  memset(pr, 0, sizeof *pr);
  cJSON_ArrayForEach(v, names) {
    if (np == CP_PROBE_COUNT) break;
    int rc = cp_probe_from_name(&probes[np], v->valuestring);
    if (rc < 0) return rc;
    np++;
  }
  CP_CHECK_ALLOC(*lengths = calloc((size_t)nl + 1, sizeof **lengths), "certificate.json");
  int i = 0;
  cJSON_ArrayForEach(v, ls)(*lengths)[i++] = (int64_t)v->valuedouble;
  pr->probes = probes, pr->n_probes = np, pr->lengths = *lengths, pr->n_lengths = nl;
  pr->seed = (uint64_t)cJSON_GetObjectItemCaseSensitive(pb, "seed")->valuedouble;
  pr->threads = p->threads > 0
                    ? p->threads
                    : (int)cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cert, "run"), "threads")
                          ->valuedouble;
  return 0;
}

/* patch IN.onnx OUT.onnx: the engine cannot open the rewritten third-party graph (its rule's nodes
 * are no part of a recovered model), so it runs the model recovered from IN, the certificate's
 * input_equivalence.path, when IN still has the recorded graph digest, under the certificate's
 * rule at its training length. *rule (the caller's) is that rule. */
static int engine_from_input(cp_model **m, cp_rule **rule, const char **in, const check_ctx *c) {
  const cJSON *ie = cJSON_GetObjectItemCaseSensitive(c->cert, "input_equivalence");
  const char *want = str_of(ie, "graph_sha256");
  char have[65], why[400];
  *in = str_of(ie, "path");
  snprintf(why, sizeof why, "%s", cp_error_message());
  if (!*in || !is_hex64(want))
    return cp_error_set(CP_EUNSUPPORTED,
                        "%s; and the certificate names no input graph (input_equivalence.path and "
                        "graph_sha256) to recover the certified model from",
                        why);
  cp_onnx_model *g = NULL;
  int rc = cp_onnx_file_digest(have, &g, *in);
  cp_onnx_model_free(g);
  if (rc < 0) return rc;
  if (strcmp(have, want) != 0)
    return cp_error_set(CP_EVERIFY_RUNTIME,
                        "%s: graph digest %.12s... is not the %.12s... the certificate recorded: the "
                        "input graph the model was recovered from has changed",
                        *in, have, want);
  char *text = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(c->cert, "rule"));
  const cJSON *tl = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c->cert, "model"), "train_len");
  CP_CHECK_ALLOC(text, "certificate.json");
  if (!(*rule = malloc(sizeof **rule))) rc = cp_nomem("certificate.json");
  if (rc == 0) rc = cp_rule_parse(*rule, text, strlen(text), "certificate.json: rule");
  free(text);
  if (rc == 0) rc = cp_model_open_stored(m, *in);
  if (rc == 0 && cJSON_IsNumber(tl) && tl->valuedouble >= 1 && tl->valuedouble <= (double)(1ll << 20) &&
      (int64_t)tl->valuedouble != (*m)->train_len)
    rc = cp_model_set_train_len(*m, (int64_t)tl->valuedouble, CP_TRAIN_LEN_OPTION);
  return rc;
}

/* The comparison made again on the artifact as it is opened (its metadata rule applied). */
static int rerun(check_ctx *c, const cJSON *old, cp_runtime_kind kind, const cp_check_params *p) {
  cp_check_report *r = c->report;
  cp_probe_kind probes[CP_PROBE_COUNT];
  int64_t *lengths = NULL;
  cp_runtime_prompts pr;
  cp_model *m = NULL;
  cp_tokenizer *tok = NULL;
  cJSON *now = NULL;
  cp_rule *rule = NULL; /* NULL: the artifact's metadata rule */
  bool differs = false;
  int rc = prompts_of(&pr, probes, &lengths, c->cert, p);
  if (rc < 0) goto done;
  if (!cp_runtime_installed(p->runtime, kind)) {
    rc = check_fail(r, "runtime-rerun", "runtime rerun: %s is not installed in %s", cp_runtime_name(kind),
                    p->runtime->node_modules);
    goto done;
  }
  const char *weights = kind == CP_RUNTIME_ONNXRUNTIME ? str_of(old, "weights") : NULL, *in = NULL;
  bool rewritten = kind == CP_RUNTIME_ONNXRUNTIME && cp_path_has_suffix(c->path, ".onnx");
  if (cp_model_open_stored(&m, c->path) < 0 && (!rewritten || engine_from_input(&m, &rule, &in, c) < 0)) {
    rc = check_fail(r, "runtime-rerun", "runtime rerun: %s", cp_error_message());
    goto done;
  }
  if ((cp_model_tokenizer_open(&tok, c->path) < 0 && (!in || cp_model_tokenizer_open(&tok, in) < 0)) ||
      cp_runtime_check(&now, &differs, p->runtime, kind, c->path, m, rule, tok, &pr, weights) < 0) {
    rc = check_fail(r, "runtime-rerun", "runtime rerun: %s", cp_error_message());
    goto done;
  }
  r->runtime_reran = true;
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(now, "max_abs_logit_diff");
  r->runtime_max_diff = cJSON_IsNumber(d) ? d->valuedouble : NAN;
  const char *want = str_of(old, "prompts_sha256"), *have = str_of(now, "prompts_sha256");
  /* Other prompts (the file's own tokenizer may split the probe text differently from the one
   * patch used, e.g. stories260K's GGUF vocabulary against tok512.model) still test the same
   * runtime on the same file: reported, not a failure. */
  r->runtime_other_prompts = want && have && strcmp(want, have) != 0;
  if (differs) rc = check_fail(r, "runtime-rerun", "runtime rerun: %s", str_of(now, "statement"));
done:
  cJSON_Delete(now);
  cp_tokenizer_free(tok);
  cp_model_free(m);
  free(rule);
  free(lengths);
  return rc;
}

/* patch IN.onnx OUT.onnx's input_equivalence (docs/certificate.md): onnxruntime on the input graph
 * against the recovered model before certifying; a certificate carries "equal" within its
 * tolerance or "not checked" with its sentence. Absent: 0. */
static int input_block(check_ctx *c, const cJSON *ie) {
  cp_check_report *r = c->report;
  if (!ie) return 0;
  const char *res = str_of(ie, "result"), *st = str_of(ie, "statement"), *rt = str_of(ie, "runtime");
  if (!cJSON_IsObject(ie) || !res || !st || !rt || strcmp(rt, "onnxruntime") != 0)
    return check_fail(r, "cert-schema",
                      "certificate.json: input_equivalence: an onnxruntime object with result and "
                      "statement expected");
  if (!strcmp(res, "not checked"))
    return strcmp(st, CP_INPUT_NOT_COMPARED) != 0
               ? check_fail(r, "cert-schema",
                            "certificate.json: input_equivalence.statement: a comparison not made must say "
                            "'" CP_INPUT_NOT_COMPARED "'")
               : 0;
  const cJSON *tol = cJSON_GetObjectItemCaseSensitive(ie, "tolerance");
  const cJSON *diff = cJSON_GetObjectItemCaseSensitive(ie, "max_abs_logit_diff");
  const char *weights = str_of(ie, "weights");
  if (!weights || !cJSON_IsNumber(tol) || tol->valuedouble != cp_runtime_tolerance(weights))
    return check_fail(r, "cert-schema", "certificate.json: input_equivalence: weights and their tolerance expected");
  if (strcmp(res, "equal") != 0 || !cJSON_IsNumber(diff) || !(diff->valuedouble >= 0) ||
      diff->valuedouble > tol->valuedouble)
    return check_fail(r, "runtime-differs",
                      "certificate.json: input_equivalence: result '%s': onnxruntime on the input graph was not shown "
                      "to compute what the certified model computes",
                      res);
  return 0;
}

int check_runtime(check_ctx *c, const cp_check_params *p) {
  const cJSON *rc_obj = cJSON_GetObjectItemCaseSensitive(c->cert, "runtime_check");
  cp_runtime_kind kind = CP_RUNTIME_LLAMACPP;
  const char *result = NULL;
  int rc = input_block(c, cJSON_GetObjectItemCaseSensitive(c->cert, "input_equivalence"));
  if (rc == 0) rc = block(c, rc_obj, &kind, &result);
  /* never redone after any failed static check (this block's or an earlier one) */
  if (rc < 0 || c->report->n_failures > 0 || !p || !p->rerun || !p->runtime || !p->runtime->node_modules) return rc;
  if (!result) { /* no comparison recorded: the artifact's format names the runtime */
    if (!strcmp(c->report->format, "safetensors") || cp_path_has_suffix(c->path, ".onnx"))
      return 0; /* no runtime file */
    kind = !strcmp(c->report->format, "gguf") ? CP_RUNTIME_LLAMACPP : CP_RUNTIME_ONNXRUNTIME;
  }
  return rerun(c, rc_obj, kind, p);
}
