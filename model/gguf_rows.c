/* llama.cpp's row orders against Hugging Face's (include/ctxpatch/model/gguf_rows.h): one formula
 * each way, shared by the GGUF reader (import/model_load.c) and writer (export/gguf/gguf_export.c). */
#include "ctxpatch/model/gguf_rows.h"

#include <stdbool.h>
#include <string.h>

#include "ctxpatch/base/error.h"

cp_gguf_rows cp_gguf_rows_of(const cp_hf_config *cfg, cp_tensor_role role) {
  cp_gguf_rows r = {CP_GGUF_ROWS_SAME, cfg->n_heads, cfg->d_head};
  /* llama.cpp's qwen2 and qwen3 rotate halves (NEOX), as HF: its converter keeps q/k rows in place. */
  bool neox = strcmp(cfg->model_type, "qwen2") == 0 || strcmp(cfg->model_type, "qwen3") == 0;
  if (cfg->family == CP_FAMILY_LLAMA && !neox && (role == CP_ROLE_Q || role == CP_ROLE_K))
    r.order = CP_GGUF_ROWS_ROTARY;
  if ((cfg->family == CP_FAMILY_BLOOM || cfg->family == CP_FAMILY_GPT_NEOX) && role == CP_ROLE_QKV)
    r.order = CP_GGUF_ROWS_QKV;
  return r;
}

/* Row = (head h, k within the head): ROTARY k = 2j + i <-> HF k = i*dh/2 + j; QKV GGUF
 * (t, h, j) <-> HF (h, t, j) with t in q, k, v. */
uint64_t cp_gguf_row_to_hf(const cp_gguf_rows *r, uint64_t gguf_row) {
  uint64_t dh = (uint64_t)r->d_head, H = (uint64_t)r->n_heads;
  switch (r->order) {
    case CP_GGUF_ROWS_ROTARY: {
      uint64_t h = gguf_row / dh, k = gguf_row % dh;
      return h * dh + (k % 2) * (dh / 2) + k / 2;
    }
    case CP_GGUF_ROWS_QKV: {
      uint64_t t = gguf_row / (H * dh), h = gguf_row / dh % H, j = gguf_row % dh;
      return (h * 3 + t) * dh + j;
    }
    default: return gguf_row;
  }
}

uint64_t cp_gguf_row_to_gguf(const cp_gguf_rows *r, uint64_t hf_row) {
  uint64_t dh = (uint64_t)r->d_head, H = (uint64_t)r->n_heads;
  switch (r->order) {
    case CP_GGUF_ROWS_ROTARY: {
      uint64_t h = hf_row / dh, k = hf_row % dh, half = dh / 2;
      return h * dh + 2 * (k % half) + k / half;
    }
    case CP_GGUF_ROWS_QKV: {
      uint64_t h = hf_row / (3 * dh), t = hf_row / dh % 3, j = hf_row % dh;
      return (t * H + h) * dh + j;
    }
    default: return hf_row;
  }
}

int cp_gguf_rows_check(const cp_gguf_rows *r, uint64_t rows, const char *where, const char *tensor) {
  uint64_t dh = (uint64_t)(r->d_head > 0 ? r->d_head : 0);
  bool fits = r->order == CP_GGUF_ROWS_SAME ||
              (r->order == CP_GGUF_ROWS_ROTARY && dh > 0 && dh % 2 == 0 && rows % dh == 0) ||
              (r->order == CP_GGUF_ROWS_QKV && dh > 0 && r->n_heads > 0 && rows == 3 * (uint64_t)r->n_heads * dh);
  if (fits) return 0;
  return cp_error_set(CP_EMODEL_TENSOR, "%s: tensor '%s': %llu rows do not fit llama.cpp's %s row order (%d heads of %d)",
                      where, tensor, (unsigned long long)rows, r->order == CP_GGUF_ROWS_QKV ? "fused q/k/v" : "rotary",
                      r->n_heads, r->d_head);
}
