/* Probe construction: sizes, placement, determinism, scoring. With an argument, prints samples
 * as JSON lines for tests/test_probes_reference.sh to compare with python/ctxpatch_ref/data.py. */
#include "test.h"

#include <cjson/cJSON.h>

#include "ctxpatch/tokenizers/tokenizer.h"
#include "ctxpatch/verify/verify.h"

static void dump(const cp_tokenizer *tok) {
  const cp_probe_kind kinds[] = {CP_PROBE_PASSKEY, CP_PROBE_LINES};
  const int64_t lengths[] = {256, 1024};
  for (size_t k = 0; k < 2; k++)
    for (size_t l = 0; l < 2; l++)
      for (int d = 0; d <= 4; d++) {
        cp_probe_sample s;
        if (cp_probe_make(&s, tok, kinds[k], lengths[l], d / 4.0, 1000 + d) < 0) exit(1);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "kind", cp_probe_name(kinds[k]));
        cJSON_AddNumberToObject(o, "length", (double)lengths[l]);
        cJSON_AddNumberToObject(o, "depth", d / 4.0);
        cJSON_AddNumberToObject(o, "answer", (double)s.answer);
        cJSON_AddNumberToObject(o, "n_ids", (double)s.n_ids);
        cJSON_AddStringToObject(o, "prompt", s.prompt);
        char *text = cJSON_PrintUnformatted(o);
        puts(text);
        free(text);
        cJSON_Delete(o);
        cp_probe_sample_free(&s);
      }
}

int main(int argc, char **argv) {
  const char *src = test_env("CTXPATCH_SOURCE_DIR");
  cp_tokenizer *tok = NULL;
  CHECK_RC(0, cp_tokenizer_open(&tok, test_path(src, "examples/probe-models/tokenizer.json")));
  if (!tok) return test_finish();
  if (argc > 1) {
    dump(tok);
    cp_tokenizer_free(tok);
    return 0;
  }

  for (int k = 0; k < CP_PROBE_COUNT; k++) {
    int64_t lengths[] = {256, 700, 4096};
    for (int l = 0; l < 3; l++) {
      long prev_pos = -1;
      for (int d = 0; d <= 4; d++) {
        cp_probe_sample s, again;
        CHECK_RC(0, cp_probe_make(&s, tok, (cp_probe_kind)k, lengths[l], d / 4.0, 7));
        CHECK_RC(0, cp_probe_make(&again, tok, (cp_probe_kind)k, lengths[l], d / 4.0, 7));
        /* deterministic, sized to the length minus the answer room, and not far below it */
        CHECK(s.prompt && again.prompt && strcmp(s.prompt, again.prompt) == 0);
        CHECK_MSG((int64_t)s.n_ids <= lengths[l] - 8 && (int64_t)s.n_ids >= lengths[l] - 8 - 40,
                  "%s at %lld: %zu tokens", cp_probe_name((cp_probe_kind)k), (long long)lengths[l], s.n_ids);
        CHECK(s.answer >= 1 && s.answer <= 50000);
        /* the answer is in the prompt, and moves later as the depth grows */
        char key[32];
        snprintf(key, sizeof key, k == CP_PROBE_LINES ? "<%lld>" : " %lld", (long long)s.answer);
        const char *at = strstr(s.prompt, key);
        CHECK_MSG(at != NULL, "%s: answer %s not in prompt", cp_probe_name((cp_probe_kind)k), key);
        if (at && k != CP_PROBE_MULTIKEY) {
          CHECK(at - s.prompt >= prev_pos);
          prev_pos = at - s.prompt;
        }
        cp_probe_sample_free(&s);
        cp_probe_sample_free(&again);
      }
    }
  }
  /* other seeds give other keys */
  cp_probe_sample a, b;
  CHECK_RC(0, cp_probe_make(&a, tok, CP_PROBE_PASSKEY, 256, 0.5, 1));
  CHECK_RC(0, cp_probe_make(&b, tok, CP_PROBE_PASSKEY, 256, 0.5, 2));
  CHECK(a.answer != b.answer);
  cp_probe_sample_free(&a);
  cp_probe_sample_free(&b);
  /* multikey: three key lines, the question names the first */
  CHECK_RC(0, cp_probe_make(&a, tok, CP_PROBE_MULTIKEY, 512, 0.3, 3));
  int lines = 0;
  for (const char *p = a.prompt; (p = strstr(p, "Remember it.")); p++) lines++;
  CHECK(lines == 3);
  cp_probe_sample_free(&a);

  /* refusals */
  CHECK_RC(CP_EVERIFY_LENGTH, cp_probe_make(&a, tok, CP_PROBE_PASSKEY, 40, 0.5, 1));
  CHECK(strstr(cp_error_message(), "40") != NULL);
  CHECK_RC(CP_EARG, cp_probe_make(&a, tok, CP_PROBE_PASSKEY, 256, 1.5, 1));
  cp_probe_kind kind;
  CHECK_RC(CP_EVERIFY_PROBE, cp_probe_from_name(&kind, "passkeys"));
  CHECK_RC(0, cp_probe_from_name(&kind, "needle"));
  CHECK(kind == CP_PROBE_NEEDLE);

  /* scoring: first integer, or the last for line retrieval */
  CHECK(cp_probe_correct(CP_PROBE_PASSKEY, " 4102. Remember", 4102));
  CHECK(!cp_probe_correct(CP_PROBE_PASSKEY, " 41 4102", 4102));
  CHECK(!cp_probe_correct(CP_PROBE_PASSKEY, " none", 4102));
  CHECK(cp_probe_correct(CP_PROBE_LINES, " line 7: <4102>", 4102));
  CHECK(!cp_probe_correct(CP_PROBE_LINES, " <4102> 5", 4102));
  CHECK(!cp_probe_correct(CP_PROBE_PASSKEY, " 41020", 4102));
  cp_tokenizer_free(tok);
  return test_finish();
}
