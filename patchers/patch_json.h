/* Floor: patchers (private). The parts of the patch pipeline that speak cJSON: the "ctxpatch"
 * block and the bake's writers, kept out of the public include/ctxpatch/patchers/patch.h. */
#ifndef CTXPATCH_PATCHERS_PATCH_JSON_H
#define CTXPATCH_PATCHERS_PATCH_JSON_H

#include <cjson/cJSON.h>

#include "ctxpatch/export/convert.h"
#include "ctxpatch/patchers/patch.h"

/* The "ctxpatch" block for a plan (certified false, certificate_sha256 null, added last);
 * `calibration` is copied when not NULL; "effective_in" lists effective_in[n_effective_in] (the
 * runtimes that execute the artifact, or "ctxpatch" alone; cp_patch_effective_in). Caller frees with cJSON_Delete. */
cJSON *cp_patch_block(const cp_patch *patch, const cp_bake_plan *plan, const cJSON *calibration,
                      const char *const *effective_in, int n_effective_in);

/* Writes the baked artifact into the existing folder `dir` through cp_folder_write: the tensors
 * (sharded past shard_size bytes, 0: one file) with `block` compact in every shard's __metadata__,
 * the aux files, and config.json with `block` under "ctxpatch". `block` is borrowed (NULL: none).
 * When the block's certificate_sha256 is a 64-zero string, out->mark_at[s] is where it lies in
 * shard s. Free *out with cp_folder_result_free (also after an error). */
int cp_bake_write(cp_folder_result *out, const char *dir, cp_checkpoint *ck, const cp_model *m,
                  const cp_bake_plan *plan, const cJSON *block, uint64_t shard_size);

/* Writes dir/config.json: `src` (its text, re-parsed strictly) with the plan's native fields and `block`. */
int cp_bake_write_config(const char *dir, const cp_hf_config *src, const cp_bake_plan *plan, const cJSON *block);

/* `patch --to gguf` (patchers/patch_gguf.c): the baked folder `tmp` (certificate.json in it when
 * `certified`) written to the GGUF file `out` in ggml type `type`, with `block`'s members as
 * ctxpatch.* keys and the certificate's text as ctxpatch.certificate; `in` names the source;
 * train_len > 0: the context_length written (the original's, --train-len included). */
int cp_patch_write_gguf(const char *tmp, const char *in, const char *out, const cJSON *block, bool certified,
                        uint32_t type, int64_t train_len);

/* The report beside a one-file output OUT (OUT + CP_REPORT_SUFFIX, ctxpatch/verify/check.h;
 * patchers/patch_report.c). _check, before any work: the path may be written (not an input of
 * this process; an existing file only with `replace`). _drop, before OUT is replaced: an earlier
 * output's report goes first, so a failure or a kill never leaves the new OUT beside the old page
 * (OUT without a report claims nothing). _write: the page the certificate text `cert_text[len]`
 * (the one OUT carries) renders, written atomically after OUT. */
int cp_patch_report_check(const char *out, bool replace);
int cp_patch_report_drop(const char *out);
int cp_patch_report_write(const char *out, const char *cert_text, size_t cert_len);

#endif
