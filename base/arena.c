/* Bump allocation freed all at once: see include/ctxpatch/base/arena.h. */
#include "ctxpatch/base/arena.h"

#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"

struct cp_arena_block {
  cp_arena_block *next;
  size_t used, cap;
  max_align_t data[];
};

#define ARENA_BLOCK ((size_t)1 << 16)

void *cp_arena_alloc(cp_arena *a, size_t n) {
  const size_t align = sizeof(max_align_t);
  if (n == 0) n = 1;
  if (n > SIZE_MAX - sizeof(cp_arena_block) - align) return NULL;
  n = (n + align - 1) / align * align;
  if (a->limit && (n > a->limit || a->total > a->limit - n)) return NULL;
  cp_arena_block *b = a->head;
  if (!b || b->cap - b->used < n) {
    size_t cap = n > ARENA_BLOCK / 2 ? n : ARENA_BLOCK;
    b = malloc(sizeof(cp_arena_block) + cap);
    if (!b) return NULL;
    b->cap = cap;
    b->used = 0;
    /* A big one-off block goes behind the current head so the head keeps its free space. */
    if (a->head && cap == n) {
      b->next = a->head->next;
      a->head->next = b;
    } else {
      b->next = a->head;
      a->head = b;
    }
  }
  void *p = (char *)b->data + b->used;
  b->used += n;
  a->total += n;
  memset(p, 0, n);
  return p;
}

void *cp_arena_array(cp_arena *a, size_t count, size_t elem) {
  size_t n;
  return cp_size_mul(&n, count, elem) ? cp_arena_alloc(a, n) : NULL;
}

void cp_arena_free(cp_arena *a) {
  cp_arena_block *b = a->head;
  while (b) {
    cp_arena_block *next = b->next;
    free(b);
    b = next;
  }
  a->head = NULL;
  a->total = 0;
}

void cp_arena_reset(cp_arena *a) {
  cp_arena_block *b = a->head;
  if (b && !b->next) { /* one block held everything: rewind it */
    b->used = 0;
    a->total = 0;
    return;
  }
  size_t want = a->total <= SIZE_MAX / 4 ? (size_t)a->total * 2 : 0;
  cp_arena_free(a);
  if (!want) return;
  /* One block big enough for last time; if it cannot be had, the next round allocates as usual. */
  if ((b = malloc(sizeof(cp_arena_block) + want))) {
    b->next = NULL, b->used = 0, b->cap = want;
    a->head = b;
  }
}
