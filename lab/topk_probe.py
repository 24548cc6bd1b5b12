#!/usr/bin/python3
"""LM-Infinite top-k on the RoPE probe: an independent numpy reference of the Lambda mask,
distance ceiling and top-k middle tokens (written from ../shared/spec/attention-rules.md, not from
the C engine or python/ctxpatch_ref/torchref), instrumented to show what the top-k rows select.

For passkey prompts with the key outside the local window it reports, per layer and head of the
top-k rows: the rank of the best key-line token among the Lambda-hidden keys (by the top-k
logit, i.e. at the top-k distance), whether a key-line token is among the k picks, and the
attention probability the key-line tokens get. It also runs the unpatched model at the training
length (key inside the window) to show which heads retrieve the key there, and, with --bin,
compares its logits with `ctxpatch forward --rule` on the same ids (max |difference|).

  scripts/py lab/topk_probe.py --bin build/ctxpatch [--length 512] [--k 5] [--n 6]

numpy only (float64). Prints a markdown report on stdout; --json FILE also writes the numbers.
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

import numpy as np

from ctxpatch_ref import bpe  # the probe models' own tokenizer, stdlib only
from ctxpatch_ref import data  # the passkey prompt format the probes were trained on

HERE = os.path.dirname(os.path.abspath(__file__))
PROBES = os.path.join(HERE, "..", "examples", "probe-models")


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        raw = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32"
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(raw[a:b], dtype="<f4").reshape(t["shape"]).astype(np.float64)
    return out


class Llama:
    """HF LlamaForCausalLM forward (rotate-half RoPE, RMSNorm, SwiGLU) with the spec's rule."""

    def __init__(self, folder):
        cfg = json.load(open(os.path.join(folder, "config.json")))
        self.w = load_safetensors(os.path.join(folder, "model.safetensors"))
        self.L = cfg["num_hidden_layers"]
        self.H = cfg["num_attention_heads"]
        self.Hkv = cfg.get("num_key_value_heads", self.H)
        self.d = cfg["hidden_size"]
        self.dh = self.d // self.H
        self.eps = cfg["rms_norm_eps"]
        self.theta = cfg["rope_theta"]
        self.train_len = cfg["max_position_embeddings"]

    def rot(self, x, pos):
        """x [n, dh] rotated by angle pos * theta^(-2a/dh) (pos: [n] or a scalar)."""
        half = self.dh // 2
        inv = self.theta ** (-np.arange(half) * 2.0 / self.dh)
        ang = np.multiply.outer(np.broadcast_to(np.asarray(pos, dtype=np.float64), (x.shape[0],)), inv)
        c, s = np.cos(ang), np.sin(ang)
        x1, x2 = x[:, :half], x[:, half:]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=1)

    def rms(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def attention(self, q, k, v, rule, layer, n_prompt, probe):
        """q, k, v [T, dh] of one head (unrotated); returns out [T, dh]. rule: dict of the spec."""
        T = q.shape[0]
        c = 1.0 / np.sqrt(self.dh)
        pos = np.arange(T)
        qr, kr = self.rot(q, pos), self.rot(k, pos)
        S = c * qr @ kr.T  # the ordinary RoPE logits, [T, T]
        i_, j_ = np.meshgrid(pos, pos, indexing="ij")
        d = i_ - j_
        lam = rule.get("lambda_mask")
        D = rule.get("distance_ceiling", lam["n_local"] if lam else None)
        if D is not None:
            # Pairs beyond the ceiling score as if the query sat D positions after the key.
            far = c * self.rot(q, D) @ k.T
            S = np.where(d > D, far, S)
        vis = d >= 0
        hidden = np.zeros_like(vis)
        if lam:
            ng, nl = lam["n_global"], lam["n_local"]
            hidden = vis & (j_ >= ng) & (d >= nl)
            vis = vis & ((j_ < ng) | (d < nl))
        tk = rule.get("top_k")
        picks = {}
        if tk and lam and layer >= tk.get("from_layer", 0):
            dist = tk.get("distance", D // 2)
            if dist == "true":  # diagnostic only (not a rule of the spec): each key at its own distance
                St = c * qr @ kr.T
            else:
                St = c * self.rot(q, dist) @ k.T  # every hidden key at the top-k distance
            rows = range(T) if tk.get("rows", "decode") == "all" else range(n_prompt - 1, T)
            for i in rows:
                cand = np.nonzero(hidden[i])[0]
                if cand.size == 0:
                    continue
                order = cand[np.lexsort((cand, -St[i, cand]))][: tk["k"]]  # ties: smaller j
                S[i, order] = St[i, order]
                vis[i, order] = True
                picks[i] = (order, St[i, cand], cand)
        S = np.where(vis, S, -np.inf)
        P = np.exp(S - S.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
        if probe is not None:
            probe(layer, P, picks)
        return P @ v

    def forward(self, ids, rule, n_prompt=None, probe=None):
        """Logits [T, vocab]; probe(layer, head, P [T, T], picks) sees every head's softmax."""
        n_prompt = len(ids) if n_prompt is None else n_prompt
        w = self.w
        x = w["model.embed_tokens.weight"][ids]
        for l in range(self.L):
            p = "model.layers.%d." % l
            h = self.rms(x, w[p + "input_layernorm.weight"])
            q = h @ w[p + "self_attn.q_proj.weight"].T
            k = h @ w[p + "self_attn.k_proj.weight"].T
            v = h @ w[p + "self_attn.v_proj.weight"].T
            out = np.zeros_like(q)
            g = self.H // self.Hkv
            for hd in range(self.H):
                sq = slice(hd * self.dh, (hd + 1) * self.dh)
                sk = slice((hd // g) * self.dh, (hd // g + 1) * self.dh)
                hp = (lambda layer, P, picks, hd=hd: probe(layer, hd, P, picks)) if probe else None
                out[:, sq] = self.attention(q[:, sq], k[:, sk], v[:, sk], rule, l, n_prompt, hp)
            x = x + out @ w[p + "self_attn.o_proj.weight"].T
            h = self.rms(x, w[p + "post_attention_layernorm.weight"])
            gt = h @ w[p + "mlp.gate_proj.weight"].T
            x = x + ((gt / (1 + np.exp(-gt))) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
        return self.rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].T

    def generate(self, ids, rule, n_new, eos=None):
        out = list(ids)
        for _ in range(n_new):
            t = int(np.argmax(self.forward(out, rule, n_prompt=len(ids))[-1]))
            out.append(t)
            if t == eos:
                break
        return out[len(ids):]


def key_positions(tok, sample):
    """Token positions of the key line (both copies of the key and the words around them)."""
    prompt, key = sample["prompt"], sample["key"]
    line = data.KEY_LINE.format(k=key)
    at = prompt.index(line)
    a = len(tok.encode(prompt[:at]))
    b = a + len(tok.encode(line))
    full = tok.encode(prompt)
    assert full[:a] == tok.encode(prompt[:at]), "tokenization is not prefix-stable here"
    digits = [p for p in range(a, b) if tok.decode([full[p]]).strip().isdigit()]
    return list(range(a, b)), digits


def run_c(bin_path, folder, ids, rule, n_new):
    """ctxpatch forward: the prompt's logits [T, vocab] and n_new greedy tokens (KV cache)."""
    with tempfile.TemporaryDirectory() as td:
        rp, op, ip = (os.path.join(td, n) for n in ("rule.json", "logits.bin", "ids.txt"))
        json.dump(rule, open(rp, "w"))
        open(ip, "w").write(",".join(map(str, ids)))
        r = subprocess.run([bin_path, "forward", folder, "--ids", "@" + ip, "--rule", rp, "--out", op,
                            "--threads", "1", "--generate", str(n_new), "--stop-at-eos"],
                           check=True, capture_output=True, text=True)
        gen = [int(t) for t in r.stdout.strip().split(",") if t.strip()]
        return np.fromfile(op, dtype="<f4").reshape(len(ids), -1).astype(np.float64), gen


def head_table(model, ids, rule, n_prompt, line_pos, digit_pos):
    """Per layer and head, for the last prompt row: the key-line tokens' probability, and under
    top-k the best key-line token's rank among the hidden keys and whether one is picked."""
    rows = []
    line = np.array(line_pos)

    def probe(layer, hd, P, picks):
        i = n_prompt - 1
        r = {"layer": layer, "head": hd, "p_line": float(P[i, line].sum()),
             "p_digits": float(P[i, digit_pos].sum())}
        if i in picks:
            order, st, cand = picks[i]
            rank = np.argsort(np.argsort(-st, kind="stable"), kind="stable")
            in_line = np.isin(cand, line)
            r["best_rank"] = int(rank[in_line].min()) + 1 if in_line.any() else None
            r["n_hidden"] = int(cand.size)
            r["picked_line"] = int(np.isin(order, line).sum())
            r["pick_dist"] = [int(i - j) for j in order]
        rows.append(r)

    logits = model.forward(ids, rule, n_prompt=n_prompt, probe=probe)
    return logits, rows


def wilson(k, n, z=1.959963984540054):
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, mid - half), min(1.0, mid + half))


def leading_digits(answer, key):
    """How many leading digits of the key the answer's first word reproduces."""
    got, want = (answer.strip().split(" ") or [""])[0], str(key)
    n = 0
    while n < min(len(got), len(want)) and got[n] == want[n]:
        n += 1
    return n


def agreement(model, tok, bin_path, length, n, rules):
    """C engine against this reference on n passkey prompts with the key hidden."""
    print("## 1. ctxpatch forward against this reference (%d passkey prompts, %d tokens, key hidden)\n"
          % (n, length))
    print("| rule | max abs logit difference, all rows | last row (top-k) | same 7 greedy tokens (KV cache) |")
    print("|---|---|---|---|")
    worst, last, same = {k: 0.0 for k in rules}, {k: 0.0 for k in rules}, {k: 0 for k in rules}
    for s_i in range(n):
        smp = data.passkey(random.Random(s_i), length - 8, tok.encode, depth=0.05 + 0.3 * s_i / max(1, n - 1))
        ids = tok.encode(smp["prompt"])
        for name, rule in rules.items():
            c, cgen = run_c(bin_path, model.folder, ids, rule, 7)
            diff = np.abs(model.forward(ids, rule) - c)
            worst[name] = max(worst[name], float(diff.max()))
            last[name] = max(last[name], float(diff[-1].max()))
            same[name] += cgen == model.generate(ids, rule, 7, eos=1)
    for name, rule in rules.items():
        print("| `%s` | %.2e | %.2e | %d / %d |" % (json.dumps(rule), worst[name], last[name], same[name], n))
    print()
    return {"n": n, "max_abs": worst, "max_abs_last_row": last, "same_tokens": same}


def heads(model, tok, length, rules):
    """Per layer and head of the last prompt row: where the key line's probability goes."""
    smp = data.passkey(random.Random(0), length - 8, tok.encode, depth=0.05)
    ids = tok.encode(smp["prompt"])
    line, digits = key_positions(tok, smp)
    short = data.passkey(random.Random(0), model.train_len - 8, tok.encode, depth=0.05, key=smp["key"])
    sids = tok.encode(short["prompt"])
    sl, sd = key_positions(tok, short)
    print("## 2. Where the top-k picks go: key %d, %d tokens, key line at tokens %d-%d "
          "(distance %d-%d from the last row)\n" % (smp["key"], len(ids), line[0], line[-1],
                                                   len(ids) - 1 - line[-1], len(ids) - 1 - line[0]))
    print("Answers (greedy): original at %d tokens (key at distance %d) %r; " % (
        len(sids), len(sids) - 1 - sd[0], tok.decode(model.generate(sids, {}, 7, eos=1)))
          + "; ".join("%s %r" % (k, tok.decode(model.generate(ids, r, 7, eos=1))) for k, r in rules.items()))
    tabs = {"original, %d tokens" % len(sids): head_table(model, sids, {}, len(sids), sl, sd)[1]}
    for k, r in rules.items():
        tabs[k] = head_table(model, ids, r, len(ids), line, digits)[1]
    print("\np(line) / p(digits): the last prompt row's attention probability on the key line / on its"
          " digits. rank: the best key-line token's rank among the %d Lambda-hidden keys by the top-k"
          " logit; picks: key-line tokens among the k picked.\n" % (
              next(r["n_hidden"] for t in tabs.values() for r in t if "n_hidden" in r)))
    print("| layer.head | " + " | ".join(tabs) + " |")
    print("|---|" + "---|" * len(tabs))
    for x in range(len(next(iter(tabs.values())))):
        cells = []
        for t in tabs.values():
            r = t[x]
            c = "%.3f / %.3f" % (r["p_line"], r["p_digits"])
            if "n_hidden" in r:
                c += ", rank %s, picks %d" % (r["best_rank"], r["picked_line"])
            cells.append(c)
        r0 = next(iter(tabs.values()))[x]
        print("| %d.%d | %s |" % (r0["layer"], r0["head"], " | ".join(cells)))
    print()
    return tabs


def ablation(model, tok, n, n_local):
    """Inside the training length: top-k at the rule's one distance against each key at its true
    distance (a diagnostic variant, not a rule of the spec)."""
    lam = {"n_global": 10, "n_local": n_local}
    rules = {"original (no rule)": {}, "Lambda 10 / %d only" % n_local: {"lambda_mask": lam}}
    for k in (5, 20):
        rules["top-k %d at distance %d (D/2, the rule)" % (k, n_local // 2)] = {"lambda_mask": lam, "top_k": {"k": k}}
        rules["top-k %d at each key's true distance (diagnostic)" % k] = {
            "lambda_mask": lam, "top_k": {"k": k, "distance": "true"}}
    ok = {k: 0 for k in rules}
    dig = {k: 0 for k in rules}
    total_digits = 0
    for s_i in range(n):
        smp = data.passkey(random.Random(1000 + s_i), model.train_len - 8, tok.encode,
                           depth=0.5 * s_i / max(1, n - 1))
        ids = tok.encode(smp["prompt"])
        total_digits += len(str(smp["key"]))
        for name, rule in rules.items():
            ans = tok.decode(model.generate(ids, rule, 7, eos=1))
            ok[name] += ans.strip().split(" ")[0].rstrip(".") == str(smp["key"])
            dig[name] += leading_digits(ans, smp["key"])
    print("## 3. Inside the training length: %d tokens, Lambda 10 / %d, key hidden (depths 0-0.5), %d prompts\n"
          % (model.train_len, n_local, n))
    print("| side | passkey accuracy [95%] | leading key digits right |")
    print("|---|---|---|")
    for name in rules:
        lo, hi = wilson(ok[name], n)
        print("| %s | %.2f [%.2f, %.2f] | %d / %d |" % (name, ok[name] / n, lo, hi, dig[name], total_digits))
    print()
    return {"n": n, "n_local": n_local, "correct": ok, "digits": dig, "total_digits": total_digits}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(PROBES, "rope-probe"))
    ap.add_argument("--bin", help="build/ctxpatch: compare its forward logits with this reference")
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--n", type=int, default=6, help="prompts of the C comparison")
    ap.add_argument("--n-ablation", type=int, default=24, help="prompts of the ablation")
    ap.add_argument("--only-agreement", action="store_true", help="section 1 only (the ctest)")
    ap.add_argument("--max-diff", type=float, default=1e-3,
                    help="exit 1 when a logit differs by more, or a greedy answer differs")
    ap.add_argument("--json", help="write the numbers there")
    a = ap.parse_args()
    tok = bpe.Tokenizer(os.path.join(PROBES, "tokenizer.json"))
    model = Llama(a.model)
    model.folder = a.model
    n_local = model.train_len
    lam = {"n_global": 10, "n_local": n_local}
    rules = {
        "Lambda": {"lambda_mask": lam},
        "top-k 5 (D/2)": {"lambda_mask": lam, "top_k": {"k": 5}},
        "top-k 5 at %d" % (n_local - 1): {"lambda_mask": lam, "top_k": {"k": 5, "distance": n_local - 1}},
    }
    print("# LM-Infinite top-k on %s (training length %d)\n" % (os.path.basename(a.model.rstrip("/")), n_local))
    out = {}
    if a.bin:
        out["agreement"] = agreement(model, tok, a.bin, a.length, a.n, dict(rules, **{
            "top-k 20 rows all": {"lambda_mask": lam, "top_k": {"k": 20, "rows": "all"}},
            "top-k 5 from layer 1": {"lambda_mask": lam, "top_k": {"k": 5, "from_layer": 1}}}))
    if not a.only_agreement:
        out["heads"] = heads(model, tok, a.length, rules)
        out["ablation"] = ablation(model, tok, a.n_ablation, n_local // 4)
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)
    if a.bin:
        ag = out["agreement"]
        bad = [k for k in ag["max_abs"] if ag["max_abs"][k] > a.max_diff or ag["same_tokens"][k] != ag["n"]]
        if bad:
            print("FAIL: ctxpatch forward differs from the reference under: " + ", ".join(bad), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
