/* ctxpatch convert IN OUT --to safetensors [--shard-size BYTES] [--threads N] [--force] [--no-manifest]
 * ctxpatch convert IN OUT --to onnx [--rule RULE.json] [--dtype fp32|fp16|bf16]
 *                                   [--external-threshold BYTES] [--force] [--no-manifest] */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "base/json_strict.h"
#include "ctxpatch/export/convert.h"
#include "ctxpatch/export/onnx_export.h"
#include "ctxpatch/export/gguf_export.h"

#include <cjson/cJSON.h>

static const char convert_help[] =
    "usage: ctxpatch convert IN OUT --to safetensors [--shard-size BYTES] [--threads N] [--force]\n"
    "                                [--no-manifest] [--json]\n"
    "       ctxpatch convert IN OUT --to onnx [--rule RULE.json] [--dtype fp32|fp16|bf16]\n"
    "                                [--external-threshold BYTES] [--force] [--no-manifest] [--json]\n"
    "       ctxpatch convert IN OUT.gguf --to gguf [--dtype f32|f16|bf16|q8_0] [--train-len N] [--force]\n"
    "                                [--json]\n\n"
    "Converts a checkpoint (PyTorch zip .bin/.pt, safetensors, single or sharded) into the\n"
    "folder OUT: model.safetensors (or model-0000k-of-0000N.safetensors + index when sharded),\n"
    "config and tokenizer files copied over, and SHA256SUMS (check with sha256sum -c).\n"
    "Streams tensor by tensor; OUT appears atomically or not at all.\n\n"
    "  --to safetensors    output format: safetensors, or onnx: OUT/onnx/model.onnx (opset 17) that\n"
    "                      computes the model under the rule, with config/tokenizer files and\n"
    "                      SHA256SUMS (Optimum / transformers.js layout; see docs/onnx.md)\n"
    "                      T5: OUT/onnx/encoder_model.onnx + decoder_model_merged.onnx\n"
    "  --rule RULE.json    (onnx) attention rule written as graph nodes, uncertified\n"
    "  --dtype TYPE        (onnx) weight storage: fp32 (default), fp16 or bf16 (computed in fp32)\n"
    "  --external-threshold BYTES  (onnx) initializers this large go to onnx/model.onnx.data\n"
    "                      (default 1024, onnx's own; past 1 GiB inline, all go there)\n"
    "  --to gguf           output format: one llama.cpp GGUF v3 file (llama, gpt_neox, bloom, mpt,\n"
    "                      gpt2, t5; tensors by llama.cpp's names and row order, {arch}.* keys,\n"
    "                      tokenizer.ggml.* carried from a GGUF input)\n"
    "  --dtype T           with --to gguf: f32 (default), f16, bf16 or q8_0 for 2-D weights\n"
    "  --train-len N       with --to gguf: the length the model was trained at, written as\n"
    "                      {arch}.context_length (and rope.scaling.original_context_length) in place\n"
    "                      of the config's max_position_embeddings or the input GGUF's key\n"
    "  --shard-size BYTES  start a new shard before a shard's tensor data would pass BYTES\n"
    "                      (suffixes K, M, G = 2^10, 2^20, 2^30)\n"
    "  --threads N         (safetensors) shards written and hashed at once (default: one per core;\n"
    "                      the bytes and SHA256SUMS are the same for any N)\n"
    "  --force             replace OUT if it exists\n"
    "  --no-manifest       (safetensors, onnx) scratch output: write no SHA256SUMS; `check` then fails\n"
    "                      it with sums-missing (files are still hashed beside the copy: no faster)\n"
    "  --json              print a JSON summary on stdout (as every command's --json)\n"
    "A progress bar (tensors written, --to safetensors) is drawn on stderr when it is a terminal.\n";

/* A byte count with an optional K/M/G suffix; shared with `patch --shard-size`. */
static bool parse_size(const char *text, unsigned long long *out) {
  char *end = NULL;
  if (!text || !*text || *text == '-') return false;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  unsigned long long mult = 1;
  if (errno == ERANGE) return false;
  if (*end == 'K' || *end == 'k') mult = 1ull << 10, end++;
  else if (*end == 'M' || *end == 'm') mult = 1ull << 20, end++;
  else if (*end == 'G' || *end == 'g') mult = 1ull << 30, end++;
  if (*end || end == text || v == 0 || v > CLI_MAX_BYTES / mult) return false;
  *out = v * mult;
  return true;
}

bool cli_parse_size(const char *cmd, const char *opt, const char *text, unsigned long long *out) {
  if (text && parse_size(text, out)) return true;
  cli_usage_error(cmd, "%s expects a positive byte count up to %llu (1048576G) such as 2000000000 or 2G, got '%s'", opt,
                  (unsigned long long)CLI_MAX_BYTES, text ? text : "");
  return false;
}

/* Prints a summary document on one line and frees it. */
static void put_json(cJSON *doc) {
  char *text = cp_json_print(doc, false);
  if (text) puts(text);
  free(text);
  cJSON_Delete(doc);
}

/* What the summary line says of the manifest. */
static const char *manifest_note(bool no_manifest) {
  return no_manifest ? "no SHA256SUMS (--no-manifest: `check` cannot verify it)" : "SHA256SUMS";
}

static int convert_onnx(const char *in, const char *out, const char *rule_path, const char *dtype,
                        unsigned long long threshold, bool replace, bool no_manifest, bool json) {
  cp_onnx_export_params p;
  cp_onnx_export_params_init(&p);
  if (!cli_parse_onnx_dtype(&p.weight_dtype, dtype))
    return cli_usage_error("convert", "--dtype expects fp32, fp16 or bf16, not '%s'", dtype);
  p.external_threshold = threshold;
  p.replace = replace;
  p.no_manifest = no_manifest;
  cp_rule rule;
  cp_onnx_export_stats st = {0};
  int rc = 0;
  if (rule_path) rc = cp_rule_load(&rule, rule_path);
  else cp_rule_init(&rule);
  if (rc == 0) rc = cli_check_outputs(&in, 1, &out, 1, true);
  if (rc == 0) rc = cp_onnx_export(&st, in, out, &rule, &p);
  if (rc < 0) return cli_report(rc);
  if (json) {
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "output", out);
    cJSON_AddStringToObject(doc, "format", "onnx");
    cJSON_AddNumberToObject(doc, "model_bytes", (double)st.model_bytes);
    cJSON_AddNumberToObject(doc, "data_bytes", (double)st.data_bytes);
    cJSON_AddNumberToObject(doc, "aux_files", (double)st.aux_files);
    cJSON_AddBoolToObject(doc, "manifest", !no_manifest);
    put_json(doc);
  } else {
    bool t5 = st.graphs == 2;
    cli_printf(stdout, "wrote %s: %s (%llu bytes)", out,
           t5 ? "onnx/encoder_model.onnx + onnx/decoder_model_merged.onnx" : "onnx/model.onnx",
           (unsigned long long)st.model_bytes);
    if (st.data_bytes)
      printf(" + %s (%llu bytes)", t5 ? "their .data files" : "onnx/model.onnx.data",
             (unsigned long long)st.data_bytes);
    printf(", %llu config/tokenizer file%s, %s\n", (unsigned long long)st.aux_files,
           st.aux_files == 1 ? "" : "s", manifest_note(no_manifest));
  }
  return CLI_OK;
}

/* `convert --to gguf`: one GGUF file, written atomically. */
static int convert_gguf(const char *in, const char *out, const char *dtype, int64_t train_len, bool replace, bool json) {
  cp_gguf_export_params p = {.replace = replace, .train_len = train_len};
  cp_gguf_export_stats st = {0};
  if (dtype && cp_gguf_dtype_from_name(&p.type, dtype) < 0) return cli_usage_error("convert", "%s", cp_error_message());
  int rc = cli_check_outputs(&in, 1, &out, 1, false);
  if (rc == 0) rc = cp_gguf_export(&st, in, out, &p);
  if (rc < 0) return cli_report(rc);
  if (json) {
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "output", out);
    cJSON_AddStringToObject(doc, "format", "gguf");
    cJSON_AddNumberToObject(doc, "tensors", (double)st.tensors);
    cJSON_AddStringToObject(doc, "sha256", st.sha256);
    put_json(doc);
  } else cli_printf(stdout, "wrote %s: GGUF v3, %llu tensors, sha256 %s\n", out, (unsigned long long)st.tensors, st.sha256);
  return CLI_OK;
}

int cmd_convert(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *to = NULL, *rule_path = NULL, *dtype = NULL;
  unsigned long long threshold = 0, train_len = 0;
  bool json = false;
  cp_convert_params params;
  cp_convert_params_init(&params);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (cli_is_help(a)) {
      fputs(convert_help, stdout);
      return CLI_OK;
    } else if (!strcmp(a, "--to")) {
      if (++i >= argc) return cli_usage_error("convert", "--to needs a value");
      to = argv[i];
    } else if (!strcmp(a, "--shard-size")) {
      unsigned long long v;
      if (!cli_parse_size("convert", a, ++i < argc ? argv[i] : NULL, &v)) return CLI_USAGE;
      params.shard_size = v;
    } else if (!strcmp(a, "--rule") || !strcmp(a, "--dtype")) {
      if (++i >= argc) return cli_usage_error("convert", "%s needs a value", a);
      *(a[2] == 'r' ? &rule_path : &dtype) = argv[i];
    } else if (!strcmp(a, "--external-threshold")) {
      unsigned long long v;
      if (!cli_parse_size("convert", a, ++i < argc ? argv[i] : NULL, &v)) return CLI_USAGE;
      threshold = v;
    } else if (!strcmp(a, "--force")) {
      params.replace = true;
    } else if (!strcmp(a, "--threads")) {
      char *end = NULL;
      const char *v = ++i < argc ? argv[i] : "";
      unsigned long k = strtoul(v, &end, 10);
      if (!*v || *end || *v == '-' || k < 1 || k > 256)
        return cli_usage_error("convert", "--threads expects a count from 1 to 256, not '%s'", v);
      params.threads = (unsigned)k;
    } else if (!strcmp(a, "--train-len")) {
      if (++i >= argc) return cli_usage_error("convert", "--train-len needs a value");
      if (!cli_parse_u64_in("convert", a, argv[i], 1, CLI_MAX_TOKENS, &train_len)) return CLI_USAGE;
    } else if (!strcmp(a, "--no-manifest")) {
      params.no_manifest = true;
    } else if (!strcmp(a, "--json")) {
      json = true;
    } else if (a[0] == '-' && a[1]) {
      return cli_usage_error("convert", "unknown option '%s'", a);
    } else if (!in) {
      in = a;
    } else if (!out) {
      out = a;
    } else {
      return cli_usage_error("convert", "unexpected argument '%s'", a);
    }
  }
  if (!in || !out) return cli_usage_error("convert", "needs IN and OUT");
  if (cli_check_output_name("convert", out) != CLI_OK) return CLI_USAGE;
  if (!to) return cli_usage_error("convert", "missing --to safetensors|onnx|gguf");
  if (train_len && strcmp(to, "gguf") != 0)
    return cli_usage_error("convert", "--train-len applies to --to gguf (its context_length); a folder keeps the "
                                      "config's key (patch and verify take --train-len)");
  if (!strcmp(to, "onnx"))
    return convert_onnx(in, out, rule_path, dtype, threshold, params.replace, params.no_manifest, json);
  if (!strcmp(to, "gguf")) {
    if (params.no_manifest)
      return cli_usage_error("convert", "--no-manifest applies to folder outputs (safetensors, onnx); a GGUF file "
                                        "has no manifest (its sha256 is printed)");
    if (rule_path || threshold) return cli_usage_error("convert", "--rule and --external-threshold apply to --to onnx only");
    return convert_gguf(in, out, dtype, (int64_t)train_len, params.replace, json);
  }
  if (strcmp(to, "safetensors") != 0)
    return cli_usage_error("convert", "unsupported --to '%s' (supported: safetensors, onnx, gguf)", to);
  if (rule_path || dtype || threshold)
    return cli_usage_error("convert", "--rule, --dtype and --external-threshold apply to --to onnx or gguf only");

  cp_convert_stats stats = {0};
  if (cli_progress_wanted()) params.progress = cli_progress_bar;
  int rc = cli_check_outputs(&in, 1, &out, 1, true);
  if (rc == 0) rc = cp_convert_to_safetensors(&stats, in, out, &params);
  if (rc < 0) return cli_report(rc);
  if (json) {
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddStringToObject(doc, "output", out);
    cJSON_AddNumberToObject(doc, "tensors", (double)stats.tensors);
    cJSON_AddNumberToObject(doc, "tensor_bytes", (double)stats.tensor_bytes);
    cJSON_AddNumberToObject(doc, "shards", (double)stats.shards);
    cJSON_AddNumberToObject(doc, "aux_files", (double)stats.aux_files);
    cJSON_AddBoolToObject(doc, "manifest", !params.no_manifest);
    put_json(doc);
  } else
    cli_printf(stdout, "wrote %s: %llu tensors, %llu bytes in %llu shard%s, %llu config/tokenizer file%s, %s\n", out,
           (unsigned long long)stats.tensors, (unsigned long long)stats.tensor_bytes,
           (unsigned long long)stats.shards, stats.shards == 1 ? "" : "s", (unsigned long long)stats.aux_files,
           stats.aux_files == 1 ? "" : "s", manifest_note(params.no_manifest));
  return CLI_OK;
}
