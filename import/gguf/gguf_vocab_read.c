/* A GGUF "gpt2" (byte-level BPE) vocabulary read as a tokenizer (import/gguf/gguf_vocab_read.h). */
#include "import/gguf/gguf_vocab_read.h"

#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"

int cp_gguf_bpe_tokenizer(cp_tokenizer **out, const cp_gguf_file *g, const cp_spm_piece *tokens, size_t n, int bos,
                          int eos) {
  *out = NULL;
  const char *path = cp_gguf_path(g), *pre = NULL;
  size_t pre_len = 0;
  cp_gguf_vtype elem;
  uint64_t n_merges = 0;
  cp_bpe_vocab v = {.tokens = tokens, .n = n, .bos_id = bos, .eos_id = eos};
  int rc = 0;
  if (cp_gguf_find_key(g, "tokenizer.ggml.pre") < 0)
    return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: gpt2 vocabulary without tokenizer.ggml.pre (llama.cpp's default "
                        "regex is not read; gpt-2 is)", path);
  if ((rc = cp_gguf_get_str(&pre, &pre_len, g, "tokenizer.ggml.pre"))) return rc;
  v.pre = pre, v.pre_len = pre_len; /* an unknown name is refused by cp_tokenizer_from_bpe_vocab */
  if ((rc = cp_gguf_get_arr(&elem, &n_merges, g, "tokenizer.ggml.merges"))) return rc;
  if (n_merges > CP_BPE_MAX_MERGES)
    return cp_error_set(CP_ETOK_MODEL, "%s: tokenizer.ggml.merges: %llu merges, more than the limit of %d", path,
                        (unsigned long long)n_merges, CP_BPE_MAX_MERGES);
  if ((cp_gguf_find_key(g, "tokenizer.ggml.add_bos_token") >= 0 &&
       (rc = cp_gguf_get_bool(&v.add_bos, g, "tokenizer.ggml.add_bos_token"))) ||
      (cp_gguf_find_key(g, "tokenizer.ggml.add_eos_token") >= 0 &&
       (rc = cp_gguf_get_bool(&v.add_eos, g, "tokenizer.ggml.add_eos_token"))))
    return rc;
  cp_str_span *merges = calloc((size_t)n_merges + 1, sizeof *merges);
  CP_CHECK_ALLOC(merges, path);
  for (uint64_t i = 0; i < n_merges && rc == 0; i++)
    rc = cp_gguf_arr_str(&merges[i].s, &merges[i].len, g, "tokenizer.ggml.merges", i);
  v.merges = merges;
  v.n_merges = (size_t)n_merges;
  if (rc == 0) rc = cp_tokenizer_from_bpe_vocab(out, &v, path);
  free(merges);
  return rc;
}
