/* Hugging Face tokenizer.json: the loader and the encode/decode pipeline of the `tokenizers`
 * crate (added tokens -> normalizer -> pre-tokenizer -> model -> post-processor; decoder chain).
 * The components live in tokenizers/hf_*.c; the post-processor (a list of ids before and after
 * the sequence) is read here. Unsupported components are refused at load. */
#include "tokenizers/hf.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "base/json_strict.h"
#include "tokenizers/hf_added.h"
#include "tokenizers/hf_decoder.h"
#include "tokenizers/hf_json.h"
#include "tokenizers/hf_model.h"
#include "tokenizers/hf_normalizer.h"
#include "tokenizers/hf_pretokenizer.h"
#include "tokenizers/pieces.h"

#define TK_MAX_DEPTH 64 /* JSON nesting */

struct tk_hf {
  char *path;
  hf_model model;
  tk_added added;
  tk_normalizers norm;
  tk_pretokenizers pre;
  tk_decoders dec;
  /* post-processor: ids before and after the sequence when adding special tokens */
  int32_t *post_pre, *post_post;
  size_t npost_pre, npost_post;
  int64_t bos, eos;
};

/* ---- post-processor */

static int post_append(tk_hf *hf, bool before, int32_t id) {
  int32_t **v = before ? &hf->post_pre : &hf->post_post;
  size_t *n = before ? &hf->npost_pre : &hf->npost_post;
  if (*n >= 64) return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: post_processor: too many special tokens", hf->path);
  int rc = CP_ARRAY_RESIZE(*v, *n + 1, hf->path);
  if (rc < 0) return rc;
  (*v)[(*n)++] = id;
  return 0;
}

static int load_post(tk_hf *hf, const cJSON *n, int depth) {
  const char *p = hf->path;
  if (!n || cJSON_IsNull(n)) return 0;
  const char *type = jstr(n, "type");
  if (!type) return cp_error_set(CP_ETOK_JSON, "%s: post_processor: no type", p);
  int rc;
  if (!strcmp(type, "Sequence")) {
    const cJSON *it, *list = jget(n, "processors");
    if (!cJSON_IsArray(list) || depth > TK_MAX_NESTING) return cp_error_set(CP_ETOK_JSON, "%s: post_processor Sequence: bad list", p);
    cJSON_ArrayForEach(it, list) if ((rc = load_post(hf, it, depth + 1))) return rc;
    return 0;
  }
  if (!strcmp(type, "ByteLevel")) return 0; /* offsets only */
  if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
    const cJSON *cls = jget(n, "cls"), *sep = jget(n, "sep");
    int32_t c, s;
    if (!jid(cJSON_GetArrayItem(cls, 1), &c) || !jid(cJSON_GetArrayItem(sep, 1), &s))
      return cp_error_set(CP_ETOK_JSON, "%s: post_processor %s: bad cls/sep", p, type);
    if ((rc = post_append(hf, true, c)) || (rc = post_append(hf, false, s))) return rc;
    return 0;
  }
  if (!strcmp(type, "TemplateProcessing")) {
    const cJSON *single = jget(n, "single"), *specials = jget(n, "special_tokens"), *it;
    if (!cJSON_IsArray(single)) return cp_error_set(CP_ETOK_JSON, "%s: post_processor: template 'single' missing", p);
    bool seen_seq = false;
    cJSON_ArrayForEach(it, single) {
      if (jget(it, "Sequence")) {
        if (seen_seq) return cp_error_set(CP_ETOK_JSON, "%s: post_processor: two sequences in 'single'", p);
        seen_seq = true;
        continue;
      }
      const char *name = jstr(jget(it, "SpecialToken"), "id");
      const cJSON *ids = name ? jget(jget(specials, name), "ids") : NULL, *idv;
      if (!cJSON_IsArray(ids))
        return cp_error_set(CP_ETOK_JSON, "%s: post_processor: special token '%.40s' undefined", p, name ? name : "?");
      cJSON_ArrayForEach(idv, ids) {
        int32_t id;
        if (!jid(idv, &id)) return cp_error_set(CP_ETOK_JSON, "%s: post_processor: '%.40s': bad id", p, name);
        if ((rc = post_append(hf, !seen_seq, id))) return rc;
      }
    }
    if (!seen_seq) return cp_error_set(CP_ETOK_JSON, "%s: post_processor: no $A in 'single'", p);
    return 0;
  }
  return cp_error_set(CP_ETOK_UNSUPPORTED, "%s: post_processor type '%.40s' is not supported", p, type);
}

/* ---- loading */

void tk_hf_free(tk_hf *hf) {
  if (!hf) return;
  tk_model_free(&hf->model);
  tk_added_free(&hf->added);
  tk_normalizers_free(&hf->norm);
  tk_pretokenizers_free(&hf->pre);
  tk_decoders_free(&hf->dec);
  free(hf->post_pre), free(hf->post_post);
  free(hf->path);
  free(hf);
}

static int64_t find_named(const tk_hf *hf, const char *const *names) {
  for (; *names; names++) {
    int64_t id = tk_hf_token_id(hf, *names);
    if (id >= 0) return id;
  }
  return -1;
}

int tk_hf_load(tk_hf **out, const char *text, size_t len, const char *path) {
  *out = NULL;
  cJSON *root = NULL;
  int rc = cp_json_parse_strict(&root, text, len, path, TK_MAX_DEPTH, CP_ETOK_JSON, CP_ETOK_JSON, CP_ETOK_JSON,
                                CP_ETOK_JSON);
  if (rc == 0) rc = tk_hf_load_tree(out, root, path);
  cJSON_Delete(root);
  return rc;
}

int tk_hf_load_tree(tk_hf **out, const cJSON *root, const char *path) {
  *out = NULL;
  tk_hf *hf = calloc(1, sizeof *hf);
  int rc = 0;
  CP_CHECK_ALLOC_GOTO(hf, path);
  CP_CHECK_ALLOC_GOTO(hf->path = strdup(path), path);
  if (!cJSON_IsObject(root)) {
    rc = cp_error_set(CP_ETOK_JSON, "%s: offset 0: top level is not an object", path);
    goto done;
  }
  const cJSON *model = jget(root, "model");
  if (!cJSON_IsObject(model)) {
    rc = cp_error_set(CP_ETOK_JSON, "%s: key 'model': missing or not an object", path);
    goto done;
  }
  if ((rc = tk_model_load(&hf->model, model, path)) ||
      (rc = tk_added_load(&hf->added, &hf->model, jget(root, "added_tokens"), path)) ||
      (rc = tk_normalizers_load(&hf->norm, jget(root, "normalizer"), hf->path, 0)) ||
      (rc = tk_pretokenizers_load(&hf->pre, jget(root, "pre_tokenizer"), path, 0)) ||
      (rc = load_post(hf, jget(root, "post_processor"), 0)) ||
      (rc = tk_decoders_load(&hf->dec, jget(root, "decoder"), hf->path, 0)))
    goto done;
  for (size_t i = 0; i < hf->npost_pre + hf->npost_post; i++) {
    int32_t id = i < hf->npost_pre ? hf->post_pre[i] : hf->post_post[i - hf->npost_pre];
    if ((size_t)id >= hf->model.nids || !hf->model.id_to_tok[id]) {
      rc = cp_error_set(CP_ETOK_JSON, "%s: post_processor: id %d is not a token", path, (int)id);
      goto done;
    }
  }
  /* No tokenizer.json field names BOS/EOS: the post-processor's tokens, else common names. */
  static const char *const bos_names[] = {"<s>", "<|begin_of_text|>", "<bos>", "[CLS]", "<|endoftext|>", NULL};
  static const char *const eos_names[] = {"</s>", "<|end_of_text|>", "<eos>", "[SEP]", "<|endoftext|>", NULL};
  hf->bos = hf->npost_pre ? hf->post_pre[0] : find_named(hf, bos_names);
  hf->eos = hf->npost_post ? hf->post_post[hf->npost_post - 1] : find_named(hf, eos_names);
  *out = hf;
  hf = NULL;
done:
  tk_hf_free(hf);
  return rc;
}

void tk_hf_set_bos_eos(tk_hf *hf, int64_t bos, int64_t eos) {
  if (bos >= 0) hf->bos = bos;
  if (eos >= 0) hf->eos = eos;
}

/* ---- encode / decode */

int tk_hf_encode(const tk_hf *hf, int64_t **ids, size_t *n, const char *text, size_t len, bool add_special) {
  *ids = NULL, *n = 0;
  pieces a = {0}, b = {0}, c = {0};
  idvec out = {0};
  int rc = 0;
  pieces_add(&a, text, len, true, -1);
  tk_added_split(&hf->added, &a, &b, false); /* raw text first: tokens matched before normalization */
  for (size_t k = 0; k < b.n && !rc; k++) {
    if (b.v[k].id >= 0) {
      pieces_add(&c, b.v[k].s, b.v[k].len, false, b.v[k].id);
      continue;
    }
    cp_strbuf nb = {0};
    rc = tk_normalizers_apply(&hf->norm, &nb, b.v[k].s, b.v[k].len);
    if (!rc) pieces_add(&c, nb.s ? nb.s : "", nb.len, b.v[k].at0, -1);
    cp_strbuf_free(&nb);
  }
  pieces_free(&a);
  if (!rc) tk_added_split(&hf->added, &c, &a, true);
  for (size_t k = 0; k < a.n && !rc; k++) {
    if (a.v[k].id >= 0) {
      ids_add(&out, a.v[k].id);
      continue;
    }
    pieces words = {0}, next = {0};
    pieces_add(&words, a.v[k].s, a.v[k].len, a.v[k].at0, -1);
    size_t bytes = a.v[k].len;
    for (size_t s = 0; s < hf->pre.n && !rc; s++) {
      /* Each step grows text by a bounded factor (ByteLevel 2x, Metaspace 4x) but chained
       * steps compound: held to the normalizers' growth bound. */
      size_t limit = tk_grow_limit(bytes, a.v[k].len);
      for (size_t w = 0; w < words.n && !rc; w++) rc = tk_pretokenizer_apply(&hf->pre.v[s], &words.v[w], &next);
      bytes = 0;
      for (size_t w = 0; w < next.n; w++) bytes += next.v[w].len;
      if (!rc && bytes > limit) rc = tk_grow_error(hf->path, "pre_tokenizer", limit);
      pieces_free(&words);
      words = next;
      memset(&next, 0, sizeof next);
    }
    for (size_t w = 0; w < words.n && !rc; w++) {
      if (!words.v[w].len) continue;
      rc = tk_model_encode_word(&hf->model, words.v[w].s, words.v[w].len, &out);
    }
    if (!rc && words.oom) rc = cp_nomem("tokenizer");
    pieces_free(&words);
    pieces_free(&next);
  }
  if (!rc && (a.oom || b.oom || c.oom)) rc = cp_nomem("tokenizer");
  pieces_free(&a), pieces_free(&b), pieces_free(&c);
  if (rc) {
    free(out.v);
    return rc;
  }
  size_t total = out.n + (add_special ? hf->npost_pre + hf->npost_post : 0);
  int64_t *res = malloc((total + 1) * sizeof *res);
  if (!res || out.oom) {
    free(res), free(out.v);
    return cp_nomem("tokenizer");
  }
  size_t o = 0;
  if (add_special)
    for (size_t i = 0; i < hf->npost_pre; i++) res[o++] = hf->post_pre[i];
  for (size_t i = 0; i < out.n; i++) res[o++] = out.v[i];
  if (add_special)
    for (size_t i = 0; i < hf->npost_post; i++) res[o++] = hf->post_post[i];
  free(out.v);
  *ids = res, *n = o;
  return 0;
}

int tk_hf_decode(const tk_hf *hf, cp_strbuf *out, const int64_t *ids, size_t n, bool skip_special) {
  pieces cur = {0};
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || (uint64_t)ids[i] >= hf->model.nids || !hf->model.id_to_tok[ids[i]]) {
      rc = cp_error_set(CP_ETOK_ID, "%s: id %lld at position %zu is not a token", hf->path, (long long)ids[i], i);
      goto done;
    }
    if (skip_special && tk_added_is_special(&hf->added, ids[i])) continue;
    pieces_add(&cur, hf->model.id_to_tok[ids[i]], strlen(hf->model.id_to_tok[ids[i]]), false, -1);
  }
  if (cur.oom) {
    rc = cp_nomem("tokenizer");
    goto done;
  }
  if ((rc = tk_decoders_apply(&hf->dec, &cur))) goto done;
  for (size_t k = 0; k < cur.n; k++) {
    if (!hf->dec.have_decoder && k) cp_strbuf_put(out, " ", 1); /* HF without a decoder joins with spaces */
    cp_strbuf_put(out, cur.v[k].s, cur.v[k].len);
  }
  if (!out->s) cp_strbuf_put(out, "", 0);
  if (out->oom) rc = cp_nomem("tokenizer");
done:
  pieces_free(&cur);
  return rc;
}

int64_t tk_hf_token_id(const tk_hf *hf, const char *name) {
  int64_t added = tk_added_find(&hf->added, name);
  if (added >= 0) return added;
  int32_t id;
  return tk_map_get(&hf->model.vocab, name, strlen(name), &id) ? id : -1;
}

size_t tk_hf_vocab_size(const tk_hf *hf) {
  size_t n = hf->model.nids;
  while (n && !hf->model.id_to_tok[n - 1]) n--;
  return n;
}

int64_t tk_hf_bos(const tk_hf *hf) { return hf->bos; }
int64_t tk_hf_eos(const tk_hf *hf) { return hf->eos; }
const char *tk_hf_kind(const tk_hf *hf) { return hf->model.unigram ? "unigram" : "bpe"; }

int tk_node_head(const char **type, const cJSON *n, const char *list_key, const char *what, const char *p,
                 int depth, tk_node_loader load, void *l) {
  *type = NULL;
  if (!n || cJSON_IsNull(n)) return TK_NODE_NONE;
  if (!(*type = jstr(n, "type"))) return cp_error_set(CP_ETOK_JSON, "%s: %s: no type", p, what);
  if (strcmp(*type, "Sequence")) return TK_NODE_ONE;
  const cJSON *it, *list = jget(n, list_key);
  if (!cJSON_IsArray(list) || depth > TK_MAX_NESTING)
    return cp_error_set(CP_ETOK_JSON, "%s: %s Sequence: bad list", p, what);
  cJSON_ArrayForEach(it, list) {
    int rc = load(l, it, p, depth + 1);
    if (rc) return rc;
  }
  return TK_NODE_SEQUENCE;
}
