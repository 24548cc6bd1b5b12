/* GPT-2 bytes_to_unicode tables, built once: see tokenizers/hf_bytelevel.h. */
#include "tokenizers/hf_bytelevel.h"

#include <pthread.h>
#include <stdbool.h>

static uint32_t byte_cp[256];
static int16_t cp_byte[512];

static void init_once(void) {
  int n = 0;
  for (int i = 0; i < 512; i++) cp_byte[i] = -1;
  for (int b = 0; b < 256; b++) {
    bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    byte_cp[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
    cp_byte[byte_cp[b]] = (int16_t)b;
  }
}

static void init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, init_once);
}

uint32_t tk_bytelevel_cp(unsigned char b) {
  init();
  return byte_cp[b];
}

int tk_bytelevel_byte(uint32_t cp) {
  init();
  return cp < 512 ? cp_byte[cp] : -1;
}
