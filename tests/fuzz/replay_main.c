/* Runs a fuzz harness over files without libFuzzer, for the regression corpus in every build
 * (normal and sanitizer) and in CTest: each argument is a file or a folder of files. Prints one
 * line per file and "N passed, 0 failed" at the end; a crash, sanitizer report or hang is the
 * failure (CTest's timeout catches hangs). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0, n;
  uint8_t chunk[65536];
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (len + n > cap) {
      cap = (len + n) * 2;
      uint8_t *grown = realloc(buf, cap);
      if (!grown) {
        free(buf);
        fclose(f);
        return -1;
      }
      buf = grown;
    }
    memcpy(buf + len, chunk, n);
    len += n;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(buf ? buf : (const uint8_t *)"", len);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int passed = 0, failed = 0;
  for (int a = 1; a < argc; a++) {
    struct stat st;
    if (stat(argv[a], &st) != 0) {
      fprintf(stderr, "replay: %s: not found\n", argv[a]);
      failed++;
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      if (run_file(argv[a]) == 0) passed++; else failed++;
      continue;
    }
    struct dirent **names = NULL;
    int n = scandir(argv[a], &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[a], names[i]->d_name);
      if (names[i]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        if (run_file(path) == 0) passed++; else failed++;
      }
      free(names[i]);
    }
    free(names);
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
