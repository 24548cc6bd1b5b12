/* ctxpatch inspect PATH [--json] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "base/json_strict.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/checkpoint.h"
#include "import/describe.h"
#include "ctxpatch/import/gguf_model.h"
#include "ctxpatch/model/hf_config.h"
#include "ctxpatch/formats/gguf.h"
#include "ctxpatch/formats/tensor.h"

static const char inspect_help[] =
    "usage: ctxpatch inspect PATH [--json]\n"
    "       ctxpatch inspect PATH --check-values\n"
    "       ctxpatch inspect MODEL --attention-stats --lengths 256,1024,4096 [--rule RULE.json]\n"
    "                        [--ids LIST|@FILE] [--seed S] [--threads T] [--json]\n\n"
    "Describes a checkpoint file or folder: format, architecture family, positional scheme\n"
    "(T5 buckets, ALiBi slopes, RoPE theta/rotary dims/scaling, FIRE), training length,\n"
    "hyperparameters, tensor and parameter counts, dtypes, bytes, and every tensor. For an ONNX\n"
    "graph (a .onnx file or an export folder) also the model recovered from it: by ctxpatch's or\n"
    "Hugging Face's initializer names, or, for third-party graphs, by the pattern of plain ops\n"
    "(torch.onnx GPT-2) or by onnxruntime's contrib ops (fused GPT-2, onnxruntime-genai Llama),\n"
    "with where each hyper-parameter came from; or the one-line reason it cannot be recovered\n"
    "(docs/onnx.md).\n\n"
    "  --json   print the description as JSON (keys documented in docs/inspect-json.md)\n\n"
    "With --check-values, reads every floating-point tensor (F64, F32, F16, BF16; not F8) and\n"
    "prints the first NaN or Inf: tensor and element index (row-major); exit 1 when found.\n\n"
    "With --attention-stats, runs one forward pass per length (random ids from --seed, or --ids\n"
    "tiled to the length; T5: encoder input, decoder [start]) and prints the mean P_max and\n"
    "entropy of the attention softmaxes per attention kind: the dispersed-attention effect\n"
    "(P_max falls, entropy rises) past the training length. --json adds every layer and head.\n";

static double num(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return cJSON_IsNumber(v) ? v->valuedouble : 0;
}
static const char *str(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return cJSON_IsString(v) ? v->valuestring : "";
}

static void print_positional(const cJSON *p) {
  const char *scheme = str(p, "scheme");
  printf("positional:    %s", scheme);
  if (!strcmp(scheme, "t5-buckets")) {
    printf(" (%g buckets, max distance %g)", num(p, "num_buckets"), num(p, "max_distance"));
  } else if (!strcmp(scheme, "alibi")) {
    printf(" (max bias %g; slopes", num(p, "alibi_bias_max"));
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(p, "slopes")) printf(" %.6g", s->valuedouble);
    printf(")");
  } else if (!strcmp(scheme, "rope")) {
    printf(" (theta %g, rotary dims %g", num(p, "theta"), num(p, "rotary_dims"));
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(p, "scaling");
    if (sc) printf(", scaling %s x%g", str(sc, "type"), num(sc, "factor"));
    if (num(p, "local_theta") > 0) printf("; sliding layers theta %g, unscaled", num(p, "local_theta"));
    printf(")");
  } else if (!strcmp(scheme, "fire")) {
    printf(" (MLP %g hidden layer%s of width %g%s)", num(p, "mlp_layers"), num(p, "mlp_layers") == 1 ? "" : "s",
           num(p, "mlp_width"),
           cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "shared")) ? ", shared" : ", per layer");
  }
  printf("\n");
}

/* One line per entry of d's "tensors": name, dtype, shape (and "external" for ONNX data). */
static void print_tensors(const cJSON *d) {
  const cJSON *t;
  cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(d, "tensors")) {
    char shape[256] = "";
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(t, "shape"))
      snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%.0f", shape[0] ? ", " : "", s->valuedouble);
    char dtype[64]; /* GGUF: the stored ggml type beside the dtype it reads as */
    snprintf(dtype, sizeof dtype, "%s%s%s%s", str(t, "dtype"), *str(t, "ggml_type") ? " (" : "", str(t, "ggml_type"),
             *str(t, "ggml_type") ? ")" : "");
    printf("  %-60s %-8s [%s]%s\n", str(t, "name"), dtype, shape,
           cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "external")) ? " external" : "");
  }
}

/* A JSON member printed compactly (NULL for an empty object or null; caller frees). */
static char *compact(const cJSON *obj, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  return cJSON_IsObject(v) && v->child ? cp_json_print(v, false) : NULL;
}

/* Whether the certificate of `d` (read from `path`) matches `digest`: certificate.json beside
 * config.json, or in a GGUF file its ctxpatch.certificate key. */
static const char *certificate_match(const cJSON *d, const char *path, const char *digest) {
  char hex[65];
  if (!strcmp(str(d, "format"), "gguf")) {
    cp_gguf_file *g = NULL;
    const char *text = NULL;
    size_t len = 0;
    bool have = cp_gguf_open(&g, path) == 0 && cp_gguf_find_key(g, "ctxpatch.certificate") >= 0 &&
                cp_gguf_get_str(&text, &len, g, "ctxpatch.certificate") == 0;
    if (have) cp_sha256_hex(hex, text, len);
    cp_gguf_free(g);
    cp_error_clear();
    return !have ? "no ctxpatch.certificate key" : !strcmp(hex, digest) ? "ctxpatch.certificate matches"
                                                                         : "ctxpatch.certificate DIFFERS from this digest";
  }
  char *cert = cp_path_join(path, "certificate.json");
  const char *file = !cert || cp_sha256_file(hex, cert) ? "no certificate.json beside it"
                     : !strcmp(hex, digest)            ? "certificate.json matches"
                                                       : "certificate.json DIFFERS from this digest";
  free(cert);
  return file;
}

/* The "ctxpatch" block of a patched artifact: what it carries, which runtimes execute it, and
 * whether it was certified (the digest checked against the certificate). */
static void print_ctxpatch(const cJSON *d, const char *path) {
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(d, "ctxpatch");
  if (!cJSON_IsObject(b)) return;
  char *rule = compact(b, "rule"), *baked = compact(b, "baked_rule");
  printf("ctxpatch:      method %s, fidelity %s\n", *str(b, "method") ? str(b, "method") : "?",
         *str(b, "fidelity") ? str(b, "fidelity") : "?");
  printf("  rule:        %s%s\n", rule ? rule : "none", rule ? " (applied by the engine from this metadata)" : "");
  printf("  baked:       %s%s\n", baked ? baked : "none", baked ? " (carried by the weights)" : "");
  const char *eff = str(b, "effective_in");
  if (*eff) printf("  effective:   %s\n", !strcmp(eff, "ctxpatch") ? "in ctxpatch only (no runtime of this format executes it)" : eff);
  free(rule);
  free(baked);
  const cJSON *cert = cJSON_GetObjectItemCaseSensitive(b, "certified");
  const char *digest = str(b, "certificate_sha256");
  if (!cJSON_IsTrue(cert)) {
    printf("  certified:   no%s\n", cJSON_IsFalse(cert) ? " (written with --no-verify)" : " (not recorded)");
    return;
  }
  printf("  certified:   yes, certificate sha256 %s (%s)\n", *digest ? digest : "?", certificate_match(d, path, digest));
}

static void print_text(const cJSON *d, const char *path) {
  printf("path:          %s\n", str(d, "path"));
  const cJSON *files = cJSON_GetObjectItemCaseSensitive(d, "files");
  printf("format:        %s (%d file%s)\n", str(d, "format"), cJSON_GetArraySize(files),
         cJSON_GetArraySize(files) == 1 ? "" : "s");
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(d, "architecture");
  if (cJSON_IsObject(a)) {
    printf("architecture:  %s (model_type %s%s%s)\n", str(a, "family"), str(a, "model_type"),
           *str(a, "class") ? ", " : "", str(a, "class"));
    print_positional(cJSON_GetObjectItemCaseSensitive(d, "positional"));
    const cJSON *tl = cJSON_GetObjectItemCaseSensitive(d, "train_len");
    if (cJSON_IsNumber(tl)) printf("train length:  %.0f (from %s)\n", tl->valuedouble, str(d, "train_len_source"));
    else printf("train length:  unknown (not in config.json)\n");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(d, "hyperparameters");
    printf("hyperparams:   vocab %.0f, d_model %.0f, layers %.0f", num(h, "vocab_size"), num(h, "d_model"),
           num(h, "n_layers"));
    if (num(h, "n_decoder_layers") > 0) printf("+%.0f decoder", num(h, "n_decoder_layers"));
    printf(", heads %.0f (kv %.0f), d_head %.0f, d_ff %.0f, %s, eps %g%s%s\n", num(h, "n_heads"), num(h, "n_kv_heads"),
           num(h, "d_head"), num(h, "d_ff"), str(h, "activation"), num(h, "norm_eps"),
           cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(h, "tie_word_embeddings")) ? ", tied embeddings" : "",
           !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(h, "qk_norm")) ? ""
           : cJSON_GetObjectItemCaseSensitive(h, "olmo2")               ? ", q/k norm over the whole projection"
                                                                          : ", per-head q/k norm");
    if (cJSON_GetObjectItemCaseSensitive(h, "olmo2"))
      printf("olmo2:         no pre-norms; attention and FFN outputs RMS-normed before their residual sums\n");
    /* Mistral, Qwen2/3, Phi-3, StarCoder2: the window's keys sit in hyperparameters (Gemma's below) */
    const cJSON *swl = cJSON_GetObjectItemCaseSensitive(h, "sliding_layers");
    if (cJSON_GetArraySize(swl) > 0)
      printf("window:        %g keys on %d of %.0f layers\n", num(h, "sliding_window"), cJSON_GetArraySize(swl),
             num(h, "n_layers"));
    const cJSON *gr = cJSON_GetObjectItemCaseSensitive(h, "granite");
    if (gr)
      printf("granite:       embedding x %g, residual x %g, attention scale %g, logits / %g\n",
             num(gr, "embedding_multiplier"), num(gr, "residual_multiplier"), num(gr, "attention_multiplier"),
             num(gr, "logits_scaling"));
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(h, "gemma");
    if (g) {
      printf("gemma:         embedding x %g, RMSNorm (1 + w), gelu tanh", num(g, "embedding_scale"));
      if (num(g, "query_pre_attn_scalar") > 0) printf(", query_pre_attn_scalar %g", num(g, "query_pre_attn_scalar"));
      if (num(g, "attn_logit_softcapping") > 0) printf(", attention soft-cap %g", num(g, "attn_logit_softcapping"));
      if (num(g, "final_logit_softcapping") > 0) printf(", final soft-cap %g", num(g, "final_logit_softcapping"));
      if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "post_norms"))) printf(", post-attention/FFN norms");
      const cJSON *sl = cJSON_GetObjectItemCaseSensitive(g, "sliding_layers");
      if (cJSON_GetArraySize(sl) > 0)
        printf(", window %g on %d of %.0f layers", num(g, "sliding_window"), cJSON_GetArraySize(sl), num(h, "n_layers"));
      printf("\n");
    }
  } else {
    printf("architecture:  unknown (no config.json beside the weights)\n");
  }
  print_ctxpatch(d, path);
  printf("tensors:       %.0f (%.0f parameters, %.0f bytes;", num(d, "tensor_count"), num(d, "parameter_count"),
         num(d, "bytes"));
  const cJSON *dt;
  cJSON_ArrayForEach(dt, cJSON_GetObjectItemCaseSensitive(d, "dtypes")) printf(" %s %g", dt->string, dt->valuedouble);
  printf(")\n");
  print_tensors(d);
}

/* The model description read back from an ONNX graph (ctxpatch/import/onnx_import.h). */
static void print_recovered(const cJSON *r) {
  if (!r) return;
  if (*str(r, "error")) {
    printf("recovered:     none: %s\n", str(r, "error"));
    return;
  }
  const char *naming = str(r, "naming");
  if (!strcmp(naming, "pattern") || !strcmp(naming, "contrib"))
    printf("recovered:     %s, %s positions (%s)\n", str(r, "family"), str(r, "positions"), str(r, "config"));
  else
    printf("recovered:     %s, %s positions (%s names, config from %s)\n", str(r, "family"), str(r, "positions"),
           naming, str(r, "config"));
  printf("  vocab %.0f, d_model %.0f, layers %.0f, heads %.0f (kv %.0f, d_head %.0f), d_ff %.0f, train_len %.0f, "
         "%s norm, %s%s\n", num(r, "vocab_size"), num(r, "d_model"), num(r, "n_layers"), num(r, "n_heads"),
         num(r, "n_kv_heads"), num(r, "d_head"), num(r, "d_ff"), num(r, "train_len"), str(r, "norm"),
         str(r, "activation"), cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "tied_head")) ? ", tied head" : "");
  if (cJSON_GetObjectItemCaseSensitive(r, "rope_theta"))
    printf("  rope theta %g, %.0f dims, scale %g\n", num(r, "rope_theta"), num(r, "rope_dims"), num(r, "rope_scale"));
  printf("  %d tensors recovered; %d initializers not used (graph constants)\n",
         cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "tensors")),
         cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "unrecognised")));
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(r, "provenance"), *e;
  cJSON_ArrayForEach(e, p) printf("  %s: %s\n", e->string, cJSON_IsString(e) ? e->valuestring : "");
}

static void print_onnx(const cJSON *d) {
  printf("path:          %s\n", str(d, "path"));
  printf("format:        onnx (%s, IR %.0f, opset %.0f, %.0f nodes, producer %s %s)\n", str(d, "model_file"),
         num(d, "ir_version"), num(d, "opset"), num(d, "node_count"), str(d, "producer"), str(d, "producer_version"));
  const cJSON *rule = cJSON_GetObjectItemCaseSensitive(d, "rule");
  char *r = rule && !cJSON_IsNull(rule) ? cp_json_print(rule, false) : NULL;
  printf("rule:          %s (fidelity %s)\n", r ? r : "none", *str(d, "fidelity") ? str(d, "fidelity") : "none");
  free(r);
  printf("certificate:   %s\n", *str(d, "certificate_sha256") ? str(d, "certificate_sha256") : "none (uncertified)");
  printf("tensors:       %.0f (%.0f parameters, %.0f bytes, %.0f external in %s)\n", num(d, "tensor_count"),
         num(d, "parameter_count"), num(d, "bytes"), num(d, "external_bytes"),
         *str(d, "external_data") ? str(d, "external_data") : "-");
  print_tensors(d);
  print_recovered(cJSON_GetObjectItemCaseSensitive(d, "recovered"));
}

/* Index of the first non-finite element of n float32 values, or -1. */
static int64_t first_nonfinite(const float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(x[i])) return (int64_t)i;
  return -1;
}

/* inspect --check-values: every float tensor read in bounded chunks, widened to float32 (exact
 * for F16/BF16; F64 is checked as double, so a finite double past float range is not flagged). */
static int check_values(const char *path) {
  enum { CHUNK = 1 << 18 }; /* elements */
  cp_checkpoint *ck = NULL;
  double *raw = malloc(CHUNK * sizeof(double));
  float *f = malloc(CHUNK * sizeof(float));
  int rc = raw && f ? cp_checkpoint_open(&ck, path) : cp_nomem("%s", path);
  int status = CLI_OK;
  size_t scanned = 0;
  for (size_t t = 0; rc == 0 && status == CLI_OK && t < cp_checkpoint_count(ck); t++) {
    const cp_tensor *tn = cp_checkpoint_tensor(ck, t);
    cp_dtype dt = tn->dtype;
    if (dt != CP_F64 && dt != CP_F32 && dt != CP_F16 && dt != CP_BF16) continue;
    size_t es = cp_dtype_size(dt);
    uint64_t numel = tn->nbytes / es;
    scanned++;
    for (uint64_t at = 0; rc == 0 && at < numel; at += CHUNK) {
      size_t n = numel - at < CHUNK ? (size_t)(numel - at) : CHUNK;
      if ((rc = cp_checkpoint_read(ck, t, at * es, raw, n * es)) < 0) break;
      int64_t bad = -1;
      if (dt == CP_F64) {
        for (size_t i = 0; i < n && bad < 0; i++)
          if (!isfinite(raw[i])) bad = (int64_t)i;
      } else if ((rc = cp_convert_to_f32(f, raw, dt, n)) == 0) {
        bad = first_nonfinite(f, n);
      }
      if (bad >= 0) {
        double v = dt == CP_F64 ? raw[bad] : f[bad];
        cli_printf(stdout, "%s: tensor '%s' (%s): element %llu is %s\n", path, tn->name, cp_dtype_name(dt),
               (unsigned long long)(at + (uint64_t)bad), isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf");
        status = CLI_FAIL;
        break;
      }
      cp_checkpoint_release(ck, t, at * es, n * es);
    }
  }
  if (rc < 0) status = cli_report(rc);
  else if (status == CLI_OK) cli_printf(stdout, "%s: %zu floating-point tensors, all finite\n", path, scanned);
  cp_checkpoint_free(ck);
  free(raw);
  free(f);
  return status;
}

int cmd_inspect(int argc, char **argv) {
  const char *path = NULL, *rule = NULL, *ids = NULL, *lengths_text = NULL;
  bool json = false, stats = false, values = false;
  unsigned long long seed = 0, threads = 0;
  for (int i = 1; i < argc; i++) {
    const char *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (cli_is_help(argv[i])) {
      fputs(inspect_help, stdout);
      return CLI_OK;
    } else if (!strcmp(argv[i], "--json")) {
      json = true;
    } else if (!strcmp(argv[i], "--attention-stats")) {
      stats = true;
    } else if (!strcmp(argv[i], "--check-values")) {
      values = true;
    } else if (!strcmp(argv[i], "--lengths") || !strcmp(argv[i], "--rule") || !strcmp(argv[i], "--ids") ||
               !strcmp(argv[i], "--seed") || !strcmp(argv[i], "--threads")) {
      if (!next) return cli_usage_error("inspect", "%s needs a value", argv[i]);
      if (!strcmp(argv[i], "--lengths")) lengths_text = next;
      else if (!strcmp(argv[i], "--rule")) rule = next;
      else if (!strcmp(argv[i], "--ids")) ids = next;
      else if (!strcmp(argv[i], "--seed") && !cli_parse_u64("inspect", "--seed", next, &seed)) return CLI_USAGE;
      else if (!strcmp(argv[i], "--threads") && !cli_parse_u64_in("inspect", "--threads", next, 0, 1024, &threads))
        return CLI_USAGE;
      i++;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      return cli_usage_error("inspect", "unknown option '%s'", argv[i]);
    } else if (!path) {
      path = argv[i];
    } else {
      return cli_usage_error("inspect", "unexpected argument '%s'", argv[i]);
    }
  }
  if (!path) return cli_usage_error("inspect", "missing PATH");
  if (values && (stats || json)) return cli_usage_error("inspect", "--check-values stands alone");
  if (values) return check_values(path);
  if (!stats && (lengths_text || rule || ids))
    return cli_usage_error("inspect", "--lengths, --rule and --ids need --attention-stats");
  if (stats) {
    if (!lengths_text) return cli_usage_error("inspect", "--attention-stats needs --lengths");
    int64_t *lengths = NULL;
    int n_lengths = 0;
    if (!cli_parse_lengths("inspect", lengths_text, &lengths, &n_lengths)) return CLI_USAGE;
    int status = inspect_attention_stats(path, lengths, n_lengths, rule, ids, seed, (int)threads, json);
    free(lengths);
    return status;
  }

  cp_checkpoint *ck = NULL;
  cp_hf_config *cfg = NULL;
  cJSON *desc = NULL;
  char *onnx = cp_onnx_model_path(path);
  int rc = onnx ? cp_describe_onnx(&desc, path, onnx) : cp_checkpoint_open(&ck, path);
  if (rc == 0 && ck && (cp_checkpoint_config_path(ck) || cp_checkpoint_gguf(ck))) rc = cp_checkpoint_config(&cfg, ck, path);
  if (rc == 0 && ck) rc = cp_describe_checkpoint(&desc, path, ck, cfg);
  free(onnx);
  int status = CLI_OK;
  if (rc < 0) {
    status = cli_report(rc);
  } else if (json) {
    char *text = cp_json_print(desc, true);
    if (text) puts(text);
    free(text);
  } else {
    cli_json_printable(desc); /* names from the files, shown in a table */
    if (!strcmp(str(desc, "format"), "onnx")) print_onnx(desc);
    else print_text(desc, path);
  }
  cJSON_Delete(desc);
  cp_hf_config_free(cfg);
  cp_checkpoint_free(ck);
  return status;
}
