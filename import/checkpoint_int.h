/* Floor: import (private). The checkpoint container shared by the opener (checkpoint_open.c: which
 * files, which format) and the tensor list (checkpoint.c). Each weight file is a shard behind one
 * small ops table, so nothing outside the opener tests which format a shard is. */
#ifndef CTXPATCH_IMPORT_CHECKPOINT_INT_H
#define CTXPATCH_IMPORT_CHECKPOINT_INT_H

#include <stdbool.h>

#include "ctxpatch/import/checkpoint.h"

/* What the tensor list needs of one opened weight file. `file` is the format's own handle. */
typedef struct {
  size_t (*count)(const void *file);
  const cp_tensor *(*tensor)(const void *file, size_t i);
  /* Bytes [offset, +len) of tensor i, for views the reader could not map (data NULL); NULL when
   * every view of the format is mapped. */
  int (*read)(void *file, size_t i, uint64_t offset, void *buf, size_t len);
  /* The descriptor whose bytes at *offset hold mapped tensor i (`view` is its view), or -1. */
  int (*fd)(uint64_t *offset, const void *file, size_t i, const cp_tensor *view);
  /* Tensor i's stored quantised blocks when it is not mapped; NULL for formats that never are. */
  const void *(*blocks)(cp_dtype *dtype, const void *file, size_t i);
  void (*close)(void *file);
} cp_ckpt_ops;

typedef struct {
  char *name; /* relative to the folder */
  const cp_ckpt_ops *ops;
  void *file;
} cp_ckpt_shard;

typedef struct {
  size_t shard;
  size_t local;
  const cp_tensor *view;
} cp_ckpt_entry;

struct cp_checkpoint {
  cp_format format;
  char *dir;
  char *config_path;
  cp_ckpt_shard *shards;
  size_t n_shards;
  cp_ckpt_entry *entries;
  size_t n_entries;
  size_t *by_name; /* entry indices sorted by name */
  char **aux;
  size_t n_aux;
};

/* Lists every shard's tensors and sorts them by name; a name in two shards is CP_ECKPT_DUPLICATE. */
int cp_ckpt_build_entries(cp_checkpoint *ck);
/* The entry named `name`, or -1. */
long cp_ckpt_find_entry(const cp_checkpoint *ck, const char *name);

#endif
