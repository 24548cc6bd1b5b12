#!/usr/bin/env python3
"""Synthetic data for the probe models, deterministic from a seed (stdlib only, so the C probe
tests can reuse it as a reference).

Three kinds of sample, each a (prompt, answer) pair of ASCII text:
  passkey  -- the anchors' format (task line, repeated filler, key line at a chosen depth,
              question "What is the pass key? The pass key is"; answer " 68132").
  lines    -- LongEval's line retrieval ("line righteous-ethernet: REGISTER_CONTENT is <4102>"
              lines, question "Tell me what is the <REGISTER_CONTENT> in line X? I need the
              number."; answer " <4102>").
  copy     -- plain copy / language-model filler: "Repeat: w1 ... wn. Again:" -> " w1 ... wn."

Lengths are in tokens of a tokenizer given as a callable encode(text) -> list of ids; the prompt
is built to be as close as possible to (and not above) the requested length.

Natural text (the v2 models, issue 18): TinyStories from the shared fixtures
(../shared/fixtures/third_party/text/tinystories_val_1000_eot.txt from the repository root, or
$FIXTURES/third_party/text/...), split at the documents separated by "<|endoftext|>" (empty ones
dropped, as lab/results.py does): stories [0, 800) train, [800, 1000) are held out, the very
corpus lab/results.py and scripts/results.sh give the `ppl` probe. The training stories are
ASCII-folded (the file's mojibake quotes become ASCII quotes; the v2 tokenizer is learned on
ASCII); the held-out file is written byte for byte as lab/results.py writes it.
  text     -- a window of n_tokens tokens of the training stories at a random offset: a
              language-model sample. The stream is built as `ctxpatch verify --probe ppl`
              builds it from the held-out file (docs/certificate.md): each story trimmed,
              encoded, preceded by the tokenizer's BOS.

Usage as a script: scripts/py -m ctxpatch_ref.data --kind passkey --len 256 --seed 1 --n 3 (prints
JSON lines); scripts/py -m ctxpatch_ref.data --held-out OUT.txt writes the held-out ppl corpus.
"""
import argparse
import json
import os
import random

TASK = ("There is an important info hidden inside a lot of irrelevant text. Find it and "
        "memorize it. I will quiz you about the important information there.")
FILLER = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
KEY_LINE = " The pass key is {k}. Remember it. {k} is the pass key."
QUESTION = " What is the pass key? The pass key is"

LINES_HEAD = ("Below is a record of lines I want you to remember. Each line begins with 'line "
              "<line index>' and contains a '<REGISTER_CONTENT>' at the end of the line as a "
              "numerical value. For each line index, memorize its corresponding "
              "<REGISTER_CONTENT>. At the end of the record, I will ask you to retrieve the "
              "corresponding <REGISTER_CONTENT> of a certain line index. Now the record start:\n\n")
LINE = "line {name}: REGISTER_CONTENT is <{v}>\n"
LINES_TAIL = ("\nNow the record is over. Tell me what is the <REGISTER_CONTENT> in line {name}? "
              "I need the number.")

ADJ = ("righteous able bright calm dark eager fancy gentle happy icy jolly kind lazy merry nice "
       "odd proud quick rapid shy tidy urban vast warm young zany brave clever dizzy early fierce "
       "grand hollow jagged keen lively mighty narrow orange plain quiet rough silent tall unique "
       "vivid wild yellow agile bold crisp dusty empty fresh giant hasty ideal juicy loud mellow "
       "noble polite rare sharp tough upper velvet witty").split()
NOUN = ("ethernet apple bridge candle desert engine forest garden harbor island jacket kettle "
        "ladder magnet needle orchid pencil quartz river saddle tunnel umbrella valley window "
        "yacht zebra anchor button cactus dragon falcon glacier hammer igloo jungle kayak lemon "
        "meadow nickel oyster parrot rocket socket tiger violin walnut badge cobalt denim ember "
        "fossil gravel helmet lantern marble nectar pepper ribbon shovel timber vessel").split()
WORDS = ("the a of and to in is it that was for on are as with his they at be this have from "
         "or one had by word but not what all were we when your can said there use an each which "
         "she do how their if will up other about out many then them these so some her would make "
         "like him into time has look two more write go see number no way could people my than "
         "first water been call who oil its now find long down day did get come made may part").split()


KEYS = (1, 50000)                # the verify probes' range (issue 5); 1- to 5-digit keys
LEGACY_KEYS = (10000, 99999)     # the range tokenizer.json's corpus was drawn with (kept fixed)


def passkey(rng, n_tokens, encode, depth=None, key=None, keys=KEYS):
    """Passkey sample with the key line at fractional depth (0 = first, 1 = last filler slot)."""
    key = rng.randint(*keys) if key is None else key
    depth = rng.random() if depth is None else depth
    fixed = len(encode(TASK + KEY_LINE.format(k=key) + QUESTION))
    per = len(encode(FILLER))
    n = max(0, (n_tokens - fixed) // per)
    at = min(n, int(round(depth * n)))
    prompt = TASK + FILLER * at + KEY_LINE.format(k=key) + FILLER * (n - at) + QUESTION
    return {"kind": "passkey", "prompt": prompt, "answer": " %d" % key, "key": key,
            "depth": depth}


def _name(rng, used):
    while True:
        s = "%s-%s" % (rng.choice(ADJ), rng.choice(NOUN))
        if s not in used:
            used.add(s)
            return s


def lines(rng, n_tokens, encode, depth=None, min_lines=1):
    """LongEval line retrieval: as many lines as fit, at least min_lines (a prompt may then run
    past n_tokens); the asked line at fractional depth. min_lines 1 draws what it always drew."""
    depth = rng.random() if depth is None else depth
    used = set()
    body = []
    base = len(encode(LINES_HEAD + LINES_TAIL.format(name="righteous-ethernet")))
    total = base
    while True:
        ln = LINE.format(name=_name(rng, used), v=rng.randint(1, 50000))
        c = len(encode(ln))
        if total + c > n_tokens and len(body) >= max(1, min_lines):
            break
        body.append(ln)
        total += c
        if total + c > n_tokens and len(body) >= min_lines:
            break
    at = min(len(body) - 1, int(depth * len(body)))
    name = body[at].split(":")[0][5:]
    v = int(body[at].split("<")[1].split(">")[0])
    prompt = LINES_HEAD + "".join(body) + LINES_TAIL.format(name=name)
    return {"kind": "lines", "prompt": prompt, "answer": " <%d>" % v, "key": v, "depth": depth}


def copy(rng, n_tokens, encode, n_words=None):
    """Copy / LM filler: a random word sequence, then its repetition as the answer. The prompt
    is padded in front with filler sentences to about n_tokens (language-model text)."""
    n_words = rng.randint(4, 16) if n_words is None else n_words
    ws = " ".join(rng.choice(WORDS) for _ in range(n_words))
    core = " Repeat: %s. Again:" % ws
    per = len(encode(FILLER))
    n = max(0, (n_tokens - len(encode(core)) - 2 * n_words - 2) // per)
    k = rng.randint(0, n)
    return {"kind": "copy", "prompt": (FILLER * k).lstrip() + core, "answer": " %s." % ws,
            "key": None, "depth": None}


FIXTURES = os.path.abspath(os.environ.get("FIXTURES", os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "fixtures")))
STORIES = os.path.join(FIXTURES, "third_party", "text", "tinystories_val_1000_eot.txt")
EOT = "<|endoftext|>"
TRAIN_STORIES = (0, 800)
HELD_OUT = (800, 1000)           # = lab/results.py HELD_OUT: the ppl probe's corpus
MOJIBAKE = (("\u00e2\u20ac\u0153", '"'), ("\u00e2\u20ac\u009d", '"'), ("\u00e2\u20ac\u2122", "'"),
            ("\u00e2\u20ac\u02dc", "'"), ("\u00e2\u20ac\u201d", "-"), ("\u00e2\u20ac\u201c", "-"),
            ("\u00e2\u20ac\u00a6", "..."), ("\u00e2\u20ac\u0160", " "), ("\u00e2\u20ac", '"'),
            ("\u201c", '"'), ("\u201d", '"'), ("\u2019", "'"))   # UTF-8 read as cp1252; its 0x9d lost


def stories(span):
    """Stories [a, b) of the fixture file, as lab/results.py numbers them."""
    if not os.path.isfile(STORIES):
        raise FileNotFoundError("data.py: %s: not found (set FIXTURES)" % STORIES)
    with open(STORIES, encoding="utf-8") as f:
        docs = [d for d in f.read().split(EOT) if d.strip()]
    if len(docs) < span[1]:
        raise ValueError("data.py: %s: %d stories, need %d" % (STORIES, len(docs), span[1]))
    return docs[span[0]:span[1]]


def ascii_fold(s):
    for a, b in MOJIBAKE:
        s = s.replace(a, b)
    return s.encode("ascii", "ignore").decode("ascii")


def train_text():
    """The training stories as one ASCII string, joined like the held-out corpus."""
    return ascii_fold(EOT.join(stories(TRAIN_STORIES)))


def write_held_out(path):
    """The held-out ppl corpus, byte for byte as lab/results.py held_out_corpus() writes it."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(EOT.join(stories(HELD_OUT)))
    os.replace(tmp, path)


class Text:
    """The training stories encoded once, each trimmed and after a BOS (the ppl probe's stream);
    windows of it are the `text` samples."""

    def __init__(self, encode, bos):
        self.ids = []
        for s in stories(TRAIN_STORIES):
            self.ids += [bos] + encode(ascii_fold(s).strip())

    def window(self, rng, n_tokens):
        at = rng.randint(0, len(self.ids) - n_tokens)
        return {"kind": "text", "ids": self.ids[at:at + n_tokens], "prompt": None, "answer": None,
                "key": None, "depth": None}


def sample(rng, n_tokens, encode, mix=(0.45, 0.35, 0.20), keys=KEYS, text=None, lines_min=1):
    """mix: passkey, lines, copy[, text] fractions (text needs a Text source); lines_min: the
    fewest lines of a lines sample."""
    r = rng.random()
    if r < mix[0]:
        return passkey(rng, n_tokens, encode, keys=keys)
    if r < mix[0] + mix[1]:
        return lines(rng, n_tokens, encode, min_lines=lines_min)
    if len(mix) > 3 and r >= mix[0] + mix[1] + mix[2]:
        return text.window(rng, n_tokens)
    return copy(rng, n_tokens, encode)


def eval_set(kind, n_tokens, n, seed, encode):
    """n samples with depths uniformly spread over [0, 1] (i / (n - 1))."""
    rng = random.Random("%s-%d-%d" % (kind, n_tokens, seed))
    f = passkey if kind == "passkey" else lines
    return [f(rng, n_tokens, encode, depth=i / max(1, n - 1)) for i in range(n)]


def corpus(seed=0, n=400, natural=False):
    """Text the tokenizer's merges are learned from (all three kinds, plain text); natural: the
    training stories too (the v2 tokenizer)."""
    rng = random.Random(seed)
    enc = lambda s: s.split(" ")      # word count is a good enough length proxy here
    out = []
    for i in range(n):
        s = sample(rng, 200, enc, keys=LEGACY_KEYS)   # keeps the learned merges reproducible
        out.append(s["prompt"] + s["answer"])
    if natural:
        out.extend(ascii_fold(s) for s in stories(TRAIN_STORIES))
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="passkey", choices=["passkey", "lines", "copy"])
    ap.add_argument("--len", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=1)
    ap.add_argument("--tokenizer", help="tokenizer.json (else lengths are counted in words)")
    ap.add_argument("--held-out", metavar="OUT", help="write the held-out ppl corpus and exit")
    a = ap.parse_args()
    if a.held_out:
        write_held_out(a.held_out)
        raise SystemExit(0)
    if a.tokenizer:
        from ctxpatch_ref import bpe
        encode = bpe.Tokenizer(a.tokenizer).encode
    else:
        encode = lambda s: s.split(" ")
    rng = random.Random(a.seed)
    f = {"passkey": passkey, "lines": lines, "copy": copy}[a.kind]
    for _ in range(a.n):
        print(json.dumps(f(rng, a.len, encode)))
