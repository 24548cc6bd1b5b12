/* Floor: patchers. `ctxpatch patch` as one library call: open, check, plan, bake into the hidden
 * temporary folder of OUT, certify the baked artifact against the original, commit only on a
 * passing verdict. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctxpatch/import/gguf_model.h"
#include "ctxpatch/export/convert.h"
#include "ctxpatch/export/gguf_export.h"
#include "ctxpatch/base/cpus.h"
#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "base/json_strict.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/num.h"
#include "model/rule_json.h"
#include "ctxpatch/patchers/calibrate.h"
#include "ctxpatch/patchers/patch.h"
#include "verify/certificate_json.h"
#include "ctxpatch/formats/safetensors.h"
#include "patchers/patch_json.h"
#include "patchers/patch_stage.h"
#include "patchers/patch_runtime.h"

#define SHA_ZEROS "0000000000000000000000000000000000000000000000000000000000000000"

void cp_patch_params_init(cp_patch_params *p) {
  memset(p, 0, sizeof *p);
  p->device = "cpu";
}

void cp_patch_outcome_free(cp_patch_outcome *o) {
  if (!o) return;
  cp_verify_result_free(o->result);
  free(o->certificate_json);
  for (int i = 0; i < o->n_reasons; i++) free(o->reasons[i]);
  free(o->reasons);
  memset(o, 0, sizeof *o);
}

cJSON *cp_patch_block(const cp_patch *patch, const cp_bake_plan *plan, const cJSON *calibration,
                      const char *const *effective_in, int n_effective_in) {
  cJSON *b = cJSON_CreateObject();
  if (!b) return NULL;
  cJSON_AddStringToObject(b, "tool_version", CTXPATCH_VERSION);
  cJSON_AddStringToObject(b, "method", cp_patch_method_name(patch->method));
  cJSON_AddStringToObject(b, "fidelity", cp_fidelity_name(plan->fidelity));
  cJSON_AddStringToObject(b, "note", plan->note);
  cJSON *r = cp_rule_to_json(&plan->residual), *br = cp_rule_to_json(&plan->baked);
  cJSON_AddItemToObject(b, "rule", r ? r : cJSON_CreateObject());
  cJSON_AddItemToObject(b, "baked_rule", br ? br : cJSON_CreateObject());
  if (plan->rope_factor > 0) {
    cJSON *rs = cJSON_AddObjectToObject(b, "rope_scaling");
    cJSON_AddStringToObject(rs, "type", "linear");
    cJSON_AddNumberToObject(rs, "factor", plan->rope_factor);
  }
  if (calibration) cJSON_AddItemToObject(b, "calibration", cJSON_Duplicate(calibration, true));
  if (n_effective_in > 0)
    cJSON_AddItemToObject(b, "effective_in", cJSON_CreateStringArray(effective_in, n_effective_in));
  cJSON_AddBoolToObject(b, "certified", false);
  cJSON_AddNullToObject(b, "certificate_sha256");
  return b;
}

/* Writes the digest over the placeholder at `offset` of `path`, where the writer put it. */
static int fill_digest(const char *path, uint64_t offset, const char hex[65]) {
  int fd = open(path, O_RDWR | O_CLOEXEC), rc = 0;
  if (fd < 0) return cp_error_set(CP_EIO, "%s: %s", path, strerror(errno));
  if (pwrite(fd, hex, 64, (off_t)offset) != 64 || fsync(fd) != 0)
    rc = cp_error_set(CP_EIO, "%s: offset %llu: %s", path, (unsigned long long)offset, strerror(errno));
  close(fd);
  return rc;
}

/* Copies `src` to dir/tokenizer.json unless the folder already has one. */
static int copy_tokenizer(const char *dir, const char *src) {
  char *dst = cp_path_join(dir, "tokenizer.json");
  struct stat st;
  int rc = dst ? 0 : cp_nomem("%s", dir);
  if (rc == 0 && stat(dst, &st) != 0) rc = cp_copy_file_atomic(NULL, dst, src, (size_t)1 << 30);
  free(dst);
  return rc;
}

/* probes.selection in the certificate: how the default probe set was chosen. */
static void add_selection(cJSON *cert, const cp_patch_outcome *out, const cp_verify_params *vp) {
  if (out->n_screened == 0) return;
  cJSON *sel = cJSON_AddObjectToObject(cJSON_GetObjectItemCaseSensitive(cert, "probes"), "selection");
  cJSON_AddStringToObject(sel, "rule", "default set: each retrieval probe the original answers above the floor at "
                                       "its training length, and ppl with a corpus");
  cJSON_AddNumberToObject(sel, "floor", CP_PATCH_PROBE_FLOOR);
  cJSON_AddNumberToObject(sel, "length", (double)out->screen_length);
  cJSON_AddNumberToObject(sel, "prompts", (double)out->screen_prompts);
  cJSON *sc = cJSON_AddObjectToObject(sel, "screened");
  for (int i = 0; i < out->n_screened; i++) {
    cJSON *e = cJSON_AddObjectToObject(sc, cp_probe_name(out->screened[i]));
    cJSON_AddNumberToObject(e, "original_accuracy", cp_num_round(out->screened_accuracy[i], CP_NUM_JSON_DIGITS));
    cJSON_AddBoolToObject(e, "used", out->screened_used[i]);
  }
  cJSON_AddBoolToObject(sel, "ppl", vp->corpus_path != NULL);
}

/* Runs the probes on `run` under `rule` (NULL: its metadata rule applies) beside the original,
 * judges, and builds the certificate (listing the files of `tmp`): kept as text in out, also for
 * a failing verdict, and on a pass as *cert_out (owned; written by write_certificate). */
static int certify_model(cJSON **cert_out, cp_patch_outcome *out, const char *tmp, const char *in,
                         const cp_model *original, const cp_model *run, const cp_rule *rule, const cp_patch *patch,
                         const cp_patch_params *params) {
  cJSON *cert = NULL;
  int rc = 0;
  *cert_out = NULL;
  cp_verify_params vp = *params->verify;
  vp.baseline = true;
  vp.baseline_model = original;
  vp.baseline_path = in; /* a --baseline-cache key hashes the original's files */
  vp.baseline_widened = params->onnx != NULL; /* cp_patch_run opened it widened (cp_model_open_ex) */
  vp.judge = params->thresholds; /* a sequential run stops by the thresholds it is judged by */
  if ((rc = cp_verify_run(&out->result, run, params->tok, rule, &vp))) goto done;
  out->verified = true;
  if ((rc = cp_verify_judge(&out->verdict, &out->reasons, &out->n_reasons, out->result, params->thresholds))) goto done;
  out->pass = out->verdict == CP_VERDICT_PASS; /* no effect, inconclusive: nothing is written either */
  const cp_rule *applied = rule ? rule : run->has_metadata_rule ? &run->metadata_rule : NULL;
  /* certificate.c hashes the regular files of model_path (recording names only). */
  cp_certificate_info info = {tmp, params->device ? params->device : "cpu",
                              vp.threads > 0 ? vp.threads : cp_cpu_count(), applied, vp.seed,
                              vp.max_new_tokens};
  if ((rc = cp_certificate_build(&cert, run, out->result, params->thresholds, out->verdict, out->reasons,
                                 out->n_reasons, &info)))
    goto done;
  add_selection(cert, out, &vp);
  cJSON *p = cJSON_AddObjectToObject(cert, "patch");
  cJSON_AddStringToObject(p, "method", cp_patch_method_name(patch->method));
  cJSON_AddStringToObject(p, "fidelity", cp_fidelity_name(out->plan.fidelity));
  cJSON_AddItemToObject(p, "baked_rule", cp_rule_to_json(&out->plan.baked));
  cJSON_AddItemToObject(p, "rule", cp_rule_to_json(&out->plan.residual));
  cJSON_AddStringToObject(p, "baseline", in);
  cJSON_AddStringToObject(p, "format", cp_artifact_format_name(cp_patch_format(params)));
  cJSON_AddItemToObject(p, "effective_in", cJSON_CreateStringArray(out->effective_in, out->n_effective_in));
  CP_CHECK_ALLOC_GOTO(out->certificate_json = cp_json_print(cert, true), tmp);
  if (out->pass) *cert_out = cert, cert = NULL;
done:
  cJSON_Delete(cert);
  return rc;
}

/* A passing certificate into `tmp`: certificate.json (its digest into out; out's text replaced,
 * since the caller may have added to it) and report.html. */
static int write_certificate(cp_patch_outcome *out, const char *tmp, const cJSON *cert) {
  char *path = NULL, *text = NULL;
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(text = cp_json_print(cert, true), tmp);
  free(out->certificate_json);
  out->certificate_json = text;
  CP_CHECK_ALLOC_GOTO(path = cp_path_join(tmp, "certificate.json"), tmp);
  if ((rc = cp_write_json_atomic(out->certificate_sha256, path, cert))) goto done;
  free(path);
  CP_CHECK_ALLOC_GOTO(path = cp_path_join(tmp, "report.html"), tmp);
  rc = cp_report_write(path, cert);
done:
  free(path);
  return rc;
}

/* certify_model on the baked folder `tmp`, opened as written (its metadata rule applied). Its
 * matrices stay as stored, and every one whose bytes equal the original's (all but what the bake
 * changed; compared at open) is the original's memory: the two sides cost about one model. */
static int certify(cJSON **cert, cp_patch_outcome *out, const char *tmp, const char *in, const cp_model *original,
                   const cp_patch *patch, const cp_patch_params *params) {
  cp_model *baked = NULL;
  cp_model_open_params op;
  cp_model_open_params_init(&op);
  op.stored_dtype = true;
  op.share_from = original;
  int rc = cp_model_open_ex(&baked, tmp, &op);
  /* The baked folder's config.json states the input's length; a --train-len replaced it. */
  if (rc == 0 && original->train_len > 0 && baked->train_len != original->train_len)
    rc = cp_model_set_train_len(baked, original->train_len, original->cfg->train_len_key);
  if (rc == 0) rc = certify_model(cert, out, tmp, in, original, baked, NULL, patch, params);
  cp_model_free(baked);
  return rc;
}

/* config.json written again with the digest in its block. */
static int config_digest(const char *tmp, const cp_hf_config *config_src, const cp_bake_plan *plan, cJSON *block,
                         const char hex[65]) {
  cJSON_ReplaceItemInObjectCaseSensitive(block, "certificate_sha256", cJSON_CreateString(hex));
  return cp_bake_write_config(tmp, config_src, plan, block);
}

/* Puts the certificate's digest where the writers left its placeholder: in place in every
 * shard's header, and config.json written again with the digest in its block. */
static int place_digest(const char *tmp, const cp_folder_result *w, const cp_hf_config *config_src, const cp_bake_plan *plan,
                        cJSON *block, const char hex[65]) {
  char *path = NULL;
  int rc = 0;
  for (size_t s = 0; s < w->stats.shards && rc == 0; s++) {
    free(path);
    CP_CHECK_ALLOC_GOTO(path = cp_path_join(tmp, w->files[s].name), tmp);
    rc = fill_digest(path, w->mark_at[s], hex);
  }
  if (rc) goto done;
  rc = config_digest(tmp, config_src, plan, block, hex);
done:
  free(path);
  return rc;
}

/* A block that will be certified: "certified" true and the digest placeholder (a digest cannot
 * cover itself). */
static void mark_certified(cJSON *block) {
  cJSON_ReplaceItemInObjectCaseSensitive(block, "certified", cJSON_CreateBool(true));
  cJSON_ReplaceItemInObjectCaseSensitive(block, "certificate_sha256", cJSON_CreateString(SHA_ZEROS));
}

/* The last step of both passes: SHA256SUMS (known digests as given), then the one rename. */
static int commit_folder(cp_patch_outcome *out, cp_atomic_dir **ad, const char *tmp, const cp_file_digest *known,
                         size_t n_known) {
  int rc = cp_write_sha256_manifest(tmp, known, n_known);
  if (rc) return rc;
  rc = cp_atomic_dir_commit(*ad);
  *ad = NULL;
  if (rc == 0) out->written = true;
  return rc;
}

#define ONNX_DIGEST_KEY "ctxpatch.certificate_sha256"

/* The offset of the digest placeholder in an exported model.onnx: the value of its metadata
 * entry (onnx.proto's StringStringEntryProto: 0x0a len key 0x12 0x40 and 64 '0's), which
 * protobuf-c writes after the graph and the opset list, so it lies in the file's last MiB. */
static int onnx_digest_offset(uint64_t *at, const char *path) {
  enum { TAIL = 1 << 20 };
  unsigned char pat[4 + sizeof ONNX_DIGEST_KEY + 64], *buf = NULL;
  size_t kl = strlen(ONNX_DIGEST_KEY), plen = 4 + kl + 64, found = 0;
  pat[0] = 0x0a, pat[1] = (unsigned char)kl, pat[2 + kl] = 0x12, pat[3 + kl] = 0x40;
  memcpy(pat + 2, ONNX_DIGEST_KEY, kl);
  memcpy(pat + 4 + kl, SHA_ZEROS, 64);
  struct stat st;
  int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;
  if (fd < 0 || fstat(fd, &st) != 0) {
    rc = cp_error_set(CP_EIO, "%s: %s", path, strerror(errno));
    goto done;
  }
  off_t start = st.st_size > TAIL ? st.st_size - TAIL : 0;
  size_t len = (size_t)(st.st_size - start);
  CP_CHECK_ALLOC_GOTO(buf = malloc(len ? len : 1), path);
  if (pread(fd, buf, len, start) != (ssize_t)len) {
    rc = cp_error_set(CP_EIO, "%s: offset %llu: short read", path, (unsigned long long)start);
    goto done;
  }
  for (size_t i = 0; i + plen <= len; i++)
    if (buf[i] == pat[0] && !memcmp(buf + i, pat, plen)) *at = (uint64_t)start + i + 4 + kl, found++;
  if (found != 1)
    rc = cp_error_set(CP_EONNX_METADATA, "%s: metadata %s: %zu digest placeholders in the last MiB, expected 1", path,
                      ONNX_DIGEST_KEY, found);
done:
  if (fd >= 0) close(fd);
  free(buf);
  return rc;
}

/* The graphs an ONNX artifact holds: model.onnx (decoders) or Optimum's T5 pair. */
static const char *const ONNX_GRAPHS[] = {"onnx/model.onnx", "onnx/encoder_model.onnx", "onnx/decoder_model_merged.onnx"};

/* The digest where the --to onnx pass left its placeholders: each graph's metadata (in place; its
 * manifest digest updated) and config.json (written again). */
static int place_onnx_digest(const char *tmp, cp_folder_result *files, const cp_hf_config *config_src,
                             const cp_bake_plan *plan, cJSON *block, const char hex[65]) {
  int rc = 0, n_graphs = 0;
  for (size_t i = 0; i < files->n_files && rc == 0; i++) {
    bool graph = false;
    for (size_t g = 0; g < sizeof ONNX_GRAPHS / sizeof *ONNX_GRAPHS; g++) graph |= !strcmp(files->files[i].name, ONNX_GRAPHS[g]);
    if (!graph) continue;
    char *path = cp_path_join(tmp, files->files[i].name);
    uint64_t at = 0;
    CP_CHECK_ALLOC(path, tmp);
    if ((rc = onnx_digest_offset(&at, path)) == 0 && (rc = fill_digest(path, at, hex)) == 0)
      rc = cp_sha256_file(files->files[i].hex, path);
    free(path);
    n_graphs++;
  }
  if (rc == 0 && n_graphs == 0) rc = cp_error_set(CP_EIO, "%s: onnx/: no graph written", tmp);
  return rc ? rc : config_digest(tmp, config_src, plan, block, hex);
}

/* The plan of an ONNX artifact: the graph computes the whole rule; nothing is baked. The rope-pi
 * factor stays: it goes into config.json and the graph's RoPE. */
static void graph_plan(cp_bake_plan *plan, const cp_patch *patch) {
  plan->fidelity = CP_FIDELITY_GRAPH;
  cp_rule_init(&plan->baked);
  plan->residual = patch->rule;
  snprintf(plan->note, sizeof plan->note, "the ONNX graph computes the whole rule from the original weights%s",
           plan->rope_factor > 0 ? " (RoPE positions divided by the config's rope_scaling factor)" : "");
}

/* patch IN.onnx OUT.onnx's runtime_check (cp_patch_inplace): onnxruntime on the rewrite under the
 * certified rule, written beside OUT for it and removed after; without onnxruntime "not checked"
 * and no graph written. */
static int runtime_check_inplace(cJSON *cert, cp_patch_outcome *out, const cp_model *run, const cp_rule *eff,
                                 const cp_patch *patch, const cp_patch_params *params) {
  const cp_patch_inplace *ip = params->inplace;
  if (!cp_runtime_installed(params->runtime, CP_RUNTIME_ONNXRUNTIME))
    return cp_patch_runtime_check(cert, out, CP_RUNTIME_ONNXRUNTIME, ip->input_graph, run, eff, params);
  const char *graph = NULL;
  int rc = ip->write_graph(ip->ctx, &graph, &patch->rule, run->train_len);
  if (rc == 0) rc = cp_patch_runtime_check(cert, out, CP_RUNTIME_ONNXRUNTIME, graph, run, eff, params);
  ip->drop_graph(ip->ctx);
  return rc;
}

/* The --to onnx pass (patch.h): config and auxiliary files, the graph of the original weights
 * under the whole rule (refused here, before any probe runs, when the graph cannot compute it),
 * certification of that model and rule on the C engine, the digest, the manifest, the commit. */
static int patch_write_onnx(cp_patch_outcome *out, const char *in, const char *out_dir, const cp_model *original,
                            const cp_patch *patch, const cJSON *calibration, const cp_patch_params *params) {
  cp_checkpoint *ck = params->checkpoint; /* taken (patch.h) */
  cp_atomic_dir *ad = NULL;
  cp_folder_result files = {0};
  cJSON *block = NULL, *cert = NULL, *input_eq = NULL;
  cp_rule eff;
  int rc = 0;
  out->patch = *patch;
  if (params->require_exact || params->shard_size) {
    rc = cp_error_set(CP_EARG, "%s: --require exact and --shard-size apply to safetensors output, not ONNX", in);
    goto done;
  }
  if (!ck) rc = cp_checkpoint_open(&ck, in);
  if (rc || (rc = cp_bake_plan_make(&out->plan, original, ck, patch))) goto done;
  graph_plan(&out->plan, patch);
  cp_model run = *original; /* a view whose RoPE is the patched config's; owns nothing */
  if (out->plan.rope_factor > 0) run.rope_scale = out->plan.rope_factor;
  if ((rc = cp_onnx_export_rule(&eff, &run, &patch->rule))) goto done;
  out->n_effective_in = cp_patch_effective_in(out->effective_in, CP_PATCH_MAX_RUNTIMES, &out->plan, CP_ARTIFACT_ONNX,
                                              original->family);
  if (params->on_plan) params->on_plan(params->on_tmp_ctx, patch, &out->plan);
  CP_CHECK_ALLOC_GOTO(block = cp_patch_block(patch, &out->plan, calibration, out->effective_in, out->n_effective_in), in);
  if (params->verify) mark_certified(block);
  /* patch IN.onnx OUT.onnx: IN in onnxruntime must compute what the recovered model computes
   * before anything is certified on that model */
  if (params->verify && params->inplace && (rc = cp_patch_input_equivalence(&input_eq, original, params))) goto done;
  if ((rc = cp_atomic_dir_open(&ad, out_dir, params->replace))) goto done;
  const char *tmp = cp_atomic_dir_path(ad);
  if (params->on_tmp_dir) params->on_tmp_dir(params->on_tmp_ctx, tmp);
  cp_folder_params fp = {.skip_aux = "config.json"};
  if ((rc = cp_folder_copy_aux(&files, tmp, ck, &fp)) || (rc = cp_bake_write_config(tmp, original->cfg, &out->plan, block)))
    goto done;
  cp_checkpoint_free(ck);
  ck = NULL;
  if (params->tokenizer_file && (rc = copy_tokenizer(tmp, params->tokenizer_file))) goto done;
  cp_onnx_export_params ep = *params->onnx;
  ep.certificate_sha256 = params->verify ? SHA_ZEROS : "";
  if ((rc = cp_onnx_write_graph(&files, NULL, tmp, &run, &eff, &ep))) goto done;
  out->pass = true;
  if (params->verify) {
    if ((rc = certify_model(&cert, out, tmp, in, original, &run, &eff, patch, params)) || !out->pass) goto done;
    if (input_eq) cJSON_AddItemToObject(cert, "input_equivalence", input_eq), input_eq = NULL;
    rc = params->inplace ? runtime_check_inplace(cert, out, &run, &eff, patch, params)
                         : cp_patch_runtime_check(cert, out, CP_RUNTIME_ONNXRUNTIME, tmp, &run, &eff, params);
    if (rc || !out->pass) goto done;
    if ((rc = write_certificate(out, tmp, cert))) goto done;
    if ((rc = place_onnx_digest(tmp, &files, original->cfg, &out->plan, block, out->certificate_sha256))) goto done;
  }
  rc = commit_folder(out, &ad, tmp, files.files, files.n_files);
done:
  cp_atomic_dir_abort(ad);
  cp_checkpoint_free(ck);
  cp_folder_result_free(&files);
  cJSON_Delete(block);
  cJSON_Delete(cert);
  cJSON_Delete(input_eq);
  return rc;
}

struct cp_patch_pending {
  cp_atomic_dir *ad;
  cp_folder_result written;
  cJSON *block, *cert; /* cert: NULL without verify */
  const cp_model *original;
  const char *in, *out_dir;
  bool to_gguf, verified;
  uint32_t gguf_type;
};

void cp_patch_pending_free(cp_patch_pending *pd) {
  if (!pd) return;
  cp_atomic_dir_abort(pd->ad);
  cp_folder_result_free(&pd->written);
  cJSON_Delete(pd->block);
  cJSON_Delete(pd->cert);
  free(pd);
}

/* Where the bake goes: OUT's hidden temporary, or with --to gguf (OUT is a file) that of OUT.bake,
 * which is removed once the GGUF file is written. */
static int open_bake_dir(cp_atomic_dir **ad, const char *out_dir, const cp_patch_params *params) {
  if (!params->to_gguf) return cp_atomic_dir_open(ad, out_dir, params->replace);
  int rc = cp_gguf_output_check(out_dir, params->replace);
  if (rc == 0) rc = cp_patch_report_check(out_dir, params->replace); /* OUT.report.html */
  if (rc) return rc;
  char *bake_dir = malloc(strlen(out_dir) + sizeof ".bake");
  CP_CHECK_ALLOC(bake_dir, out_dir);
  sprintf(bake_dir, "%s.bake", out_dir);
  rc = cp_atomic_dir_open(ad, bake_dir, 0);
  free(bake_dir);
  return rc;
}

int cp_patch_stage(cp_patch_pending **pending, cp_patch_outcome *out, const char *in, const char *out_dir,
                   const cp_model *original, const cp_patch *patch, const cJSON *calibration,
                   const cp_patch_params *params) {
  cp_checkpoint *ck = NULL;
  cp_patch_pending *pd = calloc(1, sizeof *pd);
  int rc = 0;
  *pending = NULL;
  out->patch = *patch;
  CP_CHECK_ALLOC_GOTO(pd, in);
  pd->original = original, pd->in = in, pd->out_dir = out_dir;
  pd->to_gguf = params->to_gguf, pd->gguf_type = params->gguf_type, pd->verified = params->verify != NULL;
  if ((rc = cp_checkpoint_open(&ck, in)) || (rc = cp_bake_plan_make(&out->plan, original, ck, patch))) goto done;
  if (params->require_exact && out->plan.fidelity != CP_FIDELITY_EXACT_WEIGHTS) {
    rc = cp_error_set(CP_EPATCH_FIDELITY, "%s: --require exact: %s on this %s model is %s (%s)", in,
                      cp_patch_method_name(patch->method), cp_hf_config_name(original->cfg),
                      cp_fidelity_name(out->plan.fidelity), out->plan.note);
    goto done;
  }
  if (params->to_gguf && (rc = cp_gguf_export_check(original->cfg, in))) goto done;
  cp_artifact_format fmt = cp_patch_format(params);
  if (!params->for_ctxpatch && (rc = cp_patch_effective_check(&out->plan, patch, fmt, original, out_dir))) goto done;
  out->n_effective_in = cp_patch_effective_in(out->effective_in, CP_PATCH_MAX_RUNTIMES, &out->plan, fmt, original->family);
  if (params->on_plan) params->on_plan(params->on_tmp_ctx, patch, &out->plan);
  CP_CHECK_ALLOC_GOTO(pd->block = cp_patch_block(patch, &out->plan, calibration, out->effective_in, out->n_effective_in),
                      in);
  if (params->verify) mark_certified(pd->block);
  if ((rc = open_bake_dir(&pd->ad, out_dir, params))) goto done;
  const char *tmp = cp_atomic_dir_path(pd->ad);
  if (params->on_tmp_dir) params->on_tmp_dir(params->on_tmp_ctx, tmp);
  if ((rc = cp_bake_write(&pd->written, tmp, ck, original, &out->plan, pd->block, params->shard_size))) goto done;
  cp_checkpoint_free(ck); /* its pages are not needed by the verify stage */
  ck = NULL;
  if (params->tokenizer_file && (rc = copy_tokenizer(tmp, params->tokenizer_file))) goto done;
  out->pass = true;
  /* What is certified is what is written: the baked folder, its metadata rule applied. */
  if (params->verify && ((rc = certify(&pd->cert, out, tmp, in, original, patch, params)) || !out->pass)) goto done;
  /* --to gguf: what llama.cpp computes on the file must be what was certified. */
  if (params->verify && params->to_gguf &&
      ((rc = cp_patch_runtime_check_gguf(pd->cert, out, tmp, in, pd->block, pd->gguf_type, pd->original->train_len, params)) || !out->pass))
    goto done;
  *pending = pd;
  pd = NULL;
done:
  cp_patch_pending_free(pd);
  cp_checkpoint_free(ck);
  return rc;
}

int cp_patch_finish(cp_patch_pending *pd, cp_patch_outcome *out, const char *key, cJSON *extra) {
  const char *tmp = cp_atomic_dir_path(pd->ad);
  int rc = 0;
  if (extra && pd->cert) {
    cJSON_AddItemToObject(pd->cert, key, extra);
    extra = NULL;
  }
  if (pd->cert && ((rc = write_certificate(out, tmp, pd->cert)) ||
                   (rc = place_digest(tmp, &pd->written, pd->original->cfg, &out->plan, pd->block, out->certificate_sha256))))
    goto done;
  if (pd->to_gguf) { /* one GGUF file from the certified folder, which then goes */
    if ((rc = cp_patch_write_gguf(tmp, pd->in, pd->out_dir, pd->block, pd->verified, pd->gguf_type,
                                  pd->original->train_len)))
      goto done;
    out->written = true;
    goto done;
  }
  /* The shards changed when the digest was placed; the index and aux files did not. */
  size_t shards = (size_t)pd->written.stats.shards;
  rc = commit_folder(out, &pd->ad, tmp, pd->written.files + shards, pd->written.n_files - shards);
done:
  cJSON_Delete(extra);
  cp_patch_pending_free(pd);
  return rc;
}

/* The core of the pass once the patch is built (cp_patch_write, cp_patch_run). */
static int patch_write(cp_patch_outcome *out, const char *in, const char *out_dir, const cp_model *original,
                       const cp_patch *patch, const cJSON *calibration, const cp_patch_params *params) {
  if (params->onnx) return patch_write_onnx(out, in, out_dir, original, patch, calibration, params);
  cp_patch_pending *pd = NULL;
  int rc = cp_patch_stage(&pd, out, in, out_dir, original, patch, calibration, params);
  return rc || !pd ? rc : cp_patch_finish(pd, out, NULL, NULL);
}

int cp_patch_refuse_artifact(const cp_model *m, const char *in) {
  if (!m->cfg->has_ctxpatch) return 0;
  return cp_error_set(CP_EARG, "%s: already a ctxpatch artifact (config.json has a 'ctxpatch' block); patch the "
                               "original checkpoint", in);
}

int cp_patch_write(cp_patch_outcome *out, const char *in, const char *out_dir, const cp_model *original,
                   const cp_patch *patch, const cp_patch_params *params) {
  memset(out, 0, sizeof *out);
  int rc = cp_patch_refuse_artifact(original, in);
  return rc ? rc : patch_write(out, in, out_dir, original, patch, NULL, params);
}

/* Default verify lengths: the training length and the target length. */
static int default_lengths(int64_t lengths[2], int *n, const cp_model *m, const cp_patch_options *o) {
  int64_t L_tr = o->train_len ? o->train_len : m->train_len;
  if (L_tr <= 0 || !o->target_len)
    return cp_error_set(CP_EARG, "missing --lengths (the model has no training length to default to)");
  lengths[0] = L_tr;
  lengths[1] = o->target_len;
  *n = o->target_len > L_tr ? 2 : 1;
  return 0;
}

/* The screening run's parameters (all[] and *L_tr are pointed to). */
static void screen_params(cp_verify_params *sp, cp_probe_kind all[CP_PROBE_COUNT], const int64_t *L_tr,
                          const cp_verify_params *vp) {
  for (int k = 0; k < CP_PROBE_COUNT; k++) all[k] = (cp_probe_kind)k;
  *sp = *vp;
  sp->probes = all;
  sp->n_probes = CP_PROBE_COUNT;
  sp->lengths = L_tr;
  sp->n_lengths = 1;
  sp->samples = (CP_PATCH_SCREEN_PROMPTS + vp->n_depths - 1) / vp->n_depths;
  sp->baseline = false;
  sp->baseline_model = NULL;
  sp->baseline_from = NULL;
  sp->looks = 0; /* the screening runs no comparison: every prompt */
  sp->stats = false;
  sp->corpus_path = NULL;
}

/* The default probe set: every retrieval probe run on the original at its training length with
 * a small sample (same seed and depths as certification); those above the floor are used. No
 * probe and no corpus: CP_EVERIFY_PROBE (there would be nothing to certify on). */
static int screen_probes(cp_patch_outcome *out, cp_probe_kind used[CP_PROBE_COUNT], int *n_used, const cp_model *m,
                         const cp_tokenizer *tok, const cp_patch_options *o, const cp_verify_params *vp) {
  int64_t L_tr = o->train_len ? o->train_len : m->train_len;
  if (L_tr <= 0)
    return cp_error_set(CP_EVERIFY_PROBE, "default probe set: the model has no training length to screen the probes "
                                          "at; name them with --verify");
  cp_probe_kind all[CP_PROBE_COUNT];
  cp_verify_params sp;
  screen_params(&sp, all, &L_tr, vp);
  cp_verify_result *r = NULL;
  int rc = cp_verify_run(&r, m, tok, NULL, &sp);
  if (rc) return rc;
  out->screen_length = L_tr;
  out->screen_prompts = cp_verify_prompts_at(r);
  *n_used = 0;
  for (int k = 0; k < CP_PROBE_COUNT; k++) {
    double acc = cp_verify_accuracy_at(r, CP_SIDE_PATCHED, k, 0);
    out->screened[k] = all[k];
    out->screened_accuracy[k] = acc;
    out->screened_used[k] = acc > CP_PATCH_PROBE_FLOOR;
    if (out->screened_used[k]) used[(*n_used)++] = all[k];
  }
  out->n_screened = CP_PROBE_COUNT;
  cp_verify_result_free(r);
  if (*n_used == 0 && !vp->corpus_path)
    return cp_error_set(CP_EVERIFY_PROBE, "default probe set: the original answers no retrieval probe above %g at its "
                        "training length %lld (passkey %.2f, lines %.2f, needle %.2f, multikey %.2f); give --corpus "
                        "for ppl or name probes with --verify", CP_PATCH_PROBE_FLOOR, (long long)L_tr,
                        out->screened_accuracy[0], out->screened_accuracy[1], out->screened_accuracy[2],
                        out->screened_accuracy[3]);
  return 0;
}

int cp_patch_verify_prepare(cp_patch_verify_setup *s, cp_patch_outcome *screen, bool *bad_options, const cp_model *m,
                            const cp_tokenizer *tok, const cp_patch_options *o, const cp_patch_params *params) {
  int rc = 0, n_used = 0;
  *bad_options = false;
  s->vp = *params->verify;
  s->th = *params->thresholds;
  if (o->work_budget) s->vp.work_budget = o->work_budget;
  if (!s->vp.lengths) {
    if ((rc = default_lengths(s->lengths, &s->vp.n_lengths, m, o))) {
      *bad_options = true;
      return rc;
    }
    s->vp.lengths = s->lengths;
  }
  if (!s->th.no_regression_at) { /* by default the patch may lose to the original at no length */
    s->th.no_regression_at = s->vp.lengths;
    s->th.n_no_regression = s->vp.n_lengths;
  }
  s->th.gain_after = m->train_len; /* the gain is sought past the training length */
  if (params->default_probes && s->vp.n_probes == 0) {
    if ((rc = screen_probes(screen, s->used, &n_used, m, tok, o, &s->vp))) return rc;
    s->vp.probes = s->used;
    s->vp.n_probes = n_used;
  }
  return 0;
}

void cp_patch_plan_work(cp_patch_work *w, const cp_model *m, const cp_patch_options *o, const cp_patch_params *params) {
  memset(w, 0, sizeof *w);
  cp_cal_method cm;
  if (o->method == CP_PATCH_TEMPERATURE && !(o->tau > 0) && !o->rule && cp_cal_method_from_name(&cm, o->calibrate) == 0)
    w->calibration = cp_patch_calibration_work(m, cm, o);
  if (!params->verify) return;
  cp_verify_params vp = *params->verify;
  int64_t lengths[2];
  if (!vp.lengths && default_lengths(lengths, &vp.n_lengths, m, o) == 0) vp.lengths = lengths;
  if (!vp.lengths) {
    cp_error_clear(); /* cp_patch_verify_prepare reports it */
    return;
  }
  int64_t L_tr = o->train_len ? o->train_len : m->train_len;
  cp_probe_kind all[CP_PROBE_COUNT];
  if (params->default_probes && vp.n_probes == 0 && L_tr > 0) {
    cp_verify_params sp;
    screen_params(&sp, all, &L_tr, &vp);
    w->screening = cp_verify_plan_work(&sp, m);
    vp.probes = all; /* at most every probe passes the screening */
    vp.n_probes = CP_PROBE_COUNT;
  }
  vp.baseline = false;
  vp.baseline_from = NULL;
  w->side = cp_verify_plan_work(&vp, m);
}

int cp_patch_tokenizer_open(cp_tokenizer **tok, const char *in, bool calibrates, const cp_patch_params *p) {
  *tok = NULL;
  if (!p->verify && !calibrates) return 0;
  int rc = cp_model_tokenizer_open(tok, p->tokenizer_path ? p->tokenizer_path : in);
  if (rc && !p->verify) {
    *tok = NULL;
    rc = 0;
  }
  return rc;
}

int cp_patch_run(cp_patch_outcome *out, const char *in, const char *out_dir, const cp_patch_options *opts,
                 const cp_patch_params *params) {
  memset(out, 0, sizeof *out);
  cp_patch_options o = *opts;
  cp_model *model = NULL;
  cp_tokenizer *tok = NULL;
  char *calib_text = NULL;
  cJSON *calib = NULL;
  cp_patch patch;
  cp_patch_verify_setup vs; /* vs.vp points into vs: not copied */
  bool bad = false;
  cp_checkpoint *ck = params->checkpoint; /* taken: by patch_write_onnx once it runs */
  cp_model_open_params op;
  cp_model_open_params_init(&op);
  op.checkpoint = params->onnx ? ck : NULL;
  int rc = cp_patch_options_check(&o);
  if (rc) goto bad_options;
  /* The engine reads stored F16/BF16 matrices; the ONNX writer needs float32. */
  if ((rc = params->onnx ? cp_model_open_ex(&model, in, &op) : cp_model_open_stored(&model, in)) ||
      (rc = cp_patch_method_fits(model, o.method)) ||
      (rc = cp_patch_refuse_artifact(model, in)))
    goto done;
  if (o.train_len && (rc = cp_model_set_train_len(model, o.train_len, CP_TRAIN_LEN_OPTION))) goto bad_options;
  if ((rc = cp_patch_options_resolve(&o, model))) goto bad_options;
  if (!params->onnx && !params->for_ctxpatch) { /* an inert artifact is refused before any work */
    cp_bake_plan *plan = malloc(sizeof *plan); /* two cp_rules: tens of KiB, not on the stack */
    cp_checkpoint *pck = NULL;
    CP_CHECK_ALLOC_GOTO(plan, in);
    if ((rc = cp_checkpoint_open(&pck, in)) == 0)
      rc = cp_patch_effective_precheck(plan, model, pck, &o, cp_patch_format(params), out_dir);
    cp_checkpoint_free(pck);
    free(plan);
    if (rc) goto done;
  }
  bool calibrates = o.method == CP_PATCH_TEMPERATURE && !(o.tau > 0) && !o.rule;
  /* The whole plan's work against the budget, before any of it runs: an untrusted training
   * length (the default probe and calibration lengths) otherwise runs for hours. */
  cp_patch_work w;
  cp_patch_plan_work(&w, model, &o, params);
  if ((rc = cp_work_check(cp_work_add(cp_work_add(w.calibration, w.screening), cp_work_mul(w.side, 2)), o.work_budget,
                          "patch")))
    goto done;
  if ((rc = cp_patch_tokenizer_open(&tok, in, calibrates, params))) goto done;
  /* Every file the model and tokenizer were read from is known now: OUT may be none, before any work. */
  if ((rc = cp_input_check_output(out_dir, !params->to_gguf))) goto done;
  if (calibrates) {
    cp_cal_method cm; /* a bad name is refused before anything says it calibrates */
    if ((rc = cp_cal_method_from_name(&cm, o.calibrate))) goto done;
    if (params->on_calibrate) params->on_calibrate(params->on_tmp_ctx, o.calibrate, o.schedule ? 0 : o.target_len);
  }
  if ((rc = cp_patch_from_options(&patch, &calib_text, model, tok, &o))) goto done;
  if (calib_text) CP_CHECK_ALLOC_GOTO(calib = cJSON_Parse(calib_text), in);
  cp_patch_params p = *params;
  if (params->verify) {
    if ((rc = cp_patch_verify_prepare(&vs, out, &bad, model, tok, &o, params))) {
      if (bad) goto bad_options;
      goto done;
    }
    p.verify = &vs.vp;
    p.thresholds = &vs.th;
    p.tok = tok;
  }
  if (!params->onnx) cp_checkpoint_free(ck), p.checkpoint = NULL;
  ck = NULL;
  rc = patch_write(out, in, out_dir, model, &patch, calib, &p);
  goto done;
bad_options:
  out->bad_options = true;
done:
  cJSON_Delete(calib);
  free(calib_text);
  cp_tokenizer_free(tok);
  cp_model_free(model);
  cp_checkpoint_free(ck);
  return rc;
}
