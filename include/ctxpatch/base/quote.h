/* Floor: base. Printable, bounded copies of untrusted names (zip entries, pickle globals, tensor
 * names) for one-line error messages, so hostile bytes can neither break the line nor flood it.
 * Both write into the caller's buffer and return it; nothing is allocated. */
#ifndef CTXPATCH_BASE_QUOTE_H
#define CTXPATCH_BASE_QUOTE_H

#include <stddef.h>

/* Printable ASCII kept, every other byte and '\' written as \xNN; text that would not fit in
 * `cap` bytes is cut and ends in "...". `cap` must be at least 12. */
const char *cp_quote(char *dst, size_t cap, const char *s, size_t len);

/* Room for cp_quote_masked: 64 bytes, "..." and the terminator. */
#define CP_QUOTE_MASKED_CAP 72

/* Control bytes and DEL become '?', other bytes (UTF-8 included) are kept; the first 64 bytes
 * are shown and longer text ends in "...". */
const char *cp_quote_masked(char dst[CP_QUOTE_MASKED_CAP], const char *s, size_t len);

#endif
