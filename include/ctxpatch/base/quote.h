/* Floor: base. Printable, bounded copies of untrusted names (zip entries, pickle globals, tensor
 * names) for one-line error messages, so hostile bytes can neither break the line nor flood it.
 * Both write into the caller's buffer and return it; nothing is allocated. */
#ifndef CTXPATCH_BASE_QUOTE_H
#define CTXPATCH_BASE_QUOTE_H

#include <stddef.h>
#include <stdint.h>

/* Printable ASCII kept, every other byte and '\' written as \xNN; text that would not fit in
 * `cap` bytes is cut and ends in "...". `cap` must be at least 12. */
const char *cp_quote(char *dst, size_t cap, const char *s, size_t len);

/* Room for cp_quote_masked: 64 bytes, "..." and the terminator. */
#define CP_QUOTE_MASKED_CAP 72

/* Control bytes, DEL, C1 controls and bidirectional controls (as for cp_quote_text) and bytes
 * outside well-formed UTF-8 become '?', other bytes are kept; the first 64 bytes are shown and
 * longer text ends in "...". */
const char *cp_quote_masked(char dst[CP_QUOTE_MASKED_CAP], const char *s, size_t len);

/* 1 when code point `cp` may reach a terminal as it is: not a C0 or C1 control character, not
 * DEL, and not a bidirectional formatting character (U+061C, U+200E, U+200F, U+202A..U+202E,
 * U+2066..U+2069), which would reorder the text around it. The JSON writer escapes the others. */
int cp_quote_cp_safe(uint32_t cp);

/* cp_quote_text's flags. */
enum { CP_QUOTE_LINES = 1 /* keep '\n' (a table of lines); else it becomes a space */ };

/* A whole text (a message, a table) made safe for a terminal: well-formed UTF-8 of safe code
 * points (cp_quote_cp_safe) is kept, '\t' and '\r' become a space, and every other byte - a
 * control character's bytes, or a byte outside well-formed UTF-8 - is written as \xNN. '\' is kept,
 * so quoting twice changes nothing. Text that would not fit in `cap` bytes (at least 12) is cut and
 * ends in "..."; 4 * len + 4 bytes always suffice. Returns the length written. */
size_t cp_quote_text(char *dst, size_t cap, const char *s, size_t len, unsigned flags);

#endif
