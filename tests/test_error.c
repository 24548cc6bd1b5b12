/* base/error.c: the last error's code and one-line message. A message may wrap the previous one
 * (cp_error_set(code, "%s: ...", cp_error_message())): formatting into the buffer it reads from
 * lost or garbled it before the message was formatted into a copy first. And base/quote.c: names
 * from files reach a message or a table without control characters or invalid UTF-8 (#33). */
#include <string.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/base/quote.h"
#include "test.h"

static void quote_text(void) {
  char out[256];
  /* ESC, BEL, DEL, C1 CSI (c2 9b), RLO (e2 80 ae), 0xff, a cut sequence; UTF-8 letters kept */
  const char *in = "a\x1b[31m\x07\x7f\xc2\x9b\xe2\x80\xae\xc3\xa9\xff\xe2\x82|\\";
  cp_quote_text(out, sizeof out, in, strlen(in), 0);
  CHECK_MSG(!strcmp(out, "a\\x1b[31m\\x07\\x7f\\xc2\\x9b\\xe2\\x80\\xae\xc3\xa9\\xff\\xe2\\x82|\\"), "got '%s'", out);
  char twice[256]; /* quoting twice changes nothing: a message may wrap a quoted one */
  cp_quote_text(twice, sizeof twice, out, strlen(out), 0);
  CHECK(!strcmp(twice, out));
  cp_quote_text(out, sizeof out, "t\tl\nr\r", 6, 0);
  CHECK(!strcmp(out, "t l r "));
  cp_quote_text(out, sizeof out, "t\tl\nr\r", 6, CP_QUOTE_LINES);
  CHECK(!strcmp(out, "t l\nr "));
  /* 4 * len + 4 bytes hold any text whole; less cuts it with "..." inside the buffer */
  const char esc8[] = "\x1b\x1b\x1b\x1b\x1b\x1b\x1b\x1b";
  CHECK(cp_quote_text(out, 4 * 8 + 4, esc8, 8, 0) == 32 && strlen(out) == 32);
  CHECK(cp_quote_text(out, 20, esc8, 8, 0) == strlen(out) && strlen(out) < 20 && strstr(out, "..."));
  char m[CP_QUOTE_MASKED_CAP];
  cp_quote_masked(m, "a\x1b\xc2\x9b\xff\xc3\xa9", 7);
  CHECK_MSG(!strcmp(m, "a???\xc3\xa9"), "masked '%s'", m);
  CHECK(cp_quote_cp_safe('a') && cp_quote_cp_safe(0xe9) && cp_quote_cp_safe(0x1f600));
  CHECK(!cp_quote_cp_safe(0x1b) && !cp_quote_cp_safe(0x7f) && !cp_quote_cp_safe(0x85) && !cp_quote_cp_safe(0x202e) &&
        !cp_quote_cp_safe(0x2066));
}

int main(void) {
  cp_error_set(CP_EARG, "inner %s", "reason");
  CHECK_RC(CP_EIO, cp_error_set(CP_EIO, "outer: %s (wrapped)", cp_error_message()));
  CHECK_MSG(strcmp(cp_error_message(), "outer: inner reason (wrapped)") == 0, "message '%s'", cp_error_message());
  CHECK(cp_error_code() == CP_EIO);
  /* the message's own text after a prefix longer than it */
  cp_error_set(CP_EARG, "x");
  cp_error_set(CP_EARG, "a long prefix before the old message: %s|%s", cp_error_message(), cp_error_message());
  CHECK_MSG(strcmp(cp_error_message(), "a long prefix before the old message: x|x") == 0, "message '%s'",
            cp_error_message());
  /* one line: newlines become spaces */
  cp_error_set(CP_EARG, "two\nlines\r");
  CHECK(strcmp(cp_error_message(), "two lines ") == 0);
  /* every message: a name from a file cannot carry a control byte or invalid UTF-8 to a terminal */
  cp_error_set(CP_EARG, "f: tensor '%s'", "x\x1b]0;t\x07\xff");
  CHECK_MSG(!strcmp(cp_error_message(), "f: tensor 'x\\x1b]0;t\\x07\\xff'"), "message '%s'", cp_error_message());
  quote_text();
  cp_error_clear();
  CHECK(cp_error_code() == 0 && cp_error_message()[0] == '\0');
  return test_finish();
}
