/* cli: the runtime check's options and the node script's place (cli/runtime_opts.h). */
#include "cli/runtime_opts.h"
#include "cli/cli.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

/* The node script an installed ctxpatch finds at PREFIX/share/ctxpatch/, PREFIX being its folder's parent. */
static bool installed_script(char out[4096]) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return false;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (!slash) return false;
  *slash = '\0';
  if (snprintf(out, 4096, "%s/../share/ctxpatch/ctxpatch_runtime.mjs", exe) >= 4096) return false;
  return access(out, R_OK) == 0;
}

void cli_runtime_params(cp_runtime_params *p, const char *dir, char script[4096]) {
  cp_runtime_params_init(p);
  const char *env = getenv("CTXPATCH_RUNTIMES");
  p->node_modules = dir ? dir : env && *env ? env : NULL;
  const char *s = getenv("CTXPATCH_RUNTIME_SCRIPT");
  if (s && *s) snprintf(script, 4096, "%s", s);
  else if (!installed_script(script)) snprintf(script, 4096, "%s", CTXPATCH_RUNTIME_SCRIPT_SOURCE);
  p->script = script;
}

void cli_print_runtime_check(const char *certificate_json) {
  cJSON *c = certificate_json ? cJSON_Parse(certificate_json) : NULL;
  const cJSON *rc = cJSON_GetObjectItemCaseSensitive(c, "runtime_check");
  const cJSON *st = cJSON_GetObjectItemCaseSensitive(rc, "statement"),
              *why = cJSON_GetObjectItemCaseSensitive(rc, "reason");
  const cJSON *ver = cJSON_GetObjectItemCaseSensitive(rc, "version");
  if (cJSON_IsString(st)) printf("runtime: %s", st->valuestring);
  if (cJSON_IsString(st) && cJSON_IsString(ver)) printf(" [%s]", ver->valuestring);
  if (cJSON_IsString(st)) printf("\n");
  if (cJSON_IsString(why)) printf("  (%s)\n", why->valuestring);
  /* patch IN.onnx OUT.onnx: the input graph against the recovered model, before certifying */
  const cJSON *ie = cJSON_GetObjectItemCaseSensitive(c, "input_equivalence");
  st = cJSON_GetObjectItemCaseSensitive(ie, "statement"), why = cJSON_GetObjectItemCaseSensitive(ie, "reason");
  if (cJSON_IsString(st)) cli_printf(stdout, "input graph: %s\n", st->valuestring);
  if (cJSON_IsString(st) && cJSON_IsString(why)) cli_printf(stdout, "  (%s)\n", why->valuestring);
  cJSON_Delete(c);
}
