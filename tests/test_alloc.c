/* base/alloc.c and the path tests of base/paths.c: the one out-of-memory error (cp_nomem and the
 * CP_CHECK_ALLOC macros behind it), array growth with overflow checks that leaves the array
 * unchanged on failure, and the suffix / regular-file tests every floor above base uses. */
#include <stdint.h>
#include <unistd.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/io.h"
#include "test.h"

static int check_alloc(const void *p) {
  CP_CHECK_ALLOC(p, "thing");
  return 0;
}

static int check_alloc_goto(const void *p, int *cleaned) {
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(p, "other thing");
done:
  (*cleaned)++;
  return rc;
}

int main(void) {
  /* one message shape for every out-of-memory error */
  CHECK(cp_nomem("%s: tensor '%s'", "m.safetensors", "w") == CP_ENOMEM);
  CHECK(cp_error_code() == CP_ENOMEM && !strcmp(cp_error_message(), "m.safetensors: tensor 'w': out of memory"));
  CHECK(check_alloc("x") == 0);
  CHECK(check_alloc(NULL) == CP_ENOMEM && !strcmp(cp_error_message(), "thing: out of memory"));
  int cleaned = 0;
  CHECK(check_alloc_goto("x", &cleaned) == 0 && cleaned == 1);
  CHECK(check_alloc_goto(NULL, &cleaned) == CP_ENOMEM && cleaned == 2);
  CHECK(!strcmp(cp_error_message(), "other thing: out of memory"));

  /* reserve: doubles, keeps the contents, refuses byte sizes that overflow and leaves the array */
  int *v = NULL;
  size_t cap = 0;
  CHECK_RC(0, CP_ARRAY_RESERVE(v, cap, 3, "ints"));
  CHECK(v && cap >= 3);
  v[0] = 7, v[2] = 9;
  size_t old_cap = cap;
  CHECK_RC(0, CP_ARRAY_RESERVE(v, cap, old_cap + 1, "ints"));
  CHECK(cap == 2 * old_cap && v[0] == 7 && v[2] == 9);
  int *before = v;
  old_cap = cap;
  CHECK(CP_ARRAY_RESERVE(v, cap, SIZE_MAX / 2, "ints") == CP_EOVERFLOW);
  CHECK(v == before && cap == old_cap && strstr(cp_error_message(), "ints: "));
  free(v);

  /* resize: exact counts for lists that grow one at a time */
  char **list = NULL;
  for (size_t n = 1; n <= 5; n++) {
    CHECK_RC(0, CP_ARRAY_RESIZE(list, n, "list"));
    list[n - 1] = (char *)"x";
  }
  CHECK(list && list[4][0] == 'x');
  char **kept = list;
  CHECK(CP_ARRAY_RESIZE(list, SIZE_MAX / 4, "list") == CP_EOVERFLOW && list == kept);
  CHECK(strstr(cp_error_message(), "list: ") == cp_error_message());
  free(list);

  /* suffixes */
  CHECK(cp_path_has_suffix("model.onnx", ".onnx"));
  CHECK(cp_path_has_suffix("m/model.safetensors.index.json", ".index.json"));
  CHECK(cp_path_has_suffix(".onnx", ".onnx"));
  CHECK(!cp_path_has_suffix("onnx", ".onnx"));
  CHECK(!cp_path_has_suffix("model.onnx.data", ".onnx"));
  CHECK(cp_path_has_suffix("anything", ""));

  /* regular files only: a folder, a missing path and a device are not files */
  char tmpl[] = "/tmp/ctxpatch_test_alloc_XXXXXX";
  int fd = mkstemp(tmpl);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  CHECK(cp_path_is_file(tmpl));
  CHECK(!cp_path_is_file("/tmp"));
  CHECK(!cp_path_is_file("/dev/null"));
  unlink(tmpl);
  CHECK(!cp_path_is_file(tmpl));
  return test_finish();
}
