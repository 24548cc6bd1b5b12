/* A string -> int32 hash map (open addressing, FNV-1a) for vocabularies: see tokenizers/strmap.h. */
#include "tokenizers/strmap.h"

#include <stdlib.h>
#include <string.h>

static uint64_t tk_hash(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
  return h ^ (h >> 29);
}

static int tk_map_grow(tk_map *m) {
  size_t cap = m->cap ? m->cap * 2 : 1024;
  char **keys = calloc(cap, sizeof *keys);
  uint32_t *klen = calloc(cap, sizeof *klen);
  int32_t *vals = calloc(cap, sizeof *vals);
  if (!keys || !klen || !vals) {
    free(keys), free(klen), free(vals);
    return -1;
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->keys[i]) continue;
    size_t j = tk_hash(m->keys[i], m->klen[i]) & (cap - 1);
    while (keys[j]) j = (j + 1) & (cap - 1);
    keys[j] = m->keys[i], klen[j] = m->klen[i], vals[j] = m->vals[i];
  }
  free(m->keys), free(m->klen), free(m->vals);
  m->keys = keys, m->klen = klen, m->vals = vals, m->cap = cap;
  return 0;
}

int tk_map_put(tk_map *m, const char *key, size_t len, int32_t val) {
  if (len > UINT32_MAX) return -1;
  if ((m->count + 1) * 2 > m->cap && tk_map_grow(m)) return -1;
  size_t j = tk_hash(key, len) & (m->cap - 1);
  while (m->keys[j]) {
    if (m->klen[j] == len && !memcmp(m->keys[j], key, len)) {
      m->vals[j] = val;
      return 1;
    }
    j = (j + 1) & (m->cap - 1);
  }
  char *k = malloc(len + 1);
  if (!k) return -1;
  memcpy(k, key, len);
  k[len] = '\0';
  m->keys[j] = k, m->klen[j] = (uint32_t)len, m->vals[j] = val;
  m->count++;
  return 0;
}

bool tk_map_get(const tk_map *m, const char *key, size_t len, int32_t *val) {
  if (!m->cap) return false;
  size_t j = tk_hash(key, len) & (m->cap - 1);
  while (m->keys[j]) {
    if (m->klen[j] == len && !memcmp(m->keys[j], key, len)) {
      *val = m->vals[j];
      return true;
    }
    j = (j + 1) & (m->cap - 1);
  }
  return false;
}

void tk_map_free(tk_map *m) {
  for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
  free(m->keys), free(m->klen), free(m->vals);
  memset(m, 0, sizeof *m);
}
