/* The files under a folder as sorted relative paths (include/ctxpatch/base/file_list.h). */
#include "ctxpatch/base/file_list.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/io.h"

/* Appends the entries of root/rel (rel "" = root itself), descending into folders. */
static int walk(cp_file_list *l, const char *root, const char *rel, int depth) {
  if (depth > CP_FILE_LIST_MAX_DEPTH)
    return cp_error_set(CP_EOVERFLOW, "%s: %s: folders nested deeper than %d", root, rel, CP_FILE_LIST_MAX_DEPTH);
  char *dir = *rel ? cp_path_join(root, rel) : strdup(root), *full = NULL, *sub = NULL;
  CP_CHECK_ALLOC(dir, root);
  int rc = 0;
  DIR *d = opendir(dir);
  if (!d) {
    rc = cp_error_set(CP_EIO, "%s: cannot list folder: %s", dir, strerror(errno));
    goto done;
  }
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    free(full);
    free(sub);
    full = cp_path_join(dir, e->d_name);
    sub = *rel ? cp_path_join(rel, e->d_name) : strdup(e->d_name);
    CP_CHECK_ALLOC_GOTO(full && sub ? full : NULL, dir);
    struct stat st;
    if (lstat(full, &st) != 0) {
      rc = cp_error_set(CP_EIO, "%s: %s", full, strerror(errno));
      goto done;
    }
    if (S_ISDIR(st.st_mode)) {
      if ((rc = walk(l, root, sub, depth + 1)) < 0) goto done;
      continue;
    }
    if (l->n >= CP_FILE_LIST_MAX_ENTRIES) {
      rc = cp_error_set(CP_EOVERFLOW, "%s: more than %d files", root, CP_FILE_LIST_MAX_ENTRIES);
      goto done;
    }
    if ((rc = CP_ARRAY_RESERVE(l->items, l->cap, l->n + 1, root)) < 0) goto done;
    l->items[l->n++] = (cp_file_entry){sub, (unsigned)st.st_mode, (unsigned long long)st.st_size,
                                       (long long)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec};
    sub = NULL;
  }
done:
  if (d) closedir(d);
  free(dir);
  free(full);
  free(sub);
  return rc;
}

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const cp_file_entry *)a)->path, ((const cp_file_entry *)b)->path);
}

int cp_file_list_make(cp_file_list *out, const char *dir) {
  memset(out, 0, sizeof *out);
  int rc = walk(out, dir, "", 0);
  if (rc < 0) {
    cp_file_list_free(out);
    return rc;
  }
  if (out->n) qsort(out->items, out->n, sizeof *out->items, cmp_entry);
  return 0;
}

const cp_file_entry *cp_file_list_find(const cp_file_list *l, const char *path) {
  cp_file_entry key = {.path = (char *)path};
  return l->n ? bsearch(&key, l->items, l->n, sizeof *l->items, cmp_entry) : NULL;
}

void cp_file_list_free(cp_file_list *l) {
  if (!l) return;
  for (size_t i = 0; i < l->n; i++) free(l->items[i].path);
  free(l->items);
  memset(l, 0, sizeof *l);
}
