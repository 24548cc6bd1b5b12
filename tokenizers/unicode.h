/* Private to tokenizers/: Unicode services (ICU) on valid UTF-8. Results are appended to a
 * cp_strbuf; functions return 0 or a negative cp_err. */
#ifndef CTXPATCH_TOKENIZERS_UNICODE_H
#define CTXPATCH_TOKENIZERS_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/base/strbuf.h"

typedef enum { TK_NFC, TK_NFD, TK_NFKC, TK_NFKD } tk_nf;
int tk_normalize(cp_strbuf *out, const char *s, size_t n, tk_nf form);
int tk_lowercase(cp_strbuf *out, const char *s, size_t n);

/* Compiled regular expression (ICU syntax after Rust/Oniguruma \s \S are mapped to Unicode
 * White_Space). Caller frees with tk_regex_free. Messages name file `path`, the stage `what`
 * (e.g. "pre_tokenizer Split") and the pattern. */
typedef struct tk_regex tk_regex;
int tk_regex_compile(tk_regex **out, const char *pattern, const char *path, const char *what);
void tk_regex_free(tk_regex *re);
/* Work bound of one tk_regex_each walk, linear in the text: BASE + bytes / BYTES_PER_TICK ticks
 * (ICU's unit: 10,000 engine steps, ~0.3 ms here), and the backtracking stack in bytes. The
 * GPT-2 pattern uses about one tick per 1,000 bytes. */
#define TK_REGEX_BASE_TICKS 1000
#define TK_REGEX_BYTES_PER_TICK 16
#define TK_REGEX_STACK_LIMIT (8 << 20)
/* Calls fn(start, end) for each non-empty match in s[0..n), left to right (byte offsets); a
 * non-zero return from fn stops the walk and is returned. A walk past the work bounds above
 * (catastrophic backtracking) is CP_ETOK_LIMIT. */
typedef int (*tk_span_fn)(void *ctx, size_t start, size_t end);
int tk_regex_each(const tk_regex *re, const char *s, size_t n, tk_span_fn fn, void *ctx);
/* Ticks (10,000 engine steps each) the walks of the calling thread have used so far: the work
 * count tests assert linear bounds on. */
size_t tk_regex_ticks(void);
/* Calls fn(start, end) for each extended grapheme cluster of s[0..n). */
int tk_graphemes(const char *s, size_t n, tk_span_fn fn, void *ctx);

bool tk_is_whitespace(uint32_t cp);
bool tk_is_alnum(uint32_t cp); /* \w as in Rust regex: alphabetic, mark, digit, connector punct */
bool tk_is_punct(uint32_t cp);
bool tk_is_numeric(uint32_t cp); /* general category N (Nd, Nl, No), as Rust char::is_numeric */

#endif
