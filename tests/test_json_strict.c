#include "test.h"

#include "base/json_strict.h"

static cp_json_problem scan(const char *text, size_t *offset) {
  cp_json_check c;
  cp_json_problem p = cp_json_scan(&c, text, strlen(text), 128);
  if (offset) *offset = c.offset;
  return p;
}

/* cp_json_print: names copied byte for byte from files come out as valid UTF-8 without raw
 * control characters (#33); the strict scanner, which refuses invalid UTF-8, reads the result. */
static void print_names(void) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "k\x1b\xff", "a\x07\x7f\xc2\x9b\xe2\x80\xae\xc3\xa9\xc3|");
  char *t = cp_json_print(o, false);
  CHECK_MSG(t && !strcmp(t, "{\"k\\u001b\xef\xbf\xbd\":\"a\\u0007\\u007f\\u009b\\u202e\xc3\xa9\xef\xbf\xbd|\"}"),
            "got '%s'", t ? t : "(null)");
  CHECK(t && scan(t, NULL) == CP_JSON_OK);
  free(t);
  cJSON_DeleteItemFromObject(o, "k\x1b\xff");
  cJSON_AddStringToObject(o, "plain", "\xe2\x82\xac");
  CHECK((t = cp_json_print(o, true)) && !strcmp(t, "{\n\t\"plain\":\t\"\xe2\x82\xac\"\n}")); /* untouched */
  free(t);
  cJSON_Delete(o);
}

int main(void) {
  size_t off = 0;
  print_names();
  CHECK(scan("{\"a\":1,\"b\":[true,false,null,\"x\",-1.5e3]}", NULL) == CP_JSON_OK);
  CHECK(scan("  {}  ", NULL) == CP_JSON_OK);
  CHECK(scan("{\"a\":1,\"a\":2}", &off) == CP_JSON_DUPLICATE && off == 7);
  CHECK(scan("{\"a\":1,\"\\u0061\":2}", NULL) == CP_JSON_OK);           /* escapes compared raw-decoded */
  CHECK(scan("{\"x\":{\"a\":1},\"y\":{\"a\":1}}", NULL) == CP_JSON_OK); /* same key, other objects */
  CHECK(scan("{\"x\":{\"a\":1,\"a\":1}}", NULL) == CP_JSON_DUPLICATE);
  /* only empty keys: no key bytes were ever stored (fuzz_rule found UB here under UBSan) */
  CHECK(scan("{\"\":1,\"\":2}", &off) == CP_JSON_DUPLICATE && off == 6);
  CHECK(scan("{\"a\":01}", NULL) == CP_JSON_SYNTAX);
  CHECK(scan("{\"a\":1,}", NULL) == CP_JSON_SYNTAX);
  CHECK(scan("{\"a\":1} x", NULL) == CP_JSON_SYNTAX);
  CHECK(scan("{\"a\":\"\x01\"}", NULL) == CP_JSON_SYNTAX);
  CHECK(scan("{\"a\":\"\xff\"}", &off) == CP_JSON_UTF8 && off == 6);
  CHECK(scan("{\"a\":\"\xc0\xaf\"}", NULL) == CP_JSON_UTF8);     /* overlong '/' */
  CHECK(scan("{\"a\":\"\xed\xa0\x80\"}", NULL) == CP_JSON_UTF8); /* UTF-16 surrogate */
  CHECK(scan("{\"a\":\"\xe2\x82\xac\"}", NULL) == CP_JSON_OK);   /* euro sign */
  CHECK(scan("\"unterminated", NULL) == CP_JSON_SYNTAX);
  CHECK(scan("", NULL) == CP_JSON_SYNTAX);

  /* depth: 128 nested arrays pass, 129 fail */
  char deep[300];
  for (int n = 128; n <= 129; n++) {
    memset(deep, '[', (size_t)n);
    memset(deep + n, ']', (size_t)n);
    deep[2 * n] = '\0';
    CHECK(scan(deep, NULL) == (n == 128 ? CP_JSON_OK : CP_JSON_DEPTH));
  }

  /* many keys: sorted duplicate check stays fast and exact */
  size_t cap = 200000 * 16;
  char *big = malloc(cap);
  size_t used = 0;
  used += (size_t)sprintf(big + used, "{");
  for (int i = 0; i < 200000; i++) used += (size_t)sprintf(big + used, "%s\"k%d\":%d", i ? "," : "", i, i);
  used += (size_t)sprintf(big + used, "}");
  cp_json_check c;
  CHECK(cp_json_scan(&c, big, used, 128) == CP_JSON_OK);
  used -= 1;
  used += (size_t)sprintf(big + used, ",\"k77\":0}");
  CHECK(cp_json_scan(&c, big, used, 128) == CP_JSON_DUPLICATE && strcmp(c.key, "k77") == 0);
  free(big);

  cJSON *json = NULL;
  CHECK_RC(CP_ECFG_DUPLICATE_KEY, cp_json_parse_strict(&json, "{\"a\":1,\"a\":1}", 13, "cfg.json", 128, CP_ECFG_JSON,
                                                       CP_ECFG_JSON, CP_ECFG_DUPLICATE_KEY, CP_ECFG_DEPTH));
  CHECK(strstr(cp_error_message(), "cfg.json") && strstr(cp_error_message(), "'a'"));
  CHECK_RC(0, cp_json_parse_strict(&json, "{\"a\":[1,2]}", 11, "cfg.json", 128, CP_ECFG_JSON, CP_ECFG_JSON,
                                   CP_ECFG_DUPLICATE_KEY, CP_ECFG_DEPTH));
  CHECK(json && cJSON_GetArraySize(cJSON_GetObjectItem(json, "a")) == 2);
  cJSON_Delete(json);
  return test_finish();
}
