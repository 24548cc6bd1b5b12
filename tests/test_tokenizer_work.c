/* Work bounds of the pre-tokenizers on hostile text: the llama.cpp pre-tokenizer kinds with
 * distinct regexes (tokenizers/bpe_pre.c; the same regexes as the Llama 3, Qwen2, Mistral-Nemo,
 * DeepSeek-V3 and Command-R tokenizer.json files) split 256 KiB lines of spaces and of digits, and
 * 64 KiB lines of newlines, letters, apostrophes, tabs and CJK, each with and without a final
 * non-space, in regex work linear in the text: the ticks of 10,000 ICU steps are counted
 * (tk_regex_ticks) and must stay under a fixed number per MiB, far below what one backtracking
 * blow-up costs (quadratic work on 64 KiB is ~200,000 ticks; 256 KiB rather than 1 MiB since the
 * bound is per MiB and the sanitizer build spent minutes on the larger lines). The vocabulary is GPT-2's 256 byte
 * tokens and no merges, so BPE adds nothing to the count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/utf8.h"
#include "ctxpatch/tokenizers/tokenizer.h"
#include "test.h"
#include "tokenizers/bpe_pre.h"
#include "tokenizers/hf_bytelevel.h"
#include "tokenizers/unicode.h"

/* Ticks allowed per MiB of text and pre-tokenizer: the worst kind measures about 1,200 (one match
 * per byte pair); a quadratic walk over 1 MiB would need about 5 * 10^7. */
#define TICKS_PER_MIB 4000

static int count_span(void *ctx, size_t a, size_t b) {
  (void)ctx, (void)a, (void)b;
  return 0;
}

int main(void) {
  enum { MIB = 1 << 20 };
  static char bytes[256][4];
  cp_spm_piece toks[256];
  for (int b = 0; b < 256; b++) { /* GPT-2's byte alphabet: every byte is a token */
    cp_strbuf sb = {0};
    cp_utf8_put(&sb, tk_bytelevel_cp((unsigned char)b));
    memcpy(bytes[b], sb.s, sb.len);
    toks[b] = (cp_spm_piece){bytes[b], sb.len, 0, 1};
    cp_strbuf_free(&sb);
  }
  static const char *const kinds[] = {"llama-bpe",   "qwen2",        "tekken", "starcoder",
                                      "deepseek-v3", "deepseek-llm", "falcon"};
  static const char *const fill[] = {" ", "7", "\n", " \n", "a", "'", "\t ", "a1", "\xe4\xb8\x80"};
  char *s = malloc(MIB + 2);
  if (!s) return 2;
  size_t worst = 0;
  const char *worst_kind = "";
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    cp_bpe_vocab v = {
        .tokens = toks, .n = 256, .bos_id = -1, .eos_id = -1, .pre = kinds[k], .pre_len = strlen(kinds[k])};
    cp_tokenizer *tok = NULL;
    CHECK_RC(0, cp_tokenizer_from_bpe_vocab(&tok, &v, kinds[k]));
    for (size_t f = 0; tok && f < 2 * sizeof fill / sizeof fill[0]; f++) {
      const char *p = fill[f / 2];
      size_t fl = strlen(p), size = f < 4 ? MIB / 4 : MIB / 16, n = size / fl * fl; /* spaces, digits: 256 KiB */
      for (size_t i = 0; i < n; i++) s[i] = p[i % fl];
      if (f % 2) s[n++] = 'x'; /* a run that ends in a non-space: \s+$, \s*[\r\n]+ and (?!\S) backtrack */
      int64_t *ids = NULL;
      size_t nids = 0, before = tk_regex_ticks();
      int rc = cp_tokenizer_encode(tok, &ids, &nids, s, n, false);
      size_t used = tk_regex_ticks() - before;
      CHECK_MSG(rc == 0 && nids == n, "%s: %zu KiB of '%s'%s: %s (%zu ids)", kinds[k], size >> 10, p,
                f % 2 ? " + x" : "", rc ? cp_error_message() : "ids", nids);
      CHECK_MSG(used <= TICKS_PER_MIB * (size / 1024) / 1024, "%s: %zu KiB of '%s'%s: %zu ticks", kinds[k], size >> 10,
                p, f % 2 ? " + x" : "", used);
      used = used * MIB / size;
      if (used > worst) worst = used, worst_kind = kinds[k];
      free(ids);
    }
    cp_tokenizer_free(tok);
  }
  /* Every name the refusal message lists opens (the list and the table agree). */
  char names[1024];
  snprintf(names, sizeof names, "%s", tk_bpe_pre_known());
  int listed = 0;
  for (char *save = NULL, *name = strtok_r(names, ", ", &save); name; name = strtok_r(NULL, ", ", &save), listed++) {
    cp_bpe_vocab v = {.tokens = toks, .n = 256, .bos_id = -1, .eos_id = -1, .pre = name, .pre_len = strlen(name)};
    cp_tokenizer *tok = NULL;
    CHECK_RC(0, cp_tokenizer_from_bpe_vocab(&tok, &v, name));
    cp_tokenizer_free(tok);
  }
  CHECK(listed == 19);
  /* The count is real: a pattern that rescans the run from every start (\s+x over spaces without
   * an x) is quadratic, and is stopped at the walk's budget with CP_ETOK_LIMIT. */
  tk_regex *re = NULL;
  CHECK_RC(0, tk_regex_compile(&re, "\\s+x", "test", "quadratic"));
  memset(s, ' ', MIB / 16);
  size_t before = tk_regex_ticks();
  CHECK_RC(CP_ETOK_LIMIT, tk_regex_each(re, s, MIB / 16, count_span, NULL));
  size_t quad = tk_regex_ticks() - before;
  CHECK_MSG(quad > 10 * TICKS_PER_MIB / 16, "%zu ticks", quad);
  printf("a quadratic pattern on 64 KiB: stopped after %zu ticks\n", quad);
  tk_regex_free(re);
  printf("hostile lines through %zu pre-tokenizer kinds: at most %zu ticks of 10,000 regex steps per MiB (%s)\n",
         sizeof kinds / sizeof kinds[0], worst, worst_kind);
  free(s);
  return test_finish();
}
