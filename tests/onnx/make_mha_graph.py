#!/usr/bin/python3
"""Writes a small decoder whose attention is a com.microsoft MultiHeadAttention or
GroupQueryAttention without rotary embeddings (learned absolute positions, as GPT-2), with a KV
cache, for tests/test_onnx_rewrite.sh (Lambda through attention_bias). Debian's python3-onnx;
random weights from a fixed seed (deterministic bytes).

  make_mha_graph.py OUT.onnx mha|gqa

Inputs: input_ids, position_ids [batch, seq] int64; past_key.{l}, past_value.{l} [batch, KV,
past, 16] float; gqa also seqlens_k [batch] int32 (total length - 1) and total_sequence_length
[] int32. Outputs: logits [batch, seq, 64], present_key.{l}, present_value.{l}.
Per layer: LayerNormalization -> q, k, v MatMul -> attention (MHA unidirectional, 2 heads; GQA
2 heads over 1 kv head, always causal) -> o MatMul -> residual Add. Weights of std 0.5 so the
attention depends on positions.
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

LAYERS, V, NPOS, N, H = 2, 64, 64, 2, 16
D = N * H


def main(out, kind):
    kv = 1 if kind == "gqa" else N
    rng = np.random.default_rng(11)
    inits, nodes = [], []

    def w(name, shape, std=0.5):
        inits.append(numpy_helper.from_array((std * rng.standard_normal(shape)).astype(np.float32), name))
        return name

    def const(name, arr):
        inits.append(numpy_helper.from_array(arr, name))
        return name

    inputs = [helper.make_tensor_value_info("input_ids", TP.INT64, ["batch", "seq"]),
              helper.make_tensor_value_info("position_ids", TP.INT64, ["batch", "seq"])]
    outputs = [helper.make_tensor_value_info("logits", TP.FLOAT, ["batch", "seq", V])]
    if kind == "gqa":
        inputs += [helper.make_tensor_value_info("seqlens_k", TP.INT32, ["batch"]),
                   helper.make_tensor_value_info("total_sequence_length", TP.INT32, [])]
    nodes.append(helper.make_node("Gather", [w("wte", (V, D)), "input_ids"], ["tok"], name="wte"))
    nodes.append(helper.make_node("Gather", [w("wpe", (NPOS, D)), "position_ids"], ["pos"], name="wpe"))
    nodes.append(helper.make_node("Add", ["tok", "pos"], ["x0"], name="embed"))
    x = "x0"
    for l in range(LAYERS):
        p = f"layers.{l}."
        g, b = const(p + "ln.weight", np.ones(D, np.float32)), const(p + "ln.bias", np.zeros(D, np.float32))
        nodes.append(helper.make_node("LayerNormalization", [x, g, b], [p + "h"], name=p + "ln", epsilon=1e-5))
        for name, width in (("q", D), ("k", kv * H), ("v", kv * H)):
            nodes.append(helper.make_node("MatMul", [p + "h", w(p + name + ".weight", (D, width))], [p + name],
                                          name=p + name))
        pk, pv = f"past_key.{l}", f"past_value.{l}"
        inputs += [helper.make_tensor_value_info(n, TP.FLOAT, ["batch", kv, "past", H]) for n in (pk, pv)]
        outputs += [helper.make_tensor_value_info(n, TP.FLOAT, ["batch", kv, "total", H])
                    for n in (f"present_key.{l}", f"present_value.{l}")]
        outs = [p + "attn", f"present_key.{l}", f"present_value.{l}"]
        if kind == "gqa":
            nodes.append(helper.make_node("GroupQueryAttention", [p + "q", p + "k", p + "v", pk, pv, "seqlens_k",
                                                                  "total_sequence_length"], outs, name=p + "attention",
                                          domain="com.microsoft", num_heads=N, kv_num_heads=kv))
        else:
            nodes.append(helper.make_node("MultiHeadAttention", [p + "q", p + "k", p + "v", "", "", "", pk, pv], outs,
                                          name=p + "attention", domain="com.microsoft", num_heads=N, unidirectional=1))
        nodes.append(helper.make_node("MatMul", [p + "attn", w(p + "o.weight", (D, D))], [p + "o"], name=p + "o"))
        nodes.append(helper.make_node("Add", [x, p + "o"], [p + "x"], name=p + "residual"))
        x = p + "x"
    g, b = const("ln_f.weight", np.ones(D, np.float32)), const("ln_f.bias", np.zeros(D, np.float32))
    nodes.append(helper.make_node("LayerNormalization", [x, g, b], ["hf"], name="ln_f", epsilon=1e-5))
    nodes.append(helper.make_node("MatMul", ["hf", w("head.weight", (D, V))], ["logits"], name="head"))
    graph = helper.make_graph(nodes, f"tiny_{kind}", inputs, outputs, inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                          producer_name="make_mha_graph.py")
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, out)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in ("mha", "gqa"):
        sys.exit("usage: make_mha_graph.py OUT.onnx mha|gqa")
    main(sys.argv[1], sys.argv[2])
