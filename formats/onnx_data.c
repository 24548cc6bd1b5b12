/* An ONNX model's external data file placed beside another graph, ranges only
 * (include/ctxpatch/formats/onnx_data.h). */
#include "ctxpatch/formats/onnx_data.h"

#include <inttypes.h>
#include <string.h>

#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"

/* Whether `dst` already holds the used ranges of the file (same size, same bytes there). */
static int same_ranges(bool *same, const cp_onnx_range *r, size_t n, uint64_t size, const void *map, const char *dst) {
  const void *dmap = NULL;
  uint64_t dsize = 0;
  int rc = cp_map_input(&dmap, &dsize, dst);
  if (rc < 0) return rc;
  *same = dsize == size;
  for (size_t k = 0; k < n && *same; k++)
    *same = !memcmp((const uint8_t *)dmap + r[k].offset, (const uint8_t *)map + r[k].offset, (size_t)r[k].length);
  cp_unmap_input(dmap, dsize);
  return 0;
}

int cp_onnx_data_place(bool *written, const cp_onnx_model *m, size_t k, const char *dst, bool replace) {
  const cp_onnx_range *r;
  size_t n;
  uint64_t size;
  const void *map;
  cp_onnx_data_ranges(&r, &n, &size, &map, m, k);
  if (written) *written = false;
  int rc = 0;
  if (cp_path_is_file(dst)) {
    bool same = false;
    if ((rc = same_ranges(&same, r, n, size, map, dst)) < 0) return rc;
    if (same) return 0;
    if (!replace)
      return cp_error_set(CP_EEXIST, "%s: exists with other bytes than the data file '%s' of %s (--force replaces it)",
                          dst, m->data_files[k], m->path);
  }
  cp_atomic_file *f = NULL;
  if ((rc = cp_atomic_open(&f, dst)) < 0) return rc;
  uint64_t at = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    rc = cp_atomic_skip(f, r[i].offset - at);
    if (rc == 0) rc = cp_atomic_write(f, (const uint8_t *)map + r[i].offset, (size_t)r[i].length);
    at = r[i].offset + r[i].length;
  }
  if (rc == 0) rc = cp_atomic_skip(f, size - at);
  if (rc < 0) {
    cp_atomic_abort(f);
    return rc;
  }
  if ((rc = cp_atomic_commit(f)) == 0 && written) *written = true;
  return rc;
}
