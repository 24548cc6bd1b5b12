/* Version and build options: see include/ctxpatch/base/version.h. CMake sets both strings on this
 * one file, so only it is rebuilt when an option changes. */
#include "ctxpatch/base/version.h"

#ifndef CTXPATCH_BUILD_OPTIONS
#define CTXPATCH_BUILD_OPTIONS "unknown"
#endif

const char *cp_version(void) { return CTXPATCH_VERSION; }
const char *cp_build_options(void) { return CTXPATCH_BUILD_OPTIONS; }
