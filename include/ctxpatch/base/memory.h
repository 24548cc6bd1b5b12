/* Floor: base. The memory this process may plan to use: CTXPATCH_MEMORY_LIMIT (a byte count)
 * when set, else the machine's RAM (UINT64_MAX when neither can be told). Reads the environment
 * each call; allocates nothing. */
#ifndef CTXPATCH_BASE_MEMORY_H
#define CTXPATCH_BASE_MEMORY_H

#include <stdint.h>

uint64_t cp_memory_limit(void);

#endif
