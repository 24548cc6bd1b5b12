/* Every file of the hostile safetensors corpus (tests/hostile/hostile_safetensors.py) must be
 * refused with exactly its expected code and a one-line message naming the file. */
#include "ctxpatch/formats/safetensors.h"
#include "test.h"

int main(void) {
  const char *root = test_env("CTXPATCH_HOSTILE");
  const char *dir = test_path(root, "safetensors");
  const char *tsv = test_path(dir, "expected.tsv");
  FILE *fp = fopen(tsv, "r");
  if (!fp) {
    fprintf(stderr, "%s: cannot open (the make_hostile_corpus fixture should have written it)\n", tsv);
    return 1;
  }
  char line[1024];
  int cases = 0;
  while (fgets(line, sizeof line, fp)) {
    line[strcspn(line, "\r\n")] = '\0';
    char *tab = strchr(line, '\t');
    if (!tab) continue;
    *tab = '\0';
    const char *name = line, *want = tab + 1;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cp_error_clear();
    cp_st_file *f = NULL;
    int rc = cp_st_open(&f, path);
    const char *msg = cp_error_message();
    printf("%-44s %-26s %s\n", name, cp_err_name(rc), msg);
    CHECK_MSG(strcmp(cp_err_name(rc), want) == 0, "%s: got %s, want %s (%s)", name, cp_err_name(rc), want, msg);
    CHECK_MSG(f == NULL, "%s: handle returned on failure", name);
    CHECK_MSG(strstr(msg, path) != NULL, "%s: message does not name the file: %s", name, msg);
    CHECK_MSG(strchr(msg, '\n') == NULL, "%s: message is not one line", name);
    CHECK_MSG(strstr(msg, "offset") != NULL || strstr(msg, "tensor '") != NULL,
              "%s: message names no offset or tensor: %s", name, msg);
    cp_st_free(f);
    cases++;
  }
  fclose(fp);
  CHECK_MSG(cases >= 25, "only %d hostile cases", cases);
  return test_finish();
}
