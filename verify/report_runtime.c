/* The report's runtime-check card (verify/report_runtime.h). Every string is escaped, numbers use
 * fixed formats (the report is deterministic). */
#include "verify/report_runtime.h"

#include <math.h>
#include <stdio.h>

#include "verify/report_svg.h"

static void row(cp_strbuf *b, const char *key, const cJSON *v) {
  if (!v || cJSON_IsNull(v)) return;
  cp_strbuf_printf(b, "<tr><th>%s</th><td>", key);
  if (cJSON_IsString(v)) report_esc(b, v->valuestring);
  else if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) cp_strbuf_printf(b, "%.6g", v->valuedouble);
  else cp_strbuf_str(b, "&ndash;");
  cp_strbuf_str(b, "</td></tr>");
}

void report_runtime(cp_strbuf *b, const cJSON *certificate) {
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(certificate, "runtime_check");
  if (!cJSON_IsObject(r)) return;
  static const char *const keys[] = {
      "runtime",   "version",    "result", "weights", "prompts", "positions", "max_abs_logit_diff",
      "tolerance", "top1_agree", "reason"};
  cp_strbuf_str(b, "<section class=\"card runtime\"><h2>Runtime check</h2><p class=\"note\">");
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(r, "statement");
  report_esc(b, cJSON_IsString(st) ? st->valuestring : "no statement recorded");
  cp_strbuf_str(b, "</p><table class=\"kv\">");
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) row(b, keys[i], cJSON_GetObjectItemCaseSensitive(r, keys[i]));
  cp_strbuf_str(b, "</table></section>\n");
}
