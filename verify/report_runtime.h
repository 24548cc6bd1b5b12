/* Private to verify/: the report's card for the certificate's runtime_check (docs/certificate.md,
 * "Runtime check"): which runtime, what it was compared on, and what the certificate vouches for. */
#ifndef CTXPATCH_VERIFY_REPORT_RUNTIME_H
#define CTXPATCH_VERIFY_REPORT_RUNTIME_H

#include <cjson/cJSON.h>

#include "ctxpatch/base/strbuf.h"

/* Appends the card when the certificate has a runtime_check object; nothing otherwise. */
void report_runtime(cp_strbuf *b, const cJSON *certificate);

#endif
