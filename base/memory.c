/* The memory this process may plan to use (include/ctxpatch/base/memory.h): one definition for
 * every floor that bounds work by memory (the engine's lengths, the ONNX reader's unpack). */
#include "ctxpatch/base/memory.h"

#include <stdlib.h>
#include <unistd.h>

uint64_t cp_memory_limit(void) {
  const char *env = getenv("CTXPATCH_MEMORY_LIMIT");
  if (env && *env) return strtoull(env, NULL, 10);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
}
