/* Private to verify/: the baseline cache (docs/certificate.md, "Baseline cache"): the original
 * side's outcomes of a certification, kept in DIR/<key>.json by a run that computed them and
 * read back by a later run with the same key instead of running the original again. The file is
 * untrusted input (a CI cache may be restored from anywhere): one bounded reader checks it
 * against the plan, and a bad file is ignored with a warning (verify/baseline_cache.c). */
#ifndef CTXPATCH_VERIFY_BASELINE_CACHE_H
#define CTXPATCH_VERIFY_BASELINE_CACHE_H

#include "ctxpatch/base/strbuf.h"
#include "ctxpatch/verify/verify.h"

/* An empty result of the plan `p` (verify/verify_run.c); caller frees *out. */
int verify_result_alloc(cp_verify_result **out, const cp_verify_params *p);

/* Before a run with p->baseline_cache: the key (SHA-256 over everything that determines the
 * baseline side's outcomes: the baseline's files, tokenizer, probe plan, engine, weights mode and
 * versions) into `key`; with a good cache file, *from (owned; its PATCHED side holds the
 * baseline's outcomes and no tokens, the form cp_verify_params.baseline_from takes) and the
 * file's SHA-256. No file: *from NULL. A bad or mismatching file: *from NULL and one line in
 * `warn` naming the file and the place. Negative only when the key's inputs cannot be read (or
 * no memory). `base` is the baseline side's model. */
int verify_cache_lookup(cp_verify_result **from, char key[65], char file_sha256[65], cp_strbuf *warn,
                        const cp_model *base, const cp_tokenizer *tok, const cp_verify_params *p);

/* After a run that computed the baseline side, or some of it (r->baseline_answered; `cached`, may
 * be NULL: the file read, whose answers are kept for the prompts this run did not ask):
 * DIR/<key>.json written atomically (DIR created when missing; a symlink or FIFO there is refused,
 * never followed). A prompt neither asked nor read is '-' (a sequential cell stopped). A failure
 * is one line in `warn`. */
void verify_cache_store(const cp_verify_result *r, const cp_verify_result *cached, const char key[65], cp_strbuf *warn,
                        const cp_verify_params *p);

#endif
