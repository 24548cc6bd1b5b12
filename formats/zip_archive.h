/* Private (floor: formats): a zip archive held in memory, read with bounds on every field, for
 * the PyTorch checkpoint reader. libzip validates the archive and inflates compressed entries;
 * the central directory is also parsed here because libzip 1.7 does not expose where an entry's
 * data starts, and every entry used is cross-checked against zip_stat before its bytes are
 * trusted. Refusals use the PyTorch zip codes (CP_EPT_ZIP, CP_EPT_ENTRY_NAME, CP_EPT_RECORD). */
#ifndef CTXPATCH_FORMATS_ZIP_ARCHIVE_H
#define CTXPATCH_FORMATS_ZIP_ARCHIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zip.h>

typedef struct {
  const char *name; /* into the map, not NUL-terminated */
  size_t name_len;
  uint64_t csize, usize, local_off;
  uint16_t method, flags;
  /* filled by zd_resolve */
  bool resolved;
  uint64_t data_off;
} zd_entry;

typedef struct {
  const char *name;
  size_t len, idx;
} zd_name;

typedef struct {
  const char *path;   /* for messages; borrowed */
  const uint8_t *map; /* the whole file; borrowed, must outlive the archive */
  size_t map_len;
  zip_t *za;
  zd_entry *ent; /* [nent] central directory order == libzip index */
  size_t nent;
  zd_name *by_name; /* [nent] sorted by name */
  /* zd_read_at's open inflate stream: entry cur_ent (SIZE_MAX = none) at byte cur_pos */
  zip_file_t *cur;
  size_t cur_ent;
  uint64_t cur_pos;
} zd_archive;

/* DEFLATE cannot expand more than 1032:1; an entry declaring more is a lie or a bomb. */
#define ZD_MAX_RATIO 1032

/* Parses the central directory of map[0..len) (refusing duplicate names), then opens it with
 * libzip and checks both agree on the entry count. *z owns what it allocates: zd_close it, also
 * after an error. */
int zd_open(zd_archive *z, const char *path, const uint8_t *map, size_t len);
void zd_close(zd_archive *z);

/* Entry index named name[0..len), or -1. */
int64_t zd_find(const zd_archive *z, const char *name, size_t len);
/* Cross-checks entry i against libzip and its local header, finds its data in the map, and
 * refuses a compressed entry declaring more than ZD_MAX_RATIO times its compressed size. */
int zd_resolve(zd_archive *z, size_t i);
/* Stored (not compressed, not encrypted): its bytes can be used in place in the map. */
bool zd_mappable(const zd_entry *e);
/* Inflates entry i (resolved) into buf[0..usize), checking the CRC. */
int zd_read(zd_archive *z, size_t i, uint8_t *buf);
/* Inflates bytes [off, off + len) of entry i (resolved) into buf through a bounded buffer,
 * never holding more of the entry than len: sequential reads continue one open stream, a read
 * behind it restarts the entry. The CRC is checked when a read reaches the entry's end. */
int zd_read_at(zd_archive *z, size_t i, uint64_t off, uint8_t *buf, size_t len);

#endif
