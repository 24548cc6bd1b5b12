/* Private to tokenizers/hf_*.c: GPT-2's bytes_to_unicode, the alphabet of ByteLevel
 * pre-tokenizers and decoders (each byte as a printable code point, and back). */
#ifndef CTXPATCH_TOKENIZERS_HF_BYTELEVEL_H
#define CTXPATCH_TOKENIZERS_HF_BYTELEVEL_H

#include <stdint.h>

/* The code point that stands for byte b. */
uint32_t tk_bytelevel_cp(unsigned char b);
/* The byte code point cp stands for, or -1 when cp is outside the alphabet. */
int tk_bytelevel_byte(uint32_t cp);

#endif
