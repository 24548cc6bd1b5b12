/* llama.cpp's byte-level BPE pre-tokenizer names (GGUF tokenizer.ggml.pre) as the tokenizer.json
 * pre_tokenizer node the model's own tokenizer.json has (tokenizers/bpe_pre.h).
 *
 * Where a model's tokenizer.json is at hand (Llama 3, Qwen2, DeepSeek-V3, Mistral-Nemo "tekken",
 * Command-R: ../shared/fixtures/tokenizers/modern) its regex is copied verbatim; the others are
 * llama.cpp's lists (src/llama-vocab.cpp, llm_tokenizer_bpe), which are those tokenizer.json
 * Split regexes with llama.cpp's spelling of \p{L} and (?i:) where its engine needed one. Every
 * regex splits with behavior Isolated (llama.cpp keeps unmatched text as pieces too), then
 * ByteLevel maps bytes. No normalizer: llama.cpp applies none (Qwen2's tokenizer.json has NFC; a
 * GGUF tokenizes as llama.cpp does, which differs from HF only on non-NFC text). */
#include "tokenizers/bpe_pre.h"

#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"

#define GPT2_RE "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define LLAMA3_RE(num)                                              \
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" num \
  "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define CJK_RE \
  "[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+" /* [一-龥ࠀ-一가-퟿]+ */

typedef struct {
  const char *names; /* NUL-separated, ends with an empty name */
  const char *re[6]; /* Split regexes, in order; NULL ends */
  bool digits;       /* then Digits(individual_digits) */
  bool byte_regex;   /* ByteLevel with GPT-2's regex (else use_regex false) */
  bool ignore_merges;
} pre_kind;

static const pre_kind kinds[] = {
    {"gpt-2\0mpt\0olmo\0phi-2\0", {NULL}, false, true, false},
    {"llama-bpe\0llama3\0llama-v3\0", {LLAMA3_RE("\\p{N}{1,3}")}, false, false, true},
    {"smaug-bpe\0dbrx\0", {LLAMA3_RE("\\p{N}{1,3}")}, false, false, false},
    {"qwen2\0deepseek-r1-qwen\0", {LLAMA3_RE("\\p{N}")}, false, false, false},
    {"starcoder\0refact\0command-r\0", {NULL}, true, true, false},
    {"tekken\0",
     {"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?"
      "["
      "\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/"
      "]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     false,
     false,
     true},
    {"deepseek-v3\0",
     {"\\p{N}{1,3}",
      "[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+", /* [一-龥぀-ゟ゠-ヿ]+ */
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
      "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
     false,
     false,
     false},
    {"deepseek-coder\0", {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", CJK_RE}, true, false, false},
    /* DeepSeek LLM's letters are a list of ranges in its tokenizer.json, not \p{L} (llama.cpp's copy). */
    {"deepseek-llm\0",
     {"[\r\n]",
      "\\s?[A-Za-z\xc2\xb5\xc3\x80-\xc3\x96\xc3\x98-\xc3\xb6\xc3\xb8-\xc6\xba\xc6\xbc-\xc6\xbf\xc7\x84-\xca\x93"
      "\xca\x95-\xca\xaf\xcd\xb0-\xcd\xb3\xcd\xb6\xcd\xb7\xcd\xbb-\xcd\xbd\xcd\xbf\xce\x86\xce\x88-\xce\x8a\xce\x8c"
      "\xce\x8e-\xce\xa1\xce\xa3-\xcf\xb5\xcf\xb7-\xd2\x81\xd2\x8a-\xd4\xaf\xd4\xb1-\xd5\x96\xe1\x82\xa0-\xe1\x83\x85"
      "\xe1\x8e\xa0-\xe1\x8f\xb5\xe1\x8f\xb8-\xe1\x8f\xbd\xe1\xb2\x90-\xe1\xb2\xba\xe1\xb2\xbd-\xe1\xb2\xbf\xe1\xb4\x80"
      "-\xe1\xb4\xab\xe1\xb5\xab-\xe1\xb5\xb7\xe1\xb5\xb9-\xe1\xb6\x9a\xe1\xb8\x80-\xe1\xbc\x95\xe1\xbc\x98-"
      "\xe1\xbc\x9d\xe1\xbc\xa0-\xe1\xbd\x85\xe1\xbd\x88-\xe1\xbd\x8d\xe1\xbd\x90-\xe1\xbd\x97\xe1\xbd\x99\xe1\xbd\x9b"
      "\xe1\xbd\x9d\xe1\xbd\x9f-\xe1\xbd\xbd\xe1\xbe\x80-\xe1\xbe\xb4\xe1\xbe\xb6-\xe1\xbe\xbc\xe1\xbe\xbe\xe1\xbf\x82"
      "-\xe1\xbf\x84\xe1\xbf\x86-\xe1\xbf\x8c\xe1\xbf\x90-\xe1\xbf\x93\xe1\xbf\x96-\xe1\xbf\x9b\xe1\xbf\xa0-"
      "\xe1\xbf\xac"
      "\xe1\xbf\xb2-\xe1\xbf\xb4\xe1\xbf\xb6-\xe1\xbf\xbc\xe2\x84\x82\xe2\x84\x87\xe2\x84\x8a-\xe2\x84\x93\xe2\x84\x95"
      "\xe2\x84\x99-\xe2\x84\x9d\xe2\x84\xa4\xe2\x84\xa6\xe2\x84\xa8\xe2\x84\xaa-\xe2\x84\xad\xe2\x84\xaf-"
      "\xe2\x84\xb4\xe2\x84\xb9"
      "\xe2\x84\xbc-\xe2\x84\xbf\xe2\x85\x85-\xe2\x85\x89\xe2\x85\x8e\xe2\x86\x83\xe2\x86\x84\xe2\xb0\x80-\xe2\xb1\xbb"
      "\xe2\xb1\xbe-\xe2\xb3\xa4\xe2\xb3\xab-\xe2\xb3\xae\xe2\xb3\xb2\xe2\xb3\xb3\xea\x99\x80-\xea\x99\xad\xea\x9a\x80"
      "-\xea\x9a\x9b\xea\x9c\xa2-\xea\x9d\xaf\xea\x9d\xb1-\xea\x9e\x87\xea\x9e\x8b-\xea\x9e\x8e\xea\xad\xb0-"
      "\xea\xae\xbf\xef\xac\x80-\xef\xac\x86\xef\xac\x93-\xef\xac\x97\xef\xbc\xa1-\xef\xbc\xba\xef\xbd\x81-\xef\xbd\x9a"
      "\xf0\x90\x90\x80-\xf0\x90\x91\x8f\xf0\x90\x92\xb0-\xf0\x90\x93\x93\xf0\x90\x93\x98-"
      "\xf0\x90\x93\xbb\xf0\x90\xb2\x80"
      "-\xf0\x90\xb2\xb2\xf0\x90\xb3\x80-\xf0\x90\xb3\xb2\xf0\x91\xa2\xa0-\xf0\x91\xa3\x9f\xf0\x9e\xa4\x80-"
      "\xf0\x9e\xa5\x83"
      "]+",
      "\\s?[!-/"
      ":-~\xef\xbc\x81-\xef\xbc\x8f\xef\xbc\x9a-\xef\xbd\x9e\xe2\x80\x98-\xe2\x80\x9f\xe3\x80\x80-\xe3\x80\x82]+",
      "\\s+$", CJK_RE, "\\p{N}+"},
     false,
     false,
     false},
    {"falcon\0", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2_RE, "[0-9][0-9][0-9]"}, false, false, false},
};

static const pre_kind *find(const char *name, size_t len) {
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
    for (const char *n = kinds[k].names; *n; n += strlen(n) + 1)
      if (strlen(n) == len && !memcmp(n, name, len)) return &kinds[k];
  return NULL;
}

const char *tk_bpe_pre_known(void) {
  return "gpt-2, mpt, olmo, phi-2, llama-bpe, llama3, llama-v3, smaug-bpe, dbrx, qwen2, deepseek-r1-qwen, "
         "starcoder, refact, command-r, tekken, deepseek-v3, deepseek-coder, deepseek-llm, falcon";
}

/* Appends item under key (or to an array when key is NULL); false (item freed) on failure. */
static bool put(cJSON *parent, const char *key, cJSON *item) {
  if (item && (key ? cJSON_AddItemToObject(parent, key, item) : cJSON_AddItemToArray(parent, item))) return true;
  cJSON_Delete(item);
  return false;
}

static cJSON *node(const char *type) {
  cJSON *n = cJSON_CreateObject();
  if (n && !put(n, "type", cJSON_CreateString(type))) {
    cJSON_Delete(n);
    return NULL;
  }
  return n;
}

static cJSON *build(const pre_kind *k) {
  cJSON *seq = node("Sequence"), *list = cJSON_CreateArray(), *n;
  bool ok = seq && put(seq, "pretokenizers", list);
  if (!seq) cJSON_Delete(list);
  for (int i = 0; ok && i < 6 && k->re[i]; i++) {
    cJSON *split = node("Split"), *pat = NULL;
    ok = split && put(list, NULL, split) && (pat = cJSON_CreateObject()) && put(split, "pattern", pat) &&
         put(pat, "Regex", cJSON_CreateString(k->re[i])) && put(split, "behavior", cJSON_CreateString("Isolated"));
  }
  if (ok && k->digits)
    ok = (n = node("Digits")) && put(list, NULL, n) && put(n, "individual_digits", cJSON_CreateTrue());
  if (ok)
    ok = (n = node("ByteLevel")) && put(list, NULL, n) && put(n, "add_prefix_space", cJSON_CreateFalse()) &&
         put(n, "use_regex", cJSON_CreateBool(k->byte_regex));
  if (!ok) {
    cJSON_Delete(seq);
    return NULL;
  }
  return seq;
}

int tk_bpe_pre(cJSON **out, bool *ignore_merges, const char *name, size_t len, const char *what) {
  if (out) *out = NULL;
  const pre_kind *k = find(name ? name : "gpt-2", name ? len : 5);
  if (!k)
    return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: pre-tokenizer (tokenizer.ggml.pre) '%.*s' is not supported (%s)",
                        what, (int)(len < 64 ? len : 64), name, tk_bpe_pre_known());
  *ignore_merges = k->ignore_merges;
  if (!out) return 0;
  if (!(*out = build(k))) return cp_nomem("%s", what);
  return 0;
}

/* ---------------------------------------- a tokenizer.json pre_tokenizer named, the other way */

/* The shape a pre_kind describes, read from a tokenizer.json node: Isolated, non-inverted regex
 * Splits, then optionally Digits(individual_digits), then ByteLevel without a prefix space. */
typedef struct {
  const char *re[6];
  int n_re;
  bool digits, byte_regex;
} pre_shape;

static bool shape_item(pre_shape *s, const cJSON *n, bool last) {
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(n, "type");
  if (!cJSON_IsString(type)) return false;
  if (!strcmp(type->valuestring, "ByteLevel")) {
    const cJSON *re = cJSON_GetObjectItemCaseSensitive(n, "use_regex");
    s->byte_regex = !cJSON_IsFalse(re); /* tokenizers' default is true */
    return last && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(n, "add_prefix_space"));
  }
  if (last) return false;
  if (!strcmp(type->valuestring, "Digits")) {
    if (s->digits || !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(n, "individual_digits"))) return false;
    return s->digits = true;
  }
  const cJSON *pat = cJSON_GetObjectItemCaseSensitive(n, "pattern");
  const cJSON *re = pat ? cJSON_GetObjectItemCaseSensitive(pat, "Regex") : NULL;
  const cJSON *beh = cJSON_GetObjectItemCaseSensitive(n, "behavior");
  if (strcmp(type->valuestring, "Split") || s->digits || s->n_re == 6 || !cJSON_IsString(re) || !cJSON_IsString(beh) ||
      strcmp(beh->valuestring, "Isolated") || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(n, "invert")))
    return false;
  s->re[s->n_re++] = re->valuestring;
  return true;
}

static bool shape_of(pre_shape *s, const cJSON *pre) {
  *s = (pre_shape){.n_re = 0};
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(pre, "type");
  if (!cJSON_IsString(type)) return false;
  if (strcmp(type->valuestring, "Sequence")) return shape_item(s, pre, true);
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers"), *n;
  int count = cJSON_GetArraySize(list), i = 0;
  if (!cJSON_IsArray(list) || count == 0) return false;
  cJSON_ArrayForEach(n, list) {
    if (!shape_item(s, n, ++i == count)) return false;
  }
  return true;
}

static bool shape_is(const pre_shape *s, const pre_kind *k) {
  int n = 0;
  while (n < 6 && k->re[n]) n++;
  if (n != s->n_re || s->digits != k->digits || s->byte_regex != k->byte_regex) return false;
  for (int i = 0; i < n; i++)
    if (strcmp(s->re[i], k->re[i])) return false;
  return true;
}

int tk_bpe_pre_name(const char **name, const cJSON *pre, bool ignore_merges, const char *what) {
  *name = NULL;
  pre_shape s;
  const pre_kind *other = NULL;
  if (shape_of(&s, pre))
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
      if (!shape_is(&s, &kinds[k])) continue;
      if (kinds[k].ignore_merges != ignore_merges) {
        other = &kinds[k];
        continue;
      }
      *name = kinds[k].names;
      return 0;
    }
  if (other)
    return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: model.ignore_merges %s: llama.cpp runs pre-tokenizer '%s' with it %s",
                        what, ignore_merges ? "true" : "false", other->names, other->ignore_merges ? "on" : "off");
  return cp_error_set(CP_ETOK_UNSUPPORTED,
                      "%s: pre_tokenizer: not one llama.cpp has a name (tokenizer.ggml.pre) for among %s", what,
                      tk_bpe_pre_known());
}
