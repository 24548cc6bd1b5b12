/* Fuzz harness: a certificate.json (docs/certificate.md) through the strict JSON scanner and then
 * the HTML report, which reads every field of it (the report of a tampered certificate). */
#include <stdint.h>
#include <stdlib.h>

#include "base/json_strict.h"
#include "ctxpatch/base/error.h"
#include "verify/certificate_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cJSON *cert = NULL;
  if (cp_json_parse_strict(&cert, (const char *)data, size, "certificate.json", 64, CP_EARG, CP_EARG, CP_EARG,
                           CP_EARG) != 0)
    return 0;
  char *html = NULL;
  if (cp_report_html(&html, cert) == 0) free(html);
  cJSON_Delete(cert);
  return 0;
}
