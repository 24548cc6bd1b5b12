/* Private to tokenizers/: a string -> int32 hash map (keys copied) for vocabularies. */
#ifndef CTXPATCH_TOKENIZERS_STRMAP_H
#define CTXPATCH_TOKENIZERS_STRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  char **keys; /* [cap], NULL = empty slot; owned */
  uint32_t *klen;
  int32_t *vals;
  size_t cap, count;
} tk_map;

/* 0 when added, 1 when the key existed (its value replaced), -1 when out of memory. */
int tk_map_put(tk_map *m, const char *key, size_t len, int32_t val);
bool tk_map_get(const tk_map *m, const char *key, size_t len, int32_t *val);
void tk_map_free(tk_map *m);

#endif
