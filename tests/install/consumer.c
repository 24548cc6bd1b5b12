/* A program outside the tree that links the installed libctxpatch: opens a model folder, runs one
 * forward pass on the ids of a golden file and compares the logits with the golden (written by
 * PyTorch, examples/probe-models/check.py) to max|a-b|/max|b| <= 1e-4.
 * usage: consumer MODEL IDS.txt LOGITS.f32 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <ctxpatch/ctxpatch.h>

static int read_ids(int64_t *ids, int max, const char *path) {
  FILE *f = fopen(path, "r");
  int n = 0;
  long long v;
  if (!f) return -1;
  while (n < max && fscanf(f, " %lld ,", &v) == 1) ids[n++] = v;
  fclose(f);
  return n;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: consumer MODEL IDS.txt LOGITS.f32\n");
    return 2;
  }
  static int64_t ids[4096];
  int n = read_ids(ids, 4096, argv[2]);
  cp_model *m = NULL;
  cp_engine *e = NULL;
  float *got = NULL, *want = NULL;
  int status = 1, rc;
  if (n <= 0) {
    fprintf(stderr, "consumer: %s: no ids\n", argv[2]);
    return 2;
  }
  printf("libctxpatch %s (%s)\n", cp_version(), cp_build_options());
  cp_engine_params params;
  cp_engine_params_init(&params);
  if ((rc = cp_model_open(&m, argv[1])) || (rc = cp_engine_create(&e, m, NULL, &params))) {
    fprintf(stderr, "consumer: %s: %s\n", cp_err_name(rc), cp_error_message());
    goto done;
  }
  size_t count = (size_t)cp_engine_output_rows(e, n, 0) * (size_t)m->vocab;
  got = malloc(count * sizeof *got);
  want = malloc(count * sizeof *want);
  FILE *g = fopen(argv[3], "rb");
  size_t read = g && want ? fread(want, sizeof *want, count, g) : 0;
  if (g) fclose(g);
  if (!got || read != count) {
    fprintf(stderr, "consumer: %s: expected %zu floats, read %zu\n", argv[3], count, read);
    goto done;
  }
  if ((rc = cp_engine_forward(e, got, ids, n, NULL, 0))) {
    fprintf(stderr, "consumer: forward: %s\n", cp_error_message());
    goto done;
  }
  double err = 0, scale = 0;
  for (size_t i = 0; i < count; i++) {
    err = fmax(err, fabs((double)got[i] - want[i]));
    scale = fmax(scale, fabs((double)want[i]));
  }
  printf("%d ids, %zu logits, rel err %.2e\n", n, count, err / scale);
  status = err / scale <= 1e-4 ? 0 : 1;
done:
  free(got);
  free(want);
  cp_engine_free(e);
  cp_model_free(m);
  return status;
}
