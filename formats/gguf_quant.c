/* The ggml tensor type table and the block dequantisers of the GGUF reader (formats/gguf_quant.h):
 * Q8_0, Q4_0 and Q4_K decoded as ggml's reference dequantize_row_q8_0 / _q4_0 / _q4_K do. */
#include "formats/gguf_quant.h"

#include <assert.h>

#include "ctxpatch/base/le.h"
#include "ctxpatch/formats/gguf.h"

/* Indexed by ggml type id (ggml.h); ids with no name were removed from ggml or never assigned. */
static const gguf_type_info k_types[] = {
    [0] = {"F32", 1, 4, CP_F32, false},       [1] = {"F16", 1, 2, CP_F16, false},
    [2] = {"Q4_0", 32, 18, -1, true},         [3] = {"Q4_1", 32, 20, -1, false},
    [6] = {"Q5_0", 32, 22, -1, false},        [7] = {"Q5_1", 32, 24, -1, false},
    [8] = {"Q8_0", 32, 34, -1, true},         [9] = {"Q8_1", 32, 36, -1, false},
    [10] = {"Q2_K", 256, 84, -1, false},      [11] = {"Q3_K", 256, 110, -1, false},
    [12] = {"Q4_K", 256, 144, -1, true},      [13] = {"Q5_K", 256, 176, -1, false},
    [14] = {"Q6_K", 256, 210, -1, false},     [15] = {"Q8_K", 256, 292, -1, false},
    [16] = {"IQ2_XXS", 256, 66, -1, false},   [17] = {"IQ2_XS", 256, 74, -1, false},
    [18] = {"IQ3_XXS", 256, 98, -1, false},   [19] = {"IQ1_S", 256, 50, -1, false},
    [20] = {"IQ4_NL", 32, 18, -1, false},     [21] = {"IQ3_S", 256, 110, -1, false},
    [22] = {"IQ2_S", 256, 82, -1, false},     [23] = {"IQ4_XS", 256, 136, -1, false},
    [24] = {"I8", 1, 1, CP_I8, false},        [25] = {"I16", 1, 2, CP_I16, false},
    [26] = {"I32", 1, 4, CP_I32, false},      [27] = {"I64", 1, 8, CP_I64, false},
    [28] = {"F64", 1, 8, CP_F64, false},      [29] = {"IQ1_M", 256, 56, -1, false},
    [30] = {"BF16", 1, 2, CP_BF16, false},    [34] = {"TQ1_0", 256, 54, -1, false},
    [35] = {"TQ2_0", 256, 66, -1, false},     [39] = {"MXFP4", 32, 17, -1, false},
};

const gguf_type_info *gguf_type(uint32_t type) {
  if (type >= sizeof k_types / sizeof *k_types || !k_types[type].name) return NULL;
  return &k_types[type];
}

/* Q8_0: f16 d, 32 x int8; y = d * q. */
static void dq_q8_0(float *y, const uint8_t *b) {
  float d = cp_f16_to_f32(cp_le16(b));
  for (int i = 0; i < 32; i++) y[i] = d * (float)(int8_t)b[2 + i];
}

/* Q4_0: f16 d, 16 bytes; low nibbles are elements 0..15, high nibbles 16..31; y = d * (q - 8). */
static void dq_q4_0(float *y, const uint8_t *b) {
  float d = cp_f16_to_f32(cp_le16(b));
  for (int j = 0; j < 16; j++) {
    y[j] = d * (float)((b[2 + j] & 0x0f) - 8);
    y[j + 16] = d * (float)((b[2 + j] >> 4) - 8);
  }
}

/* The 6-bit scale and min of sub-block j (0..7) packed in Q4_K's 12 scale bytes. */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

/* Q4_K: f16 d, f16 dmin, 12 scale bytes, 128 nibble bytes; 8 sub-blocks of 32, each
 * y = d*sc * q - dmin*m; each 32-byte run of qs holds two sub-blocks (low, then high nibbles). */
static void dq_q4_k(float *y, const uint8_t *b) {
  float d = cp_f16_to_f32(cp_le16(b)), dmin = cp_f16_to_f32(cp_le16(b + 2));
  const uint8_t *scales = b + 4, *q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    uint8_t sc, m;
    scale_min_k4(is, scales, &sc, &m);
    float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, &sc, &m);
    float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; l++) y[j + l] = d1 * (float)(q[l] & 0x0f) - m1;
    for (int l = 0; l < 32; l++) y[j + 32 + l] = d2 * (float)(q[l] >> 4) - m2;
  }
}

void gguf_dequant_blocks(float *dst, const uint8_t *src, uint32_t type, size_t n_blocks) {
  const gguf_type_info *ti = gguf_type(type);
  assert(ti && ti->dequant);
  for (size_t k = 0; k < n_blocks; k++, dst += ti->block, src += ti->size) {
    switch (type) {
      case CP_GGML_Q8_0: dq_q8_0(dst, src); break;
      case CP_GGML_Q4_0: dq_q4_0(dst, src); break;
      default: dq_q4_k(dst, src); break;
    }
  }
}
