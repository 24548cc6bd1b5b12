/* Fuzz harness: the GGUF reader (header, metadata, tensor infos, offsets) and what reads its
 * metadata (the llama config and the tokenizer.ggml.* vocabulary). Every mapped tensor is touched
 * at its last byte, every tensor's last float read (dequantising block types), every array's
 * first and last element fetched. Seeds: tests/fuzz/seeds/gguf (tests/gguf/make_gguf_cases.py). */
#include <stdint.h>

#include "ctxpatch/import/gguf_model.h"
#include "ctxpatch/formats/gguf.h"
#include "fuzz_input.h"

static void touch_metadata(const cp_gguf_file *f) {
  for (size_t i = 0; i < cp_gguf_kv_count(f); i++) {
    const char *key = cp_gguf_kv_key(f, i), *s;
    size_t len;
    int64_t v;
    double d;
    bool b;
    cp_gguf_vtype et;
    uint64_t n;
    (void)cp_gguf_get_int(&v, f, key);
    (void)cp_gguf_get_f64(&d, f, key);
    (void)cp_gguf_get_bool(&b, f, key);
    (void)cp_gguf_get_str(&s, &len, f, key);
    if (cp_gguf_get_arr(&et, &n, f, key) == 0 && n > 0) {
      for (uint64_t k = 0; k < n; k += n - 1) {
        (void)cp_gguf_arr_str(&s, &len, f, key, k);
        (void)cp_gguf_arr_int(&v, f, key, k);
        (void)cp_gguf_arr_f64(&d, f, key, k);
        if (n == 1) break;
      }
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_file("model.gguf", data, size);
  cp_gguf_file *f = NULL;
  if (!path || cp_gguf_open(&f, path) != 0) return 0;
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < cp_gguf_count(f); i++) {
    const cp_tensor *t = cp_gguf_tensor(f, i);
    float last;
    if (t->data && t->nbytes) sink ^= ((const uint8_t *)t->data)[t->nbytes - 1];
    if (t->nbytes >= 4 && cp_gguf_read(f, i, t->nbytes - 4, &last, 4) == 0) sink ^= (uint8_t)(last != 0);
    (void)cp_gguf_find(f, t->name);
  }
  touch_metadata(f);
  char digest[65]; /* check's content digest of a patched GGUF: every key entry, infos, data */
  cp_gguf_content_sha256(f, "ctxpatch.", digest);
  sink ^= (uint8_t)digest[0];
  cp_hf_config *cfg = NULL;
  if (cp_gguf_config(&cfg, f) == 0) cp_hf_config_free(cfg);
  cp_tokenizer *tok = NULL;
  if (cp_gguf_tokenizer(&tok, f) == 0) cp_tokenizer_free(tok);
  (void)sink;
  cp_gguf_free(f);
  return 0;
}
