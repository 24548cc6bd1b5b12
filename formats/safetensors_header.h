/* Private (floor: formats): the schema walk over a safetensors header, the last of the reader's
 * four gates (formats/safetensors_read.c runs the first three: UTF-8, '{', cp_json_scan). */
#ifndef CTXPATCH_FORMATS_SAFETENSORS_HEADER_H
#define CTXPATCH_FORMATS_SAFETENSORS_HEADER_H

#include <stddef.h>
#include <stdint.h>

#include "ctxpatch/formats/tensor.h"

typedef struct {
  char *name;     /* owned; t.name points at it */
  size_t key_off; /* header offset of the name's opening quote */
  uint64_t begin, end;
  cp_tensor t; /* dtype, shape and nbytes checked; data not yet set */
} st_entry;

typedef struct {
  st_entry *e; /* [n] in header order */
  size_t n;
  char **meta_key, **meta_val; /* [n_meta] in header order, owned */
  size_t n_meta;
} st_header;

/* Walks hdr[0..len), which cp_json_scan has found well-formed, and checks the schema: tensor
 * entries with exactly dtype, shape and data_offsets that agree, and one __metadata__ object of
 * strings. Numbers are read from the text, never through doubles. Everything parsed so far is in
 * *out on return, also after an error: the caller frees every name, key and value and the
 * arrays. Messages name `path` and the header offset. */
int st_header_parse(st_header *out, const char *path, const char *hdr, size_t len);

/* Which code a duplicate key at hdr offset `off` gets: CP_EST_DUPLICATE_NAME at the top level,
 * CP_EST_METADATA inside __metadata__, CP_EST_ENTRY inside a tensor entry. */
int st_duplicate_code(const char *hdr, size_t off);

#endif
