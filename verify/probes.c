/* Long retrieval probes. The texts are those of python/ctxpatch_ref/data.py, so the probe
 * models are tested on the formats they were trained on. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxpatch/base/alloc.h"
#include "ctxpatch/base/error.h"
#include "ctxpatch/base/strbuf.h"
#include "ctxpatch/verify/verify.h"
#include "verify/splitmix.h"

#define ANSWER_ROOM 8

static const char TASK[] =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz you "
    "about the important information there.";
static const char FILLER[] = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
static const char KEY_LINE[] = " The pass key is %lld. Remember it. %lld is the pass key.";
static const char QUESTION[] = " What is the pass key? The pass key is";

static const char NEEDLE_TASK[] =
    "There is a special magic number hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz "
    "you about the special magic number there.";
static const char NEEDLE[] = " The special magic number is %lld.";
static const char NEEDLE_QUESTION[] = " What is the special magic number? The special magic number is";

static const char MULTI_KEY_LINE[] = " The pass key of %s is %lld. Remember it. %lld is the pass key of %s.";
static const char MULTI_QUESTION[] = " What is the pass key of %s? The pass key of %s is";

static const char LINES_HEAD[] =
    "Below is a record of lines I want you to remember. Each line begins with 'line <line index>' and contains a "
    "'<REGISTER_CONTENT>' at the end of the line as a numerical value. For each line index, memorize its "
    "corresponding <REGISTER_CONTENT>. At the end of the record, I will ask you to retrieve the corresponding "
    "<REGISTER_CONTENT> of a certain line index. Now the record start:\n\n";
static const char LINE[] = "line %s: REGISTER_CONTENT is <%lld>\n";
static const char LINES_TAIL[] =
    "\nNow the record is over. Tell me what is the <REGISTER_CONTENT> in line %s? I need the number.";

static const char *const ADJ[] = {
    "righteous", "able",   "bright", "calm",   "dark",   "eager",  "fancy",  "gentle", "happy",  "icy",
    "jolly",     "kind",   "lazy",   "merry",  "nice",   "odd",    "proud",  "quick",  "rapid",  "shy",
    "tidy",      "urban",  "vast",   "warm",   "young",  "zany",   "brave",  "clever", "dizzy",  "early",
    "fierce",    "grand",  "hollow", "jagged", "keen",   "lively", "mighty", "narrow", "orange", "plain",
    "quiet",     "rough",  "silent", "tall",   "unique", "vivid",  "wild",   "yellow", "agile",  "bold",
    "crisp",     "dusty",  "empty",  "fresh",  "giant",  "hasty",  "ideal",  "juicy",  "loud",   "mellow",
    "noble",     "polite", "rare",   "sharp",  "tough",  "upper",  "velvet", "witty"};
static const char *const NOUN[] = {
    "ethernet", "apple",   "bridge", "candle",  "desert",  "engine", "forest", "garden", "harbor", "island",
    "jacket",   "kettle",  "ladder", "magnet",  "needle",  "orchid", "pencil", "quartz", "river",  "saddle",
    "tunnel",   "umbrella", "valley", "window", "yacht",   "zebra",  "anchor", "button", "cactus", "dragon",
    "falcon",   "glacier", "hammer", "igloo",   "jungle",  "kayak",  "lemon",  "meadow", "nickel", "oyster",
    "parrot",   "rocket",  "socket", "tiger",   "violin",  "walnut", "badge",  "cobalt", "denim",  "ember",
    "fossil",   "gravel",  "helmet", "lantern", "marble",  "nectar", "pepper", "ribbon", "shovel", "timber",
    "vessel"};
#define N_ADJ (sizeof ADJ / sizeof *ADJ)
#define N_NOUN (sizeof NOUN / sizeof *NOUN)

static const char *const probe_names[CP_PROBE_COUNT] = {"passkey", "lines", "needle", "multikey"};

const char *cp_probe_name(cp_probe_kind kind) { return (unsigned)kind < CP_PROBE_COUNT ? probe_names[kind] : "?"; }

int cp_probe_from_name(cp_probe_kind *out, const char *name) {
  for (int k = 0; k < CP_PROBE_COUNT; k++)
    if (!strcmp(name, probe_names[k])) {
      *out = (cp_probe_kind)k;
      return 0;
    }
  return cp_error_set(CP_EVERIFY_PROBE, "unknown probe '%s' (known: passkey, lines, needle, multikey)", name);
}

#define next_u64 cp_splitmix64_next
static int64_t rand_between(uint64_t *s, int64_t lo, int64_t hi) { /* inclusive */
  return lo + (int64_t)(next_u64(s) % (uint64_t)(hi - lo + 1));
}

static void repeat(cp_strbuf *t, const char *s, int64_t n) {
  for (int64_t i = 0; i < n; i++) cp_strbuf_printf(t, "%s", s);
}

static int count_tokens(int64_t *out, const cp_tokenizer *tok, const char *s) {
  int64_t *ids = NULL;
  size_t n = 0;
  int rc = cp_tokenizer_encode(tok, &ids, &n, s, strlen(s), false);
  free(ids);
  *out = (int64_t)n;
  return rc;
}

static int too_short(cp_probe_kind kind, int64_t n_tokens, int64_t needed) {
  return cp_error_set(CP_EVERIFY_LENGTH, "probe %s: length %lld cannot hold its %lld fixed tokens plus %d of answer room",
                      cp_probe_name(kind), (long long)n_tokens, (long long)needed, ANSWER_ROOM);
}

static void random_name(char *out, size_t cap, uint64_t *rng) {
  snprintf(out, cap, "%s-%s", ADJ[next_u64(rng) % N_ADJ], NOUN[next_u64(rng) % N_NOUN]);
}

/* Task + filler around one needle line at `depth`, then the question (passkey and needle). */
static int make_single(cp_strbuf *t, int64_t *answer, const cp_tokenizer *tok, cp_probe_kind kind, int64_t budget,
                       double depth, uint64_t *rng) {
  const char *task = kind == CP_PROBE_NEEDLE ? NEEDLE_TASK : TASK;
  const char *question = kind == CP_PROBE_NEEDLE ? NEEDLE_QUESTION : QUESTION;
  int64_t key = rand_between(rng, 1, 50000);
  char line[256];
  if (kind == CP_PROBE_NEEDLE) snprintf(line, sizeof line, NEEDLE, (long long)key);
  else snprintf(line, sizeof line, KEY_LINE, (long long)key, (long long)key);
  cp_strbuf fixed = {0};
  cp_strbuf_printf(&fixed, "%s%s%s", task, line, question);
  int64_t n_fixed = 0, per = 0;
  int rc = fixed.oom ? cp_nomem("%s probe", cp_probe_name(kind)) : count_tokens(&n_fixed, tok, fixed.s);
  free(fixed.s);
  if (rc == 0) rc = count_tokens(&per, tok, FILLER);
  if (rc < 0) return rc;
  if (budget < n_fixed || per <= 0) return too_short(kind, budget + ANSWER_ROOM, n_fixed);
  int64_t n = (budget - n_fixed) / per;
  int64_t at = (int64_t)llround(depth * (double)n);
  if (at > n) at = n;
  cp_strbuf_printf(t, "%s", task);
  repeat(t, FILLER, at);
  cp_strbuf_printf(t, "%s", line);
  repeat(t, FILLER, n - at);
  cp_strbuf_printf(t, "%s", question);
  *answer = key;
  return 0;
}

/* RULER-style multi-key passkey: the asked key and two distractors with other names. */
static int make_multikey(cp_strbuf *t, int64_t *answer, const cp_tokenizer *tok, int64_t budget, double depth,
                         uint64_t *rng) {
  enum { KEYS = 3 };
  char names[KEYS][64], lines[KEYS][256];
  int64_t keys[KEYS];
  for (int k = 0; k < KEYS; k++) {
    do {
      random_name(names[k], sizeof names[k], rng);
    } while ((k > 0 && !strcmp(names[k], names[0])) || (k > 1 && !strcmp(names[k], names[1])));
    keys[k] = rand_between(rng, 1, 50000);
    snprintf(lines[k], sizeof lines[k], MULTI_KEY_LINE, names[k], (long long)keys[k], (long long)keys[k], names[k]);
  }
  cp_strbuf fixed = {0};
  cp_strbuf_printf(&fixed, "%s", TASK);
  for (int k = 0; k < KEYS; k++) cp_strbuf_printf(&fixed, "%s", lines[k]);
  cp_strbuf_printf(&fixed, MULTI_QUESTION, names[0], names[0]);
  int64_t n_fixed = 0, per = 0;
  int rc = fixed.oom ? cp_nomem("multi-key probe") : count_tokens(&n_fixed, tok, fixed.s);
  free(fixed.s);
  if (rc == 0) rc = count_tokens(&per, tok, FILLER);
  if (rc < 0) return rc;
  if (budget < n_fixed || per <= 0) return too_short(CP_PROBE_MULTIKEY, budget + ANSWER_ROOM, n_fixed);
  int64_t n = (budget - n_fixed) / per;
  int64_t slot[KEYS];
  slot[0] = (int64_t)llround(depth * (double)n);
  if (slot[0] > n) slot[0] = n;
  for (int k = 1; k < KEYS; k++) slot[k] = rand_between(rng, 0, n);
  cp_strbuf_printf(t, "%s", TASK);
  for (int64_t i = 0; i <= n; i++) {
    for (int k = 0; k < KEYS; k++)
      if (slot[k] == i) cp_strbuf_printf(t, "%s", lines[k]);
    if (i < n) cp_strbuf_printf(t, "%s", FILLER);
  }
  cp_strbuf_printf(t, MULTI_QUESTION, names[0], names[0]);
  *answer = keys[0];
  return 0;
}

/* LongEval lines: as many lines as fit; the asked line at `depth`. */
static int make_lines(cp_strbuf *t, int64_t *answer, const cp_tokenizer *tok, int64_t budget, double depth,
                      uint64_t *rng) {
  cp_strbuf head = {0};
  cp_strbuf_printf(&head, "%s", LINES_HEAD);
  cp_strbuf_printf(&head, LINES_TAIL, "righteous-ethernet");
  int64_t total = 0;
  int rc = head.oom ? cp_nomem("lines probe") : count_tokens(&total, tok, head.s);
  free(head.s);
  if (rc < 0) return rc;
  size_t n = 0, cap = 0;
  char(*names)[64] = NULL;
  int64_t *values = NULL;
  cp_strbuf body = {0};
  for (;;) {
    char name[64], line[160];
    bool fresh;
    do { /* line names are unique within a prompt */
      random_name(name, sizeof name, rng);
      fresh = true;
      for (size_t i = 0; i < n && fresh; i++) fresh = strcmp(names[i], name) != 0;
    } while (!fresh && n < N_ADJ * N_NOUN);
    int64_t v = rand_between(rng, 1, 50000), c = 0;
    snprintf(line, sizeof line, LINE, name, (long long)v);
    if ((rc = count_tokens(&c, tok, line)) < 0) goto done;
    if (total + c > budget || n == N_ADJ * N_NOUN) break;
    if (n == cap) { /* two arrays of one capacity: both grow from the same count */
      size_t cap_v = cap;
      if ((rc = CP_ARRAY_RESERVE(names, cap, n + 1, "lines probe")) < 0 ||
          (rc = CP_ARRAY_RESERVE(values, cap_v, n + 1, "lines probe")) < 0)
        goto done;
    }
    memcpy(names[n], name, sizeof name);
    values[n++] = v;
    cp_strbuf_printf(&body, "%s", line);
    total += c;
  }
  if (n == 0) {
    rc = too_short(CP_PROBE_LINES, budget + ANSWER_ROOM, total);
    goto done;
  }
  size_t at = (size_t)(depth * (double)n);
  if (at > n - 1) at = n - 1;
  cp_strbuf_printf(t, "%s%s", LINES_HEAD, body.s ? body.s : "");
  cp_strbuf_printf(t, LINES_TAIL, names[at]);
  *answer = values[at];
done:
  free(body.s);
  free(names);
  free(values);
  return rc;
}

int cp_probe_make(cp_probe_sample *out, const cp_tokenizer *tok, cp_probe_kind kind, int64_t n_tokens, double depth,
                  uint64_t seed) {
  memset(out, 0, sizeof *out);
  if ((unsigned)kind >= CP_PROBE_COUNT) return cp_error_set(CP_EVERIFY_PROBE, "unknown probe kind %d", (int)kind);
  if (!(depth >= 0 && depth <= 1)) return cp_error_set(CP_EARG, "probe depth %g is outside [0, 1]", depth);
  uint64_t rng = seed;
  int64_t budget = n_tokens - ANSWER_ROOM, answer = 0;
  cp_strbuf t = {0};
  int rc;
  switch (kind) {
  case CP_PROBE_LINES: rc = make_lines(&t, &answer, tok, budget, depth, &rng); break;
  case CP_PROBE_MULTIKEY: rc = make_multikey(&t, &answer, tok, budget, depth, &rng); break;
  default: rc = make_single(&t, &answer, tok, kind, budget, depth, &rng); break;
  }
  if (rc == 0 && t.oom) rc = cp_nomem("building a %s probe", cp_probe_name(kind));
  if (rc == 0) rc = cp_tokenizer_encode(tok, &out->ids, &out->n_ids, t.s, t.len, true);
  if (rc < 0) {
    free(t.s);
    cp_probe_sample_free(out);
    return rc;
  }
  out->prompt = t.s;
  out->answer = answer;
  out->depth = depth;
  return 0;
}

void cp_probe_sample_free(cp_probe_sample *s) {
  if (!s) return;
  free(s->prompt);
  free(s->ids);
  memset(s, 0, sizeof *s);
}

bool cp_probe_correct(cp_probe_kind kind, const char *generated, int64_t answer) {
  /* first integer, or the last one for line retrieval */
  long long found = -1;
  for (const char *p = generated; *p;) {
    if (!isdigit((unsigned char)*p)) {
      p++;
      continue;
    }
    long long v = 0;
    while (isdigit((unsigned char)*p)) {
      if (v < 1000000000000ll) v = v * 10 + (*p - '0');
      p++;
    }
    found = v;
    if (kind != CP_PROBE_LINES) break;
  }
  return found == answer;
}
