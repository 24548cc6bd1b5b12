/* PyTorch zip reader against goldens computed by torch 1.13
 * (tests/reference/make_fixture_goldens.py): our own small checkpoints in tests/goldens/pytorch/
 * (views, shared storages, nesting, Parameters, deflated records, protocol 4) and every third-party
 * fixture under $CTXPATCH_FIXTURES/third_party/{burn,candle} (skipped when the fixtures folder is
 * absent). */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ctxpatch/base/io.h"
#include "ctxpatch/formats/pytorch.h"
#include "ctxpatch/formats/tensor.h"
#include "test.h"

static cJSON *load_json(const char *path) {
  char *text = NULL;
  size_t len = 0;
  if (cp_read_file(&text, &len, path, 64u << 20) < 0) {
    fprintf(stderr, "%s: %s\n", path, cp_error_message());
    return NULL;
  }
  cJSON *j = cJSON_Parse(text);
  free(text);
  if (!j) fprintf(stderr, "%s: golden is not JSON\n", path);
  return j;
}

/* Golden value as a double (floats, with "nan"/"inf"/"-inf" strings) */
static double golden_double(const cJSON *v) {
  if (cJSON_IsString(v)) {
    if (strcmp(v->valuestring, "nan") == 0) return NAN;
    if (strcmp(v->valuestring, "inf") == 0) return INFINITY;
    if (strcmp(v->valuestring, "-inf") == 0) return -INFINITY;
  }
  return v->valuedouble;
}

static int64_t golden_int(const cJSON *v) {
  if (cJSON_IsString(v)) return strtoll(v->valuestring, NULL, 10);
  return (int64_t)v->valuedouble;
}

static bool same_double(double got, double want) {
  if (isnan(want)) return isnan(got);
  return got == want && signbit(got) == signbit(want);
}

/* Compares element k of `bytes` (dtype) with the golden value; returns 1 when equal. */
static int value_matches(const uint8_t *bytes, cp_dtype dt, size_t k, const cJSON *v) {
  switch (dt) {
    case CP_F64: {
      double x;
      memcpy(&x, bytes + k * 8, 8);
      return same_double(x, golden_double(v));
    }
    case CP_F32: {
      float x;
      memcpy(&x, bytes + k * 4, 4);
      return same_double((double)x, golden_double(v));
    }
    case CP_F16:
    case CP_BF16: {
      uint16_t h;
      memcpy(&h, bytes + k * 2, 2);
      float x = dt == CP_F16 ? cp_f16_to_f32(h) : cp_bf16_to_f32(h);
      return same_double((double)x, golden_double(v));
    }
    case CP_I64: {
      int64_t x;
      memcpy(&x, bytes + k * 8, 8);
      return x == golden_int(v);
    }
    case CP_I32: {
      int32_t x;
      memcpy(&x, bytes + k * 4, 4);
      return x == golden_int(v);
    }
    case CP_I16: {
      int16_t x;
      memcpy(&x, bytes + k * 2, 2);
      return x == golden_int(v);
    }
    case CP_I8:
      return (int8_t)bytes[k] == golden_int(v);
    case CP_U8:
    case CP_BOOL:
      return bytes[k] == golden_int(v);
    default:
      return 0;
  }
}

static int file_bytes_equal(const char *path, int64_t off, const void *data, size_t n) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return 0;
  uint8_t *buf = malloc(n ? n : 1);
  ssize_t r = n ? pread(fd, buf, n, off) : 0;
  int ok = r == (ssize_t)n && memcmp(buf, data, n) == 0;
  free(buf);
  close(fd);
  return ok;
}

static int tensors_checked, values_checked, mapped_seen, unmapped_seen;

/* Opens `pt_path` and compares it with the golden at `golden_path`. */
static void check_golden(const char *golden_path, const char *pt_path) {
  cJSON *g = load_json(golden_path);
  CHECK_MSG(g != NULL, "%s", golden_path);
  if (!g) return;
  const char *expect = cJSON_GetStringValue(cJSON_GetObjectItem(g, "expect"));
  CHECK(expect != NULL);
  cp_pt_file *f = NULL;
  int rc = cp_pt_open(&f, pt_path);
  if (!expect || strcmp(expect, "ok") != 0) {
    CHECK_MSG(rc < 0 && expect && strcmp(cp_err_name(rc), expect) == 0, "%s: got %s (%s), want %s",
              pt_path, cp_err_name(rc), cp_error_message(), expect ? expect : "?");
    CHECK_MSG(rc >= 0 || strstr(cp_error_message(), pt_path) != NULL, "message does not name %s",
              pt_path);
    if (rc == CP_EPT_LEGACY)
      CHECK(strstr(cp_error_message(), "_use_new_zipfile_serialization=True") != NULL);
    printf("  %s: %s as expected: %s\n", pt_path, cp_err_name(rc), cp_error_message());
    cp_pt_free(f);
    cJSON_Delete(g);
    return;
  }
  CHECK_MSG(rc == 0, "%s: %s %s", pt_path, cp_err_name(rc), cp_error_message());
  if (rc != 0) {
    cJSON_Delete(g);
    return;
  }
  const cJSON *tensors = cJSON_GetObjectItem(g, "tensors");
  size_t n = (size_t)cJSON_GetArraySize(tensors);
  CHECK_MSG(cp_pt_count(f) == n, "%s: %zu tensors, golden has %zu", pt_path, cp_pt_count(f), n);
  CHECK_MSG(cp_pt_skipped_count(f) == (size_t)cJSON_GetObjectItem(g, "skipped")->valueint,
            "%s: skipped %zu", pt_path, cp_pt_skipped_count(f));
  for (size_t i = 0; i < n && i < cp_pt_count(f); i++) {
    const cJSON *gt = cJSON_GetArrayItem(tensors, (int)i);
    const cp_tensor *t = cp_pt_tensor(f, i);
    const char *gname = cJSON_GetObjectItem(gt, "name")->valuestring;
    CHECK_MSG(strcmp(t->name, gname) == 0, "%s: tensor %zu named '%s', want '%s'", pt_path, i,
              t->name, gname);
    CHECK_MSG(cp_pt_find(f, gname) == (int64_t)i, "%s: find '%s'", pt_path, gname);
    CHECK_MSG(strcmp(cp_dtype_name(t->dtype), cJSON_GetObjectItem(gt, "dtype")->valuestring) == 0,
              "%s: '%s' dtype %s", pt_path, gname, cp_dtype_name(t->dtype));
    const cJSON *shape = cJSON_GetObjectItem(gt, "shape");
    int nd = cJSON_GetArraySize(shape);
    CHECK_MSG(t->ndim == nd, "%s: '%s' ndim %d want %d", pt_path, gname, t->ndim, nd);
    bool shape_ok = t->ndim == nd;
    for (int d = 0; shape_ok && d < nd; d++)
      shape_ok = t->shape[d] == (int64_t)cJSON_GetArrayItem(shape, d)->valuedouble;
    CHECK_MSG(shape_ok, "%s: '%s' shape differs", pt_path, gname);
    const cJSON *values = cJSON_GetObjectItem(gt, "values");
    size_t nv = (size_t)cJSON_GetArraySize(values);
    size_t es = cp_dtype_size(t->dtype);
    CHECK_MSG(t->nbytes == nv * es, "%s: '%s' nbytes %llu for %zu values", pt_path, gname,
              (unsigned long long)t->nbytes, nv);
    if (t->nbytes != nv * es) continue;

    /* Whole read, then a read in odd-sized pieces (partial elements, odometer restarts). */
    uint8_t *full = malloc(t->nbytes + 1), *pieces = malloc(t->nbytes + 1);
    CHECK_RC(0, cp_pt_read(f, i, 0, full, (size_t)t->nbytes));
    for (uint64_t off = 0; off < t->nbytes; off += 3) {
      size_t len = t->nbytes - off < 3 ? (size_t)(t->nbytes - off) : 3;
      CHECK_RC(0, cp_pt_read(f, i, off, pieces + off, len));
    }
    CHECK_MSG(memcmp(full, pieces, (size_t)t->nbytes) == 0, "%s: '%s' piecewise read differs",
              pt_path, gname);
    CHECK_RC(CP_EARG, cp_pt_read(f, i, t->nbytes, full, 1));
    int64_t foff = cp_pt_tensor_file_offset(f, i);
    if (t->data) {
      mapped_seen++;
      CHECK_MSG(memcmp(t->data, full, (size_t)t->nbytes) == 0, "%s: '%s' mapped != read", pt_path,
                gname);
      CHECK_MSG(foff >= 0 && file_bytes_equal(pt_path, foff, t->data, (size_t)t->nbytes),
                "%s: '%s' file offset %lld does not hold its bytes", pt_path, gname,
                (long long)foff);
    } else {
      unmapped_seen++;
      CHECK(foff == -1);
    }
    size_t bad = 0;
    for (size_t k = 0; k < nv; k++) {
      if (!value_matches(full, t->dtype, k, cJSON_GetArrayItem(values, (int)k))) {
        if (bad++ < 3)
          fprintf(stderr, "%s: '%s'[%zu] differs from the golden\n", pt_path, gname, k);
      }
    }
    CHECK_MSG(bad == 0, "%s: '%s': %zu of %zu values differ", pt_path, gname, bad, nv);
    values_checked += (int)nv;
    tensors_checked++;
    free(full);
    free(pieces);
  }
  CHECK_RC(CP_EARG, cp_pt_read(f, cp_pt_count(f), 0, NULL, 0));
  cp_pt_free(f);
  cJSON_Delete(g);
}

/* dir/name in a rotating static buffer large enough for any dir under 4096 bytes. */
static const char *own_path(const char *dir, const char *name) {
  static char buf[4][8400];
  static int slot;
  char *p = buf[slot++ & 3];
  snprintf(p, sizeof buf[0], "%s/%s", dir, name);
  return p;
}

static const cp_tensor *by_name(cp_pt_file *f, const char *name) {
  int64_t i = cp_pt_find(f, name);
  CHECK_MSG(i >= 0, "no tensor '%s'", name);
  return i >= 0 ? cp_pt_tensor(f, (size_t)i) : NULL;
}

/* Mapping decisions on our own checkpoints (values are covered by the goldens). */
static void check_mapping(const char *dir) {
  cp_pt_file *f = NULL;
  CHECK_RC(0, cp_pt_open(&f, own_path(dir, "transposed.pt")));
  if (f) {
    const cp_tensor *t = by_name(f, "t");
    CHECK(t && t->data == NULL && t->ndim == 2 && t->shape[0] == 4 && t->shape[1] == 3);
    CHECK(strcmp(cp_pt_prefix(f), "transposed") == 0);
    cp_pt_free(f);
  }
  f = NULL;
  CHECK_RC(0, cp_pt_open(&f, own_path(dir, "view_offset.pt")));
  if (f) {
    const cp_tensor *a = by_name(f, "contig_offset"), *b = by_name(f, "strided_offset"),
                    *s = by_name(f, "scalar_view");
    CHECK(a && a->data != NULL); /* contiguous view with a storage offset is still mapped */
    CHECK(b && b->data == NULL);
    CHECK(s && s->data != NULL && s->ndim == 0 && s->nbytes == 8);
    if (a && s && a->data && s->data) /* same storage: element 7 sits 2 past element 5 */
      CHECK((const uint8_t *)s->data - (const uint8_t *)a->data == 16);
    cp_pt_free(f);
  }
  f = NULL;
  CHECK_RC(0, cp_pt_open(&f, own_path(dir, "compressed.pt")));
  if (f) {
    for (size_t i = 0; i < cp_pt_count(f); i++) CHECK(cp_pt_tensor(f, i)->data == NULL);
    CHECK(cp_pt_count(f) == 4);
    cp_pt_free(f);
  }
  f = NULL;
  CHECK_RC(0, cp_pt_open(&f, own_path(dir, "shared.pt")));
  if (f) {
    const cp_tensor *w = by_name(f, "w"), *flat = by_name(f, "flat"), *row = by_name(f, "row");
    CHECK(w && flat && w->data && w->data == flat->data);
    CHECK(row && row->data == (const uint8_t *)w->data + 2 * 4 * 4);
    cp_pt_free(f);
  }
  cp_pt_free(NULL);
}

int main(void) {
  const char *src = test_env("CTXPATCH_SOURCE_DIR");
  char own[4096];
  snprintf(own, sizeof own, "%s/tests/goldens/pytorch", src);
  DIR *d = opendir(own);
  CHECK_MSG(d != NULL, "cannot list %s", own);
  int own_count = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    size_t l = strlen(e->d_name);
    if (l < 6 || strcmp(e->d_name + l - 5, ".json") != 0) continue;
    char golden[4096 + 256], pt[4096 + 256];
    snprintf(golden, sizeof golden, "%s/%s", own, e->d_name);
    snprintf(pt, sizeof pt, "%s/%.*s.pt", own, (int)(l - 5), e->d_name);
    check_golden(golden, pt);
    own_count++;
  }
  if (d) closedir(d);
  CHECK(own_count >= 8);
  check_mapping(own);
  printf("own checkpoints: %d files\n", own_count);
  if (test_failed) return test_finish(); /* report failures rather than skip below */

  const char *fx = test_fixtures();
  int fixture_count = 0;
  static const char *groups[] = {"burn", "candle"};
  for (int gi = 0; gi < 2; gi++) {
    char gdir[4096];
    snprintf(gdir, sizeof gdir, "%s/third_party/%s", fx, groups[gi]);
    d = opendir(gdir);
    CHECK_MSG(d != NULL, "cannot list %s", gdir);
    for (struct dirent *e; d && (e = readdir(d));) {
      size_t l = strlen(e->d_name);
      if (l < 4 || strcmp(e->d_name + l - 3, ".pt") != 0) continue;
      char golden[8192], pt[8192];
      snprintf(golden, sizeof golden, "%s/tests/goldens/fixtures/%s_%.*s.json", src, groups[gi],
               (int)(l - 3), e->d_name);
      snprintf(pt, sizeof pt, "%s/%s", gdir, e->d_name);
      check_golden(golden, pt);
      fixture_count++;
    }
    if (d) closedir(d);
  }
  CHECK(fixture_count >= 19);
  printf("fixtures: %d files; %d tensors, %d values compared (%d mapped, %d via cp_pt_read)\n",
         fixture_count, tensors_checked, values_checked, mapped_seen, unmapped_seen);
  return test_finish();
}
