#!/usr/bin/python3
"""Seeds of tests/fuzz/fuzz_onnx_sites.c (the rewriter's attention-site finder), written with
python3-onnx's helper: a two-layer plain-op attention (MatMul -> Div -> Add(ALiBi term from a
BLOOM slopes constant) -> Softmax), and the regression graph of issue 33 item 12 (600 Softmax
sites on one shared MatMul behind a dead end of 7 doubled Adds: refused at the 513th site).

  make_onnx_sites_seeds.py SEEDS_DIR REGRESS_DIR
"""
import math
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def model(nodes, inits, inputs, outputs):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="make_onnx_sites_seeds")


def alibi_two_layers():
    heads = 4
    slopes = np.array([2 ** (-8 * (h + 1) / heads) for h in range(heads)], np.float32).reshape(heads, 1, 1)
    inits = [numpy_helper.from_array(slopes, "slopes"), numpy_helper.from_array(np.float32(math.sqrt(8)), "scale")]
    nodes = [helper.make_node("Mul", ["slopes", "dist"], ["term"], name="alibi_term")]
    h = "x"
    for layer in range(2):
        p = f"L{layer}/"
        nodes += [helper.make_node("MatMul", [h, "kT"], [p + "qk"], name=p + "qk"),
                  helper.make_node("Div", [p + "qk", "scale"], [p + "scaled"], name=p + "div"),
                  helper.make_node("Add", [p + "scaled", "term"], [p + "biased"], name=p + "alibi"),
                  helper.make_node("Softmax", [p + "biased"], [p + "probs"], name=p + "softmax", axis=-1),
                  helper.make_node("MatMul", [p + "probs", "v"], [p + "out"], name=p + "pv")]
        h = p + "out"
    return model(nodes, inits, ["x", "kT", "v", "dist"], [h])


def many_sites(sites=600):
    nodes = [helper.make_node("MatMul", ["x", "x2"], ["s"])]
    dead = "x"
    for k in range(1, 8):
        nodes.append(helper.make_node("Add", [dead, dead], [f"d{k}"]))
        dead = f"d{k}"
    for k in range(sites):
        nodes += [helper.make_node("Div", ["s", "x"], [f"v{k}"]), helper.make_node("Add", [dead, f"v{k}"], [f"a{k}"]),
                  helper.make_node("Softmax", [f"a{k}"], [f"p{k}"])]
    return model(nodes, [], ["x", "x2"], ["p0"])


if __name__ == "__main__":
    seeds, regress = sys.argv[1], sys.argv[2]
    with open(os.path.join(seeds, "alibi_two_layers.onnx"), "wb") as f:
        f.write(alibi_two_layers().SerializeToString())
    with open(os.path.join(regress, "many_sites_600.onnx"), "wb") as f:
        f.write(many_sites().SerializeToString())
