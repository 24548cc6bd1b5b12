/* Floor: base. The library's version and the options it was built with, for `ctxpatch --version`
 * and for programs that link libctxpatch and want to say what they run. */
#ifndef CTXPATCH_BASE_VERSION_H
#define CTXPATCH_BASE_VERSION_H

/* "MAJOR.MINOR.PATCH" (static storage). */
const char *cp_version(void);
/* Build options as "key=value" words separated by spaces, e.g. "cuda=off sanitize=off blas=openblas"
 * (static storage). */
const char *cp_build_options(void);

#endif
