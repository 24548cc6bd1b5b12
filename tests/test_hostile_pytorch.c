/* Every file of the hostile PyTorch corpus (tests/hostile/hostile_pytorch.py) is refused with
 * exactly its expected code, and the message names the file. CP_OK rows are the well-formed
 * controls built with the same helpers. */
#include <stdint.h>

#include "ctxpatch/formats/pytorch.h"
#include "test.h"

/* Code number of a name such as "CP_EPKL_GLOBAL"; 1 when unknown (never a real code). */
static int code_of(const char *name) {
  for (int c = 0; c >= -1000; c--)
    if (strcmp(cp_err_name(c), name) == 0) return c;
  return 1;
}

int main(void) {
  char dir[4096], tsv[4200];
  snprintf(dir, sizeof dir, "%s/pytorch", test_env("CTXPATCH_HOSTILE"));
  snprintf(tsv, sizeof tsv, "%s/expected.tsv", dir);
  FILE *fp = fopen(tsv, "r");
  CHECK_MSG(fp != NULL, "cannot open %s (run make_hostile_corpus first)", tsv);
  if (!fp) return test_finish();
  char line[1024];
  int cases = 0, refusals = 0;
  while (fgets(line, sizeof line, fp)) {
    line[strcspn(line, "\r\n")] = 0;
    char *tab = strchr(line, '\t');
    if (!tab) continue;
    *tab = 0;
    const char *name = line, *want_name = tab + 1;
    int want = code_of(want_name);
    CHECK_MSG(want <= 0, "%s: unknown code name %s", name, want_name);
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cp_error_clear();
    cp_pt_file *f = NULL;
    int rc = cp_pt_open(&f, path);
    CHECK_MSG(rc == want, "%s: got %s, want %s (%s)", name, cp_err_name(rc), want_name,
              cp_error_message());
    if (rc < 0) {
      refusals++;
      CHECK_MSG(f == NULL, "%s: handle set on failure", name);
      CHECK_MSG(strstr(cp_error_message(), path) != NULL, "%s: message does not name the file: %s",
                name, cp_error_message());
      CHECK_MSG(strchr(cp_error_message(), '\n') == NULL, "%s: message is not one line", name);
      printf("%-32s %-22s %s\n", name, cp_err_name(rc), cp_error_message());
    } else {
      /* controls: a float32 tensor 'w' = [1, 2, 3, 4], and every tensor readable */
      printf("%-32s %-22s %zu tensors\n", name, "CP_OK", f ? cp_pt_count(f) : 0);
      int64_t wi = f ? cp_pt_find(f, "w") : -1;
      CHECK_MSG(wi >= 0, "%s: no tensor 'w'", name);
      for (size_t i = 0; f && i < cp_pt_count(f); i++) {
        const cp_tensor *t = cp_pt_tensor(f, i);
        uint8_t buf[64];
        CHECK(t->nbytes <= sizeof buf);
        if (t->nbytes <= sizeof buf) CHECK_RC(0, cp_pt_read(f, i, 0, buf, (size_t)t->nbytes));
      }
      if (wi >= 0) {
        const cp_tensor *t = cp_pt_tensor(f, (size_t)wi);
        float v[4] = {0};
        CHECK(t->dtype == CP_F32 && t->nbytes == 16);
        CHECK_RC(0, cp_pt_read(f, (size_t)wi, 0, v, sizeof v));
        CHECK(v[0] == 1.0f && v[1] == 2.0f && v[2] == 3.0f && v[3] == 4.0f);
      }
      cp_pt_free(f);
    }
    cases++;
  }
  fclose(fp);
  CHECK_MSG(cases >= 20, "only %d cases in %s", cases, tsv);
  printf("%d hostile PyTorch files, %d refused\n", cases, refusals);
  return test_finish();
}
