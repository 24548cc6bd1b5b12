/* `ctxpatch check`'s output formats: how each is recognised and where it keeps its ctxpatch
 * metadata. Adding a format is one detect function and one read_meta function that turns its
 * metadata into config.json-style "ctxpatch" blocks (verify/check_int.h):
 *   safetensors  config.json "ctxpatch" block and every *.safetensors __metadata__.ctxpatch
 *   onnx         config.json "ctxpatch" block and every .onnx graph in onnx/'s metadata_props
 *                ctxpatch.version / .fidelity / .rule / .certificate_sha256 (read by
 *                formats/onnx_read.c's bounded reader), as tool_version / fidelity / rule /
 *                certificate_sha256
 *                or one .onnx file `patch IN.onnx OUT.onnx` rewrote: its ctxpatch.rewrite_version / .rule /
 *                .certified / .certificate_sha256 / .fidelity (graph-rewrite) and the certificate in
 *                ctxpatch.certificate (c->cert_text), and its ctxpatch.graph_sha256 recomputed over
 *                the graph's bytes and external data (formats/onnx_digest.c); no manifest (docs/ci.md)
 *   gguf         one .gguf file (not a folder): its ctxpatch.tool_version / .method / .fidelity / .rule /
 *                .baked_rule / .certified / .certificate_sha256 keys, and the certificate itself in
 *                ctxpatch.certificate (set as c->cert_text); no manifest (docs/ci.md) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json_strict.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/formats/gguf.h"
#include "ctxpatch/formats/onnx.h"
#include "ctxpatch/formats/onnx_digest.h"
#include "ctxpatch/formats/safetensors.h"
#include "verify/check_int.h"

#define CONFIG_MAX ((size_t)16 << 20)

static bool any_file(const cp_file_list *files, const char *prefix, const char *suffix) {
  for (size_t i = 0; i < files->n; i++)
    if (!strncmp(files->items[i].path, prefix, strlen(prefix)) && cp_path_has_suffix(files->items[i].path, suffix))
      return true;
  return false;
}

static bool is_top_level(const char *path) { return !strchr(path, '/'); }

static bool detect_safetensors(const cp_file_list *files) {
  for (size_t i = 0; i < files->n; i++)
    if (is_top_level(files->items[i].path) && cp_path_has_suffix(files->items[i].path, ".safetensors")) return true;
  return false;
}

static bool detect_onnx(const cp_file_list *files) { return any_file(files, "onnx/", "") || any_file(files, "", ".onnx"); }

static bool detect_gguf(const cp_file_list *files) { return any_file(files, "", ".gguf"); }

/* config.json's "ctxpatch" block. */
static int config_block(check_ctx *c) {
  char *path = cp_path_join(c->path, "config.json"), *text = NULL;
  size_t len = 0;
  cJSON *cfg = NULL;
  CP_CHECK_ALLOC(path, c->path);
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
  CP_CHECK_ALLOC(path, c->path);
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
    if (is_top_level(p) && cp_path_has_suffix(p, ".safetensors")) rc = shard_block(c, p);
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
  CP_CHECK_ALLOC(path, c->path);
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
  rc = cp_nomem("%s", where);
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
    if (!strncmp(p, "onnx/", 5) && !strchr(p + 5, '/') && cp_path_has_suffix(p, ".onnx"))
      rc = onnx_block(c, p), graphs++;
  }
  if (rc == 0 && graphs == 0) rc = check_fail(c->report, "meta-missing", "onnx/: no .onnx graph");
  return rc;
}

/* The graph digest ctxpatch.graph_sha256 against the one of the bytes read (onnx_digest.h):
 * anything the graph computes with that changed after the rewrite fails it. A graph without one
 * (an older ctxpatch's) fails too: a gate that passed it would pass any graph whose entry was cut. */
static int graph_digest(check_ctx *c, const cp_onnx_model *m, const char hex[65]) {
  const char *stored = cp_onnx_model_meta(m, CP_ONNX_GRAPH_DIGEST_KEY);
  if (!stored)
    return check_fail(c->report, "graph-digest", "%s: no " CP_ONNX_GRAPH_DIGEST_KEY " in metadata_props (written by an "
                      "older ctxpatch: no graph digest; rewrite the original graph again)", c->path);
  if (strcmp(stored, hex) != 0)
    return check_fail(c->report, "graph-digest", "%s: metadata_props " CP_ONNX_GRAPH_DIGEST_KEY " %.12s... is not the "
                      "graph's %.12s... (nodes, weights, metadata or external data changed after the rewrite)", c->path,
                      stored, hex);
  return 0;
}

/* A graph `patch IN.onnx OUT.onnx` rewrote (one file): the graph must read; its graph digest must
 * hold; ctxpatch.rewrite_version / .rule / .certificate_sha256 / .certified become one block,
 * ctxpatch.fidelity must be graph-rewrite (the block says "graph": the embedded certificate is
 * the one `patch --to onnx` made on the model recovered from the graph), ctxpatch.certificate is
 * c->cert_text. */
static int read_onnx_file(check_ctx *c) {
  static const char *const keys[][2] = {{"ctxpatch.rewrite_version", "tool_version"},
                                        {"ctxpatch.certificate_sha256", "certificate_sha256"}};
  cp_onnx_model *m = NULL;
  cJSON *block = NULL, *rule = NULL;
  char hex[65];
  int rc = cp_onnx_file_digest(hex, &m, c->path);
  if (rc < 0) {
    rc = check_fail(c->report, "onnx-unreadable", "%s", cp_error_message());
    goto done;
  }
  const char *fidelity = cp_onnx_model_meta(m, "ctxpatch.fidelity"), *rewrite = cp_onnx_model_meta(m, "ctxpatch.rewrite_version");
  const char *certified = cp_onnx_model_meta(m, "ctxpatch.certified"), *cert = cp_onnx_model_meta(m, "ctxpatch.certificate");
  const char *text = cp_onnx_model_meta(m, "ctxpatch.rule");
  if (!fidelity && !rewrite && !text) {
    rc = check_fail(c->report, "meta-missing", "%s: no ctxpatch metadata_props (not a graph ctxpatch rewrote)", c->path);
    goto done;
  }
  if (!fidelity || strcmp(fidelity, "graph-rewrite") != 0) {
    rc = check_fail(c->report, "meta-fidelity", "%s: metadata_props ctxpatch.fidelity is '%.40s', not 'graph-rewrite'%s",
                    c->path, fidelity ? fidelity : "(none)",
                    fidelity && !strcmp(fidelity, "graph") ? " (a graph of an export folder: check the folder)" : "");
    goto done;
  }
  if ((rc = graph_digest(c, m, hex)) < 0) goto done;
  CP_CHECK_ALLOC_GOTO(block = cJSON_CreateObject(), c->path);
  CP_CHECK_ALLOC_GOTO(cJSON_AddStringToObject(block, "fidelity", "graph"), c->path);
  for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
    const char *v = cp_onnx_model_meta(m, keys[k][0]);
    if (v) CP_CHECK_ALLOC_GOTO(cJSON_AddStringToObject(block, keys[k][1], v), c->path);
  }
  if (text && (cp_json_parse_strict(&rule, text, strlen(text), "ctxpatch.rule", 64, CP_EARG, CP_EARG, CP_EARG, CP_EARG) < 0 ||
               !cJSON_IsObject(rule))) {
    rc = check_fail(c->report, "meta-json", "%s: metadata_props ctxpatch.rule is not a JSON object", c->path);
    goto done;
  }
  if (rule) cJSON_AddItemToObject(block, "rule", rule), rule = NULL;
  if (certified && strcmp(certified, "true") != 0 && strcmp(certified, "false") != 0) {
    rc = check_fail(c->report, "meta-json", "%s: metadata_props ctxpatch.certified is '%.20s', not true or false", c->path,
                    certified);
    goto done;
  }
  if (certified) CP_CHECK_ALLOC_GOTO(cJSON_AddBoolToObject(block, "certified", !strcmp(certified, "true")), c->path);
  if (!cert || !cert[0])
    rc = check_fail(c->report, "cert-missing", "%s: no ctxpatch.certificate in metadata_props (%s)", c->path,
                    certified && !strcmp(certified, "false") ? "ctxpatch.certified is false: written with --no-verify"
                                                             : "not a certified rewrite");
  else {
    CP_CHECK_ALLOC_GOTO(c->cert_text = strdup(cert), c->path);
    c->cert_len = strlen(cert);
  }
  if (rc == 0) {
    rc = check_meta_add(c, "metadata_props", block);
    block = NULL;
  }
done:
  cp_onnx_model_free(m);
  cJSON_Delete(block);
  cJSON_Delete(rule);
  return rc;
}

/* A GGUF string key as a block member: JSON objects and arrays parsed back (rule, baked_rule,
 * effective_in), else the string. */
static int gguf_member(check_ctx *c, cJSON *block, const cp_gguf_file *g, const char *key, const char *member) {
  const char *v = NULL;
  size_t len = 0;
  cJSON *item = NULL;
  if (cp_gguf_find_key(g, key) < 0) return 0;
  if (cp_gguf_get_str(&v, &len, g, key) < 0)
    return check_fail(c->report, "meta-unreadable", "%s: %s: %s", c->path, key, cp_error_message());
  if (len && (v[0] == '{' || v[0] == '[')) {
    if (cp_json_parse_strict(&item, v, len, key, 64, CP_EARG, CP_EARG, CP_EARG, CP_EARG) < 0 ||
        (v[0] == '{' ? !cJSON_IsObject(item) : !cJSON_IsArray(item))) {
      cJSON_Delete(item);
      return check_fail(c->report, "meta-json", "%s: %s is not a JSON %s", c->path, key, v[0] == '{' ? "object" : "array");
    }
  } else {
    char *z = memchr(v, '\0', len) ? NULL : malloc(len + 1); /* the GGUF string is not NUL-terminated */
    if (!z && memchr(v, '\0', len)) return check_fail(c->report, "meta-json", "%s: %s holds a NUL byte", c->path, key);
    CP_CHECK_ALLOC(z, key);
    memcpy(z, v, len);
    z[len] = '\0';
    item = cJSON_CreateString(z);
    free(z);
    CP_CHECK_ALLOC(item, key);
  }
  if (!cJSON_AddItemToObject(block, member, item)) {
    cJSON_Delete(item);
    return cp_nomem("%s: %s", c->path, key);
  }
  return 0;
}

#define GGUF_DIGEST_KEY "ctxpatch.content_sha256"

/* What llama.cpp computes with (every key outside ctxpatch.*, the tensor infos, the tensor bytes)
 * against the content digest patch --to gguf stamped (cp_gguf_content_sha256). */
static int check_gguf_digest(check_ctx *c, const cp_gguf_file *g) {
  const char *want = NULL;
  size_t len = 0;
  char have[65];
  if (cp_gguf_find_key(g, GGUF_DIGEST_KEY) < 0)
    return check_fail(c->report, "gguf-digest", "%s: no " GGUF_DIGEST_KEY " key: the weights and hyperparameters are "
                                                "not bound (written by a ctxpatch before the digest; patch it again)", c->path);
  if (cp_gguf_get_str(&want, &len, g, GGUF_DIGEST_KEY) < 0 || len != 64)
    return check_fail(c->report, "gguf-digest", "%s: " GGUF_DIGEST_KEY " is not a 64-character SHA-256", c->path);
  cp_gguf_content_sha256(g, "ctxpatch.", have);
  if (!have[0]) return cp_nomem("%s: hashing the content", c->path);
  if (memcmp(have, want, 64) != 0)
    return check_fail(c->report, "gguf-digest", "%s: content SHA-256 %.12s... differs from " GGUF_DIGEST_KEY " %.12s...: "
                                                "a weight, a shape or a key outside ctxpatch.* was changed", c->path, have, want);
  return 0;
}

/* A patched .gguf: the file must parse; its ctxpatch.* keys become one block, its certificate c->cert_text. */
static int read_gguf_file(check_ctx *c) {
  static const char *const keys[][2] = {{"ctxpatch.tool_version", "tool_version"}, {"ctxpatch.method", "method"},
                                        {"ctxpatch.fidelity", "fidelity"},         {"ctxpatch.rule", "rule"},
                                        {"ctxpatch.baked_rule", "baked_rule"},     {"ctxpatch.effective_in", "effective_in"},
                                        {"ctxpatch.certificate_sha256", "certificate_sha256"}};
  cp_gguf_file *g = NULL;
  cJSON *block = NULL;
  const char *cert = NULL;
  size_t len = 0;
  bool certified = false;
  int rc = cp_gguf_open(&g, c->path);
  if (rc < 0) { /* a file that no longer parses fails the artifact */
    rc = check_fail(c->report, "gguf-unreadable", "%s", cp_error_message());
    goto done;
  }
  CP_CHECK_ALLOC_GOTO(block = cJSON_CreateObject(), c->path);
  for (size_t k = 0; k < sizeof keys / sizeof *keys && rc == 0; k++) rc = gguf_member(c, block, g, keys[k][0], keys[k][1]);
  if (rc < 0) goto done;
  if (cp_gguf_find_key(g, "ctxpatch.certified") >= 0) {
    if (cp_gguf_get_bool(&certified, g, "ctxpatch.certified") < 0) {
      rc = check_fail(c->report, "meta-unreadable", "%s: ctxpatch.certified: %s", c->path, cp_error_message());
      goto done;
    }
    CP_CHECK_ALLOC_GOTO(cJSON_AddBoolToObject(block, "certified", certified), c->path);
  }
  if (cp_gguf_find_key(g, "ctxpatch.certificate") < 0)
    rc = check_fail(c->report, "cert-missing", "%s: no ctxpatch.certificate key (%s)", c->path,
                    cp_gguf_find_key(g, "ctxpatch.tool_version") < 0 ? "not a patched artifact" : "written with --no-verify");
  else if (cp_gguf_get_str(&cert, &len, g, "ctxpatch.certificate") < 0)
    rc = check_fail(c->report, "cert-missing", "%s: ctxpatch.certificate: %s", c->path, cp_error_message());
  else {
    CP_CHECK_ALLOC_GOTO(c->cert_text = malloc(len + 1), c->path);
    memcpy(c->cert_text, cert, len);
    c->cert_text[len] = '\0';
    c->cert_len = len;
    rc = check_gguf_digest(c, g);
  }
  if (rc == 0) {
    rc = check_meta_add(c, "ctxpatch.* keys", block);
    block = NULL;
  }
done:
  cJSON_Delete(block);
  cp_gguf_free(g);
  return rc;
}

/* First match wins: an ONNX or GGUF export folder may also hold the safetensors it came from. */
static const check_format formats[] = {
    {"gguf", detect_gguf, NULL, read_gguf_file},
    {"onnx", detect_onnx, read_onnx, read_onnx_file},
    {"safetensors", detect_safetensors, read_safetensors, NULL},
};

const check_format *check_format_detect(const cp_file_list *files) {
  for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
    if (formats[i].detect(files)) return &formats[i];
  return NULL;
}

const check_format *check_format_of_file(const char *path) {
  if (cp_path_has_suffix(path, ".gguf")) return &formats[0];
  if (cp_path_has_suffix(path, ".onnx")) return &formats[1];
  return NULL;
}
