/* The vocabulary of a tokenizer.json model and the BPE / Unigram dispatch (tokenizers/hf_model.h). */
#include "tokenizers/hf_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "tokenizers/hf_json.h"

int tk_model_add_token(hf_model *m, const char *p, const char *tok, int32_t id, const char *where, bool in_model) {
  if ((size_t)id >= m->nids) {
    size_t old = m->nids;
    int rc = CP_ARRAY_RESERVE(m->id_to_tok, m->nids, (size_t)id + 1, p);
    if (rc) return rc;
    memset(m->id_to_tok + old, 0, (m->nids - old) * sizeof *m->id_to_tok);
  }
  if (m->id_to_tok[id]) return cp_error_set(CP_ETOK_JSON, "%s: %s: id %d used twice", p, where, (int)id);
  CP_CHECK_ALLOC(m->id_to_tok[id] = strdup(tok), p);
  if (!in_model) return 0;
  int r = tk_map_put(&m->vocab, tok, strlen(tok), id);
  if (r < 0) return cp_nomem("%s", p);
  if (r > 0) return cp_error_set(CP_ETOK_JSON, "%s: %s: token '%.40s' appears twice", p, where, tok);
  return 0;
}

bool tk_model_byte_id(const hf_model *m, unsigned char b, int32_t *id) {
  char name[8];
  snprintf(name, sizeof name, "<0x%02X>", b);
  return tk_map_get(&m->vocab, name, 6, id);
}

int tk_model_load(hf_model *m, const cJSON *model, const char *p) {
  const char *mtype = jstr(model, "type");
  if (!mtype) { /* old serialisations have no model.type: BPE has merges, Unigram has unk_id */
    mtype = jget(model, "merges") ? "BPE" : jget(model, "unk_id") ? "Unigram" : "?";
  }
  if (!strcmp(mtype, "BPE")) return tk_bpe_load(m, model, p);
  if (!strcmp(mtype, "Unigram")) {
    m->unigram = true;
    return tk_unigram_load(m, model, p);
  }
  return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: model type '%.40s' is not supported (BPE, Unigram)", p, mtype);
}

int tk_model_encode_word(const hf_model *m, const char *w, size_t n, idvec *out) {
  return m->unigram ? tk_unigram_word(m, w, n, out) : tk_bpe_word(m, w, n, out);
}

void tk_model_free(hf_model *m) {
  tk_map_free(&m->vocab);
  for (size_t i = 0; i < m->nids; i++) free(m->id_to_tok[i]);
  free(m->id_to_tok);
  free(m->merges.keys), free(m->merges.rank), free(m->merges.merged);
  free(m->cont_prefix), free(m->eow_suffix), free(m->scores);
  memset(m, 0, sizeof *m);
}
