/* cli: the runtime check's options (--runtime-dir, CTXPATCH_RUNTIMES) and where the node script
 * is (include/ctxpatch/verify/runtime.h, docs/certificate.md "Runtime check"). */
#ifndef CTXPATCH_CLI_RUNTIME_OPTS_H
#define CTXPATCH_CLI_RUNTIME_OPTS_H

#include "ctxpatch/verify/runtime.h"

/* Fills *p: node_modules from `dir` (--runtime-dir), else $CTXPATCH_RUNTIMES (empty: none); the
 * script from $CTXPATCH_RUNTIME_SCRIPT, else share/ctxpatch/ctxpatch_runtime.mjs beside the
 * installed program (../share from its folder), else the source tree's scripts/runtime/ (a build
 * tree). `script` is the caller's storage. */
void cli_runtime_params(cp_runtime_params *p, const char *dir, char script[4096]);
/* One line on stdout from a certificate's runtime_check, when it has one. */
void cli_print_runtime_check(const char *certificate_json);

#endif
