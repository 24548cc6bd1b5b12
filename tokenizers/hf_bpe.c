/* The BPE model of a tokenizer.json: vocabulary and merges, and HF's merge loop on one
 * pre-token (a rank-ordered heap over a linked list of symbols). See tokenizers/hf_model.h. */
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/utf8.h"
#include "tokenizers/hf_json.h"
#include "tokenizers/hf_model.h"

/* ---- merge map: (left id, right id) -> (rank, merged id) */

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdULL, x ^= x >> 33;
  return x;
}

static int merge_put(merge_map *m, int32_t l, int32_t r, uint32_t rank, int32_t merged, size_t expect) {
  if (!m->cap) {
    size_t cap = 1024;
    while (cap < expect * 2 + 2) cap *= 2;
    m->keys = calloc(cap, sizeof *m->keys);
    m->rank = calloc(cap, sizeof *m->rank);
    m->merged = calloc(cap, sizeof *m->merged);
    if (!m->keys || !m->rank || !m->merged) return -1;
    m->cap = cap;
  }
  uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
  size_t j = mix64(key) & (m->cap - 1);
  while (m->keys[j] && m->keys[j] != key) j = (j + 1) & (m->cap - 1);
  if (m->keys[j]) return 0; /* duplicate merge: the first (lowest rank) wins, as in HF */
  m->keys[j] = key, m->rank[j] = rank, m->merged[j] = merged;
  return 0;
}

static bool merge_get(const merge_map *m, int32_t l, int32_t r, uint32_t *rank, int32_t *merged) {
  if (!m->cap) return false;
  uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
  size_t j = mix64(key) & (m->cap - 1);
  while (m->keys[j]) {
    if (m->keys[j] == key) {
      *rank = m->rank[j], *merged = m->merged[j];
      return true;
    }
    j = (j + 1) & (m->cap - 1);
  }
  return false;
}

int tk_bpe_load(hf_model *m, const cJSON *model, const char *p) {
  const cJSON *vocab = jget(model, "vocab"), *merges = jget(model, "merges"), *it;
  if (!cJSON_IsObject(vocab)) return cp_error_set(CP_ETOK_JSON, "%s: model.vocab: not an object", p);
  if (!cJSON_IsArray(merges)) return cp_error_set(CP_ETOK_JSON, "%s: model.merges: not an array", p);
  if (cJSON_IsNumber(jget(model, "dropout")) && jget(model, "dropout")->valuedouble > 0)
    return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: model.dropout: BPE dropout is not deterministic", p);
  int rc;
  cJSON_ArrayForEach(it, vocab) {
    int32_t id;
    if (!jid(it, &id)) return cp_error_set(CP_ETOK_JSON, "%s: model.vocab['%.40s']: not an id", p, it->string);
    if ((rc = tk_model_add_token(m, p, it->string, id, "model.vocab", true))) return rc;
  }
  m->byte_fallback = jbool(model, "byte_fallback", false);
  m->fuse_unk = jbool(model, "fuse_unk", false);
  m->ignore_merges = jbool(model, "ignore_merges", false);
  const char *unk = jstr(model, "unk_token"), *cp = jstr(model, "continuing_subword_prefix"),
             *eow = jstr(model, "end_of_word_suffix");
  m->unk_id = -1;
  if (unk && !tk_map_get(&m->vocab, unk, strlen(unk), &m->unk_id))
    return cp_error_set(CP_ETOK_JSON, "%s: model.unk_token '%.40s' is not in the vocabulary", p, unk);
  if ((cp && *cp && !(m->cont_prefix = strdup(cp))) || (eow && *eow && !(m->eow_suffix = strdup(eow))))
    return cp_nomem("%s", p);
  size_t nm = (size_t)cJSON_GetArraySize(merges), rank = 0;
  cp_strbuf joined = {0};
  cJSON_ArrayForEach(it, merges) {
    const char *a, *b;
    size_t alen, blen;
    if (cJSON_IsString(it)) { /* "left right" */
      const char *sp = strchr(it->valuestring, ' ');
      if (!sp || strchr(sp + 1, ' ')) {
        cp_strbuf_free(&joined);
        return cp_error_set(CP_ETOK_JSON, "%s: model.merges[%zu]: not 'left right'", p, rank);
      }
      a = it->valuestring, alen = (size_t)(sp - a), b = sp + 1, blen = strlen(b);
    } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
               cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
      a = cJSON_GetArrayItem(it, 0)->valuestring, b = cJSON_GetArrayItem(it, 1)->valuestring;
      alen = strlen(a), blen = strlen(b);
    } else {
      cp_strbuf_free(&joined);
      return cp_error_set(CP_ETOK_JSON, "%s: model.merges[%zu]: not a pair of strings", p, rank);
    }
    int32_t l, r, mid;
    cp_strbuf_reset(&joined);
    cp_strbuf_put(&joined, a, alen);
    cp_strbuf_put(&joined, b, blen);
    if (joined.oom) {
      cp_strbuf_free(&joined);
      return cp_nomem("%s", p);
    }
    /* HF accepts continuing_subword_prefix on the right part: the merged token drops it. */
    size_t cpl = m->cont_prefix ? strlen(m->cont_prefix) : 0;
    const char *mj = joined.s;
    size_t mjl = joined.len;
    if (cpl && blen >= cpl && !memcmp(b, m->cont_prefix, cpl)) {
      memmove(joined.s + alen, joined.s + alen + cpl, blen - cpl);
      mjl = alen + blen - cpl;
    }
    if (!tk_map_get(&m->vocab, a, alen, &l) || !tk_map_get(&m->vocab, b, blen, &r) ||
        !tk_map_get(&m->vocab, mj, mjl, &mid)) {
      cp_strbuf_free(&joined);
      return cp_error_set(CP_ETOK_JSON, "%s: model.merges[%zu]: token not in the vocabulary", p, rank);
    }
    if (merge_put(&m->merges, l, r, (uint32_t)rank, mid, nm)) {
      cp_strbuf_free(&joined);
      return cp_nomem("%s", p);
    }
    rank++;
  }
  cp_strbuf_free(&joined);
  return 0;
}

/* ---- encoding */

/* <0xXX> ids of every byte, or false if one is missing. */
static bool byte_ids(const hf_model *m, const unsigned char *s, size_t n, int32_t *out) {
  for (size_t i = 0; i < n; i++)
    if (!tk_model_byte_id(m, s[i], &out[i])) return false;
  return true;
}

typedef struct {
  uint32_t rank;
  uint32_t pos;
  int32_t merged;
} qent;

static bool qless(qent a, qent b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; }

static void qpush(qent *h, size_t *n, qent e) {
  size_t i = (*n)++;
  h[i] = e;
  while (i && qless(h[i], h[(i - 1) / 2])) {
    qent t = h[i];
    h[i] = h[(i - 1) / 2], h[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
}

static qent qpop(qent *h, size_t *n) {
  qent top = h[0];
  h[0] = h[--(*n)];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < *n && qless(h[l], h[m])) m = l;
    if (r < *n && qless(h[r], h[m])) m = r;
    if (m == i) break;
    qent t = h[i];
    h[i] = h[m], h[m] = t;
    i = m;
  }
  return top;
}

/* HF BPE::merge_word + word_to_tokens on one pre-token. */
int tk_bpe_word(const hf_model *m, const char *w, size_t n, idvec *out) {
  int32_t id;
  if (m->ignore_merges && tk_map_get(&m->vocab, w, n, &id)) {
    ids_add(out, id);
    return 0;
  }
  /* symbols: ids with a doubly linked list; at most one per byte */
  int32_t *sym = malloc((n + 1) * sizeof *sym);
  int32_t *prv = malloc((n + 1) * sizeof *prv), *nxt = malloc((n + 1) * sizeof *nxt);
  qent *heap = malloc((2 * n + 2) * sizeof *heap);
  cp_strbuf tmp = {0};
  int rc = 0;
  size_t ns = 0, nh = 0;
  if (!sym || !prv || !nxt || !heap) {
    rc = cp_nomem("tokenizer");
    goto done;
  }
  bool last_unk = false;
  size_t cpl = m->cont_prefix ? strlen(m->cont_prefix) : 0, eol = m->eow_suffix ? strlen(m->eow_suffix) : 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    size_t l = cp_utf8_decode(&cp, (const unsigned char *)w + i, n - i);
    if (!l) l = 1;
    tmp.len = 0;
    if (cpl && i > 0) cp_strbuf_put(&tmp, m->cont_prefix, cpl);
    cp_strbuf_put(&tmp, w + i, l);
    if (eol && i + l == n) cp_strbuf_put(&tmp, m->eow_suffix, eol);
    if (tmp.oom) {
      rc = cp_nomem("tokenizer");
      goto done;
    }
    int32_t bids[4];
    if (tk_map_get(&m->vocab, tmp.s, tmp.len, &id)) {
      sym[ns++] = id, last_unk = false;
    } else if (m->byte_fallback && byte_ids(m, (const unsigned char *)w + i, l, bids)) {
      for (size_t k = 0; k < l; k++) sym[ns++] = bids[k];
      last_unk = false;
    } else if (m->unk_id >= 0) {
      if (!(m->fuse_unk && last_unk)) sym[ns++] = m->unk_id;
      last_unk = true;
    } /* no unk token: HF drops the character */
    i += l;
  }
  for (size_t i = 0; i < ns; i++) prv[i] = (int32_t)i - 1, nxt[i] = i + 1 < ns ? (int32_t)i + 1 : -1;
  uint32_t rank;
  int32_t merged;
  for (size_t i = 0; i + 1 < ns; i++)
    if (merge_get(&m->merges, sym[i], sym[i + 1], &rank, &merged)) qpush(heap, &nh, (qent){rank, (uint32_t)i, merged});
  while (nh) {
    qent top = qpop(heap, &nh);
    size_t p = top.pos;
    if (sym[p] < 0 || nxt[p] < 0) continue;
    int32_t r = nxt[p];
    if (!merge_get(&m->merges, sym[p], sym[r], &rank, &merged) || merged != top.merged) continue;
    sym[p] = merged;
    sym[r] = -1; /* dead */
    nxt[p] = nxt[r];
    if (nxt[r] >= 0) prv[nxt[r]] = (int32_t)p;
    if (nh + 2 > 2 * n + 2) continue; /* cannot happen: every push follows a merge */
    if (prv[p] >= 0 && merge_get(&m->merges, sym[prv[p]], sym[p], &rank, &merged))
      qpush(heap, &nh, (qent){rank, (uint32_t)prv[p], merged});
    if (nxt[p] >= 0 && merge_get(&m->merges, sym[p], sym[nxt[p]], &rank, &merged))
      qpush(heap, &nh, (qent){rank, (uint32_t)p, merged});
  }
  for (int32_t i = ns ? 0 : -1; i >= 0; i = nxt[i]) ids_add(out, sym[i]);
done:
  free(sym), free(prv), free(nxt), free(heap);
  cp_strbuf_free(&tmp);
  return rc;
}
