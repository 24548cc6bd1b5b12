#!/usr/bin/python3
"""Toy ONNX graphs in the layout `ctxpatch convert --to onnx` writes, with a numpy evaluation of
the same toy model, so the runtime drivers (ort_run.mjs) are tested before and apart from the
exporter.

  make_toy_graph.py OUT --kind decoder|t5          write OUT/config.json, OUT/onnx/*.onnx, OUT/toy.npz
  make_toy_graph.py OUT --reference --ids 1,2,3 [--decoder-ids 0,5] [--out F] [--generate N]
      numpy logits of every position (of the decoder for t5), float32 LE [positions x vocab], and
      greedy tokens printed comma-separated like `ctxpatch forward --generate`

Decoder-only (onnx/model.onnx): inputs input_ids [b, s], attention_mask [b, total],
position_ids [b, s] (int64), past_key_values.{i}.key/value [b, Hkv, past, dh] (float32);
outputs logits [b, s, V], present.{i}.key/value [b, Hkv, total, dh]. Each layer: GQA attention
(H query heads over Hkv key/value heads) with an ALiBi-like bias -m_h * min(d, CEIL) at distance
d = position_ids[i] - j (so positions must travel through the cache right), causal and padding
mask, then x += tanh(x W1).
T5 (Optimum's merged layout): onnx/encoder_model.onnx (input_ids, attention_mask ->
last_hidden_state [b, S, d]) and onnx/decoder_model_merged.onnx (input_ids, encoder_attention_mask,
encoder_hidden_states, past_key_values.{i}.decoder/encoder.key/value, use_cache_branch bool[1];
outputs logits, present.{i}.decoder/encoder.key/value); the cross-attention keys come from an If
on use_cache_branch: computed from encoder_hidden_states (false) or passed through from the
past (true), as in Optimum's merged decoders. Decoder positions are past length + arange(s).
Opset 17, IR 8 (what Debian's python3-onnx 1.12 knows).
"""
import argparse
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

V, D, H, HKV, DH, CEIL = 24, 16, 4, 2, 4, 6
LAYERS = {"decoder": 2, "t5": 2}
NEG = -1e9


def weights(kind):
    rng = np.random.default_rng(11 if kind == "decoder" else 4321)
    w = {"emb": rng.normal(0, 1, (V, D)), "out": rng.normal(0, 0.2, (D, V)),
         "slopes": np.array([0.5, 0.25, 0.125, 0.0625])[:H]}

    def attn(prefix, hkv):
        w[prefix + "q"] = rng.normal(0, 0.6, (D, H * DH))
        w[prefix + "k"] = rng.normal(0, 0.6, (D, hkv * DH))
        w[prefix + "v"] = rng.normal(0, 0.6, (D, hkv * DH))
        w[prefix + "o"] = rng.normal(0, 0.25, (H * DH, D))

    for i in range(LAYERS[kind]):
        attn(f"l{i}.self.", HKV if kind == "decoder" else H)
        w[f"l{i}.mlp"] = rng.normal(0, 0.25, (D, D))
        if kind == "t5":
            attn(f"l{i}.cross.", H)
    if kind == "t5":
        attn("enc.self.", H)
    # the next token follows the current one through a permutation, blurred by attention, so
    # greedy decoding walks through many tokens instead of settling on one
    w["out"] += 1.0 * w["emb"][(np.arange(V) * 5 + 1) % V].T
    return {k: v.astype(np.float32) for k, v in w.items()}


# ---------------------------------------------------------------- numpy reference

def np_attention(w, prefix, x, kv_src, bias, visible, hkv):
    """x [s, D], kv_src [T, D], bias/visible [H, s, T] -> [s, D]"""
    s, t = x.shape[0], kv_src.shape[0]
    q = (x @ w[prefix + "q"]).reshape(s, H, DH).transpose(1, 0, 2)
    k = (kv_src @ w[prefix + "k"]).reshape(t, hkv, DH).transpose(1, 0, 2)
    v = (kv_src @ w[prefix + "v"]).reshape(t, hkv, DH).transpose(1, 0, 2)
    k, v = np.repeat(k, H // hkv, axis=0), np.repeat(v, H // hkv, axis=0)
    sc = q @ k.transpose(0, 2, 1) / np.sqrt(DH) + bias
    sc = np.where(visible, sc, -np.inf)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ v).transpose(1, 0, 2).reshape(s, H * DH) @ w[prefix + "o"]


def np_bias(w, dist):
    """dist [s, T] (signed) -> [H, s, T]"""
    return -w["slopes"][:, None, None] * np.minimum(np.abs(dist), CEIL)[None]


def np_logits(kind, w, ids, dec_ids):
    w = {k: v.astype(np.float64) for k, v in w.items()}
    if kind == "decoder":
        x = w["emb"][ids]
        n = len(ids)
        dist = np.arange(n)[:, None] - np.arange(n)[None, :]
        for i in range(LAYERS[kind]):
            x = x + np_attention(w, f"l{i}.self.", x, x, np_bias(w, dist), (dist >= 0)[None], HKV)
            x = x + np.tanh(x @ w[f"l{i}.mlp"])
        return x @ w["out"]
    e = w["emb"][ids]
    n = len(ids)
    dist = np.arange(n)[None, :] - np.arange(n)[:, None]
    e = e + np_attention(w, "enc.self.", e, e, np_bias(w, dist), np.ones((1, n, n), bool), H)
    x = w["emb"][dec_ids]
    m = len(dec_ids)
    dist = np.arange(m)[:, None] - np.arange(m)[None, :]
    for i in range(LAYERS[kind]):
        x = x + np_attention(w, f"l{i}.self.", x, x, np_bias(w, dist), (dist >= 0)[None], H)
        x = x + np_attention(w, f"l{i}.cross.", x, e, 0.0, np.ones((1, m, n), bool), H)
        x = x + np.tanh(x @ w[f"l{i}.mlp"])
    return x @ w["out"]


# ---------------------------------------------------------------- graph building

class G:
    def __init__(self, w):
        self.nodes, self.inits, self.n, self.w = [], [], 0, w

    def tmp(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def op(self, op, ins, base=None, out=None, **attrs):
        out = out or self.tmp(base or op.lower())
        self.nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def const(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def weight(self, key):
        if not any(t.name == key for t in self.inits):
            self.const(key, self.w[key])
        return key


def g_heads(g, x, key, heads):
    """x [b, s, D] -> [b, heads, s, DH]"""
    y = g.op("MatMul", [x, g.weight(key)])
    y = g.op("Reshape", [y, g.const(g.tmp("shape"), np.array([0, 0, heads, DH], np.int64))])
    return g.op("Transpose", [y], perm=[0, 2, 1, 3])


def g_repeat_kv(g, k, hkv):
    """k [b, hkv, T, DH] -> [b, H, T, DH] (each kv head serves H/hkv query heads)"""
    if hkv == H:
        return k
    u = g.op("Unsqueeze", [k, g.const(g.tmp("axes"), np.array([2], np.int64))])
    t = g.op("Tile", [u, g.const(g.tmp("reps"), np.array([1, 1, H // hkv, 1, 1], np.int64))])
    return g.op("Reshape", [t, g.const(g.tmp("shape"), np.array([0, H, -1, DH], np.int64))])


def g_attend(g, prefix, x, k, v, bias, visible, hkv):
    """x [b, s, D]; k, v [b, hkv, T, DH]; bias [b|1, H|1, s, T] or None; visible bool, broadcast
    to [b, H, s, T] -> x + attention output"""
    q = g_heads(g, x, prefix + "q", H)
    kt = g.op("Transpose", [g_repeat_kv(g, k, hkv)], perm=[0, 1, 3, 2])
    sc = g.op("Mul", [g.op("MatMul", [q, kt]), g.const(g.tmp("scale"), np.array(1 / np.sqrt(DH), np.float32))])
    if bias:
        sc = g.op("Add", [sc, bias])
    sc = g.op("Where", [visible, sc, g.const(g.tmp("neg"), np.array(NEG, np.float32))])
    p = g.op("Softmax", [sc], axis=-1)
    o = g.op("Transpose", [g.op("MatMul", [p, g_repeat_kv(g, v, hkv)])], perm=[0, 2, 1, 3])
    o = g.op("Reshape", [o, g.const(g.tmp("shape"), np.array([0, 0, H * DH], np.int64))])
    return g.op("Add", [x, g.op("MatMul", [o, g.weight(prefix + "o")])])


def g_mlp(g, x, i):
    return g.op("Add", [x, g.op("Tanh", [g.op("MatMul", [x, g.weight(f"l{i}.mlp")])])])


def g_bias(g, qpos, kpos):
    """qpos [b|1, s] int64, kpos [T] int64 -> (bias [b|1, H, s, T], dist [b|1, 1, s, T] int64)"""
    qp = g.op("Unsqueeze", [qpos, g.const(g.tmp("axes"), np.array([1, 3], np.int64))])
    dist = g.op("Sub", [qp, kpos])
    dc = g.op("Min", [g.op("Cast", [g.op("Abs", [dist])], to=TensorProto.FLOAT),
                      g.const(g.tmp("ceil"), np.array(CEIL, np.float32))])
    neg = g.const(g.tmp("slopes"), -g.w["slopes"].reshape(1, H, 1, 1))
    return g.op("Mul", [dc, neg]), dist


def g_causal_visible(g, dist, mask):
    """dist [b|1, 1, s, T], mask [b, T] int64 -> bool [b, 1, s, T]"""
    causal = g.op("GreaterOrEqual", [dist, g.const(g.tmp("zero"), np.array(0, np.int64))])
    return g.op("And", [causal, g_key_mask(g, mask)])


def g_key_mask(g, mask):
    """mask [b, T] int64 -> bool [b, 1, 1, T]"""
    m = g.op("Unsqueeze", [mask, g.const(g.tmp("axes"), np.array([1, 2], np.int64))])
    return g.op("Equal", [m, g.const(g.tmp("one"), np.array(1, np.int64))])


def g_range(g, length):
    """length: int64 scalar -> arange [length]"""
    return g.op("Range", [g.const(g.tmp("zero"), np.array(0, np.int64)), length,
                          g.const(g.tmp("one"), np.array(1, np.int64))])


def g_dim(g, x, axis):
    s = g.op("Shape", [x])
    return g.op("Gather", [s, g.const(g.tmp("idx"), np.array(axis, np.int64))])


def tvi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def kv_names(prefix, i, what=""):
    return [f"{prefix}.{i}{what}.key", f"{prefix}.{i}{what}.value"]


def decoder_model(w):
    g = G(w)
    f = TensorProto.FLOAT
    ins = [tvi("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
           tvi("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
           tvi("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"])]
    outs = [tvi("logits", f, ["batch_size", "sequence_length", V])]
    x = g.op("Gather", [g.weight("emb"), "input_ids"])
    kpos = g_range(g, g_dim(g, "attention_mask", 1))
    bias, dist = g_bias(g, "position_ids", kpos)
    visible = g_causal_visible(g, dist, "attention_mask")
    for i in range(LAYERS["decoder"]):
        pk, pv = kv_names("past_key_values", i)
        ok, ov = kv_names("present", i)
        ins += [tvi(n, f, ["batch_size", HKV, "past_sequence_length", DH]) for n in (pk, pv)]
        outs += [tvi(n, f, ["batch_size", HKV, "total_sequence_length", DH]) for n in (ok, ov)]
        k = g.op("Concat", [pk, g_heads(g, x, f"l{i}.self.k", HKV)], out=ok, axis=2)
        v = g.op("Concat", [pv, g_heads(g, x, f"l{i}.self.v", HKV)], out=ov, axis=2)
        x = g_mlp(g, g_attend(g, f"l{i}.self.", x, k, v, bias, visible, HKV), i)
    g.op("MatMul", [x, g.weight("out")], out="logits")
    return finish(g, "toy-decoder", ins, outs)


def encoder_model(w):
    g = G(w)
    ins = [tvi("input_ids", TensorProto.INT64, ["batch_size", "encoder_sequence_length"]),
           tvi("attention_mask", TensorProto.INT64, ["batch_size", "encoder_sequence_length"])]
    outs = [tvi("last_hidden_state", TensorProto.FLOAT, ["batch_size", "encoder_sequence_length", D])]
    x = g.op("Gather", [g.weight("emb"), "input_ids"])
    pos = g_range(g, g_dim(g, "input_ids", 1))
    qpos = g.op("Unsqueeze", [pos, g.const(g.tmp("axes"), np.array([0], np.int64))])
    bias, _ = g_bias(g, qpos, pos)
    k, v = g_heads(g, x, "enc.self.k", H), g_heads(g, x, "enc.self.v", H)
    g_attend(g, "enc.self.", x, k, v, bias, g_key_mask(g, "attention_mask"), H)
    g.nodes[-1].output[0] = "last_hidden_state"
    return finish(g, "toy-encoder", ins, outs)


def merged_decoder_model(w):
    g = G(w)
    f = TensorProto.FLOAT
    ins = [tvi("input_ids", TensorProto.INT64, ["batch_size", "decoder_sequence_length"]),
           tvi("encoder_attention_mask", TensorProto.INT64, ["batch_size", "encoder_sequence_length"]),
           tvi("encoder_hidden_states", f, ["batch_size", "encoder_sequence_length", D])]
    outs = [tvi("logits", f, ["batch_size", "decoder_sequence_length", V])]
    x = g.op("Gather", [g.weight("emb"), "input_ids"])
    past = g_dim(g, "past_key_values.0.decoder.key", 2)
    total = g.op("Add", [past, g_dim(g, "input_ids", 1)])
    kpos = g_range(g, total)
    qpos = g.op("Unsqueeze", [g.op("Range", [past, total, g.const(g.tmp("one"), np.array(1, np.int64))]),
                              g.const(g.tmp("axes"), np.array([0], np.int64))])
    bias, dist = g_bias(g, qpos, kpos)
    causal = g.op("GreaterOrEqual", [dist, g.const(g.tmp("zero"), np.array(0, np.int64))])
    cross_visible = g_key_mask(g, "encoder_attention_mask")
    branches = {True: [], False: []}
    for i in range(LAYERS["t5"]):
        names = {what: kv_names("past_key_values", i, "." + what) for what in ("decoder", "encoder")}
        pres = {what: kv_names("present", i, "." + what) for what in ("decoder", "encoder")}
        for what in ("decoder", "encoder"):
            ins += [tvi(n, f, ["batch_size", H, f"past_{what}_sequence_length", DH]) for n in names[what]]
            outs += [tvi(n, f, ["batch_size", H, f"{what}_sequence_length_out", DH]) for n in pres[what]]
        k = g.op("Concat", [names["decoder"][0], g_heads(g, x, f"l{i}.self.k", H)], out=pres["decoder"][0], axis=2)
        v = g.op("Concat", [names["decoder"][1], g_heads(g, x, f"l{i}.self.v", H)], out=pres["decoder"][1], axis=2)
        x = g_attend(g, f"l{i}.self.", x, k, v, bias, causal, H)
        # the cross keys/values: from the past (use_cache_branch true) or computed (false)
        sub = G(w)
        sub.inits, sub.n = g.inits, g.n  # weights and constants stay in the main graph (outer scope)
        ck = g_heads(sub, "encoder_hidden_states", f"l{i}.cross.k", H)
        cv = g_heads(sub, "encoder_hidden_states", f"l{i}.cross.v", H)
        g.n = sub.n
        branches[False] += sub.nodes + [helper.make_node("Identity", [ck], [f"else_{i}_k"]),
                                        helper.make_node("Identity", [cv], [f"else_{i}_v"])]
        branches[True] += [helper.make_node("Identity", [names["encoder"][0]], [f"then_{i}_k"]),
                           helper.make_node("Identity", [names["encoder"][1]], [f"then_{i}_v"])]
        x = g_mlp(g, g_attend(g, f"l{i}.cross.", x, pres["encoder"][0], pres["encoder"][1], None, cross_visible, H), i)
    g.op("MatMul", [x, g.weight("out")], out="logits")
    if_outs = [n for i in range(LAYERS["t5"]) for n in kv_names("present", i, ".encoder")]
    sub_graphs = {}
    for flag, tag in ((True, "then"), (False, "else")):
        b_outs = [tvi(f"{tag}_{i}_{kv}", f, None) for i in range(LAYERS["t5"]) for kv in ("k", "v")]
        sub_graphs[flag] = helper.make_graph(branches[flag], f"{tag}_branch", [], b_outs)
    g.nodes.insert(0, helper.make_node("If", ["use_cache_branch"], if_outs, then_branch=sub_graphs[True],
                                       else_branch=sub_graphs[False]))
    ins.append(tvi("use_cache_branch", TensorProto.BOOL, [1]))
    g.nodes = topo_sort(g.nodes, {t.name for t in g.inits} | {i.name for i in ins})
    return finish(g, "toy-decoder-merged", ins, outs)


def topo_sort(nodes, have):
    """ONNX wants nodes in topological order; the If was placed before its inputs exist."""
    have, out, rest = set(have), [], list(nodes)
    while rest:
        ready = [n for n in rest if all(i in have or i == "" for i in n.input)]
        if not ready:
            raise ValueError("graph has a cycle or a missing input")
        for n in ready:
            out.append(n)
            have.update(n.output)
            rest.remove(n)
    return out


def finish(g, name, ins, outs):
    graph = helper.make_graph(g.nodes, name, ins, outs, initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ctxpatch-toy")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def write(out, kind):
    w = weights(kind)
    os.makedirs(os.path.join(out, "onnx"), exist_ok=True)
    cfg = {"model_type": "toy", "vocab_size": V, "max_position_embeddings": 8}
    if kind == "decoder":
        onnx.save(decoder_model(w), os.path.join(out, "onnx", "model.onnx"))
    else:
        cfg.update(is_encoder_decoder=True, decoder_start_token_id=0)
        onnx.save(encoder_model(w), os.path.join(out, "onnx", "encoder_model.onnx"))
        onnx.save(merged_decoder_model(w), os.path.join(out, "onnx", "decoder_model_merged.onnx"))
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2)
    np.savez(os.path.join(out, "toy.npz"), kind=np.array(kind), **w)


def reference(out, args):
    z = np.load(os.path.join(out, "toy.npz"))
    kind = str(z["kind"])
    w = {k: z[k] for k in z.files if k != "kind"}
    ids = [int(t) for t in args.ids.split(",")]
    dec = [int(t) for t in args.decoder_ids.split(",")] if args.decoder_ids else [0]
    if args.out:
        np_logits(kind, w, ids, dec).astype("<f4").tofile(args.out)
    if args.generate:
        seq, gen = (ids if kind == "decoder" else dec), []
        for _ in range(args.generate):
            logits = np_logits(kind, w, ids if kind == "t5" else seq, seq)
            gen.append(int(np.argmax(logits[-1])))
            seq = seq + gen[-1:]
        print(",".join(map(str, gen)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--kind", choices=["decoder", "t5"])
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--ids")
    ap.add_argument("--decoder-ids")
    ap.add_argument("--out")
    ap.add_argument("--generate", type=int, default=0)
    args = ap.parse_args()
    if args.reference:
        reference(args.folder, args)
    elif args.kind:
        write(args.folder, args.kind)
    else:
        ap.error("give --kind or --reference")


if __name__ == "__main__":
    main()
