/* Floor: base. Little-endian integers in untrusted byte buffers (zip records, pickle operands,
 * safetensors and SentencePiece length prefixes), read and written byte by byte so neither the
 * host's byte order nor the buffer's alignment matters. The caller bounds-checks `p` first. */
#ifndef CTXPATCH_BASE_LE_H
#define CTXPATCH_BASE_LE_H

#include <stddef.h>
#include <stdint.h>

/* The n-byte (0..8) little-endian unsigned integer at p. */
static inline uint64_t cp_le_bytes(const void *p, size_t n) {
  const uint8_t *b = p;
  uint64_t v = 0;
  while (n--) v = (v << 8) | b[n];
  return v;
}

static inline uint16_t cp_le16(const void *p) { return (uint16_t)cp_le_bytes(p, 2); }
static inline uint32_t cp_le32(const void *p) { return (uint32_t)cp_le_bytes(p, 4); }
static inline uint64_t cp_le64(const void *p) { return cp_le_bytes(p, 8); }

/* Writes v as 8 little-endian bytes at p. */
static inline void cp_le_put64(void *p, uint64_t v) {
  uint8_t *b = p;
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}

#endif
