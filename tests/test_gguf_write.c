/* GGUF writer (formats/gguf_write.c): every value type and array kind read back by the GGUF reader,
 * tensor offsets aligned, F16/BF16 and Q8_0 bytes against hand-computed ggml encodings (roundf's
 * half away from zero included), deterministic bytes, and refusals that leave no file. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"
#include "ctxpatch/formats/gguf.h"
#include "ctxpatch/formats/gguf_write.h"
#include "test.h"

static char dir[] = "/tmp/ctxpatch-test-gguf-write-XXXXXX";

/* Stored bytes of tensor `name` in the file at `path` (caller frees). */
static unsigned char *stored(const cp_gguf_file *g, const char *path, const char *name, uint64_t *n) {
  int64_t i = cp_gguf_find(g, name);
  if (i < 0) return NULL;
  *n = cp_gguf_tensor_stored_bytes(g, (size_t)i);
  unsigned char *b = malloc(*n);
  FILE *f = fopen(path, "rb");
  if (!b || !f || fseek(f, (long)cp_gguf_tensor_file_offset(g, (size_t)i), SEEK_SET) || fread(b, 1, *n, f) != *n) {
    free(b);
    b = NULL;
  }
  if (f) fclose(f);
  return b;
}

static int write_sample(const char *path) {
  cp_gguf_writer *w = NULL;
  int rc = cp_gguf_writer_new(&w, path);
  if (rc) return rc;
  uint8_t u8 = 200;
  int16_t i16 = -300;
  int64_t i64 = -5000000000LL;
  int32_t arr_i[3] = {1, -2, 3};
  float arr_f[2] = {0.5f, -1.25f};
  const char *strs[3] = {"a", "", "\xc3\xa9t\xc3\xa9"};
  size_t lens[3] = {1, 0, 5};
  const int64_t s23[2] = {2, 3}, s4[1] = {4}, s12[2] = {1, 2}, s232[2] = {2, 32};
  if ((rc = cp_gguf_put_str(w, "general.architecture", "llama", 5)) ||
      (rc = cp_gguf_put_scalar(w, "t.u8", CP_GGUF_U8, &u8)) || (rc = cp_gguf_put_scalar(w, "t.i16", CP_GGUF_I16, &i16)) ||
      (rc = cp_gguf_put_u32(w, "t.u32", 4000000000u)) || (rc = cp_gguf_put_i32(w, "t.i32", -7)) ||
      (rc = cp_gguf_put_u64(w, "t.u64", 1ULL << 40)) || (rc = cp_gguf_put_scalar(w, "t.i64", CP_GGUF_I64, &i64)) ||
      (rc = cp_gguf_put_f32(w, "t.f32", 0.1f)) || (rc = cp_gguf_put_f64(w, "t.f64", 0.1)) ||
      (rc = cp_gguf_put_bool(w, "t.bool", true)) || (rc = cp_gguf_put_arr(w, "t.arr_i32", CP_GGUF_I32, arr_i, 3)) ||
      (rc = cp_gguf_put_arr(w, "t.arr_f32", CP_GGUF_F32, arr_f, 2)) ||
      (rc = cp_gguf_put_arr_str(w, "t.arr_str", strs, lens, 3)) ||
      (rc = cp_gguf_add_tensor(w, "f32", CP_GGML_F32, 2, s23)) || (rc = cp_gguf_add_tensor(w, "f16", CP_GGML_F16, 1, s4)) ||
      (rc = cp_gguf_add_tensor(w, "bf16", CP_GGML_BF16, 2, s12)) ||
      (rc = cp_gguf_add_tensor(w, "q8", CP_GGML_Q8_0, 2, s232)) || (rc = cp_gguf_writer_begin(w)))
    goto fail;
  float f32[6] = {1, 2, 3, 4, 5, 6}, f16[4] = {1.0f, -2.0f, 65504.0f, 1.0f + 1.0f / 2048}, bf[2] = {1.0f, 1.00390625f};
  float q[64];
  for (int j = 0; j < 32; j++) q[j] = (float)(j - 16);
  memset(q + 32, 0, 32 * sizeof *q);
  q[32] = 127.0f, q[33] = 2.5f, q[34] = -2.5f, q[35] = 0.5f;
  if ((rc = cp_gguf_write_data(w, f32, 12)) || (rc = cp_gguf_write_data(w, f32 + 3, 12)) ||
      (rc = cp_gguf_write_f32(w, f16, 4)) || (rc = cp_gguf_write_f32(w, bf, 2)) || (rc = cp_gguf_write_f32(w, q, 64)))
    goto fail;
  return cp_gguf_writer_commit(w, NULL);
fail:
  cp_gguf_writer_abort(w);
  return rc;
}

static void test_roundtrip(const char *path) {
  CHECK_RC(0, write_sample(path));
  cp_gguf_file *g = NULL;
  CHECK_RC(0, cp_gguf_open(&g, path));
  if (!g) return;
  int64_t iv;
  double dv;
  bool bv;
  const char *s;
  size_t len;
  cp_gguf_vtype et;
  uint64_t n;
  CHECK(cp_gguf_version(g) == 3 && cp_gguf_alignment(g) == 32 && cp_gguf_kv_count(g) == 14);
  CHECK(cp_gguf_get_int(&iv, g, "t.u8") == 0 && iv == 200 && cp_gguf_kv_type(g, 1) == CP_GGUF_U8);
  CHECK(cp_gguf_get_int(&iv, g, "t.i16") == 0 && iv == -300);
  CHECK(cp_gguf_get_int(&iv, g, "t.u32") == 0 && iv == 4000000000LL);
  CHECK(cp_gguf_get_int(&iv, g, "t.i64") == 0 && iv == -5000000000LL);
  CHECK(cp_gguf_get_int(&iv, g, "t.u64") == 0 && iv == (1LL << 40));
  CHECK(cp_gguf_get_f64(&dv, g, "t.f32") == 0 && dv == (double)0.1f);
  CHECK(cp_gguf_get_f64(&dv, g, "t.f64") == 0 && dv == 0.1);
  CHECK(cp_gguf_get_bool(&bv, g, "t.bool") == 0 && bv);
  CHECK(cp_gguf_get_str(&s, &len, g, "general.architecture") == 0 && len == 5 && !memcmp(s, "llama", 5));
  CHECK(cp_gguf_get_arr(&et, &n, g, "t.arr_i32") == 0 && et == CP_GGUF_I32 && n == 3);
  CHECK(cp_gguf_arr_int(&iv, g, "t.arr_i32", 1) == 0 && iv == -2);
  CHECK(cp_gguf_arr_f64(&dv, g, "t.arr_f32", 1) == 0 && dv == -1.25);
  CHECK(cp_gguf_arr_str(&s, &len, g, "t.arr_str", 1) == 0 && len == 0);
  CHECK(cp_gguf_arr_str(&s, &len, g, "t.arr_str", 2) == 0 && len == 5 && !memcmp(s, "\xc3\xa9t\xc3\xa9", 5));
  CHECK(cp_gguf_get_int(&iv, g, "general.alignment") == 0 && iv == 32);
  for (size_t i = 0; i < cp_gguf_count(g); i++) CHECK(cp_gguf_tensor_file_offset(g, i) % 32 == 0);
  const cp_tensor *t = cp_gguf_tensor(g, (size_t)cp_gguf_find(g, "f32"));
  CHECK(t && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 && ((const float *)t->data)[5] == 6.0f);
  uint64_t nb;
  unsigned char *b = stored(g, path, "f16", &nb);
  /* 1.0 0x3C00, -2.0 0xC000, 65504 0x7BFF, 1 + 2^-11 is halfway to 1 + 2^-10: even -> 0x3C00 */
  static const unsigned char f16w[8] = {0x00, 0x3C, 0x00, 0xC0, 0xFF, 0x7B, 0x00, 0x3C};
  CHECK(b && nb == 8 && !memcmp(b, f16w, 8));
  free(b);
  b = stored(g, path, "bf16", &nb);
  /* 1.0 0x3F80; 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: even -> 0x3F80 */
  static const unsigned char bfw[4] = {0x80, 0x3F, 0x80, 0x3F};
  CHECK(b && nb == 4 && !memcmp(b, bfw, 4));
  free(b);
  b = stored(g, path, "q8", &nb);
  CHECK(b && nb == 68);
  if (b && nb == 68) {
    /* block 0: x = j - 16, d = 16/127 -> f16 0x3008; q = roundf(x * 127/16): -127, -119, ..., 119 */
    CHECK(b[0] == 0x08 && b[1] == 0x30);
    CHECK((int8_t)b[2] == -127 && (int8_t)b[3] == -119 && (int8_t)b[2 + 16] == 0 && (int8_t)b[2 + 31] == 119);
    /* block 1: d = 1 (0x3C00); 2.5 -> 3, -2.5 -> -3, 0.5 -> 1 (roundf, half away from zero) */
    CHECK(b[34] == 0x00 && b[35] == 0x3C);
    CHECK((int8_t)b[36] == 127 && (int8_t)b[37] == 3 && (int8_t)b[38] == -3 && (int8_t)b[39] == 1);
  }
  free(b);
  cp_gguf_free(g);
}

static bool dir_holds_only(const char *only) {
  DIR *d = opendir(dir);
  struct dirent *e;
  bool ok = true;
  while (d && (e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && (!only || strcmp(e->d_name, only))) ok = false;
  if (d) closedir(d);
  return ok;
}

static void test_refusals(const char *path) {
  cp_gguf_writer *w = NULL;
  const int64_t s31[1] = {31}, s4[1] = {4};
  CHECK_RC(0, cp_gguf_writer_new(&w, path));
  CHECK_RC(0, cp_gguf_put_u32(w, "k", 1));
  CHECK_RC(CP_EARG, cp_gguf_put_u32(w, "k", 2));
  CHECK_RC(CP_EARG, cp_gguf_put_u32(w, "", 2));
  CHECK_RC(CP_EARG, cp_gguf_put_u32(w, "bad\xff", 2));
  CHECK_RC(CP_EARG, cp_gguf_add_tensor(w, "q", CP_GGML_Q8_0, 1, s31));
  CHECK_RC(CP_EARG, cp_gguf_add_tensor(w, "q4", CP_GGML_Q4_0, 1, s4));
  CHECK_RC(CP_EARG, cp_gguf_add_tensor(w, "x", CP_GGML_F32, 0, s4));
  CHECK_RC(CP_EARG, cp_gguf_add_tensor(w, "a-name-of-sixty-four-bytes-or-more-is-refused-as-ggml-refuses-it", CP_GGML_F32,
                                       1, s4));
  CHECK_RC(0, cp_gguf_add_tensor(w, "t", CP_GGML_F32, 1, s4));
  CHECK_RC(CP_EARG, cp_gguf_add_tensor(w, "t", CP_GGML_F32, 1, s4));
  CHECK_RC(0, cp_gguf_writer_begin(w));
  CHECK_RC(CP_EARG, cp_gguf_put_u32(w, "late", 1));
  float x[5] = {0};
  CHECK_RC(CP_EARG, cp_gguf_write_data(w, x, 20)); /* past the tensor's 16 bytes */
  CHECK_RC(0, cp_gguf_write_data(w, x, 8));
  CHECK_RC(CP_EARG, cp_gguf_writer_commit(w, NULL)); /* 8 of 16 bytes */
  CHECK(access(path, F_OK) != 0 && dir_holds_only(NULL));
}

int main(void) {
  if (!mkdtemp(dir)) test_skip("cannot create a temporary folder");
  char *a = cp_path_join(dir, "a.gguf"), *b = cp_path_join(dir, "b.gguf"), *c = cp_path_join(dir, "c.gguf");
  test_roundtrip(a);
  CHECK_RC(0, write_sample(b));
  char ha[65] = "", hb[65] = "";
  CHECK(cp_sha256_file(ha, a) == 0 && cp_sha256_file(hb, b) == 0 && !strcmp(ha, hb));
  unlink(a);
  unlink(b);
  test_refusals(c);
  rmdir(dir);
  free(a);
  free(b);
  free(c);
  return test_finish();
}
