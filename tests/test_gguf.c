/* The GGUF reader (include/ctxpatch/formats/gguf.h) on files written by
 * tests/gguf/make_gguf_cases.py: valid files read back (metadata of every type, tensor views,
 * hand-computed Q8_0/Q4_0/Q4_K values, refusal of other quant types by name), and every hostile
 * case refused with its exact code and message (cases.tsv). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/formats/gguf.h"
#include "ctxpatch/formats/tensor.h"
#include "test.h"

static char dir[4096];

static const char *path_of(const char *name) {
  static char buf[4200];
  snprintf(buf, sizeof buf, "%s/%s", dir, name);
  return buf;
}

static float read_f32(const cp_gguf_file *f, const char *name, uint64_t i) {
  int64_t t = cp_gguf_find(f, name);
  float v = NAN;
  if (t < 0 || cp_gguf_read(f, (size_t)t, i * 4, &v, 4)) return NAN;
  return v;
}

static void test_metadata(const cp_gguf_file *f) {
  int64_t i;
  double d;
  bool b;
  const char *s;
  size_t len;
  cp_gguf_vtype et;
  uint64_t n;
  CHECK(cp_gguf_version(f) == 3 && cp_gguf_alignment(f) == 64 && cp_gguf_kv_count(f) == 16);
  CHECK_RC(0, cp_gguf_get_str(&s, &len, f, "general.architecture"));
  CHECK(len == 5 && !memcmp(s, "llama", 5));
  CHECK(cp_gguf_get_int(&i, f, "t.u8") == 0 && i == 200);
  CHECK(cp_gguf_get_int(&i, f, "t.i8") == 0 && i == -5);
  CHECK(cp_gguf_get_int(&i, f, "t.u16") == 0 && i == 60000);
  CHECK(cp_gguf_get_int(&i, f, "t.i16") == 0 && i == -300);
  CHECK(cp_gguf_get_int(&i, f, "t.i32") == 0 && i == -70000);
  CHECK(cp_gguf_get_int(&i, f, "t.u64") == 0 && i == (int64_t)1 << 40);
  CHECK(cp_gguf_get_int(&i, f, "t.i64") == 0 && i == -((int64_t)1 << 40));
  CHECK(cp_gguf_get_f64(&d, f, "t.f32") == 0 && d == 0.25);
  CHECK(cp_gguf_get_f64(&d, f, "t.f64") == 0 && d == 1.5);
  CHECK(cp_gguf_get_f64(&d, f, "t.i32") == 0 && d == -70000);
  CHECK(cp_gguf_get_bool(&b, f, "t.bool") == 0 && b);
  CHECK_RC(CP_EGGUF_KEY, cp_gguf_get_int(&i, f, "t.big")); /* u64 past INT64_MAX */
  CHECK(strstr(cp_error_message(), "key 't.big' is u64, expected an integer up to 2^63-1") != NULL);
  CHECK_RC(CP_EGGUF_KEY, cp_gguf_get_int(&i, f, "general.architecture"));
  CHECK_RC(CP_ENOTFOUND, cp_gguf_get_int(&i, f, "no.such.key"));
  CHECK(cp_gguf_get_arr(&et, &n, f, "t.strs") == 0 && et == CP_GGUF_STRING && n == 3);
  CHECK(cp_gguf_arr_str(&s, &len, f, "t.strs", 1) == 0 && len == 0);
  CHECK(cp_gguf_arr_str(&s, &len, f, "t.strs", 2) == 0 && len == 3 && !memcmp(s, "ccc", 3));
  CHECK_RC(CP_EGGUF_KEY, cp_gguf_arr_str(&s, &len, f, "t.strs", 3));
  CHECK(cp_gguf_arr_int(&i, f, "t.ints", 1) == 0 && i == -4);
  CHECK(cp_gguf_arr_f64(&d, f, "t.ints", 2) == 0 && d == 5);
  CHECK_RC(CP_EGGUF_KEY, cp_gguf_arr_int(&i, f, "t.strs", 0));
  CHECK(cp_gguf_get_arr(&et, &n, f, "t.nested") == 0 && et == CP_GGUF_ARRAY && n == 2);
}

static void test_tensors(const cp_gguf_file *f) {
  CHECK(cp_gguf_count(f) == 8);
  const cp_tensor *a = cp_gguf_tensor(f, 0);
  CHECK(!strcmp(a->name, "a") && a->dtype == CP_F32 && a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3);
  CHECK(a->data && a->nbytes == 24 && ((const float *)a->data)[5] == 6.0f);
  CHECK((cp_gguf_tensor_file_offset(f, 0) - cp_gguf_data_offset(f)) % 64 == 0);
  const cp_tensor *h = cp_gguf_tensor(f, 1), *bf = cp_gguf_tensor(f, 2);
  CHECK(h->dtype == CP_F16 && h->data && cp_f16_to_f32(((const uint16_t *)h->data)[3]) == 65504.0f);
  CHECK(bf->dtype == CP_BF16 && bf->shape[0] == 2 && cp_bf16_to_f32(((const uint16_t *)bf->data)[1]) == -2.0f);
  /* Q8_0: d = 0.5, row 0 q = -16..15, row 1 q = 15..-16 */
  const cp_tensor *q8 = cp_gguf_tensor(f, 3);
  CHECK(q8->dtype == CP_F32 && !q8->data && q8->nbytes == 256 && q8->shape[0] == 2 && q8->shape[1] == 32);
  CHECK(read_f32(f, "q8", 0) == -8.0f && read_f32(f, "q8", 31) == 7.5f && read_f32(f, "q8", 32) == 7.5f &&
        read_f32(f, "q8", 63) == -8.0f);
  /* Q4_0: d = 2, byte j = j | (15-j) << 4: y[j] = (j-8)*2, y[j+16] = (7-j)*2 */
  CHECK(read_f32(f, "q4", 0) == -16.0f && read_f32(f, "q4", 15) == 14.0f && read_f32(f, "q4", 16) == 14.0f &&
        read_f32(f, "q4", 31) == -16.0f);
  /* Q4_K: d = 1, dmin = 0.5, scales 1..8, mins 1,1,1,1,2,2,2,2; byte l: l%16 | (15-l%16) << 4.
   * y[1] = 1*1 - 0.5; y[33] = 2*14 - 0.5; y[133] = 5*5 - 1; y[226] = 8*13 - 1. */
  CHECK(read_f32(f, "qk", 1) == 0.5f && read_f32(f, "qk", 33) == 27.5f && read_f32(f, "qk", 133) == 24.0f &&
        read_f32(f, "qk", 226) == 103.0f);
  /* A read spanning blocks and starting mid-element range equals element reads. */
  float span[40];
  CHECK_RC(0, cp_gguf_read(f, 3, 20 * 4, span, sizeof span));
  CHECK(span[0] == read_f32(f, "q8", 20) && span[39] == read_f32(f, "q8", 59));
  CHECK_RC(CP_EARG, cp_gguf_read(f, 3, 250, span, 8));
  float v;
  CHECK_RC(CP_EGGUF_QUANT, cp_gguf_read(f, 6, 0, &v, 4));
  CHECK(strstr(cp_error_message(), "tensor 'iq' is IQ2_XXS; only F32, F16, BF16, Q8_0, Q4_0 and Q4_K are read"));
  CHECK(!strcmp(cp_gguf_ggml_type_name(cp_gguf_tensor_ggml_type(f, 6)), "IQ2_XXS"));
  const cp_tensor *e = cp_gguf_tensor(f, 7);
  CHECK(e->nbytes == 0 && e->shape[0] == 3 && e->shape[1] == 0);
  CHECK(cp_gguf_find(f, "qk") == 5 && cp_gguf_find(f, "zz") == -1);
}

/* Every hostile case: its code and its message with the path filled in. */
static void test_hostile(void) {
  FILE *fp = fopen(path_of("cases.tsv"), "r");
  CHECK(fp != NULL);
  if (!fp) return;
  char line[8192];
  int n = 0;
  while (fgets(line, sizeof line, fp)) {
    line[strcspn(line, "\n")] = '\0';
    char *file = strtok(line, "\t"), *code = strtok(NULL, "\t"), *msg = strtok(NULL, "");
    if (!file || !code || !msg) continue;
    const char *p = path_of(file);
    char want[8192];
    const char *at = strstr(msg, "{p}");
    snprintf(want, sizeof want, "%.*s%s%s", at ? (int)(at - msg) : 0, msg, at ? p : "", at ? at + 3 : msg);
    cp_gguf_file *f = NULL;
    int rc = cp_gguf_open(&f, p);
    CHECK_MSG(!strcmp(cp_err_name(rc), code), "%s: got %s, want %s (%s)", file, cp_err_name(rc), code,
              cp_error_message());
    CHECK_MSG(rc == 0 || !strcmp(cp_error_message(), want), "%s:\n  got  %s\n  want %s", file,
              cp_error_message(), want);
    CHECK(f == NULL || rc == 0);
    cp_gguf_free(f);
    n++;
  }
  fclose(fp);
  CHECK_MSG(n >= 45, "only %d hostile cases", n);
}

/* A GGUF of two big arrays: N_STR strings "s<i>" (key big.str, unless bools_only) then N_BOOL bools
 * i % 3 == 0 (key big.bool; byte `bad_at` set to 2 when >= 0), cut to `cut` bytes when nonzero. */
#define N_BOOL ((uint64_t)48 << 20)
#define N_STR ((uint64_t)1 << 20)
static void put_le(FILE *fp, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) fputc((int)(v >> (8 * i) & 0xff), fp);
}
static void put_key(FILE *fp, const char *key, uint32_t elem, uint64_t n) {
  put_le(fp, strlen(key), 8);
  fputs(key, fp);
  put_le(fp, CP_GGUF_ARRAY, 4);
  put_le(fp, elem, 4);
  put_le(fp, n, 8);
}
static void write_big(const char *path, int64_t bad_at, bool bools_only, long cut) {
  FILE *fp = fopen(path, "wb");
  if (!fp) return;
  fputs("GGUF", fp);
  put_le(fp, 3, 4);
  put_le(fp, 0, 8);
  put_le(fp, bools_only ? 1 : 2, 8);
  if (!bools_only) {
    put_key(fp, "big.str", CP_GGUF_STRING, N_STR);
    char s[32];
    for (uint64_t i = 0; i < N_STR; i++) {
      int n = snprintf(s, sizeof s, "s%llu", (unsigned long long)i);
      put_le(fp, (uint64_t)n, 8);
      fwrite(s, 1, (size_t)n, fp);
    }
  }
  put_key(fp, "big.bool", CP_GGUF_BOOL, N_BOOL);
  uint8_t *b = malloc(N_BOOL);
  if (b) {
    for (uint64_t i = 0; i < N_BOOL; i++) b[i] = i % 3 == 0;
    if (bad_at >= 0) b[bad_at] = 2;
    fwrite(b, 1, N_BOOL, fp);
  }
  free(b);
  fclose(fp);
  if (cut) CHECK(truncate(path, cut) == 0);
}

/* Big bool and string arrays (the finding: a 400 MB bool array took over a minute, one element at
 * a time) are checked in bulk: the parser's step count stays at one per key, not one per element
 * (counting work, not time), the values read back, and a bad or truncated element is still refused
 * naming it. */
static void test_big_arrays(void) {
  char path[4300];
  snprintf(path, sizeof path, "%s/big_arrays.gguf", dir);
  write_big(path, -1, false, 0);
  cp_gguf_file *f = NULL;
  CHECK_RC(0, cp_gguf_open(&f, path));
  if (f) {
    CHECK_MSG(cp_gguf_value_steps(f) <= 4, "%llu value steps for 2 keys", (unsigned long long)cp_gguf_value_steps(f));
    cp_gguf_vtype elem;
    uint64_t n = 0;
    CHECK(cp_gguf_get_arr(&elem, &n, f, "big.bool") == 0 && elem == CP_GGUF_BOOL && n == N_BOOL);
    const uint64_t at[] = {0, 1, 2, 3, 12345678, N_BOOL - 2, N_BOOL - 1};
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
      int64_t v = -1;
      CHECK(cp_gguf_arr_int(&v, f, "big.bool", at[k]) == 0 && v == (at[k] % 3 == 0));
    }
    const char *s = NULL;
    size_t len = 0;
    CHECK(cp_gguf_arr_str(&s, &len, f, "big.str", 0) == 0 && len == 2 && !memcmp(s, "s0", 2));
    CHECK(cp_gguf_arr_str(&s, &len, f, "big.str", N_STR - 1) == 0 && len == 8 && !memcmp(s, "s1048575", 8));
  }
  cp_gguf_free(f);
  f = NULL;
  char want[8192];
  /* A bool of 2 deep in the array: named by its index and offset, as one at a time named it. */
  write_big(path, 12345678, true, 0);
  snprintf(want, sizeof want, "%s: offset %llu: key 'big.bool[12345678]': bool value 2 is neither 0 nor 1", path,
           (unsigned long long)(24 + 8 + 8 + 4 + 4 + 8 + 12345678));
  CHECK_RC(CP_EGGUF_TYPE, cp_gguf_open(&f, path));
  CHECK_MSG(!strcmp(cp_error_message(), want), "\n  got  %s\n  want %s", cp_error_message(), want);
  CHECK(f == NULL);
  /* The bool array one byte short. */
  write_big(path, -1, true, (long)(24 + 8 + 8 + 4 + 4 + 8 + N_BOOL - 1));
  CHECK_RC(CP_EGGUF_LIMIT, cp_gguf_open(&f, path));
  CHECK(f == NULL && strstr(cp_error_message(), "key 'big.bool': 50331648 elements of bool cannot fit"));
  /* The last string one byte short (the bools after it cut away). */
  uint64_t str_bytes = 0;
  for (uint64_t i = 0; i < N_STR; i++) str_bytes += 8 + (uint64_t)snprintf(want, 32, "s%llu", (unsigned long long)i);
  write_big(path, -1, false, (long)(24 + 8 + 7 + 4 + 4 + 8 + str_bytes - 1));
  CHECK_RC(CP_EGGUF_LIMIT, cp_gguf_open(&f, path));
  CHECK_MSG(f == NULL && strstr(cp_error_message(), "value of 'big.str[1048575]': length 8 is past the 7 bytes left"),
            "%s", cp_error_message());
  remove(path);
}

/* cp_half_canon, which the GGUF export applies to llama q/k rows it reorders in their stored 16-bit
 * type, against the widened path it replaced (cp_f16_to_f32 then cp_f32_to_f16, and the BF16
 * pair) on all 65536 patterns, in place and into another buffer, at an odd length (the tail). */
static void test_half_canon(void) {
  static uint16_t h[65536], o[65536], in_place[65536];
  for (int f16 = 0; f16 < 2; f16++) {
    for (int k = 0; k < 65536; k++) h[k] = in_place[k] = (uint16_t)k;
    cp_half_canon(o, h, 65535, f16);
    o[65535] = h[65535];
    cp_half_canon(in_place, in_place, 65536, f16);
    int bad = 0;
    for (int k = 0; k < 65536; k++) {
      uint16_t want = f16 ? cp_f32_to_f16(cp_f16_to_f32(h[k])) : cp_f32_to_bf16(cp_bf16_to_f32(h[k]));
      if ((k < 65535 && o[k] != want) || in_place[k] != want) bad++;
    }
    CHECK_MSG(bad == 0, "%s: %d patterns differ from the float32 round trip", f16 ? "F16" : "BF16", bad);
  }
}

int main(void) {
  test_half_canon();
  const char *py = test_env("CTXPATCH_PYTHON"), *src = test_env("CTXPATCH_SOURCE_DIR");
  snprintf(dir, sizeof dir, "%s/gguf_cases", test_env("CTXPATCH_BUILD_DIR"));
  char cmd[9000];
  snprintf(cmd, sizeof cmd, "'%s' '%s/tests/gguf/make_gguf_cases.py' '%s'", py, src, dir);
  CHECK(system(cmd) == 0);

  cp_gguf_file *f = NULL;
  CHECK_RC(0, cp_gguf_open(&f, path_of("valid_minimal.gguf")));
  CHECK(f && cp_gguf_count(f) == 0 && cp_gguf_kv_count(f) == 0 && cp_gguf_alignment(f) == 32);
  cp_gguf_free(f);
  f = NULL;
  CHECK_RC(0, cp_gguf_open(&f, path_of("valid_v2.gguf")));
  CHECK(f && cp_gguf_version(f) == 2 && cp_gguf_count(f) == 1);
  cp_gguf_free(f);
  f = NULL;
  CHECK_RC(0, cp_gguf_open(&f, path_of("valid_tensors.gguf")));
  if (f) {
    test_metadata(f);
    test_tensors(f);
  }
  cp_gguf_free(f);
  test_hostile();
  test_big_arrays();
  return test_finish();
}
