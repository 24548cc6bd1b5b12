/* The Unigram model of a tokenizer.json: pieces with scores, and HF's Viterbi segmentation of
 * one pre-token. See tokenizers/hf_model.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/utf8.h"
#include "tokenizers/hf_json.h"
#include "tokenizers/hf_model.h"

#define TK_MAX_PIECE_BYTES 256 /* longest Unigram piece considered */

int tk_unigram_load(hf_model *m, const cJSON *model, const char *p) {
  const cJSON *vocab = jget(model, "vocab"), *it;
  if (!cJSON_IsArray(vocab) || cJSON_GetArraySize(vocab) < 1)
    return cp_error_set(CP_ETOK_JSON, "%s: model.vocab: not a non-empty array", p);
  size_t n = (size_t)cJSON_GetArraySize(vocab);
  if (n >= TK_MAX_ID) return cp_error_set(CP_ETOK_JSON, "%s: model.vocab: %zu pieces is too many", p, n);
  m->scores = calloc(n, sizeof *m->scores);
  CP_CHECK_ALLOC(m->scores, p);
  m->nscores = n;
  int32_t id = 0;
  m->min_score = INFINITY;
  int rc;
  cJSON_ArrayForEach(it, vocab) {
    const cJSON *s = cJSON_GetArrayItem(it, 0), *sc = cJSON_GetArrayItem(it, 1);
    if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2 || !cJSON_IsString(s) || !cJSON_IsNumber(sc) ||
        !isfinite(sc->valuedouble))
      return cp_error_set(CP_ETOK_JSON, "%s: model.vocab[%d]: not [piece, score]", p, (int)id);
    if ((rc = tk_model_add_token(m, p, s->valuestring, id, "model.vocab", true))) return rc;
    m->scores[id] = sc->valuedouble;
    if (sc->valuedouble < m->min_score) m->min_score = sc->valuedouble;
    size_t l = strlen(s->valuestring);
    if (l > m->max_piece) m->max_piece = l;
    id++;
  }
  if (m->max_piece > TK_MAX_PIECE_BYTES) m->max_piece = TK_MAX_PIECE_BYTES;
  m->unk_id = -1;
  const cJSON *u = jget(model, "unk_id");
  if (u && !cJSON_IsNull(u) && (!jid(u, &m->unk_id) || (size_t)m->unk_id >= n))
    return cp_error_set(CP_ETOK_JSON, "%s: model.unk_id: not an id of the vocabulary", p);
  m->byte_fallback = jbool(model, "byte_fallback", false);
  m->fuse_unk = true; /* Unigram always fuses unknowns */
  return 0;
}

/* HF Unigram::encode_optimized: Viterbi over pieces, ties keep the earlier candidate. */
int tk_unigram_word(const hf_model *m, const char *w, size_t n, idvec *out) {
  typedef struct {
    double score;
    int64_t start; /* -1: unreached */
    int32_t id;
  } node;
  node *best = malloc((n + 1) * sizeof *best);
  size_t *stack = malloc((n + 1) * sizeof *stack);
  if (!best || !stack) {
    free(best), free(stack);
    return cp_nomem("tokenizer");
  }
  for (size_t i = 0; i <= n; i++) best[i] = (node){0, -1, -1};
  best[0].start = 0;
  double unk_score = m->min_score - 10.0;
  for (size_t s = 0; s < n;) {
    uint32_t cp;
    size_t mblen = cp_utf8_decode(&cp, (const unsigned char *)w + s, n - s);
    if (!mblen) mblen = 1;
    double base = best[s].score;
    bool single = false;
    size_t maxl = n - s < m->max_piece ? n - s : m->max_piece;
    for (size_t l = 1; l <= maxl; l++) {
      int32_t id;
      if (!tk_map_get(&m->vocab, w + s, l, &id) || id < 0 || (size_t)id >= m->nscores) continue;
      double cand = base + m->scores[id];
      if (best[s + l].start < 0 || cand > best[s + l].score) best[s + l] = (node){cand, (int64_t)s, id};
      if (l == mblen) single = true;
    }
    if (!single) {
      double cand = base + unk_score;
      if (best[s + mblen].start < 0 || cand > best[s + mblen].score) best[s + mblen] = (node){cand, (int64_t)s, m->unk_id};
    }
    s += mblen;
  }
  /* backtrack, fusing consecutive unknowns */
  size_t ns = 0;
  for (size_t e = n; e > 0;) {
    stack[ns++] = e;
    e = (size_t)best[e].start;
  }
  bool prev_unk = false;
  for (size_t k = ns; k-- > 0;) {
    size_t e = stack[k], s = (size_t)best[e].start;
    int32_t id = best[e].id;
    if (id == m->unk_id || id < 0) {
      if (m->byte_fallback) {
        int32_t b;
        bool ok = true;
        for (size_t i = s; i < e && ok; i++) ok = tk_model_byte_id(m, (unsigned char)w[i], &b);
        if (ok) {
          for (size_t i = s; i < e; i++) {
            tk_model_byte_id(m, (unsigned char)w[i], &b);
            ids_add(out, b);
          }
          prev_unk = false;
          continue;
        }
      }
      if (!prev_unk && m->unk_id >= 0) ids_add(out, m->unk_id);
      prev_unk = true;
      continue;
    }
    ids_add(out, id);
    prev_unk = false;
  }
  free(best), free(stack);
  return 0;
}
