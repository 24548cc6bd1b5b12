/* `ctxpatch patch` as a library call: plan, bake into the hidden temporary folder of OUT,
 * certify the baked artifact against the original, commit only on a passing verdict. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctxpatch/converters/convert.h"
#include "ctxpatch/base/error.h"
#include "base/json_strict.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/base/le.h"
#include "ctxpatch/patchers/patch.h"
#include "ctxpatch/verify/report.h"
#include "ctxpatch/formats/safetensors.h"

#define SHA_ZEROS "0000000000000000000000000000000000000000000000000000000000000000"

void cp_patch_params_init(cp_patch_params *p) {
  memset(p, 0, sizeof *p);
  p->device = "cpu";
}

void cp_patch_outcome_free(cp_patch_outcome *o) {
  if (!o) return;
  cp_verify_result_free(o->result);
  for (int i = 0; i < o->n_reasons; i++) free(o->reasons[i]);
  free(o->reasons);
  cJSON_Delete(o->certificate);
  memset(o, 0, sizeof *o);
}

cJSON *cp_patch_block(const cp_patch *patch, const cp_bake_plan *plan, const cJSON *calibration) {
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
  cJSON_AddBoolToObject(b, "certified", false);
  cJSON_AddNullToObject(b, "certificate_sha256");
  return b;
}

/* Writes the digest over the 64-zero placeholder that follows "certificate_sha256" in the first
 * `limit` bytes of `path` (the safetensors header or the whole config.json). */
static int stamp(const char *path, const char hex[65], uint64_t limit) {
  int fd = open(path, O_RDWR | O_CLOEXEC);
  char *buf = NULL;
  int rc = 0;
  if (fd < 0) return cp_error_set(CP_EIO, "%s: %s", path, strerror(errno));
  if (!(buf = malloc(limit + 1))) {
    rc = cp_error_set(CP_ENOMEM, "out of memory");
    goto done;
  }
  ssize_t got = pread(fd, buf, limit, 0);
  if (got < 0) {
    rc = cp_error_set(CP_EIO, "%s: %s", path, strerror(errno));
    goto done;
  }
  buf[got] = 0;
  char *key = memmem(buf, (size_t)got, "certificate_sha256", 18);
  char *zeros = key ? memmem(key, (size_t)(buf + got - key), SHA_ZEROS, 64) : NULL;
  /* The placeholder sits right after the key: `":"`, `\":\"` or `": "` between them. */
  if (!zeros || zeros - key > 24) {
    rc = cp_error_set(CP_EIO, "%s: certificate_sha256 placeholder not found", path);
    goto done;
  }
  if (pwrite(fd, hex, 64, zeros - buf) != 64 || fsync(fd) != 0)
    rc = cp_error_set(CP_EIO, "%s: %s", path, strerror(errno));
done:
  free(buf);
  close(fd);
  return rc;
}


/* Copies `src` to dir/tokenizer.json unless the folder already has one. */
static int copy_tokenizer(const char *dir, const char *src) {
  char *dst = cp_path_join(dir, "tokenizer.json");
  struct stat st;
  int rc = dst ? 0 : cp_error_set(CP_ENOMEM, "out of memory");
  if (rc == 0 && stat(dst, &st) != 0) rc = cp_copy_file_atomic(NULL, dst, src, (size_t)1 << 30);
  free(dst);
  return rc;
}

static uint64_t st_header_end(const char *path) {
  unsigned char b[8];
  FILE *f = fopen(path, "rb");
  uint64_t n = 0;
  if (f && fread(b, 1, 8, f) == 8) n = cp_le64(b);
  if (f) fclose(f);
  return n > CP_ST_MAX_HEADER ? 0 : n + 8;
}

int cp_patch_write(cp_patch_outcome *out, const char *in, const char *out_dir, const cp_model *original,
                   const cp_patch *patch, const cp_patch_params *params) {
  memset(out, 0, sizeof *out);
  cp_checkpoint *ck = NULL;
  cp_atomic_dir *ad = NULL;
  cp_model *baked = NULL;
  cJSON *block = NULL;
  char *path = NULL;
  int rc = 0;
  if (cJSON_GetObjectItemCaseSensitive(original->cfg->json, "ctxpatch"))
    return cp_error_set(CP_EARG, "%s: already a ctxpatch artifact (config.json has a 'ctxpatch' block); patch the "
                                 "original checkpoint",
                        in);
  if ((rc = cp_checkpoint_open(&ck, in))) goto done;
  if ((rc = cp_bake_plan_make(&out->plan, original, ck, patch))) goto done;
  if (params->require_exact && out->plan.fidelity != CP_FIDELITY_EXACT_WEIGHTS) {
    rc = cp_error_set(CP_EPATCH_FIDELITY, "--require exact: %s on this %s model is %s (%s)",
                      cp_patch_method_name(patch->method), cp_family_name(original->family),
                      cp_fidelity_name(out->plan.fidelity), out->plan.note);
    goto done;
  }
  if (!(block = cp_patch_block(patch, &out->plan, params->calibration))) {
    rc = cp_error_set(CP_ENOMEM, "out of memory");
    goto done;
  }
  bool verify = params->verify != NULL;
  if (verify) {
    cJSON_ReplaceItemInObjectCaseSensitive(block, "certified", cJSON_CreateBool(true));
    cJSON_ReplaceItemInObjectCaseSensitive(block, "certificate_sha256", cJSON_CreateString(SHA_ZEROS));
  }
  if ((rc = cp_atomic_dir_open(&ad, out_dir, params->replace))) goto done;
  const char *tmp = cp_atomic_dir_path(ad);
  if (params->on_tmp_dir) params->on_tmp_dir(params->on_tmp_ctx, tmp);
  if ((rc = cp_bake_write(tmp, ck, original, &out->plan, block))) goto done;
  cp_checkpoint_free(ck);
  ck = NULL;
  if (params->tokenizer_file && (rc = copy_tokenizer(tmp, params->tokenizer_file))) goto done;

  if (verify) {
    /* What is certified is what is written: the baked folder, its metadata rule applied. */
    if ((rc = cp_model_open(&baked, tmp))) goto done;
    cp_verify_params vp = *params->verify;
    vp.baseline = true;
    vp.baseline_model = original;
    if ((rc = cp_verify_run(&out->result, baked, params->tok, NULL, &vp))) goto done;
    out->verified = true;
    if ((rc = cp_verify_judge(&out->pass, &out->reasons, &out->n_reasons, out->result, params->thresholds))) goto done;
    if (!out->pass) goto done; /* nothing is written: the temporary folder is removed below */
    const cp_rule *applied = baked->has_metadata_rule ? &baked->metadata_rule : NULL;
    /* certificate.c hashes the regular files of model_path (recording names only). */
    cp_certificate_info info = {tmp, params->device ? params->device : "cpu",
                                vp.threads > 0 ? vp.threads : (int)sysconf(_SC_NPROCESSORS_ONLN), applied, vp.seed,
                                vp.max_new_tokens};
    if ((rc = cp_certificate_build(&out->certificate, baked, out->result, params->thresholds, out->pass,
                                   out->reasons, out->n_reasons, &info)))
      goto done;
    cJSON *p = cJSON_AddObjectToObject(out->certificate, "patch");
    cJSON_AddStringToObject(p, "method", cp_patch_method_name(patch->method));
    cJSON_AddStringToObject(p, "fidelity", cp_fidelity_name(out->plan.fidelity));
    cJSON_AddItemToObject(p, "baked_rule", cp_rule_to_json(&out->plan.baked));
    cJSON_AddItemToObject(p, "rule", cp_rule_to_json(&out->plan.residual));
    cJSON_AddStringToObject(p, "baseline", in);
    if (!(path = cp_path_join(tmp, "certificate.json"))) {
      rc = cp_error_set(CP_ENOMEM, "out of memory");
      goto done;
    }
    if ((rc = cp_write_json_atomic(out->certificate_sha256, path, out->certificate))) goto done;
    free(path);
    if (!(path = cp_path_join(tmp, "report.html"))) {
      rc = cp_error_set(CP_ENOMEM, "out of memory");
      goto done;
    }
    if ((rc = cp_report_write(path, out->certificate))) goto done;
    free(path);
    if (!(path = cp_path_join(tmp, "model.safetensors"))) {
      rc = cp_error_set(CP_ENOMEM, "out of memory");
      goto done;
    }
    if ((rc = stamp(path, out->certificate_sha256, st_header_end(path)))) goto done;
    free(path);
    if (!(path = cp_path_join(tmp, "config.json"))) {
      rc = cp_error_set(CP_ENOMEM, "out of memory");
      goto done;
    }
    struct stat st;
    if (stat(path, &st) != 0 || st.st_size > (64 << 20)) {
      rc = cp_error_set(CP_EIO, "%s: cannot stat or too large", path);
      goto done;
    }
    if ((rc = stamp(path, out->certificate_sha256, (uint64_t)st.st_size))) goto done;
  } else {
    out->pass = true;
  }
  if ((rc = cp_write_sha256_manifest(tmp, NULL, NULL, 0))) goto done;
  rc = cp_atomic_dir_commit(ad);
  ad = NULL;
  if (rc == 0) out->written = true;
done:
  cp_atomic_dir_abort(ad);
  cp_model_free(baked);
  cp_checkpoint_free(ck);
  cJSON_Delete(block);
  free(path);
  return rc;
}
