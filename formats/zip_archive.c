/* Bounded reading of an in-memory zip archive for formats/pytorch_zip.c: see
 * formats/zip_archive.h. */
#include "formats/zip_archive.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/le.h"
#include "ctxpatch/base/quote.h"

static int cmp_name(const char *a, size_t al, const char *b, size_t bl) {
  int c = memcmp(a, b, al < bl ? al : bl);
  if (c) return c;
  return al < bl ? -1 : al > bl;
}

static int cmp_zd_name(const void *x, const void *y) {
  const zd_name *a = x, *b = y;
  int c = cmp_name(a->name, a->len, b->name, b->len);
  if (c) return c;
  return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Entry index named name[0..len), or -1. */
int64_t zd_find(const zd_archive *z, const char *name, size_t len) {
  size_t lo = 0, hi = z->nent;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const zd_name *e = &z->by_name[mid];
    int c = cmp_name(e->name, e->len, name, len);
    if (c == 0) return (int64_t)e->idx;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -1;
}

static int parse_central_dir(zd_archive *ar) {
  const uint8_t *m = ar->map;
  size_t n = ar->map_len;
  if (n < 22) return cp_error_set(CP_EPT_ZIP, "%s: not a zip archive (%zu bytes)", ar->path, n);
  size_t eocd = SIZE_MAX;
  size_t lowest = n - 22 > 65535 ? n - 22 - 65535 : 0;
  for (size_t p = n - 22 + 1; p-- > lowest;) {
    if (cp_le32(m + p) == 0x06054b50 && p + 22 + cp_le16(m + p + 20) <= n) {
      eocd = p;
      break;
    }
  }
  if (eocd == SIZE_MAX)
    return cp_error_set(CP_EPT_ZIP, "%s: not a zip archive (no end of central directory record)",
                        ar->path);
  uint64_t count = cp_le16(m + eocd + 10), cd_size = cp_le32(m + eocd + 12),
           cd_off = cp_le32(m + eocd + 16);
  uint64_t limit = eocd;
  if (cp_le16(m + eocd + 4) != 0 || cp_le16(m + eocd + 6) != 0 || cp_le16(m + eocd + 8) != count)
    return cp_error_set(CP_EPT_ZIP, "%s: offset %zu: multi-disk archives are not supported",
                        ar->path, eocd);
  if (eocd >= 20 && cp_le32(m + eocd - 20) == 0x07064b50) {
    uint64_t z = cp_le64(m + eocd - 20 + 8);
    if (z > eocd - 20 || eocd - 20 - z < 56 || cp_le32(m + z) != 0x06064b50)
      return cp_error_set(CP_EPT_ZIP, "%s: offset %zu: bad zip64 end of central directory locator",
                          ar->path, eocd - 20);
    count = cp_le64(m + z + 32);
    cd_size = cp_le64(m + z + 40);
    cd_off = cp_le64(m + z + 48);
    limit = z;
  }
  if (cd_off > limit || cd_size > limit - cd_off)
    return cp_error_set(CP_EPT_ZIP,
                        "%s: central directory (offset %llu, %llu bytes) past its end record",
                        ar->path, (unsigned long long)cd_off, (unsigned long long)cd_size);
  if (count > cd_size / 46)
    return cp_error_set(CP_EPT_ZIP, "%s: %llu entries do not fit in a %llu-byte central directory",
                        ar->path, (unsigned long long)count, (unsigned long long)cd_size);
  ar->ent = calloc(count ? (size_t)count : 1, sizeof *ar->ent);
  ar->by_name = calloc(count ? (size_t)count : 1, sizeof *ar->by_name);
  CP_CHECK_ALLOC(ar->ent, ar->path);
  CP_CHECK_ALLOC(ar->by_name, ar->path);
  ar->nent = (size_t)count;
  uint64_t q = cd_off, end = cd_off + cd_size;
  for (size_t i = 0; i < ar->nent; i++) {
    if (end - q < 46 || cp_le32(m + q) != 0x02014b50)
      return cp_error_set(CP_EPT_ZIP, "%s: offset %llu: central directory entry %zu is malformed",
                          ar->path, (unsigned long long)q, i);
    zd_entry *e = &ar->ent[i];
    uint64_t nl = cp_le16(m + q + 28), xl = cp_le16(m + q + 30), cl = cp_le16(m + q + 32);
    if (end - q - 46 < nl + xl + cl)
      return cp_error_set(CP_EPT_ZIP, "%s: offset %llu: central directory entry %zu overruns",
                          ar->path, (unsigned long long)q, i);
    e->flags = cp_le16(m + q + 8);
    e->method = cp_le16(m + q + 10);
    e->csize = cp_le32(m + q + 20);
    e->usize = cp_le32(m + q + 24);
    e->local_off = cp_le32(m + q + 42);
    e->name = (const char *)m + q + 46;
    e->name_len = (size_t)nl;
    /* zip64 extra field (id 1): the saturated fields, in this order, 8 bytes each. */
    const uint8_t *x = m + q + 46 + nl, *xe = x + xl;
    while (xe - x >= 4) {
      uint64_t id = cp_le16(x), sz = cp_le16(x + 2);
      if ((uint64_t)(xe - x - 4) < sz) break;
      if (id == 1) {
        const uint8_t *z = x + 4, *ze = z + sz;
        uint64_t *fields[3] = {&e->usize, &e->csize, &e->local_off};
        for (int k = 0; k < 3; k++) {
          if (*fields[k] != 0xffffffffu) continue;
          if (ze - z < 8)
            return cp_error_set(CP_EPT_ZIP, "%s: central directory entry %zu: short zip64 field",
                                ar->path, i);
          *fields[k] = cp_le64(z);
          z += 8;
        }
      }
      x += 4 + sz;
    }
    ar->by_name[i] = (zd_name){e->name, e->name_len, i};
    q += 46 + nl + xl + cl;
  }
  qsort(ar->by_name, ar->nent, sizeof *ar->by_name, cmp_zd_name);
  for (size_t i = 1; i < ar->nent; i++) {
    const zd_name *a = &ar->by_name[i - 1], *b = &ar->by_name[i];
    if (cmp_name(a->name, a->len, b->name, b->len) == 0) {
      char q1[160];
      return cp_error_set(CP_EPT_ENTRY_NAME, "%s: zip entry name '%s' appears more than once",
                          ar->path, cp_quote(q1, sizeof q1, a->name, a->len));
    }
  }
  return 0;
}

int zd_open(zd_archive *z, const char *path, const uint8_t *map, size_t len) {
  memset(z, 0, sizeof *z);
  z->cur_ent = SIZE_MAX;
  z->path = path;
  z->map = map;
  z->map_len = len;
  /* Own parse first: it names duplicate entries and bad offsets; libzip then validates again. */
  int rc = parse_central_dir(z);
  if (rc < 0) return rc;
  zip_error_t zerr;
  zip_error_init(&zerr);
  zip_source_t *src = zip_source_buffer_create(z->map, z->map_len, 0, &zerr);
  if (src) z->za = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &zerr);
  if (!z->za) {
    rc = cp_error_set(zip_error_code_zip(&zerr) == ZIP_ER_MEMORY ? CP_ENOMEM : CP_EPT_ZIP,
                      "%s: not a readable zip archive: %s", z->path, zip_error_strerror(&zerr));
    zip_error_fini(&zerr);
    zip_source_free(src); /* NULL-safe; owned by the archive only once opened */
    return rc;
  }
  zip_error_fini(&zerr);
  zip_int64_t zn = zip_get_num_entries(z->za, 0);
  if (zn < 0 || (uint64_t)zn != z->nent)
    return cp_error_set(CP_EPT_ZIP, "%s: central directory has %zu entries, libzip counts %lld",
                        z->path, z->nent, (long long)zn);
  return 0;
}

void zd_close(zd_archive *z) {
  if (z->cur) zip_fclose(z->cur);
  if (z->za) zip_discard(z->za);
  free(z->ent);
  free(z->by_name);
  memset(z, 0, sizeof *z);
}

int zd_resolve(zd_archive *z, size_t i) {
  zd_entry *e = &z->ent[i];
  if (e->resolved) return 0;
  char qn[160];
  cp_quote(qn, sizeof qn, e->name, e->name_len);
  zip_stat_t st;
  zip_stat_init(&st);
  const zip_uint64_t need =
      ZIP_STAT_NAME | ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD;
  if (zip_stat_index(z->za, i, ZIP_FL_ENC_RAW, &st) != 0 || (st.valid & need) != need ||
      strlen(st.name) != e->name_len || memcmp(st.name, e->name, e->name_len) != 0 ||
      st.size != e->usize || st.comp_size != e->csize || st.comp_method != e->method)
    return cp_error_set(CP_EPT_ZIP, "%s: entry %zu '%s': central directory disagrees with libzip",
                        z->path, i, qn);
  uint64_t lo = e->local_off;
  if (lo > z->map_len || z->map_len - lo < 30 || cp_le32(z->map + lo) != 0x04034b50)
    return cp_error_set(CP_EPT_ZIP, "%s: offset %llu: no local header for entry '%s'", z->path,
                        (unsigned long long)lo, qn);
  uint64_t nl = cp_le16(z->map + lo + 26), xl = cp_le16(z->map + lo + 28);
  uint64_t data = lo + 30 + nl + xl;
  if (data > z->map_len || nl != e->name_len || memcmp(z->map + lo + 30, e->name, nl) != 0)
    return cp_error_set(
        CP_EPT_ZIP,
        "%s: offset %llu: local header of entry '%s' disagrees with the central directory", z->path,
        (unsigned long long)lo, qn);
  if (z->map_len - data < e->csize)
    return cp_error_set(CP_EPT_ZIP,
                        "%s: offset %llu: entry '%s' data (%llu bytes) runs past end of file",
                        z->path, (unsigned long long)data, qn, (unsigned long long)e->csize);
  if (e->method == ZIP_CM_STORE && e->csize != e->usize)
    return cp_error_set(CP_EPT_ZIP, "%s: entry '%s' is stored but its sizes differ", z->path, qn);
  /* Bound the expansion before anything is inflated (other methods than DEFLATE are held to
   * the same ratio: no checkpoint writer uses them). */
  if (e->method != ZIP_CM_STORE && e->usize / ZD_MAX_RATIO + (e->usize % ZD_MAX_RATIO != 0) > e->csize)
    return cp_error_set(CP_EPT_RECORD,
                        "%s: offset %llu: entry '%s' declares %llu bytes from %llu compressed, "
                        "over the %d:1 DEFLATE maximum (a zip bomb?)",
                        z->path, (unsigned long long)lo, qn, (unsigned long long)e->usize,
                        (unsigned long long)e->csize, ZD_MAX_RATIO);
  e->data_off = data;
  e->resolved = true;
  return 0;
}

bool zd_mappable(const zd_entry *e) { return e->method == ZIP_CM_STORE && !(e->flags & 1); }

static void stream_close(zd_archive *z) {
  if (z->cur) zip_fclose(z->cur);
  z->cur = NULL;
  z->cur_ent = SIZE_MAX;
  z->cur_pos = 0;
}

/* Reads exactly n bytes of the open stream into dst, or into a bounded scratch buffer when dst
 * is NULL (skipping). */
static int stream_take(zd_archive *z, const char *qn, uint8_t *dst, uint64_t n) {
  const zd_entry *e = &z->ent[z->cur_ent];
  uint8_t scratch[16384];
  while (n > 0) {
    uint64_t want = dst ? n : (n < sizeof scratch ? n : sizeof scratch);
    zip_int64_t r = zip_fread(z->cur, dst ? dst : scratch, want);
    if (r <= 0)
      return cp_error_set(CP_EPT_RECORD, "%s: entry '%s': read %llu of %llu bytes: %s", z->path, qn,
                          (unsigned long long)z->cur_pos, (unsigned long long)e->usize,
                          r < 0 ? zip_file_strerror(z->cur) : "unexpected end");
    z->cur_pos += (uint64_t)r;
    n -= (uint64_t)r;
    if (dst) dst += r;
  }
  return 0;
}

int zd_read_at(zd_archive *z, size_t i, uint64_t off, uint8_t *buf, size_t len) {
  const zd_entry *e = &z->ent[i];
  char qn[160];
  cp_quote(qn, sizeof qn, e->name, e->name_len);
  if (e->flags & 1) return cp_error_set(CP_EPT_RECORD, "%s: entry '%s' is encrypted", z->path, qn);
  if (off > e->usize || len > e->usize - off)
    return cp_error_set(CP_EPT_RECORD, "%s: entry '%s': bytes [%llu, +%zu) past its %llu bytes",
                        z->path, qn, (unsigned long long)off, len, (unsigned long long)e->usize);
  if (z->cur_ent != i || off < z->cur_pos) {
    stream_close(z);
    if (!(z->cur = zip_fopen_index(z->za, i, 0)))
      return cp_error_set(CP_EPT_RECORD, "%s: entry '%s': %s", z->path, qn, zip_strerror(z->za));
    z->cur_ent = i;
  }
  int rc = stream_take(z, qn, NULL, off - z->cur_pos);
  if (rc == 0) rc = stream_take(z, qn, buf, len);
  if (rc == 0 && z->cur_pos == e->usize) {
    /* One more read reaches end of data, where libzip checks the CRC. */
    uint8_t extra;
    zip_int64_t r = zip_fread(z->cur, &extra, 1);
    if (r != 0)
      rc = cp_error_set(CP_EPT_RECORD, "%s: entry '%s': %s", z->path, qn,
                        r < 0 ? zip_file_strerror(z->cur) : "more data than its size");
    stream_close(z);
  }
  if (rc < 0) stream_close(z);
  return rc;
}

int zd_read(zd_archive *z, size_t i, uint8_t *buf) {
  return zd_read_at(z, i, 0, buf, (size_t)z->ent[i].usize);
}
