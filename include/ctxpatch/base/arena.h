/* Floor: base. A bump allocator for many small objects that share one lifetime (a pickle's
 * objects, the names that point into them): each allocation is a pointer bump in a 64 KiB block,
 * and everything is freed at once, so an error at any point leaks nothing.
 *
 * Start from a zeroed cp_arena ({0}, or calloc'd inside its owner); set `limit` to cap the bytes
 * handed out (0: no cap but memory). The arena owns every block; cp_arena_free releases them. */
#ifndef CTXPATCH_BASE_ARENA_H
#define CTXPATCH_BASE_ARENA_H

#include <stddef.h>
#include <stdint.h>

typedef struct cp_arena_block cp_arena_block;
typedef struct {
  cp_arena_block *head;
  uint64_t total; /* bytes handed out, rounded up to the alignment */
  uint64_t limit; /* cap on total; 0 = none */
} cp_arena;

/* n zeroed, max_align_t-aligned bytes; NULL when out of memory or past the limit. */
void *cp_arena_alloc(cp_arena *a, size_t n);
/* count * elem zeroed bytes, the product checked for overflow (NULL then too). */
void *cp_arena_array(cp_arena *a, size_t count, size_t elem);
/* Makes every byte handed out reusable, for an owner that needs scratch again and again (the
 * engine's per-call attention tables): keeps one block twice the size of what was handed out since
 * the last reset, so a caller that needs about as much each time stops allocating after the first
 * rounds. Every pointer handed out before becomes invalid. */
void cp_arena_reset(cp_arena *a);
/* Frees every block; the arena is then empty and reusable with the same limit. */
void cp_arena_free(cp_arena *a);

#endif
