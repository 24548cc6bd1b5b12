/* `patch --to gguf`: the baked, certified folder written as one GGUF file with the patch's
 * ctxpatch.* keys (include/ctxpatch/patchers/patch.h, cp_patch_params.to_gguf), and its report
 * beside it. */
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/export/gguf_export.h"
#include "patchers/patch_json.h"

#define MAX_CERTIFICATE ((size_t)64 << 20)

/* A member of the block as a string key: strings as they are, objects as compact JSON. */
static int block_str(cp_gguf_meta *m, char **owned, const cJSON *block, const char *member, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(block, member);
  *m = (cp_gguf_meta){key, CP_GGUF_STRING, NULL, false, 0};
  if (cJSON_IsString(v)) {
    m->s = v->valuestring;
    return 0;
  }
  if (!v || cJSON_IsNull(v)) return 1; /* absent: no key */
  CP_CHECK_ALLOC(*owned = cJSON_PrintUnformatted(v), key);
  m->s = *owned;
  return 0;
}

int cp_patch_write_gguf(const char *tmp, const char *in, const char *out, const cJSON *block, bool certified,
                        uint32_t type, int64_t train_len) {
  static const struct { const char *member, *key; } strs[] = {
      {"method", "ctxpatch.method"},       {"fidelity", "ctxpatch.fidelity"},
      {"note", "ctxpatch.note"},           {"rule", "ctxpatch.rule"},
      {"baked_rule", "ctxpatch.baked_rule"}, {"calibration", "ctxpatch.calibration"},
      {"effective_in", "ctxpatch.effective_in"},
      {"certificate_sha256", "ctxpatch.certificate_sha256"}};
  enum { N_STR = sizeof strs / sizeof *strs };
  cp_gguf_meta meta[N_STR + 2];
  char *owned[N_STR] = {0}, *cert = NULL, *cert_path = NULL;
  cp_gguf_file *src = NULL;
  size_t n = 0, cert_len = 0;
  int rc = 0;
  for (size_t i = 0; i < N_STR; i++) {
    int r = block_str(&meta[n], &owned[i], block, strs[i].member, strs[i].key);
    if (r < 0) {
      rc = r;
      goto done;
    }
    if (r == 0) n++;
  }
  meta[n++] = (cp_gguf_meta){"ctxpatch.certified", CP_GGUF_BOOL, NULL, certified, 0};
  if (certified) { /* the certificate itself, so its digest can be checked from the file alone */
    CP_CHECK_ALLOC_GOTO(cert_path = cp_path_join(tmp, "certificate.json"), tmp);
    if ((rc = cp_read_file(&cert, &cert_len, cert_path, MAX_CERTIFICATE))) goto done;
    meta[n++] = (cp_gguf_meta){"ctxpatch.certificate", CP_GGUF_STRING, cert, false, 0};
  }
  /* A GGUF input's baked folder has no tokenizer files: its tokenizer.ggml.* keys travel instead. */
  if (cp_gguf_open(&src, in) != 0) {
    src = NULL;
    cp_error_clear();
  }
  /* What llama.cpp computes with (weights, shapes, hyperparameter keys) is bound by the content
   * digest, which check recomputes: the certificate's model.files speaks of the baked folder the
   * probes ran on, not of this file. */
  cp_gguf_export_params p = {.replace = true, .type = type, .meta = meta, .n_meta = n, .source = in, .tokenizer_gguf = src,
                             .digest_key = "ctxpatch.content_sha256", .train_len = train_len};
  if ((rc = cp_patch_report_drop(out)) || (rc = cp_gguf_export(NULL, tmp, out, &p))) goto done;
  if (certified) rc = cp_patch_report_write(out, cert, cert_len);
done:
  cp_gguf_free(src);
  for (size_t i = 0; i < N_STR; i++) free(owned[i]);
  free(cert);
  free(cert_path);
  return rc;
}
