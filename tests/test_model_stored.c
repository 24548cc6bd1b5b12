/* Models opened with their matrices as stored (cp_model_open_ex, include/ctxpatch/import/model.h)
 * on the BF16 golden model llama_rope2: the matrices stay BF16; a copy of the model with one byte
 * of one matrix changed, opened with share_from, uses the original's memory for every other
 * matrix and its own for the changed one, and gives the same logits as the copy opened on its
 * own (so nothing was shared that differs); cp_engine_forward_blocks hands out the logits of
 * cp_engine_forward in blocks, and stops on the callback's error. The BF16 matrices take half the
 * bytes of the float32 ones, and greedy decoding on them (one row per step: the 16-bit GEMV of
 * engine/kern16.h) gives logits within the goldens' tolerance of the float32 model's, the same bits
 * from the AVX2 and the portable kernels, and other bits than the widened-tile path that
 * CTXPATCH_WEIGHTS=f32 forces (so the direct kernels did run). */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/import/model.h"
#include "ctxpatch/engine/engine.h"
#include "ctxpatch/formats/safetensors.h"
#include "engine/kern16.h"
#include "stored_steps.h"
#include "test.h"

#define Q0 "model.layers.0.self_attn.q_proj.weight"
enum { N_IDS = 70, N_NEW = 6, N_PROMPT = 9 };

/* A copy of src/{config.json, model.safetensors} in dir with the low byte of tensor Q0's first
 * element flipped. */
static void copy_and_flip(const char *src, const char *dir) {
  const char *files[2] = {"config.json", "model.safetensors"};
  for (int i = 0; i < 2; i++)
    CHECK_RC(0, cp_copy_file_atomic(NULL, test_path(dir, files[i]), test_path(src, files[i]), (size_t)1 << 30));
  cp_st_file *f = NULL;
  CHECK_RC(0, cp_st_open(&f, test_path(dir, "model.safetensors")));
  if (!f) return;
  long long idx = cp_st_find_index(f, Q0);
  CHECK(idx >= 0);
  uint64_t off = idx >= 0 ? cp_st_tensor_file_offset(f, (size_t)idx) : 0;
  cp_st_free(f);
  int fd = open(test_path(dir, "model.safetensors"), O_RDWR);
  unsigned char b = 0;
  CHECK(fd >= 0 && pread(fd, &b, 1, (off_t)off) == 1);
  b ^= 0x40;
  CHECK(fd >= 0 && pwrite(fd, &b, 1, (off_t)off) == 1);
  if (fd >= 0) close(fd);
}

static float *logits_of(const cp_model *m, const int64_t *ids) {
  cp_engine *e = NULL;
  float *out = malloc((size_t)N_IDS * (size_t)m->vocab * sizeof *out);
  CHECK_RC(0, cp_engine_create(&e, m, NULL, NULL));
  if (e && out) CHECK_RC(0, cp_engine_forward(e, out, ids, N_IDS, NULL, 0));
  cp_engine_free(e);
  return out;
}

static void check_decode(const cp_model *a, const cp_model *a32, const int64_t *ids) {
  /* the resident matrices: BF16 is half of float32 */
  CHECK_MSG(2 * matrix_bytes(a) == matrix_bytes(a32), "BF16 matrices %llu bytes, float32 %llu",
            (unsigned long long)matrix_bytes(a), (unsigned long long)matrix_bytes(a32));
  check_decode_kernels(a, a32, ids, N_PROMPT, N_NEW, "16-bit kernels", "the float32 model");

  cp_engine *e = NULL;
  setenv("CTXPATCH_WEIGHTS", "bf16", 1);
  CHECK_RC(CP_EARG, cp_engine_create(&e, a, NULL, NULL));
  CHECK(e == NULL);
  unsetenv("CTXPATCH_WEIGHTS");
}

typedef struct {
  const float *want; /* [N_IDS, vocab] */
  int vocab;
  int64_t next_row, calls, stop_at;
  double worst;
} blocks_seen;

static int on_block(void *ctx, const float *logits, int64_t row0, int64_t n_rows) {
  blocks_seen *s = ctx;
  CHECK_MSG(row0 == s->next_row && n_rows > 0 && n_rows <= CP_ENGINE_LOGIT_BLOCK, "block at %lld of %lld rows",
            (long long)row0, (long long)n_rows);
  for (int64_t i = 0; i < n_rows * s->vocab; i++) {
    double want = s->want[(size_t)row0 * (size_t)s->vocab + (size_t)i];
    s->worst = fmax(s->worst, fabs((double)logits[i] - want) / fmax(1.0, fabs(want)));
  }
  s->next_row = row0 + n_rows;
  if (++s->calls == s->stop_at) return cp_error_set(CP_EIO, "stop here");
  return 0;
}

int main(void) {
  const char *src_dir = test_env("CTXPATCH_SOURCE_DIR"), *build = test_env("CTXPATCH_BUILD_DIR");
  char model_dir[2048], tmp[2048];
  snprintf(model_dir, sizeof model_dir, "%.1900s/tests/goldens/engine/models/llama_rope2", src_dir);
  snprintf(tmp, sizeof tmp, "%.1900s/test_model_stored.XXXXXX", build);
  CHECK(mkdtemp(tmp) != NULL);
  copy_and_flip(model_dir, tmp);

  cp_model *a = NULL, *b = NULL, *c = NULL, *a32 = NULL;
  cp_model_open_params op;
  cp_model_open_params_init(&op);
  op.stored_dtype = true;
  CHECK_RC(0, cp_model_open_ex(&a, model_dir, &op));
  CHECK_RC(0, cp_model_open_ex(&c, tmp, &op)); /* the changed copy on its own */
  op.share_from = a;
  CHECK_RC(0, cp_model_open_ex(&b, tmp, &op)); /* the changed copy over the original */
  CHECK_RC(0, cp_model_open(&a32, model_dir));
  if (!a || !b || !c || !a32) goto done;

  const cp_layer *la = a->decoder.layers, *lb = b->decoder.layers, *lc = c->decoder.layers;
  CHECK(la[0].q.dtype == CP_BF16 && a->embed_dtype == CP_BF16 && a->lm_head_dtype == CP_BF16);
  CHECK(a32->decoder.layers[0].q.dtype == CP_F32 && a32->embed_dtype == CP_F32);
  /* every matrix but the changed one is the original's memory */
  CHECK(lb[0].q.w != la[0].q.w);
  CHECK(lb[0].k.w == la[0].k.w && lb[0].v.w == la[0].v.w && lb[0].o.w == la[0].o.w);
  CHECK(lb[1].q.w == la[1].q.w && lb[1].down.w == la[1].down.w);
  CHECK(b->embed == a->embed && b->lm_head == a->lm_head);
  uint64_t q0 = (uint64_t)la[0].q.n_out * (uint64_t)la[0].q.n_in * 2;
  CHECK_MSG(b->shared_bytes == matrix_bytes(a) - q0, "shared %llu bytes, want %llu",
            (unsigned long long)b->shared_bytes, (unsigned long long)(matrix_bytes(a) - q0));
  CHECK(c->shared_bytes == 0 && lc[0].k.w != la[0].k.w);

  int64_t ids[N_IDS];
  for (int i = 0; i < N_IDS; i++) ids[i] = (i * 37 + 5) % a->vocab;
  float *la_l = logits_of(a, ids), *lb_l = logits_of(b, ids), *lc_l = logits_of(c, ids), *l32 = logits_of(a32, ids);
  size_t nl = (size_t)N_IDS * (size_t)a->vocab;
  if (la_l && lb_l && lc_l && l32) {
    /* shared or not, the same weights give the same logits; the flipped byte changes them */
    CHECK(memcmp(lb_l, lc_l, nl * sizeof *lb_l) == 0);
    CHECK(memcmp(la_l, lb_l, nl * sizeof *la_l) != 0);
    double worst = 0;
    for (size_t i = 0; i < nl; i++) worst = fmax(worst, fabs((double)la_l[i] - l32[i]) / fmax(1.0, fabs(l32[i])));
    CHECK_MSG(worst <= 1e-5, "stored vs float32 logits differ by %g", worst);

    cp_engine *e = NULL;
    CHECK_RC(0, cp_engine_create(&e, a, NULL, NULL));
    blocks_seen s = {la_l, a->vocab, 0, 0, -1, 0};
    if (e) CHECK_RC(0, cp_engine_forward_blocks(e, on_block, &s, ids, N_IDS, NULL, 0));
    CHECK_MSG(s.next_row == N_IDS && s.calls == (N_IDS + CP_ENGINE_LOGIT_BLOCK - 1) / CP_ENGINE_LOGIT_BLOCK,
              "blocks covered %lld rows in %lld calls", (long long)s.next_row, (long long)s.calls);
    CHECK_MSG(s.worst <= 1e-5, "block logits differ from cp_engine_forward by %g", s.worst);
    blocks_seen stop = {la_l, a->vocab, 0, 0, 2, 0};
    if (e) CHECK_RC(CP_EIO, cp_engine_forward_blocks(e, on_block, &stop, ids, N_IDS, NULL, 0));
    CHECK(stop.calls == 2);
    cp_engine_free(e);
  }
  free(la_l), free(lb_l), free(lc_l), free(l32);
  check_decode(a, a32, ids);
done:
  cp_model_free(b); /* before a, whose mapping it borrows */
  cp_model_free(a);
  cp_model_free(c);
  cp_model_free(a32);
  unlink(test_path(tmp, "config.json"));
  unlink(test_path(tmp, "model.safetensors"));
  rmdir(tmp);
  return test_finish();
}
