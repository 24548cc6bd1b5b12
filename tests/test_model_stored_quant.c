/* GGUF quantised matrices opened as stored (cp_model_open_ex stored_dtype, model.h): the golden
 * Llama llama_rope2 written with `convert --to gguf --dtype q8_0` (cp_gguf_export, the only quant
 * ctxpatch writes), and any GGUF named in argv (tests/test_model_stored_q4.sh passes Q4_K and
 * Q4_0 files made by tests/gguf/requant.py, ggml's reference quantisers). For each file:
 *   - every quantised matrix keeps its block dtype and points into the file's mapping, not into
 *     a float32 copy, but llama's q/k: their rows are reordered on load, into an owned copy that
 *     keeps the block dtype (whole rows of blocks moved);
 *   - the logits equal those of the same file opened with full dequantisation (cp_model_open)
 *     bit for bit: the engine decodes tiles exactly and multiplies float32 matrices with the same
 *     tile kernel in the same K blocks (engine/kerntile.h), so each product sees the same floats
 *     in the same order;
 *   - a GGUF whose matrices are all F32 keeps none as a block type.
 * And for the Q8_0 file: its matrices take 34/128 of the float32 bytes, and greedy decoding on them
 * (one row per step: the Q8_0 GEMV of engine/kernq8.h, int16 activations) gives logits within the
 * goldens' tolerance of the dequantised model's, the same bits from the AVX2 and the portable
 * kernels, and other bits than the widened-tile path that CTXPATCH_WEIGHTS=f32 forces (so the
 * direct kernel ran). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/import/checkpoint.h"
#include "ctxpatch/export/gguf_export.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/engine/engine.h"
#include "ctxpatch/formats/gguf.h"
#include "engine/kern16.h"
#include "stored_steps.h"
#include "test.h"

enum { N_IDS = 40, N_NEW = 6, N_PROMPT = 9 };

typedef struct {
  const char *lo, *hi; /* the file's mapping [lo, hi) */
  int blocks;          /* matrices kept as a block type */
  int bad;             /* block matrices outside the mapping */
} map_check;

/* Counts a block matrix; `copy`: it must lie outside the mapping (llama q/k), else inside. */
static void check_matrix(map_check *c, const void *w, cp_dtype dtype, int n_out, int n_in, bool copy) {
  if (!w || !cp_dtype_is_block(dtype)) return;
  c->blocks++;
  const char *p = w;
  uint64_t bytes = (uint64_t)n_out * cp_dtype_span(dtype, (uint64_t)n_in);
  bool inside = p >= c->lo && p <= c->hi && bytes <= (uint64_t)(c->hi - p);
  if (inside == copy) c->bad++;
}

static float *logits_of(const cp_model *m, const int64_t *ids) {
  cp_engine *e = NULL;
  float *out = malloc((size_t)N_IDS * (size_t)m->vocab * sizeof *out);
  CHECK_RC(0, cp_engine_create(&e, m, NULL, NULL));
  if (e && out) CHECK_RC(0, cp_engine_forward(e, out, ids, N_IDS, NULL, 0));
  cp_engine_free(e);
  return out;
}

/* Decoding on the Q8_0 file (see the top). */
static void check_decode_q8(const char *path) {
  cp_model *s = NULL, *f = NULL;
  cp_model_open_params op;
  cp_model_open_params_init(&op);
  op.stored_dtype = true;
  CHECK_RC(0, cp_model_open_ex(&s, path, &op));
  CHECK_RC(0, cp_model_open(&f, path));
  if (!s || !f) goto done;
  CHECK_MSG(matrix_bytes(s) * 128 == matrix_bytes(f) * 34, "Q8_0 matrices %llu bytes, float32 %llu",
            (unsigned long long)matrix_bytes(s), (unsigned long long)matrix_bytes(f));
  int64_t ids[N_PROMPT];
  for (int i = 0; i < N_PROMPT; i++) ids[i] = (i * 37 + 5) % s->vocab;
  check_decode_kernels(s, f, ids, N_PROMPT, N_NEW, "Q8_0 GEMV", "the dequantised model");
done:
  cp_model_free(s);
  cp_model_free(f);
}

/* Opens `path` stored and fully dequantised and checks the points above; returns the number of
 * matrices kept as a block type. */
static int check_file(const char *path) {
  cp_model *s = NULL, *f = NULL;
  cp_model_open_params op;
  cp_model_open_params_init(&op);
  op.stored_dtype = true;
  CHECK_RC(0, cp_model_open_ex(&s, path, &op));
  CHECK_RC(0, cp_model_open(&f, path));
  map_check c = {0};
  if (!s || !f) goto done;
  /* the mapping: a tensor's bytes minus its file offset, for the file's size */
  const cp_gguf_file *g = cp_checkpoint_gguf(s->ck);
  struct stat st;
  CHECK(g != NULL && stat(path, &st) == 0);
  if (!g) goto done;
  for (size_t i = 0; i < cp_gguf_count(g) && !c.lo; i++) {
    cp_dtype dt;
    const char *b = cp_gguf_tensor_blocks(&dt, g, i);
    if (b) c.lo = b - cp_gguf_tensor_file_offset(g, i), c.hi = c.lo + st.st_size;
  }
  const int V = s->vocab, D = s->d_model;
  check_matrix(&c, s->embed, s->embed_dtype, V, D, false);
  if (s->lm_head != s->embed) check_matrix(&c, s->lm_head, s->lm_head_dtype, V, D, false);
  for (int l = 0; l < s->decoder.n_layers; l++) {
    const cp_layer *ly = &s->decoder.layers[l];
    const cp_linear *lin[7] = {&ly->q, &ly->k, &ly->v, &ly->o, &ly->gate, &ly->up, &ly->down};
    for (int i = 0; i < 7; i++)
      check_matrix(&c, lin[i]->w, lin[i]->dtype, lin[i]->n_out, lin[i]->n_in, s->family == CP_FAMILY_LLAMA && i < 2);
    const cp_linear *fl[7] = {&f->decoder.layers[l].q,   &f->decoder.layers[l].k,    &f->decoder.layers[l].v,
                              &f->decoder.layers[l].o,   &f->decoder.layers[l].gate, &f->decoder.layers[l].up,
                              &f->decoder.layers[l].down};
    for (int i = 0; i < 7; i++) CHECK(!fl[i]->w || fl[i]->dtype == CP_F32);
  }
  CHECK_MSG(c.bad == 0, "%s: %d block matrices lie outside the file's mapping (or q/k inside it)", path, c.bad);
  int64_t ids[N_IDS];
  for (int i = 0; i < N_IDS; i++) ids[i] = (i * 37 + 5) % V;
  float *ls = logits_of(s, ids), *lf = logits_of(f, ids);
  if (ls && lf) {
    size_t n = (size_t)N_IDS * (size_t)V, differ = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
      if (memcmp(&ls[i], &lf[i], sizeof *ls)) differ++;
      worst = fmax(worst, fabs((double)ls[i] - lf[i]) / fmax(1.0, fabs(lf[i])));
    }
    CHECK_MSG(differ == 0, "%s: %zu of %zu logits differ from the dequantised model (worst %g)", path, differ, n,
              worst);
  }
  free(ls), free(lf);
done:
  cp_model_free(s);
  cp_model_free(f);
  return c.blocks;
}

int main(int argc, char **argv) {
  const char *src_dir = test_env("CTXPATCH_SOURCE_DIR"), *build = test_env("CTXPATCH_BUILD_DIR");
  char model_dir[2048], tmp[2048], q8[2100], f32[2100];
  snprintf(model_dir, sizeof model_dir, "%.1900s/tests/goldens/engine/models/llama_rope2", src_dir);
  snprintf(tmp, sizeof tmp, "%.1900s/test_model_stored_quant.XXXXXX", build);
  CHECK(mkdtemp(tmp) != NULL);
  snprintf(q8, sizeof q8, "%s/q8.gguf", tmp);
  snprintf(f32, sizeof f32, "%s/f32.gguf", tmp);
  cp_gguf_export_params p = {0};
  p.type = CP_GGML_Q8_0;
  CHECK_RC(0, cp_gguf_export(NULL, model_dir, q8, &p));
  p.type = CP_GGML_F32;
  CHECK_RC(0, cp_gguf_export(NULL, model_dir, f32, &p));

  /* q8_0: embedding, head and all 7 matrices of both layers (q/k as reordered Q8_0 copies) */
  int n = check_file(q8);
  CHECK_MSG(n == 2 + 2 * 7, "q8_0: %d matrices kept as Q8_0, want 16", n);
  {
    cp_model *m = NULL;
    cp_model_open_params op;
    cp_model_open_params_init(&op);
    op.stored_dtype = true;
    CHECK_RC(0, cp_model_open_ex(&m, q8, &op));
    if (m) {
      CHECK(m->embed_dtype == CP_Q8_0 && m->lm_head_dtype == CP_Q8_0);
      CHECK(m->decoder.layers[0].v.dtype == CP_Q8_0 && m->decoder.layers[1].down.dtype == CP_Q8_0);
      CHECK(m->decoder.layers[0].q.dtype == CP_Q8_0 && m->decoder.layers[1].k.dtype == CP_Q8_0);
    }
    cp_model_free(m);
  }
  check_decode_q8(q8);
  CHECK_MSG(check_file(f32) == 0, "an F32 GGUF kept a block matrix");
  for (int i = 1; i < argc; i++) {
    int k = check_file(argv[i]);
    CHECK_MSG(k > 0, "%s: no matrix kept quantised", argv[i]);
    printf("%s: %d matrices kept as blocks\n", argv[i], k);
  }
  unlink(q8);
  unlink(f32);
  rmdir(tmp);
  return test_finish();
}
