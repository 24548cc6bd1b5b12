/* Floor: base. The files under a folder, recursively, as sorted relative paths with their types:
 * what `ctxpatch check` compares with SHA256SUMS and what `ctxpatch batch` fingerprints.
 *
 * Symlinks are listed (with S_IFLNK), never followed; folders are descended into, not listed.
 * Bounded for untrusted trees: at most CP_FILE_LIST_MAX_DEPTH levels and CP_FILE_LIST_MAX_ENTRIES
 * entries, beyond which the listing is refused (CP_EOVERFLOW naming the folder). The caller owns
 * the list (cp_file_list_free). */
#ifndef CTXPATCH_BASE_FILE_LIST_H
#define CTXPATCH_BASE_FILE_LIST_H

#include <stddef.h>

#define CP_FILE_LIST_MAX_DEPTH 16
#define CP_FILE_LIST_MAX_ENTRIES 100000

typedef struct {
  char *path;     /* relative to the listed folder, '/'-separated, owned */
  unsigned mode;  /* lstat st_mode: S_ISREG, S_ISLNK, S_ISFIFO, ... */
  unsigned long long size;
  long long mtime_ns;
} cp_file_entry;

typedef struct {
  cp_file_entry *items; /* [n], sorted bytewise by path */
  size_t n, cap;
} cp_file_list;

/* Lists `dir` (hidden names included). 0, or CP_EIO / CP_ENOMEM / CP_EOVERFLOW; *out is then empty. */
int cp_file_list_make(cp_file_list *out, const char *dir);
/* The entry with this relative path, or NULL. */
const cp_file_entry *cp_file_list_find(const cp_file_list *l, const char *path);
void cp_file_list_free(cp_file_list *l);

#endif
