/* Which llama.cpp vocabulary a tokenizer.json becomes, and the scores and types of a
 * SentencePiece-derived one (export/gguf/gguf_vocab_json.h).
 *
 * llama.cpp's convert_hf_to_gguf.py writes a byte-level BPE tokenizer.json as "gpt2" with the name
 * of its pre-tokenizer (get_vocab_base_pre, _set_vocab_gpt2), found there by hashing the HF
 * tokenizer's ids on a check text; here the pre_tokenizer node itself is compared with the
 * tokenizers floor's table of llama.cpp's pre-tokenizers (tokenizers/bpe_pre.c), the same table the
 * GGUF reader uses the other way. A SentencePiece model in HF form (BPE with byte fallback: Gemma,
 * Llama 2, Phi-3) becomes "llama", which llama.cpp runs as SentencePiece: merge the adjacent pair
 * whose concatenation scores highest. HF made the merges of such a file from the SentencePiece
 * scores (every split of each piece, ranked by the piece's score), so a token's score is taken as
 * minus the rank of the first merge producing it. */
#include "export/gguf/gguf_vocab_json.h"

#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "tokenizers/bpe_pre.h"
#include "tokenizers/strmap.h"

static const cJSON *member(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static bool is_str(const cJSON *o, const char *k, const char *want) {
  const cJSON *s = member(o, k);
  return cJSON_IsString(s) && !strcmp(s->valuestring, want);
}

static bool has_byte_level(const cJSON *pre) {
  if (is_str(pre, "type", "ByteLevel")) return true;
  const cJSON *n;
  if (is_str(pre, "type", "Sequence"))
    cJSON_ArrayForEach(n, member(pre, "pretokenizers")) if (is_str(n, "type", "ByteLevel")) return true;
  return false;
}

/* Replace(" " -> U+2581) */
static bool space_replace(const cJSON *n) {
  return is_str(n, "type", "Replace") && is_str(member(n, "pattern"), "String", " ") &&
         is_str(n, "content", "\xe2\x96\x81");
}

/* The SentencePiece forms HF writes: Gemma's space replacement (its Split on " " after it splits
 * nothing), the legacy Llama one with a prepended U+2581, and Metaspace without splitting. */
static int spm_form(bool *space_prefix, const cJSON *norm, const cJSON *pre, const char *path) {
  bool no_pre = !pre || cJSON_IsNull(pre) ||
                (is_str(pre, "type", "Split") && is_str(member(pre, "pattern"), "String", " ") &&
                 is_str(pre, "behavior", "MergedWithPrevious") && !cJSON_IsTrue(member(pre, "invert")));
  if (no_pre && space_replace(norm)) {
    *space_prefix = false;
    return 0;
  }
  const cJSON *list = member(norm, "normalizers");
  if (no_pre && is_str(norm, "type", "Sequence") && cJSON_GetArraySize(list) == 2 &&
      is_str(cJSON_GetArrayItem(list, 0), "type", "Prepend") &&
      is_str(cJSON_GetArrayItem(list, 0), "prepend", "\xe2\x96\x81") && space_replace(cJSON_GetArrayItem(list, 1))) {
    *space_prefix = true;
    return 0;
  }
  if ((!norm || cJSON_IsNull(norm)) && is_str(pre, "type", "Metaspace") && is_str(pre, "replacement", "\xe2\x96\x81") &&
      !cJSON_IsTrue(member(pre, "split"))) {
    const cJSON *scheme = member(pre, "prepend_scheme");
    *space_prefix = cJSON_IsString(scheme) ? strcmp(scheme->valuestring, "never") != 0
                                           : !cJSON_IsFalse(member(pre, "add_prefix_space"));
    return 0;
  }
  return cp_error_set(CP_ETOK_UNSUPPORTED,
                      "%s: %s: a byte-fallback BPE whose text handling is not SentencePiece's (a space "
                      "replacement by U+2581, optionally prepended, or an unsplit Metaspace), which llama.cpp's "
                      "\"llama\" vocabulary cannot express",
                      path, no_pre ? "normalizer" : "pre_tokenizer");
}

int cp_gguf_hf_kind_of(cp_gguf_hf_kind *kind, const char **pre, bool *space_prefix, const cJSON *root,
                       const char *path) {
  *kind = CP_GGUF_HF_NONE, *pre = NULL, *space_prefix = false;
  const cJSON *m = member(root, "model"), *norm = member(root, "normalizer"), *pt = member(root, "pre_tokenizer");
  if (!is_str(m, "type", "BPE") || !cJSON_IsObject(member(m, "vocab")) || !cJSON_IsArray(member(m, "merges"))) return 0;
  static const char *const affix[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (int k = 0; k < 2; k++) {
    const cJSON *a = member(m, affix[k]);
    if (cJSON_IsString(a) && a->valuestring[0])
      return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: model.%s: llama.cpp's vocabularies have none", path, affix[k]);
  }
  if (cJSON_IsTrue(member(m, "byte_fallback"))) {
    int rc = spm_form(space_prefix, norm, pt, path);
    if (rc == 0) *kind = CP_GGUF_HF_LLAMA;
    return rc;
  }
  if (!has_byte_level(pt)) return 0;
  /* llama.cpp applies no normalizer; NFC (Qwen2, Command-R) changes only text that is not NFC
   * already, where llama.cpp and HF then differ (docs/gguf.md) */
  bool norm_none = !norm || cJSON_IsNull(norm) || is_str(norm, "type", "NFC") ||
                   (is_str(norm, "type", "Sequence") && cJSON_GetArraySize(member(norm, "normalizers")) == 0);
  if (!norm_none)
    return cp_error_set(CP_ETOK_UNSUPPORTED,
                        "%s: normalizer: llama.cpp's \"gpt2\" vocabulary applies none (NFC is "
                        "written, as llama.cpp's converter does)",
                        path);
  int rc = tk_bpe_pre_name(pre, pt, cJSON_IsTrue(member(m, "ignore_merges")), path);
  if (rc == 0) *kind = CP_GGUF_HF_GPT2;
  return rc;
}

static bool byte_piece(const char *t) {
  static const char hex[] = "0123456789ABCDEFabcdef";
  return strlen(t) == 6 && !memcmp(t, "<0x", 3) && t[5] == '>' && strchr(hex, t[3]) && strchr(hex, t[4]) && t[3] &&
         t[4];
}

int cp_gguf_spm_json_types(int32_t *type, int *unk, const cp_gguf_spm_json *s, const cJSON *root, const char *path) {
  (void)path;
  const cJSON *u = member(member(root, "model"), "unk_token");
  for (size_t i = 0; i < s->n; i++) {
    if (type[i] == 1 && byte_piece(s->tok[i])) type[i] = 6;
    if (cJSON_IsString(u) && !strcmp(s->tok[i], u->valuestring) && *unk < 0) *unk = (int)i;
  }
  if (*unk >= 0) type[*unk] = 2;
  return 0;
}

int cp_gguf_spm_json_scores(float *score, const cp_gguf_spm_json *s, const char *path) {
  tk_map ids = {0};
  char *buf = malloc(CP_BPE_MAX_TOKEN_BYTES * 2 + 1);
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(buf, path);
  for (size_t i = 0; i < s->n; i++) {
    CP_CHECK_ALLOC_GOTO(tk_map_put(&ids, s->tok[i], s->len[i], (int32_t)i) >= 0, path);
    score[i] = -(float)(s->n_merges + 1);
  }
  for (size_t k = s->n_merges; k-- > 0;) { /* backwards: the first merge producing a token wins */
    const cp_str_span *m = &s->merges[k];
    size_t l = s->left[k];
    int32_t id;
    if (l >= m->len || m->len - 1 > CP_BPE_MAX_TOKEN_BYTES * 2) continue; /* checked: cp_bpe_vocab_check */
    memcpy(buf, m->s, l);
    memcpy(buf + l, m->s + l + 1, m->len - l - 1);
    if (!tk_map_get(&ids, buf, m->len - 1, &id)) {
      rc = cp_error_set(CP_ETOK_MODEL, "%s: model.merges[%zu]: the concatenation is not a token", path, k);
      goto done;
    }
    score[id] = -(float)k;
  }
done:
  tk_map_free(&ids);
  free(buf);
  return rc;
}
