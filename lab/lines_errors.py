"""What a probe model gets wrong on line retrieval (issue 18): for each lines cell of an
evaluate.py output, the lines each prompt holds and each wrong answer's kind: another line's value
(the lookup picked the wrong line; its offset from the asked one) or a value in no line (digits
blended or invented). The prompts are rebuilt from data.eval_set as evaluate.py drew them.

  scripts/py lab/lines_errors.py --eval EVAL.json --tokenizer TOKENIZER.json
"""
import argparse
import collections
import json
import re

from ctxpatch_ref import bpe, data

LINE_VALUE = re.compile(r"^line [^:\n]+: REGISTER_CONTENT is <(\d+)>$", re.M)


def classify(sample, answer_text):
    """(kind, offset, lines in the prompt): kind 'ok', 'other' (another line's value, offset lines
    from the asked one) or 'none' (offset None)."""
    values = [int(v) for v in LINE_VALUE.findall(sample["prompt"])]
    got = re.findall(r"\d+", answer_text)
    got = int(got[-1]) if got else None     # evaluate.py's rule: the last integer is the answer
    if got == sample["key"]:
        return "ok", None, len(values)
    if got in values:
        return "other", values.index(got) - values.index(sample["key"]), len(values)
    return "none", None, len(values)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--eval", required=True, help="evaluate.py --out file (or a model's eval.json)")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--rule", default="none", help="which cells: none or patch")
    a = ap.parse_args()
    tok = bpe.Tokenizer(a.tokenizer)
    ev = json.load(open(a.eval))
    print("| length | lines a prompt | correct | another line's value (offsets) | a value in no line |")
    print("|---|---|---|---|---|")
    for c in ev["cells"]:
        if c["task"] != "lines" or c["rule"] != a.rule:
            continue
        samples = data.eval_set("lines", c["length"] - 8, c["n_set"], 0, tok.encode)
        kinds, offsets, counts = collections.Counter(), [], set()
        for ans in c["answers"]:
            kind, offset, n_lines = classify(samples[ans[0]], ans[3])
            kinds[kind] += 1
            counts.add(n_lines)
            if offset is not None:
                offsets.append(offset)
        n = len(c["answers"])
        span = "%d" % min(counts) if min(counts) == max(counts) else "%d-%d" % (min(counts), max(counts))
        print("| %d | %s | %d/%d | %d (%s) | %d |" % (c["length"], span, kinds["ok"], n, kinds["other"],
              ", ".join("%+d" % o for o in sorted(offsets)) or "-", kinds["none"]))


if __name__ == "__main__":
    main()
