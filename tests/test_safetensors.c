/* safetensors reader, writer and shard index: round trips of every dtype, exact header bytes,
 * determinism, alignment, streaming, refusals, sharding, and a golden file written by an
 * independent (Python + PyTorch) writer. */
#include "ctxpatch/base/io.h"
#include "ctxpatch/formats/safetensors.h"
#include "test.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

static char tmpdir[256];

static const char *tmp(const char *name) { return test_path(tmpdir, name); }

static void remove_tmpdir(void) {
  DIR *d = opendir(tmpdir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink(tmp(e->d_name));
    closedir(d);
  }
  rmdir(tmpdir);
}

static size_t count_dir_entries(void) {
  size_t n = 0;
  DIR *d = opendir(tmpdir);
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  if (d) closedir(d);
  return n;
}

static int file_exists(const char *p) { return access(p, F_OK) == 0; }

static unsigned char *slurp(const char *path, size_t *len) {
  char *s = NULL;
  if (cp_read_file(&s, len, path, 1u << 26) < 0) return NULL;
  return (unsigned char *)s;
}

static void write_bytes(const char *path, const void *data, size_t len) {
  FILE *fp = fopen(path, "wb");
  if (!fp) return;
  fwrite(data, 1, len, fp);
  fclose(fp);
}

/* A raw safetensors file from header text and data. */
static void write_st(const char *path, const char *header, const void *data, size_t dlen) {
  size_t hl = strlen(header);
  unsigned char *b = malloc(8 + hl + dlen + 1);
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(b + 8, header, hl);
  if (dlen) memcpy(b + 8 + hl, data, dlen);
  write_bytes(path, b, 8 + hl + dlen);
  free(b);
}

/* ------------------------------------------------------------------------------------------- */

#define NT 16
static cp_tensor tens[NT];
static unsigned char *bufs[NT];

/* One tensor per dtype plus scalars, zero-size and 8-dim tensors; bytes are a per-tensor pattern,
 * so comparing bytes compares values exactly. */
static size_t make_tensors(void) {
  static const struct {
    const char *name;
    cp_dtype dtype;
    int ndim;
    int64_t shape[CP_MAX_DIMS];
  } spec[] = {
      {"f64", CP_F64, 2, {2, 3}},
      {"f32", CP_F32, 1, {5}},
      {"f16", CP_F16, 2, {3, 1}},
      {"bf16", CP_BF16, 1, {7}},
      {"f8e4m3", CP_F8_E4M3, 1, {3}},
      {"f8e5m2", CP_F8_E5M2, 2, {2, 2}},
      {"i64", CP_I64, 1, {2}},
      {"i32", CP_I32, 3, {1, 2, 3}},
      {"i16", CP_I16, 1, {5}},
      {"i8", CP_I8, 1, {9}},
      {"u8", CP_U8, 1, {4}},
      {"bool", CP_BOOL, 1, {6}},
      {"scalar.f32", CP_F32, 0, {0}},
      {"empty.f32", CP_F32, 2, {0, 3}},
      {"empty.bool", CP_BOOL, 1, {0}},
      {"eight.dims \"quoted\"\n\xc3\xa9", CP_I16, 8, {1, 2, 1, 1, 1, 1, 1, 2}},
  };
  size_t n = sizeof spec / sizeof spec[0];
  for (size_t i = 0; i < n; i++) {
    cp_tensor *t = &tens[i];
    free(bufs[i]);
    memset(t, 0, sizeof *t);
    t->name = spec[i].name;
    t->dtype = spec[i].dtype;
    t->ndim = spec[i].ndim;
    memcpy(t->shape, spec[i].shape, sizeof t->shape);
    cp_shape_nbytes(&t->nbytes, t->dtype, t->ndim, t->shape);
    bufs[i] = malloc(t->nbytes + 1);
    for (uint64_t b = 0; b < t->nbytes; b++) bufs[i][b] = (unsigned char)(b * 37 + i * 11 + 1);
    if (t->dtype == CP_BOOL)
      for (uint64_t b = 0; b < t->nbytes; b++) bufs[i][b] &= 1;
    t->data = bufs[i];
  }
  return n;
}

static void check_same_tensors(const cp_st_file *f, size_t n) {
  CHECK(cp_st_count(f) == n);
  for (size_t i = 0; i < n; i++) {
    const cp_tensor *g = cp_st_find(f, tens[i].name);
    CHECK_MSG(g != NULL, "tensor %s missing", tens[i].name);
    if (!g) continue;
    CHECK(strcmp(g->name, tens[i].name) == 0);
    CHECK(g->dtype == tens[i].dtype);
    CHECK(g->ndim == tens[i].ndim);
    CHECK(memcmp(g->shape, tens[i].shape, sizeof(int64_t) * (size_t)g->ndim) == 0);
    CHECK(g->nbytes == tens[i].nbytes);
    CHECK_MSG(g->nbytes == 0 || memcmp(g->data, tens[i].data, g->nbytes) == 0, "bytes of %s differ", g->name);
  }
}

static void test_round_trip(void) {
  size_t n = make_tensors();
  const char *meta[] = {"source", "test \"quoted\"\n", "alpha", "\xce\xb1"};
  const char *p = tmp("all.safetensors");
  CHECK_RC(0, cp_st_write_file(p, tens, n, meta, 2));
  cp_st_file *f = NULL;
  CHECK_RC(0, cp_st_open(&f, p));
  if (!f) return;
  check_same_tensors(f, n);
  CHECK(cp_st_find(f, "absent") == NULL);
  CHECK(cp_st_find_index(f, "absent") == -1);
  /* Metadata: sorted keys, "format":"pt" added. */
  CHECK(cp_st_meta_count(f) == 3);
  CHECK(strcmp(cp_st_meta_key(f, 0), "alpha") == 0 && strcmp(cp_st_meta_value(f, 0), "\xce\xb1") == 0);
  CHECK(strcmp(cp_st_meta_key(f, 1), "format") == 0 && strcmp(cp_st_meta_value(f, 1), "pt") == 0);
  CHECK(cp_st_meta_get(f, "source") && strcmp(cp_st_meta_get(f, "source"), "test \"quoted\"\n") == 0);
  CHECK(cp_st_meta_get(f, "nope") == NULL);

  /* File order is the reference save_file order: dtype rank descending (the reference Dtype
   * enum: ... F32 < F64 < I64), then name; zero-size tensors sit at their offset. */
  static const char *want_order[] = {"i64", "f64", "empty.f32", "f32", "scalar.f32", "i32", "bf16", "f16",
                                     "eight.dims \"quoted\"\n\xc3\xa9", "i16", "f8e4m3", "f8e5m2", "i8", "u8",
                                     "bool", "empty.bool"};
  CHECK(n == sizeof want_order / sizeof want_order[0]);
  for (size_t i = 0; i < n; i++) {
    const cp_tensor *t = cp_st_tensor(f, i);
    CHECK_MSG(strcmp(t->name, want_order[i]) == 0, "position %zu: %s, want %s", i, t->name, want_order[i]);
  }
  /* Header padded to 8; each tensor starts at a multiple of its element size in the file. */
  CHECK(cp_st_header_len(f) % 8 == 0);
  for (size_t i = 0; i < n; i++) {
    const cp_tensor *t = cp_st_tensor(f, i);
    uint64_t off = cp_st_tensor_file_offset(f, i);
    CHECK_MSG(off % cp_dtype_size(t->dtype) == 0, "%s at file offset %llu", t->name, (unsigned long long)off);
    CHECK((const unsigned char *)cp_st_map_base(f) + off == t->data);
  }
  CHECK(cp_st_file_size(f) == 8 + cp_st_header_len(f) + 2 * 3 * 8 + 5 * 4 + 3 * 2 + 7 * 2 + 3 + 4 + 2 * 8 +
                                  6 * 4 + 5 * 2 + 9 + 4 + 6 + 4 + 4 * 2);
  /* Releasing pages is only advice: the data reads back the same afterwards. */
  for (size_t i = 0; i < n; i++) cp_st_release(f, i);
  check_same_tensors(f, n);
  cp_st_free(f);
}

/* Exact bytes for a tiny file, written out by hand from the format description. */
static void test_exact_bytes(void) {
  float v[6] = {0, 1, 2, 3, 4, 5};
  cp_tensor t = {.name = "attn.0", .dtype = CP_F32, .ndim = 3, .shape = {1, 2, 3}, .data = v};
  const char *p = tmp("exact.safetensors");
  CHECK_RC(0, cp_st_write_file(p, &t, 1, NULL, 0));
  const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],"
                    "\"data_offsets\":[0,24]}}";
  size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8, len = 0;
  unsigned char *got = slurp(p, &len);
  CHECK(got && len == 8 + padded + 24);
  if (got && len == 8 + padded + 24) {
    CHECK(got[0] == padded && got[1] == 0 && got[7] == 0);
    CHECK(memcmp(got + 8, hdr, hl) == 0);
    for (size_t i = hl; i < padded; i++) CHECK(got[8 + i] == ' ');
    CHECK(memcmp(got + 8 + padded, v, 24) == 0);
  }
  free(got);

  /* No tensors: just the metadata. */
  CHECK_RC(0, cp_st_write_file(tmp("none.safetensors"), NULL, 0, NULL, 0));
  got = slurp(tmp("none.safetensors"), &len);
  const char *none = "{\"__metadata__\":{\"format\":\"pt\"}}"; /* 32 bytes: no padding */
  CHECK(got && len == 8 + 32 && got[0] == 32 && memcmp(got + 8, none, 32) == 0);
  free(got);
  cp_st_file *f = NULL;
  CHECK_RC(0, cp_st_open(&f, tmp("none.safetensors")));
  CHECK(f && cp_st_count(f) == 0);
  cp_st_free(f);

  /* Control characters are escaped like serde_json (\u00XX lowercase, short forms). */
  const char *meta[] = {"k", "a\x01\x1f\t\\\"/\x7f"};
  CHECK_RC(0, cp_st_write_file(tmp("esc.safetensors"), NULL, 0, meta, 1));
  got = slurp(tmp("esc.safetensors"), &len);
  const char *esc = "{\"__metadata__\":{\"format\":\"pt\",\"k\":\"a\\u0001\\u001f\\t\\\\\\\"/\x7f\"}}";
  CHECK(got && len > 8 + strlen(esc) && memcmp(got + 8, esc, strlen(esc)) == 0);
  free(got);
  CHECK_RC(0, cp_st_open(&f, tmp("esc.safetensors")));
  CHECK(f && cp_st_meta_get(f, "k") && strcmp(cp_st_meta_get(f, "k"), meta[1]) == 0);
  cp_st_free(f);
}

static void test_determinism(void) {
  size_t n = make_tensors();
  const char *meta[] = {"b", "2", "a", "1"};
  const char *meta_rev[] = {"a", "1", "b", "2"};
  CHECK_RC(0, cp_st_write_file(tmp("d1.safetensors"), tens, n, meta, 2));
  CHECK_RC(0, cp_st_write_file(tmp("d2.safetensors"), tens, n, meta, 2));
  /* Same tensors and metadata given in another order: same bytes. */
  cp_tensor rev[NT];
  for (size_t i = 0; i < n; i++) rev[i] = tens[n - 1 - i];
  CHECK_RC(0, cp_st_write_file(tmp("d3.safetensors"), rev, n, meta_rev, 2));
  size_t l1 = 0, l2 = 0, l3 = 0;
  unsigned char *a = slurp(tmp("d1.safetensors"), &l1), *b = slurp(tmp("d2.safetensors"), &l2),
                *c = slurp(tmp("d3.safetensors"), &l3);
  CHECK(a && b && c && l1 == l2 && l1 == l3 && memcmp(a, b, l1) == 0 && memcmp(a, c, l1) == 0);
  free(a);
  free(b);
  free(c);
}

static void test_streaming(void) {
  size_t n = make_tensors();
  const char *p = tmp("stream.safetensors");
  cp_st_writer *w = NULL;
  CHECK_RC(0, cp_st_writer_open(&w, p, tens, n, NULL, 0));
  if (!w) return;
  CHECK(!file_exists(p)); /* nothing visible before commit */
  /* Concatenate all bytes in the writer's order, then feed them in odd-sized chunks that span
   * tensors, checking next_index follows the order. */
  size_t total = 0;
  for (size_t k = 0; k < n; k++) total += tens[cp_st_writer_order(w, k)].nbytes;
  unsigned char *all = malloc(total + 1);
  size_t o = 0;
  for (size_t k = 0; k < n; k++) {
    const cp_tensor *t = &tens[cp_st_writer_order(w, k)];
    memcpy(all + o, t->data, t->nbytes);
    o += t->nbytes;
  }
  CHECK(strcmp(tens[cp_st_writer_next_index(w)].name, "i64") == 0);
  size_t chunk = 1;
  for (o = 0; o < total;) {
    size_t len = chunk < total - o ? chunk : total - o;
    /* The tensor expected next is the one holding byte o. */
    size_t k = 0, acc = 0;
    while (acc + tens[cp_st_writer_order(w, k)].nbytes <= o) acc += tens[cp_st_writer_order(w, k++)].nbytes;
    CHECK(cp_st_writer_next_index(w) == cp_st_writer_order(w, k));
    CHECK_RC(0, cp_st_writer_write(w, all + o, len));
    o += len;
    chunk = chunk * 3 % 17 + 1;
  }
  CHECK(cp_st_writer_next_index(w) == (size_t)-1);
  CHECK_RC(CP_EARG, cp_st_writer_write(w, all, 1)); /* past the end */
  CHECK_RC(0, cp_st_writer_commit(w));
  free(all);
  CHECK_RC(0, cp_st_write_file(tmp("stream_ref.safetensors"), tens, n, NULL, 0));
  size_t l1 = 0, l2 = 0;
  unsigned char *a = slurp(p, &l1), *b = slurp(tmp("stream_ref.safetensors"), &l2);
  CHECK(a && b && l1 == l2 && memcmp(a, b, l1) == 0);
  free(a);
  free(b);

  /* Commit with bytes missing: refused, and nothing left behind (no target, no temporary). */
  size_t before = count_dir_entries();
  CHECK_RC(0, cp_st_writer_open(&w, tmp("partial.safetensors"), tens, n, NULL, 0));
  if (w) {
    CHECK_RC(0, cp_st_writer_write(w, tens[cp_st_writer_next_index(w)].data, 3));
    CHECK_RC(CP_EARG, cp_st_writer_commit(w));
  }
  CHECK(!file_exists(tmp("partial.safetensors")));
  CHECK(count_dir_entries() == before);
  /* Abort likewise. */
  CHECK_RC(0, cp_st_writer_open(&w, tmp("aborted.safetensors"), tens, n, NULL, 0));
  cp_st_writer_abort(w);
  CHECK(!file_exists(tmp("aborted.safetensors")));
  CHECK(count_dir_entries() == before);
}

/* A file with 16 MiB of tensor data or more goes through the atomic writer's staged handle
 * (8 MiB buffers written with O_DIRECT where the filesystem takes it; formats/safetensors_write.c
 * ST_STAGED_MIN): gathered small writes, a large write, and the mapped-source entry point (with a
 * descriptor: pread into the buffer; without: copied from the mapping) give exactly the bytes
 * test_exact_bytes spells out, and the running digest is that of the file read back. */
static void test_large_staged(void) {
  const size_t big = ((size_t)16 << 20) + 4099; /* not a whole number of 4 KiB blocks */
  unsigned char *data = malloc(big);
  char src[512], path[512];
  snprintf(src, sizeof src, "%s", tmp("big.src"));
  snprintf(path, sizeof path, "%s", tmp("big.safetensors"));
  CHECK(data != NULL);
  if (!data) return;
  uint64_t seed = 7;
  for (size_t i = 0; i < big; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    data[i] = (unsigned char)(seed >> 56);
  }
  write_bytes(src, data, big);
  int fd = open(src, O_RDONLY);
  void *map = fd >= 0 ? mmap(NULL, big, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  CHECK(map != MAP_FAILED);
  cp_tensor t = {.name = "big", .dtype = CP_U8, .ndim = 1, .shape = {(int64_t)big}};
  cp_st_writer *w = NULL;
  CHECK_RC(0, cp_st_writer_open(&w, path, &t, 1, NULL, 0));
  char hex[65] = "", want[65] = "";
  if (w && map != MAP_FAILED) {
    size_t at = 0, half;
    for (int i = 0; i < 300; i++, at += 1000) CHECK_RC(0, cp_st_writer_write(w, data + at, 1000));
    CHECK_RC(0, cp_st_writer_write(w, data + at, (size_t)3 << 20));
    at += (size_t)3 << 20;
    half = (big - at) / 2;
    CHECK_RC(0, cp_st_writer_write_mapped(w, (const char *)map + at, half, fd, at, 1));
    at += half;
    CHECK_RC(0, cp_st_writer_write_mapped(w, (const char *)map + at, big - at, -1, 0, 0));
    CHECK_RC(0, cp_st_writer_sha256(w, hex));
    CHECK_RC(0, cp_st_writer_commit(w));
  } else {
    cp_st_writer_abort(w);
  }
  char hdr[160];
  snprintf(hdr, sizeof hdr, "{\"__metadata__\":{\"format\":\"pt\"},\"big\":{\"dtype\":\"U8\",\"shape\":[%zu],"
           "\"data_offsets\":[0,%zu]}}", big, big);
  size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8, len = 0;
  unsigned char *got = slurp(path, &len);
  CHECK_MSG(got && len == 8 + padded + big, "%zu bytes, want %zu", len, 8 + padded + big);
  if (got && len == 8 + padded + big) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | got[i];
    CHECK(n == padded && memcmp(got + 8, hdr, hl) == 0);
    for (size_t i = hl; i < padded; i++) CHECK(got[8 + i] == ' ');
    CHECK(memcmp(got + 8 + padded, data, big) == 0);
  }
  CHECK_RC(0, cp_sha256_file(want, path));
  CHECK_MSG(hex[0] && strcmp(hex, want) == 0, "digest %s, file %s", hex, want);
  free(got);
  if (map != MAP_FAILED) munmap(map, big);
  if (fd >= 0) close(fd);
  free(data);
  unlink(src);
  unlink(path);
}

static void test_writer_refusals(void) {
  size_t n = make_tensors();
  size_t before = count_dir_entries();
  cp_tensor two[2] = {tens[0], tens[1]};
  two[1].name = two[0].name;
  CHECK_RC(CP_EARG, cp_st_write_file(tmp("dup.safetensors"), two, 2, NULL, 0));
  two[1].name = "__metadata__";
  CHECK_RC(CP_EARG, cp_st_write_file(tmp("dup.safetensors"), two, 2, NULL, 0));
  two[1].name = "bad\xff";
  CHECK_RC(CP_EARG, cp_st_write_file(tmp("dup.safetensors"), two, 2, NULL, 0));
  two[1] = tens[1];
  two[1].shape[0] = -1;
  CHECK_RC(CP_EARG, cp_st_write_file(tmp("dup.safetensors"), two, 2, NULL, 0));
  two[1].ndim = 2;
  two[1].shape[0] = INT64_C(1) << 40;
  two[1].shape[1] = INT64_C(1) << 40;
  CHECK_RC(CP_EOVERFLOW, cp_st_write_file(tmp("dup.safetensors"), two, 2, NULL, 0));
  two[1] = tens[1];
  two[1].data = NULL;
  CHECK_RC(CP_EARG, cp_st_write_file(tmp("dup.safetensors"), two, 2, NULL, 0));
  const char *meta[] = {"k", "1", "k", "2"};
  CHECK_RC(CP_EARG, cp_st_write_file(tmp("dup.safetensors"), tens, n, meta, 2));
  CHECK(!file_exists(tmp("dup.safetensors")));
  CHECK(count_dir_entries() == before);
  /* The caller's "format" wins over the default. */
  const char *fmt[] = {"format", "np"};
  CHECK_RC(0, cp_st_write_file(tmp("np.safetensors"), tens, n, fmt, 1));
  cp_st_file *f = NULL;
  CHECK_RC(0, cp_st_open(&f, tmp("np.safetensors")));
  CHECK(f && cp_st_meta_count(f) == 1 && strcmp(cp_st_meta_get(f, "format"), "np") == 0);
  cp_st_free(f);
}

/* Files written by other writers that must be accepted. */
static void test_reader_accepts(void) {
  cp_st_file *f = NULL;
  float one = 1.0f, two[2] = {2.0f, 3.0f};
  unsigned char d[12];
  memcpy(d, two, 8);
  memcpy(d + 8, &one, 4);
  /* Unpadded header (data unaligned), escaped names, whitespace, any key order, tensors listed
   * out of offset order, a zero-size tensor at the end, empty metadata. */
  write_st(tmp("other.safetensors"),
           " {\"z\" : {\"data_offsets\":[8,12], \"shape\":[], \"dtype\":\"F32\"},\n"
           "\"\\u00e9\\ud83d\\ude00\\/\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"e\":{\"dtype\":\"I8\",\"shape\":[0,5],\"data_offsets\":[12,12]},\"__metadata__\":{}}\t\r\n",
           d, 12);
  CHECK_RC(CP_EST_HEADER_NOT_OBJECT, cp_st_open(&f, tmp("other.safetensors"))); /* leading space */
  write_st(tmp("other.safetensors"),
           "{\"z\" : {\"data_offsets\":[8,12], \"shape\":[], \"dtype\":\"F32\"},\n"
           "\"\\u00e9\\ud83d\\ude00\\/\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"e\":{\"dtype\":\"I8\",\"shape\":[0,5],\"data_offsets\":[12,12]},\"__metadata__\":{}}\t\r\n ",
           d, 12);
  CHECK_RC(0, cp_st_open(&f, tmp("other.safetensors")));
  if (f) {
    CHECK(cp_st_count(f) == 3 && cp_st_meta_count(f) == 0);
    CHECK(strcmp(cp_st_tensor(f, 0)->name, "\xc3\xa9\xf0\x9f\x98\x80/") == 0);
    CHECK(strcmp(cp_st_tensor(f, 1)->name, "z") == 0 && cp_st_tensor(f, 1)->ndim == 0);
    CHECK(strcmp(cp_st_tensor(f, 2)->name, "e") == 0 && cp_st_tensor(f, 2)->nbytes == 0);
    float got;
    memcpy(&got, cp_st_find(f, "z")->data, 4);
    CHECK(got == 1.0f);
    CHECK(cp_st_header_len(f) % 8 == 1); /* so the data is unaligned */
    cp_st_free(f);
  }
  /* Empty header object with no data. */
  write_st(tmp("emptyobj.safetensors"), "{}", NULL, 0);
  CHECK_RC(0, cp_st_open(&f, tmp("emptyobj.safetensors")));
  CHECK(f && cp_st_count(f) == 0);
  cp_st_free(f);
  CHECK_RC(CP_ENOTFOUND, cp_st_open(&f, tmp("does-not-exist.safetensors")));
}

/* ------------------------------------------------------------------------------------------- */

static void test_shard_plan(void) {
  /* U8 tensors of 10, 10, 25, 5, 5, 100, 1 bytes, limit 30 (worked by hand from transformers'
   * shard_checkpoint): [10,10] | [25,5] | [5] | [100] | [1]. */
  static const int64_t sizes[] = {10, 10, 25, 5, 5, 100, 1};
  static const size_t want[] = {0, 0, 1, 1, 2, 3, 4};
  cp_tensor t[7];
  static const char *names[] = {"t0", "t1", "t2", "t3", "t4", "t5", "t6"};
  for (int i = 0; i < 7; i++) t[i] = (cp_tensor){.name = names[i], .dtype = CP_U8, .ndim = 1, .shape = {sizes[i]}};
  cp_st_shard_plan *p = NULL;
  CHECK_RC(0, cp_st_plan_shards(&p, t, 7, 30));
  if (!p) return;
  CHECK(p->n_shards == 5 && p->total_size == 156);
  for (int i = 0; i < 7; i++) CHECK_MSG(p->shard_of[i] == want[i], "tensor %d in shard %zu", i, p->shard_of[i]);
  CHECK(strcmp(p->shard_names[0], "model-00001-of-00005.safetensors") == 0);
  CHECK(strcmp(p->shard_names[4], "model-00005-of-00005.safetensors") == 0);
  CHECK(p->shard_bytes[0] == 20 && p->shard_bytes[1] == 30 && p->shard_bytes[3] == 100);
  cp_st_shard_plan_free(p);
  CHECK_RC(0, cp_st_plan_shards(&p, t, 7, 1000));
  CHECK(p && p->n_shards == 1 && strcmp(p->shard_names[0], "model.safetensors") == 0);
  cp_st_shard_plan_free(p);
  CHECK_RC(CP_EARG, cp_st_plan_shards(&p, t, 7, 0));
}

static void test_index_exact(void) {
  const char *names[] = {"b.w", "caf\xc3\xa9 \xf0\x9f\x98\x80\"\\\n\x7f", "a.w"};
  const char *files[] = {"model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors",
                         "model-00001-of-00002.safetensors"};
  CHECK_RC(0, cp_st_index_write(tmp("x.index.json"), 151, names, files, 3));
  /* What transformers writes: json.dumps(index, indent=2, sort_keys=True) + "\n" (checked
   * against /usr/bin/python3 when this test was written). */
  const char *want = "{\n  \"metadata\": {\n    \"total_size\": 151\n  },\n  \"weight_map\": {\n"
                     "    \"a.w\": \"model-00001-of-00002.safetensors\",\n"
                     "    \"b.w\": \"model-00002-of-00002.safetensors\",\n"
                     "    \"caf\\u00e9 \\ud83d\\ude00\\\"\\\\\\n\\u007f\": \"model-00001-of-00002.safetensors\"\n"
                     "  }\n}\n";
  size_t len = 0;
  unsigned char *got = slurp(tmp("x.index.json"), &len);
  CHECK_MSG(got && len == strlen(want) && memcmp(got, want, len) == 0, "index text:\n%s", got ? (char *)got : "");
  free(got);
  CHECK_RC(0, cp_st_index_write(tmp("e.index.json"), 0, NULL, NULL, 0));
  got = slurp(tmp("e.index.json"), &len);
  const char *empty = "{\n  \"metadata\": {\n    \"total_size\": 0\n  },\n  \"weight_map\": {}\n}\n";
  CHECK(got && len == strlen(empty) && memcmp(got, empty, len) == 0);
  free(got);

  cp_st_index *x = NULL;
  CHECK_RC(0, cp_st_index_read(&x, tmp("x.index.json")));
  if (x) {
    CHECK(cp_st_index_count(x) == 3 && cp_st_index_total_size(x) == 151);
    CHECK(strcmp(cp_st_index_name(x, 0), "a.w") == 0);
    CHECK(strcmp(cp_st_index_name(x, 2), names[1]) == 0);
    /* Files in order of first appearance in weight_map (which is sorted by tensor name). */
    CHECK(cp_st_index_file_count(x) == 2);
    CHECK(strcmp(cp_st_index_file_name(x, 0), "model-00001-of-00002.safetensors") == 0);
    CHECK(strcmp(cp_st_index_file_name(x, 1), "model-00002-of-00002.safetensors") == 0);
    CHECK(cp_st_index_file_of(x, 0) == 0 && cp_st_index_file_of(x, 1) == 1 && cp_st_index_file_of(x, 2) == 0);
    CHECK(strcmp(cp_st_index_file(x, 1), "model-00002-of-00002.safetensors") == 0);
    cp_st_index_free(x);
  }
  const char *bad_files[] = {"../model.safetensors"};
  CHECK_RC(CP_EARG, cp_st_index_write(tmp("bad.index.json"), 1, names, bad_files, 1));
  const char *dup_names[] = {"a", "a"};
  CHECK_RC(CP_EARG, cp_st_index_write(tmp("bad.index.json"), 1, dup_names, files, 2));
  CHECK(!file_exists(tmp("bad.index.json")));
}

static void test_index_refusals(void) {
  static const struct {
    const char *text;
    const char *why;
  } bad[] = {
      {"{\"weight_map\":{\"a\":\"../outside.safetensors\"}}", "parent folder"},
      {"{\"weight_map\":{\"a\":\"/etc/passwd\"}}", "absolute path"},
      {"{\"weight_map\":{\"a\":\"sub/model.safetensors\"}}", "subfolder"},
      {"{\"weight_map\":{\"a\":\"sub\\\\model.safetensors\"}}", "backslash"},
      {"{\"weight_map\":{\"a\":\"..\"}}", "dot dot"},
      {"{\"weight_map\":{\"a\":\"\"}}", "empty name"},
      {"{\"weight_map\":{\"a\":\"m.safetensors\\u0000/../../x\"}}", "NUL in file name"},
      {"{\"weight_map\":{\"a\":1}}", "number value"},
      {"{\"weight_map\":{\"a\":[\"m.safetensors\"]}}", "array value"},
      {"{\"weight_map\":{\"a\":\"m.safetensors\",\"a\":\"n.safetensors\"}}", "duplicate name"},
      {"{\"weight_map\":{\"a\":\"m.safetensors\",\"\\u0061\":\"n.safetensors\"}}", "duplicate escaped name"},
      {"{\"weight_map\":[]}", "weight_map not an object"},
      {"{\"metadata\":{\"total_size\":1}}", "no weight_map"},
      {"{\"metadata\":{\"total_size\":-1},\"weight_map\":{}}", "negative total_size"},
      {"{\"metadata\":{\"total_size\":1.5},\"weight_map\":{}}", "fractional total_size"},
      {"{\"metadata\":{\"total_size\":1e300},\"weight_map\":{}}", "huge total_size"},
      {"{\"metadata\":[],\"weight_map\":{}}", "metadata not an object"},
      {"[]", "not an object"},
      {"{\"weight_map\":{\"a\":\"m.safetensors\"}", "invalid JSON"},
      {"{\"weight_map\":{\"a\xff\":\"m.safetensors\"}}", "invalid UTF-8"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    write_bytes(tmp("bad.index.json"), bad[i].text, strlen(bad[i].text));
    cp_st_index *x = NULL;
    int rc = cp_st_index_read(&x, tmp("bad.index.json"));
    CHECK_MSG(rc == CP_EST_INDEX, "%s: got %s (%s)", bad[i].why, cp_err_name(rc), cp_error_message());
    CHECK(strstr(cp_error_message(), tmp("bad.index.json")) != NULL);
    cp_st_index_free(x);
  }
  /* Unknown top-level keys and a missing metadata are tolerated. */
  const char *ok = "{\"weight_map\":{\"b\":\"m2.safetensors\",\"a\":\"m1.safetensors\"},\"extra\":true}";
  write_bytes(tmp("ok.index.json"), ok, strlen(ok));
  cp_st_index *x = NULL;
  CHECK_RC(0, cp_st_index_read(&x, tmp("ok.index.json")));
  if (x) {
    CHECK(cp_st_index_total_size(x) == -1 && cp_st_index_count(x) == 2);
    CHECK(strcmp(cp_st_index_name(x, 0), "b") == 0 && strcmp(cp_st_index_file_name(x, 0), "m2.safetensors") == 0);
    cp_st_index_free(x);
  }
}

/* Plan, write shards and the index, then read the index and every shard back. */
static void test_sharded_round_trip(void) {
  size_t n = make_tensors();
  cp_st_shard_plan *p = NULL;
  CHECK_RC(0, cp_st_plan_shards(&p, tens, n, 40));
  if (!p) return;
  CHECK(p->n_shards > 2);
  for (size_t s = 0; s < p->n_shards; s++) {
    cp_tensor sub[NT];
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
      if (p->shard_of[i] == s) sub[m++] = tens[i];
    CHECK_RC(0, cp_st_write_file(tmp(p->shard_names[s]), sub, m, NULL, 0));
  }
  CHECK_RC(0, cp_st_index_write_plan(tmp("model.safetensors.index.json"), p, tens));
  cp_st_index *x = NULL;
  CHECK_RC(0, cp_st_index_read(&x, tmp("model.safetensors.index.json")));
  if (x) {
    CHECK(cp_st_index_count(x) == n);
    CHECK(cp_st_index_file_count(x) == p->n_shards);
    CHECK(cp_st_index_total_size(x) == (int64_t)p->total_size);
    size_t found = 0;
    for (size_t j = 0; j < cp_st_index_file_count(x); j++) {
      cp_st_file *f = NULL;
      CHECK_RC(0, cp_st_open(&f, tmp(cp_st_index_file_name(x, j))));
      if (!f) continue;
      for (size_t i = 0; i < cp_st_index_count(x); i++) {
        if (cp_st_index_file_of(x, i) != j) continue;
        const cp_tensor *t = cp_st_find(f, cp_st_index_name(x, i));
        CHECK_MSG(t != NULL, "%s not in %s", cp_st_index_name(x, i), cp_st_index_file_name(x, j));
        for (size_t k = 0; t && k < n; k++)
          if (strcmp(tens[k].name, t->name) == 0) {
            found++;
            CHECK(t->nbytes == tens[k].nbytes && (!t->nbytes || memcmp(t->data, tens[k].data, t->nbytes) == 0));
          }
      }
      cp_st_free(f);
    }
    CHECK(found == n);
    cp_st_index_free(x);
  }
  cp_st_shard_plan_free(p);
}

/* ------------------------------------------------------------------------------------------- */

static double element(const cp_tensor *t, uint64_t i) {
  const unsigned char *p = (const unsigned char *)t->data + i * cp_dtype_size(t->dtype);
  union {
    double f64;
    float f32;
    int64_t i64;
    int32_t i32;
    int16_t i16;
    uint16_t u16;
    int8_t i8;
    uint8_t u8;
  } u;
  memcpy(&u, p, cp_dtype_size(t->dtype));
  switch (t->dtype) {
  case CP_F64: return u.f64;
  case CP_F32: return u.f32;
  case CP_F16: return cp_f16_to_f32(u.u16);
  case CP_BF16: return cp_bf16_to_f32(u.u16);
  case CP_I64: return (double)u.i64;
  case CP_I32: return u.i32;
  case CP_I16: return u.i16;
  case CP_I8: return u.i8;
  case CP_U8: return u.u8;
  case CP_BOOL: return u.u8;
  default: return NAN;
  }
}

static void test_golden(void) {
  const char *src = test_env("CTXPATCH_SOURCE_DIR");
  char st_path[4096], json_path[4096];
  snprintf(st_path, sizeof st_path, "%s/tests/goldens/safetensors/sample.safetensors", src);
  snprintf(json_path, sizeof json_path, "%s/tests/goldens/safetensors/sample.json", src);
  char *text = NULL;
  size_t len = 0;
  CHECK_RC(0, cp_read_file(&text, &len, json_path, 1u << 20));
  cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
  free(text);
  CHECK(root != NULL);
  cp_st_file *f = NULL;
  CHECK_RC(0, cp_st_open(&f, st_path));
  if (!root || !f) goto done;
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "metadata"), *m;
  size_t nm = 0;
  cJSON_ArrayForEach(m, meta) {
    nm++;
    const char *v = cp_st_meta_get(f, m->string);
    CHECK_MSG(v && strcmp(v, m->valuestring) == 0, "metadata %s", m->string);
  }
  CHECK(cp_st_meta_count(f) == nm);
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "tensors"), *e;
  size_t i = 0;
  cJSON_ArrayForEach(e, list) {
    const char *name = cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring;
    const char *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype")->valuestring;
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *values = cJSON_GetObjectItemCaseSensitive(e, "values");
    const cp_tensor *t = cp_st_tensor(f, i++); /* the generator writes in list order */
    CHECK_MSG(t && strcmp(t->name, name) == 0, "file order: %s, want %s", t ? t->name : "(none)", name);
    t = cp_st_find(f, name);
    CHECK_MSG(t != NULL, "golden tensor %s missing", name);
    if (!t) continue;
    CHECK_MSG(strcmp(cp_dtype_name(t->dtype), dtype) == 0, "%s: dtype %s, want %s", name,
              cp_dtype_name(t->dtype), dtype);
    CHECK(t->ndim == cJSON_GetArraySize(shape));
    for (int d = 0; d < t->ndim && d < CP_MAX_DIMS; d++)
      CHECK(t->shape[d] == (int64_t)cJSON_GetArrayItem(shape, d)->valuedouble);
    uint64_t numel = 0;
    cp_shape_numel(&numel, t->ndim, t->shape);
    CHECK(numel == (uint64_t)cJSON_GetArraySize(values));
    uint64_t k = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, values) {
      double want = cJSON_IsBool(v) ? (cJSON_IsTrue(v) ? 1 : 0) : v->valuedouble;
      double got = k < numel ? element(t, k) : NAN;
      CHECK_MSG(got == want && signbit(got) == signbit(want), "%s[%llu]: got %.17g want %.17g", name,
                (unsigned long long)k, got, want);
      k++;
    }
  }
  CHECK(i == cp_st_count(f));
done:
  cJSON_Delete(root);
  cp_st_free(f);
}

int main(void) {
  const char *base = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/ctxpatch_st_XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_round_trip();
  test_exact_bytes();
  test_determinism();
  test_streaming();
  test_large_staged();
  test_writer_refusals();
  test_reader_accepts();
  test_shard_plan();
  test_index_exact();
  test_index_refusals();
  test_sharded_round_trip();
  test_golden();
  for (int i = 0; i < NT; i++) free(bufs[i]);
  remove_tmpdir();
  return test_finish();
}
