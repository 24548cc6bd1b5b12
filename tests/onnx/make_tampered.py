#!/usr/bin/python3
"""Tampered copies of a decoder graph for tests/test_onnx_recover_account.sh: each inserts one or a
few nodes (named `tamper/...`) that change what the graph computes, or, for the `keep_*` kinds, a
node that changes nothing (an Identity). Recovery must refuse every changed graph naming the
inserted node (issue 33 item 1: a node the pattern does not explain is a refusal) and read the
others as before.

  make_tampered.py SRC.onnx OUTDIR

OUTDIR/KIND.onnx for each kind that applies to SRC's layout, and OUTDIR/cases.tsv:
KIND <tab> refuse|accept <tab> the inserted node's name and its closing quote, or its prefix
`tamper/KIND/` for the kinds that insert one per layer (the refusal names the one nearest the
logits). Kinds:
  attn_zero       Mul(attention output, 0) in the first layer (plain ops: the probabilities'
                  MatMul; contrib: the attention node's output)
  attn_zero_all   the same in every layer
  resid_add       Add(residual stream, [-1 .. 1] over d_model) after the first layer's attention, rewired into the
                  MLP's residual Add only (the next norm reads the untouched stream)
  resid_add_all   the same Add rewired into every consumer of the stream after layer 0's attention
  logits_mul      Mul(logits, 2) before the graph's first output
  scores_mul      Mul(scores, 2) right before the first Softmax (plain ops)
  probs_mul       Mul(probabilities, 0.5) right after the first Softmax (plain ops)
  mlp_zero        Mul(MLP activation, 0) before the first down projection (plain ops)
  cos_half        Mul(cos, 0.5) after the first Cos (a plain-op Llama's RoPE)
  keep_identity   Identity on the attention output of the first layer (changes nothing: accepted)
"""
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper


def consumers(g, v):
    return [n for n in g.node if v in n.input]


def producer(g, v):
    for n in g.node:
        if v in n.output:
            return n
    return None


def const(g, name, value):
    """A Constant node (not an initializer: a graph that claims to be ctxpatch's export keeps only
    ctxpatch's initializer names, and a Constant node is how an edit adds a value)."""
    g.node.insert(0, helper.make_node("Constant", [], [name], name=name,
                                      value=numpy_helper.from_array(np.array(value, np.float32), name)))
    return name


def d_model(g):
    """The columns of the token embedding (the first 2-D float initializer a Gather or
    EmbedLayerNormalization looks up)."""
    inits = {t.name: t for t in g.initializer}
    for n in g.node:
        for x in n.input[:3]:
            t = inits.get(x)
            if t is not None and n.op_type in ("Gather", "EmbedLayerNormalization") and len(t.dims) == 2:
                return t.dims[1]
    sys.exit("make_tampered: no token embedding")


def insert(m, v, op, name, value=None, only=None):
    """op(v, value) as node `name`, its output replacing v in v's consumers (those in `only` when
    given); a graph output v is renamed so that the new node makes it."""
    g = m.graph
    outs = [o.name for o in g.output]
    ins = [v] + ([const(g, name + "/c", value)] if value is not None else [])
    if v in outs:  # the producer makes v + "/pre"; the new node makes v
        p = producer(g, v)
        pre = v + "/pre"
        p.output[list(p.output).index(v)] = pre
        for c in consumers(g, v):
            c.input[:] = [pre if x == v else x for x in c.input]
        node = helper.make_node(op, [pre] + ins[1:], [v], name=name)
        g.node.insert(list(g.node).index(p) + 1, node)
        return
    new = v + "/tampered"
    targets = only if only is not None else consumers(g, v)
    for c in targets:
        c.input[:] = [new if x == v else x for x in c.input]
    p = producer(g, v)
    node = helper.make_node(op, ins, [new], name=name)
    g.node.insert(list(g.node).index(p) + 1 if p is not None else 0, node)


def through(g, v, ops=("Cast", "Identity")):
    """The value v passes into (single consumers of kind ops) and its first non-such consumer."""
    for _ in range(8):
        cs = consumers(g, v)
        if len(cs) == 1 and cs[0].op_type in ops:
            v = cs[0].output[0]
            continue
        return v, cs
    return v, []


def attention_outputs(g):
    """The attention output of each layer, in file order."""
    contrib = [n.output[0] for n in g.node if n.domain == "com.microsoft" and
               n.op_type in ("Attention", "MultiHeadAttention", "GroupQueryAttention")]
    if contrib:
        return contrib
    out = []
    for n in g.node:
        if n.op_type == "Softmax":
            v, cs = through(g, n.output[0])
            mm = [c for c in cs if c.op_type == "MatMul" and c.input[0] == v]
            if mm:
                out.append(mm[0].output[0])
    return out


def stream_after_attention(g):
    """The residual stream value after layer 0's attention and the node adding the MLP to it."""
    for n in g.node:  # contrib: the first Skip*LayerNormalization's running sum
        if n.domain == "com.microsoft" and n.op_type.startswith("Skip") and len(n.output) > 3 and n.output[3]:
            v = n.output[3]
            adds = [c for c in consumers(g, v) if c.op_type.startswith("Skip")]
            return v, adds
    att = attention_outputs(g)[0]
    inits = {t.name for t in g.initializer}
    seen, frontier = set(), [att]
    while frontier:  # forward from the attention output to the first Add of two computed values
        v = frontier.pop(0)
        for c in consumers(g, v):
            if tuple(c.output) in seen:
                continue
            seen.add(tuple(c.output))
            ps = [producer(g, x) for x in c.input]
            if c.op_type == "Add" and all(p is not None and p.op_type != "Constant" for p in ps) and \
                    not any(x in inits for x in c.input):
                x2 = c.output[0]
                return x2, [cc for cc in consumers(g, x2) if cc.op_type == "Add"]
            frontier += list(c.output)
    sys.exit("make_tampered: no residual Add after the first attention")


def kinds(m):
    g = m.graph
    plain = not any(n.domain == "com.microsoft" and "Attention" in n.op_type for n in g.node)
    k = ["attn_zero", "attn_zero_all", "resid_add", "resid_add_all", "logits_mul", "keep_identity"]
    if plain:
        k += ["scores_mul", "probs_mul", "mlp_zero"]
    if any(n.op_type == "Cos" for n in g.node):
        k.append("cos_half")
    return k


def apply(m, kind):
    g = m.graph
    if kind in ("attn_zero", "attn_zero_all"):
        atts = attention_outputs(g)
        for i, v in enumerate(atts if kind.endswith("_all") else atts[:1]):
            insert(m, v, "Mul", f"tamper/{kind}/{i}", 0.0)
        return f"tamper/{kind}/" if kind.endswith("_all") else f"tamper/{kind}/0"
    if kind == "keep_identity":
        insert(m, attention_outputs(g)[0], "Identity", "tamper/keep_identity")
        return "tamper/keep_identity"
    if kind == "resid_add":
        v, adds = stream_after_attention(g)
        insert(m, v, "Add", "tamper/resid_add", np.linspace(-1, 1, d_model(g)), only=adds[-1:])
        return "tamper/resid_add"
    if kind == "resid_add_all":
        v, _ = stream_after_attention(g)
        insert(m, v, "Add", "tamper/resid_add_all", np.linspace(-1, 1, d_model(g)))
        return "tamper/resid_add_all"
    if kind == "logits_mul":
        insert(m, g.output[0].name, "Mul", "tamper/logits_mul", 2.0)
        return "tamper/logits_mul"
    sm = next(n for n in g.node if n.op_type == "Softmax")
    if kind == "scores_mul":
        v = sm.input[0]
        insert(m, v, "Mul", "tamper/scores_mul", 2.0, only=[sm])
        return "tamper/scores_mul"
    if kind == "probs_mul":
        insert(m, sm.output[0], "Mul", "tamper/probs_mul", 0.5)
        return "tamper/probs_mul"
    if kind == "mlp_zero":  # the input of the weight MatMul/Gemm that follows the first activation
        acts = [n for n in g.node if n.op_type in ("Tanh", "Erf", "Sigmoid", "Relu")]
        v = acts[0].output[0]
        inits = {t.name for t in g.initializer}
        frontier = [v]
        while frontier:
            x = frontier.pop(0)
            for c in consumers(g, x):
                if c.op_type in ("MatMul", "Gemm") and c.input[1] in inits | {
                        n.output[0] for n in g.node if n.op_type == "Identity" and n.input[0] in inits}:
                    insert(m, x, "Mul", "tamper/mlp_zero", 0.0, only=[c])
                    return "tamper/mlp_zero"
                frontier += list(c.output)
        sys.exit("make_tampered: no down projection")
    if kind == "cos_half":
        cos = next(n for n in g.node if n.op_type == "Cos")
        insert(m, cos.output[0], "Mul", "tamper/cos_half", 0.5)
        return "tamper/cos_half"
    raise SystemExit("unknown kind " + kind)


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    rows = []
    for kind in kinds(onnx.load(src)):
        m = onnx.load(src)
        first = apply(m, kind)
        onnx.save(m, os.path.join(out, kind + ".onnx"))
        quoted = first if first.endswith("/") else first + "'"  # as the refusal quotes it
        rows.append(f"{kind}\t{'accept' if kind.startswith('keep_') else 'refuse'}\t{quoted}\n")
    with open(os.path.join(out, "cases.tsv"), "w") as f:
        f.writelines(rows)
    print(f"make_tampered: {len(rows)} graphs from {src} in {out}")


if __name__ == "__main__":
    main()
