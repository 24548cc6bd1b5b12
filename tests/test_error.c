/* base/error.c: the last error's code and one-line message. A message may wrap the previous one
 * (cp_error_set(code, "%s: ...", cp_error_message())): formatting into the buffer it reads from
 * lost or garbled it before the message was formatted into a copy first. */
#include <string.h>

#include "ctxpatch/base/error.h"
#include "test.h"

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
  cp_error_clear();
  CHECK(cp_error_code() == 0 && cp_error_message()[0] == '\0');
  return test_finish();
}
