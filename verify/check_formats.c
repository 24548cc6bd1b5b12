/* `ctxpatch check`'s output formats: how each is recognised and where it keeps its ctxpatch
 * metadata. Adding a format is one detect function and one read_meta function that turns its
 * metadata into config.json-style "ctxpatch" blocks (verify/check_int.h):
 *   safetensors  config.json "ctxpatch" block and every *.safetensors __metadata__.ctxpatch
 *   onnx         config.json "ctxpatch" block and every .onnx graph in onnx/'s metadata_props
 *                ctxpatch.version / .fidelity / .rule / .certificate_sha256 (read by
 *                formats/onnx_read.c's bounded reader), as tool_version / fidelity / rule /
 *                certificate_sha256
 *   gguf         (not yet) the ctxpatch.* keys */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json_strict.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/formats/onnx.h"
#include "ctxpatch/formats/safetensors.h"
#include "verify/check_int.h"

#define CONFIG_MAX ((size_t)16 << 20)

static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && !strcmp(s + a - b, suffix);
}

static bool any_file(const cp_file_list *files, const char *prefix, const char *suffix) {
  for (size_t i = 0; i < files->n; i++)
    if (!strncmp(files->items[i].path, prefix, strlen(prefix)) && ends_with(files->items[i].path, suffix)) return true;
  return false;
}

static bool is_top_level(const char *path) { return !strchr(path, '/'); }

static bool detect_safetensors(const cp_file_list *files) {
  for (size_t i = 0; i < files->n; i++)
    if (is_top_level(files->items[i].path) && ends_with(files->items[i].path, ".safetensors")) return true;
  return false;
}

static bool detect_onnx(const cp_file_list *files) { return any_file(files, "onnx/", "") || any_file(files, "", ".onnx"); }

static bool detect_gguf(const cp_file_list *files) { return any_file(files, "", ".gguf"); }

/* config.json's "ctxpatch" block. */
static int config_block(check_ctx *c) {
  char *path = cp_path_join(c->path, "config.json"), *text = NULL;
  size_t len = 0;
  cJSON *cfg = NULL;
  if (!path) return cp_error_set(CP_ENOMEM, "%s: out of memory", c->path);
  int rc = cp_read_file(&text, &len, path, CONFIG_MAX);
  if (rc < 0) rc = check_fail(c->report, "meta-missing", "config.json: %s", cp_error_message());
  else if (cp_json_parse_strict(&cfg, text, len, "config.json", 128, CP_EARG, CP_EARG, CP_EARG, CP_EARG) < 0)
    rc = check_fail(c->report, "meta-json", "%s", cp_error_message());
  else {
    cJSON *block = cJSON_DetachItemFromObjectCaseSensitive(cfg, "ctxpatch");
    if (!cJSON_IsObject(block)) {
      cJSON_Delete(block);
      rc = check_fail(c->report, "meta-missing", "config.json: no \"ctxpatch\" object (not a patched artifact)");
    } else rc = check_meta_add(c, "config.json: ctxpatch", block);
  }
  cJSON_Delete(cfg);
  free(text);
  free(path);
  return rc;
}

/* One shard's __metadata__.ctxpatch (compact JSON in a string). */
static int shard_block(check_ctx *c, const char *name) {
  char *path = cp_path_join(c->path, name), where[512];
  cp_st_file *f = NULL;
  cJSON *block = NULL;
  if (!path) return cp_error_set(CP_ENOMEM, "%s: out of memory", c->path);
  snprintf(where, sizeof where, "%s: __metadata__.ctxpatch", name);
  int rc = cp_st_open(&f, path);
  const char *text = rc < 0 ? NULL : cp_st_meta_get(f, "ctxpatch");
  if (rc < 0) rc = check_fail(c->report, "meta-unreadable", "%s: %s", name, cp_error_message());
  else if (!text) rc = check_fail(c->report, "meta-missing", "%s: no ctxpatch entry in __metadata__", name);
  else if (cp_json_parse_strict(&block, text, strlen(text), where, 64, CP_EARG, CP_EARG, CP_EARG, CP_EARG) < 0 ||
           !cJSON_IsObject(block))
    rc = check_fail(c->report, "meta-json", "%s: not a JSON object", where);
  else {
    rc = check_meta_add(c, where, block);
    block = NULL;
  }
  cJSON_Delete(block);
  cp_st_free(f);
  free(path);
  return rc;
}

static int read_safetensors(check_ctx *c) {
  int rc = config_block(c);
  for (size_t i = 0; i < c->files.n && rc == 0; i++) {
    const char *p = c->files.items[i].path;
    if (is_top_level(p) && ends_with(p, ".safetensors")) rc = shard_block(c, p);
  }
  /* Every shard carries the config's block, byte for byte in meaning. */
  for (size_t i = 1; i < c->n_meta && rc == 0; i++)
    if (!cJSON_Compare(c->meta[0].block, c->meta[i].block, true))
      rc = check_fail(c->report, "meta-blocks", "%s differs from %s", c->meta[i].where, c->meta[0].where);
  return rc;
}

/* One graph's metadata_props as a block with config.json's keys; the rule parsed back to JSON. */
static int onnx_block(check_ctx *c, const char *name) {
  static const char *const keys[][2] = {{"ctxpatch.version", "tool_version"}, {"ctxpatch.fidelity", "fidelity"},
                                        {"ctxpatch.certificate_sha256", "certificate_sha256"}};
  char *path = cp_path_join(c->path, name), where[512];
  cp_onnx_info info;
  cJSON *block = NULL, *rule = NULL;
  if (!path) return cp_error_set(CP_ENOMEM, "%s: out of memory", c->path);
  snprintf(where, sizeof where, "%s: metadata_props", name);
  int rc = cp_onnx_read_info(&info, path);
  if (rc < 0) {
    rc = check_fail(c->report, "meta-unreadable", "%s: %s", name, cp_error_message());
    goto done;
  }
  if (!(block = cJSON_CreateObject())) goto oom;
  for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
    const char *v = cp_onnx_info_meta(&info, keys[k][0]);
    if (v && !cJSON_AddStringToObject(block, keys[k][1], v)) goto oom;
  }
  const char *text = cp_onnx_info_meta(&info, "ctxpatch.rule");
  if (text && (cp_json_parse_strict(&rule, text, strlen(text), where, 64, CP_EARG, CP_EARG, CP_EARG, CP_EARG) < 0 ||
               !cJSON_IsObject(rule))) {
    rc = check_fail(c->report, "meta-json", "%s: ctxpatch.rule is not a JSON object", where);
    goto done;
  }
  if (rule) cJSON_AddItemToObject(block, "rule", rule), rule = NULL;
  rc = check_meta_add(c, where, block);
  block = NULL;
  goto done;
oom:
  rc = cp_error_set(CP_ENOMEM, "%s: out of memory", where);
done:
  cp_onnx_info_free(&info); /* zeroed by a failed read */
  cJSON_Delete(block);
  cJSON_Delete(rule);
  free(path);
  return rc;
}

static int read_onnx(check_ctx *c) {
  int rc = config_block(c);
  size_t graphs = 0;
  for (size_t i = 0; i < c->files.n && rc == 0; i++) {
    const char *p = c->files.items[i].path;
    if (!strncmp(p, "onnx/", 5) && !strchr(p + 5, '/') && ends_with(p, ".onnx")) rc = onnx_block(c, p), graphs++;
  }
  if (rc == 0 && graphs == 0) rc = check_fail(c->report, "meta-missing", "onnx/: no .onnx graph");
  return rc;
}

/* First match wins: an ONNX or GGUF export folder may also hold the safetensors it came from. */
static const check_format formats[] = {
    {"gguf", detect_gguf, NULL},
    {"onnx", detect_onnx, read_onnx},
    {"safetensors", detect_safetensors, read_safetensors},
};

const check_format *check_format_detect(const cp_file_list *files) {
  for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
    if (formats[i].detect(files)) return &formats[i];
  return NULL;
}

const check_format *check_format_of_file(const char *path) {
  if (ends_with(path, ".gguf")) return &formats[0];
  if (ends_with(path, ".onnx")) return &formats[1];
  return NULL;
}
