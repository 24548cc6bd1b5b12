#!/usr/bin/env python3
"""Writes the ONNX reader's test corpus (tests/test_onnx_hostile.sh, tests/test_onnx_graph.c) with
Debian's python3-onnx 1.12 (helper + raw protobuf bytes edited by hand). Deterministic.

Layout written under OUT (replaced):
  OUT/hostile/<case>/model.onnx  one hostile model per folder (with its external files, links)
  OUT/hostile/cases.tsv          "<case>\t<CP_E... code>\t<exact substring of the message>";
                                 code OK: the model must read (e.g. a hard link inside the folder)
  OUT/outside/                   files a hostile model points at: secret.bin (a regular file) and
                                 fifo (a FIFO); nothing may ever open them
  OUT/recover/<case>/model.onnx  hostile or malformed decoders for the recovery of third-party
                                 graphs (tests/test_onnx_recover.sh runs `forward` on each);
  OUT/recover/cases.tsv          "<case>\t<CP_E... code>\t<exact substring of the message>"
  OUT/good/structure.onnx        subgraphs, every attribute kind, value_info, opsets, metadata,
                                 nodes out of file order (tests/test_onnx_graph.c knows its shape)
  OUT/good/elements/model.onnx   one initializer per (dtype, storage), external ones in
                                 model.onnx.data and in a 3 GiB sparse file (big.bin, bytes at
                                 2.5 GiB); elements.tsv "<tensor>\t<numel>\t<int: 1|0>" with the
                                 expected values from numpy (or the bf16 bit rule) in
                                 <tensor>.f32 (and <tensor>.i64 for integer types), little-endian
"""
import os
import shutil
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = sys.argv[1]
HOSTILE = os.path.join(OUT, "hostile")
OUTSIDE = os.path.join(OUT, "outside")
cases = []


def varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def ld(field, payload):
    """A length-delimited field."""
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def tiny_model(inits=(), nodes=None, inputs=None, outputs=None, opset=17):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    if nodes is None:
        nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "g", inputs if inputs is not None else [x],
                          outputs if outputs is not None else [y], initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="make_onnx_cases")


def case_dir(name):
    d = os.path.join(HOSTILE, name)
    os.makedirs(d)
    return d


def add(name, code, substring, model=None, raw=None):
    d = case_dir(name) if not os.path.isdir(os.path.join(HOSTILE, name)) else os.path.join(HOSTILE, name)
    data = raw if raw is not None else model.SerializeToString()
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(data)
    cases.append((name, code, substring))


def ext_tensor(name, location, offset=None, length=None, dims=(3,), dtype=TensorProto.FLOAT, extra=()):
    t = TensorProto()
    t.name = name
    t.data_type = dtype
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for k, v in [("location", location), ("offset", offset), ("length", length)] + list(extra):
        if v is not None:
            e = t.external_data.add()
            e.key, e.value = k, str(v)
    return t


def raw_tensor(name, dims, dtype, raw):
    t = TensorProto()
    t.name, t.data_type = name, dtype
    t.dims.extend(dims)
    t.raw_data = raw
    return t


def protobuf_cases():
    base = tiny_model().SerializeToString()
    add("truncated_varint", "CP_EONNX_WIRE", "truncated varint", raw=base + b"\x08\x80")
    add("varint_over_10_bytes", "CP_EONNX_WIRE", "varint longer than 10 bytes", raw=base + b"\x08" + b"\xff" * 11)
    add("wrong_wire_type", "CP_EONNX_WIRE", "wrong wire type 2 for field 'ir_version'", raw=base + b"\x0a\x01\x00")
    add("length_past_end", "CP_EONNX_WIRE", "runs past the end", raw=base + b"\x3a\x64\x0a\x01")
    add("group_wire_type", "CP_EONNX_WIRE", "wire type 3", raw=base + b"\x0b")
    add("field_number_zero", "CP_EONNX_WIRE", "field number 0", raw=base + b"\x00\x01")
    add("nul_in_string", "CP_EONNX_WIRE", "holds a NUL byte", raw=base + ld(2, b"a\x00b"))
    # 40 graphs inside one another, written by hand: Graph.node(1) -> Node.attribute(5) -> Attribute.g(6).
    g = b""
    for _ in range(40):
        attr = ld(1, b"body") + ld(6, g) + varint(20 << 3) + varint(5)
        g = ld(1, ld(5, attr))
    add("deep_message_nesting", "CP_EONNX_WIRE", "nested deeper than 100", raw=ld(7, g) + varint(1 << 3) + varint(8))
    add("not_protobuf", "CP_EONNX_WIRE", "offset 0", raw=b"\xff\xff\xff\xff")


def graph_cases():
    # 18 subgraphs inside one another (the bound is 16), each well formed.
    inner = helper.make_graph([helper.make_node("Constant", [], ["c18"], value_float=1.0)], "g18", [],
                              [helper.make_tensor_value_info("c18", TensorProto.FLOAT, [])])
    for k in range(17, 0, -1):
        node = helper.make_node("Wrap", [], [f"c{k}"], name=f"wrap{k}", domain="test.ctxpatch", body=inner)
        inner = helper.make_graph([node], f"g{k}", [], [helper.make_tensor_value_info(f"c{k}", TensorProto.FLOAT, [])])
    top = helper.make_node("Wrap", [], ["y"], name="wrap0", domain="test.ctxpatch", body=inner)
    m = tiny_model(nodes=[top], inputs=[])
    add("subgraph_depth_17", "CP_EONNX_GRAPH", "subgraphs nested deeper than 16", m)
    w = numpy_helper.from_array(np.ones(3, np.float32), "w")
    add("duplicate_initializer", "CP_EONNX_GRAPH", "duplicate name 'w' (an initializer and an initializer)",
        tiny_model([w, w], nodes=[helper.make_node("Add", ["x", "w"], ["y"], name="add")]))
    add("duplicate_node_output", "CP_EONNX_GRAPH",
        "duplicate name 'y' (an output of node 'a' and an output of node 'b')",
        tiny_model(nodes=[helper.make_node("Relu", ["x"], ["y"], name="a"),
                          helper.make_node("Neg", ["x"], ["y"], name="b")]))
    add("duplicate_graph_input", "CP_EONNX_GRAPH", "duplicate name 'x' (a graph input and a graph input)",
        tiny_model(inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])] * 2))
    add("output_shadows_input", "CP_EONNX_GRAPH", "duplicate name 'x' (a graph input and an output of node 'n')",
        tiny_model(nodes=[helper.make_node("Relu", ["x"], ["y"], name="relu"),
                          helper.make_node("Neg", ["y"], ["x"], name="n")]))
    add("cycle", "CP_EONNX_GRAPH", "cycle through node 'a'",
        tiny_model(nodes=[helper.make_node("Add", ["x", "c"], ["b"], name="a"),
                          helper.make_node("Relu", ["b"], ["c"], name="b_node"),
                          helper.make_node("Relu", ["b"], ["y"], name="out")]))
    add("self_loop", "CP_EONNX_GRAPH", "cycle through node 'self'",
        tiny_model(nodes=[helper.make_node("Add", ["x", "y"], ["y"], name="self")]))
    add("undefined_input", "CP_EONNX_GRAPH", "node 'relu' input 'nowhere' is produced by no node",
        tiny_model(nodes=[helper.make_node("Relu", ["nowhere"], ["y"], name="relu")]))
    add("undefined_graph_output", "CP_EONNX_GRAPH", "graph output 'y' is produced by nothing",
        tiny_model(nodes=[helper.make_node("Relu", ["x"], ["z"], name="relu")]))
    # issue 33 item 7: a node without an op_type, refused in the wire walk (a flood of them cost memory).
    add("empty_op_type", "CP_EONNX_GRAPH", "node 1 of its graph has an empty op_type",
        tiny_model(nodes=[helper.make_node("Relu", ["x"], ["t"], name="relu"),
                          helper.make_node("", ["t"], ["y"], name="blank")]))
    add("out_of_order_reads", "OK", "",
        tiny_model(nodes=[helper.make_node("Relu", ["t"], ["y"], name="second"),
                          helper.make_node("Neg", ["x"], ["t"], name="first")]))
    sub = helper.make_graph([helper.make_node("Relu", ["x"], ["x"], name="inner")], "then", [],
                            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])])
    add("subgraph_shadows_outer", "CP_EONNX_GRAPH", "'x' (an output of node 'inner') shadows a name of an enclosing graph",
        tiny_model(nodes=[helper.make_node("If", ["x"], ["y"], name="if", then_branch=sub, else_branch=sub)]))
    m = tiny_model()
    m.graph.node[0].attribute.append(helper.make_attribute("sp", helper.make_sparse_tensor(
        numpy_helper.from_array(np.ones(1, np.float32), "v"), numpy_helper.from_array(np.zeros(1, np.int64), "i"),
        [4])))
    add("sparse_attribute", "CP_EONNX_DTYPE", "sparse tensors are not supported", m)
    m = tiny_model()
    m.graph.sparse_initializer.append(helper.make_sparse_tensor(
        numpy_helper.from_array(np.ones(1, np.float32), "sv"), numpy_helper.from_array(np.zeros(1, np.int64), "si"),
        [4]))
    add("sparse_initializer", "CP_EONNX_DTYPE", "1 sparse initializers (e.g. 'sv'): not supported", m)
    vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    vi.type.tensor_type.shape.dim[0].dim_value = -5
    add("negative_input_dim", "CP_EONNX_GRAPH", "graph input 'x': negative dim 0 (-5)", tiny_model(inputs=[vi]))


def tensor_cases():
    def with_init(name, t):
        add(name[0], name[1], name[2], tiny_model([t], nodes=[helper.make_node("Add", ["x", t.name], ["y"], name="add")]))

    with_init(("negative_dim", "CP_EONNX_TENSOR", "initializer 'w': negative dim 0 (-1)"),
              raw_tensor("w", [-1], TensorProto.FLOAT, b""))
    with_init(("dim_product_overflow", "CP_EOVERFLOW", "initializer 'w': dim product overflows at dim 1"),
              raw_tensor("w", [1 << 40, 1 << 40], TensorProto.FLOAT, b""))
    with_init(("huge_dim", "CP_EOVERFLOW", "initializer 'w': dim product overflows at dim 0"),
              raw_tensor("w", [(1 << 63) - 1], TensorProto.FLOAT, b""))
    with_init(("too_many_dims", "CP_EONNX_TENSOR", "initializer 'w': 9 dims (at most 8)"),
              raw_tensor("w", [1] * 9, TensorProto.FLOAT, b"\0" * 4))
    with_init(("raw_size_mismatch", "CP_EONNX_TENSOR", "initializer 'w': 8 raw_data bytes for a 12-byte shape"),
              raw_tensor("w", [3], TensorProto.FLOAT, b"\0" * 8))
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[3], float_data=[1.0, 2.0])
    with_init(("typed_count_mismatch", "CP_EONNX_TENSOR", "initializer 'w': 2 entries in float_data for 3 elements"), t)
    t = TensorProto(name="w", data_type=TensorProto.FLOAT16, dims=[3], float_data=[1, 2, 3])
    with_init(("typed_wrong_field", "CP_EONNX_TENSOR", "a FLOAT16 tensor keeps its elements in int32_data"), t)
    t = raw_tensor("w", [3], TensorProto.FLOAT, b"\0" * 12)
    t.float_data.extend([1, 2, 3])
    with_init(("raw_and_typed", "CP_EONNX_TENSOR", "initializer 'w': raw_data and a typed field both"), t)
    with_init(("no_data", "CP_EONNX_TENSOR", "initializer 'w': 0 entries in float_data for 3 elements"),
              TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[3]))
    with_init(("unknown_dtype", "CP_EONNX_TENSOR", "initializer 'w': unknown data type 99"),
              raw_tensor("w", [3], 99, b"\0" * 12))
    with_init(("undefined_dtype", "CP_EONNX_TENSOR", "initializer 'w': unknown data type 0"),
              raw_tensor("w", [3], 0, b"\0" * 12))
    with_init(("string_initializer", "CP_EONNX_DTYPE", "initializer 'w': STRING tensors are not supported"),
              helper.make_tensor("w", TensorProto.STRING, [1], [b"s"]))


def external_cases():
    os.makedirs(OUTSIDE)
    secret = os.path.join(OUTSIDE, "secret.bin")
    with open(secret, "wb") as f:
        f.write(struct.pack("<3f", 1, 2, 3))
    os.mkfifo(os.path.join(OUTSIDE, "fifo"))

    def ext(name, code, substring, t, setup=None):
        d = case_dir(name)
        if setup:
            setup(d)
        add(name, code, substring, tiny_model([t], nodes=[helper.make_node("Add", ["x", t.name], ["y"], name="add")]))

    def data(fname, size=12, payload=None):
        def setup(d):
            with open(os.path.join(d, fname), "wb") as f:
                f.write(payload if payload is not None else b"\0" * size)
        return setup

    ext("ext_dotdot", "CP_EONNX_EXTERNAL", "external location '../../outside/secret.bin' has a '..' component",
        ext_tensor("w", "../../outside/secret.bin"))
    ext("ext_dotdot_inner", "CP_EONNX_EXTERNAL", "external location 'a/../../../outside/secret.bin' has a '..' component",
        ext_tensor("w", "a/../../../outside/secret.bin"))
    ext("ext_absolute", "CP_EONNX_EXTERNAL", "is absolute", ext_tensor("w", os.path.abspath(secret)))
    ext("ext_symlink_final", "CP_EFILETYPE", "'data.bin' is a symbolic link", ext_tensor("w", "data.bin"),
        lambda d: os.symlink("../../outside/secret.bin", os.path.join(d, "data.bin")))
    ext("ext_symlink_inside", "CP_EFILETYPE", "'alias.bin' is a symbolic link", ext_tensor("w", "alias.bin"),
        lambda d: (data("real.bin")(d), os.symlink("real.bin", os.path.join(d, "alias.bin"))))
    ext("ext_symlink_parent", "CP_EFILETYPE", "'sub' is a symbolic link", ext_tensor("w", "sub/secret.bin"),
        lambda d: os.symlink("../../outside", os.path.join(d, "sub")))
    ext("ext_symlink_to_fifo", "CP_EFILETYPE", "'pipe' is a symbolic link", ext_tensor("w", "pipe"),
        lambda d: os.symlink("../../outside/fifo", os.path.join(d, "pipe")))
    ext("ext_fifo", "CP_EFILETYPE", "external data file 'fifo' is a FIFO, not a regular file",
        ext_tensor("w", "fifo"), lambda d: os.mkfifo(os.path.join(d, "fifo")))
    ext("ext_folder", "CP_EFILETYPE", "external data file 'dir' is a folder, not a regular file",
        ext_tensor("w", "dir"), lambda d: os.mkdir(os.path.join(d, "dir")))
    ext("ext_file_as_parent", "CP_EFILETYPE", "'plain' is a symbolic link or not a folder",
        ext_tensor("w", "plain/x.bin"), data("plain"))
    ext("ext_missing", "CP_ENOTFOUND", "external data file 'missing.bin': No such file", ext_tensor("w", "missing.bin"))
    ext("ext_empty_component", "CP_EONNX_EXTERNAL", "external location 'a//b.bin' has an empty component",
        ext_tensor("w", "a//b.bin"))
    ext("ext_no_location", "CP_EONNX_EXTERNAL", "initializer 'w': external data without a location",
        ext_tensor("w", None, offset=0))
    ext("ext_offset_past_eof", "CP_EONNX_EXTERNAL", "external bytes [16, +12) run past the end of 'd.bin' (16 bytes)",
        ext_tensor("w", "d.bin", offset=16, length=12), data("d.bin", 16))
    ext("ext_offset_overflow", "CP_EONNX_EXTERNAL", "external bytes [18446744073709551612, +12) run past the end",
        ext_tensor("w", "d.bin", offset=(1 << 64) - 4, length=12), data("d.bin", 16))
    ext("ext_offset_too_big_number", "CP_EONNX_EXTERNAL", "external offset '99999999999999999999999' is not a decimal number",
        ext_tensor("w", "d.bin", offset="99999999999999999999999"), data("d.bin", 16))
    ext("ext_offset_negative", "CP_EONNX_EXTERNAL", "external offset '-4' is not a decimal number",
        ext_tensor("w", "d.bin", offset=-4), data("d.bin", 16))
    ext("ext_length_wrong", "CP_EONNX_EXTERNAL", "external length 8 is not its 12 bytes",
        ext_tensor("w", "d.bin", offset=0, length=8), data("d.bin", 16))
    ext("ext_length_huge", "CP_EONNX_EXTERNAL", "external length 18446744073709551608 is not its 12 bytes",
        ext_tensor("w", "d.bin", offset=8, length=(1 << 64) - 8), data("d.bin", 16))
    ext("ext_misaligned", "CP_EONNX_EXTERNAL", "external offset 2 is not a multiple of its 4-byte element",
        ext_tensor("w", "d.bin", offset=2, length=12), data("d.bin", 16))
    ext("ext_hardlink_inside", "OK", "", ext_tensor("w", "linked.bin", offset=0, length=12),
        lambda d: os.link(secret, os.path.join(d, "linked.bin")))
    ext("ext_no_length_reads", "OK", "", ext_tensor("w", "d.bin", offset=4), data("d.bin", 16))
    # issue 33 item 5: a model-local function's Constant in external data is outside the graph
    # digest while onnxruntime computes with it (inlined): refused
    d = case_dir("ext_in_function")
    data("d.bin", 16)(d)
    fconst = helper.make_node("Constant", [], ["c"], name="fc", value=ext_tensor("c", "d.bin", offset=0, length=12))
    fadd = helper.make_node("Add", ["a", "c"], ["b"], name="fadd")
    fn = helper.make_function("local", "AddC", ["a"], ["b"], [fconst, fadd], [helper.make_opsetid("", 17)])
    m = tiny_model(nodes=[helper.make_node("AddC", ["x"], ["y"], name="call", domain="local")])
    m.opset_import.append(helper.make_opsetid("local", 1))
    m.functions.append(fn)
    add("ext_in_function", "CP_EONNX_EXTERNAL", "model-local function 'AddC' (functions[0]) holds a tensor in external data", m)

    def big(d):  # 3 GiB, sparse: 12 real bytes at 2.5 GiB
        with open(os.path.join(d, "big.bin"), "wb") as f:
            f.seek(5 << 29)
            f.write(struct.pack("<3f", 1, 2, 3))
            f.truncate(3 << 30)
    ext("ext_past_2gib_reads", "OK", "", ext_tensor("w", "big.bin", offset=5 << 29, length=12), big)
    ext("ext_past_3gib_eof", "CP_EONNX_EXTERNAL", "external bytes [3221225476, +12) run past the end",
        ext_tensor("w", "big.bin", offset=(3 << 30) + 4, length=12), big)
    # A Constant node's tensor attribute pointing outside (the fixture's attack, on an attribute).
    t = ext_tensor("evil", "../../outside/secret.bin", offset=0, length=12)
    node = helper.make_node("Constant", [], ["y"], name="const")
    node.attribute.append(helper.make_attribute("value", t))
    add("ext_attribute_dotdot", "CP_EONNX_EXTERNAL", "node 'const' attribute 'value': external location '../../outside",
        tiny_model(nodes=[node], inputs=[]))


def structure_model():
    """Every attribute kind, a subgraph that reads an outer name, symbolic dims, out-of-order nodes."""
    then_g = helper.make_graph([helper.make_node("Add", ["h", "w"], ["t_out"], name="then_add")], "then", [],
                               [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, ["batch", 4])])
    else_g = helper.make_graph([helper.make_node("Neg", ["h"], ["e_out"], name="else_neg")], "else", [],
                               [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, ["batch", 4])])
    kinds = helper.make_node("Kinds", ["x"], ["k"], name="kinds", domain="test.ctxpatch",
                             f=0.5, i=-7, s="text", t=numpy_helper.from_array(np.arange(3, dtype=np.int64), "tt"),
                             g=then_g, floats=[1.5, -2.0], ints=[1, 2, 3], strings=[b"a", b"bc"],
                             tensors=[numpy_helper.from_array(np.array([2.0], np.float32), "t0")],
                             graphs=[else_g])
    nodes = [
        helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g),  # uses h (later)
        helper.make_node("Relu", ["x"], ["h"], name="relu"),
        helper.make_node("Greater", ["x0", "zero"], ["cond"], name="gt"),
        kinds,
    ]
    g = helper.make_graph(
        nodes, "main",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("x0", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.ones(4, np.float32), "w"),
                     numpy_helper.from_array(np.zeros((), np.float32), "zero")],
        value_info=[helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("test.ctxpatch", 3)],
                          producer_name="make_onnx_cases", producer_version="1.0")
    helper.set_model_props(m, {"ctxpatch.k": "v", "second": "2"})
    return m


def bf16_bits(x):
    return (np.array(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def elements_model(d):
    """(name, TensorProto, expected numpy array) for each dtype x storage."""
    f = np.array([1.5, -2.25, 3e-3, 65504.0], np.float32)
    ints = np.array([-128, -1, 0, 127], np.int64)
    items = []

    def add_t(name, t, expect):
        items.append((name, t, np.asarray(expect)))

    add_t("f32_raw", numpy_helper.from_array(f, "f32_raw"), f)
    add_t("f32_typed", helper.make_tensor("f32_typed", TensorProto.FLOAT, [2, 2], f.tolist()), f)
    h = f.astype(np.float16)
    add_t("f16_raw", numpy_helper.from_array(h, "f16_raw"), h)
    add_t("f16_typed", helper.make_tensor("f16_typed", TensorProto.FLOAT16, [4], h), h)
    b = bf16_bits(f)
    bf = (b.astype(np.uint32) << 16).view(np.float32)  # the bf16 values, by the bit rule
    add_t("bf16_raw", raw_tensor("bf16_raw", [4], TensorProto.BFLOAT16, b.tobytes()), bf)
    add_t("bf16_typed", TensorProto(name="bf16_typed", data_type=TensorProto.BFLOAT16, dims=[4],
                                    int32_data=b.astype(np.int32).tolist()), bf)
    dbl = np.array([0.1, -1e10, 2.0, 1e-40], np.float64)
    add_t("f64_raw", numpy_helper.from_array(dbl, "f64_raw"), dbl)
    add_t("f64_typed", helper.make_tensor("f64_typed", TensorProto.DOUBLE, [4], dbl.tolist()), dbl)
    add_t("i64_raw", numpy_helper.from_array(ints, "i64_raw"), ints)
    add_t("i64_typed", helper.make_tensor("i64_typed", TensorProto.INT64, [4], ints.tolist()), ints)
    add_t("i32_typed", helper.make_tensor("i32_typed", TensorProto.INT32, [4], ints.tolist()), ints)
    add_t("i32_raw", numpy_helper.from_array(ints.astype(np.int32), "i32_raw"), ints)
    add_t("i16_raw", numpy_helper.from_array(ints.astype(np.int16), "i16_raw"), ints)
    add_t("i8_typed", helper.make_tensor("i8_typed", TensorProto.INT8, [4], ints.tolist()), ints)
    add_t("i8_raw", numpy_helper.from_array(ints.astype(np.int8), "i8_raw"), ints)
    u8 = np.array([0, 1, 200, 255], np.uint8)
    add_t("u8_typed", helper.make_tensor("u8_typed", TensorProto.UINT8, [4], u8.tolist()), u8)
    add_t("u8_raw", numpy_helper.from_array(u8, "u8_raw"), u8)
    bo = np.array([True, False, True, True])
    add_t("bool_typed", helper.make_tensor("bool_typed", TensorProto.BOOL, [4], bo.tolist()), bo)
    add_t("scalar", numpy_helper.from_array(np.array(7.0, np.float32), "scalar"), np.array([7.0]))
    add_t("empty", numpy_helper.from_array(np.zeros((0, 3), np.float32), "empty"), np.zeros(0))
    # External: model.onnx.data (f32 at 0, f16 at 16) and the 3 GiB sparse big.bin.
    with open(os.path.join(d, "model.onnx.data"), "wb") as fh:
        fh.write(f.tobytes() + h.tobytes())
    add_t("f32_ext", ext_tensor("f32_ext", "model.onnx.data", 0, 16, dims=[4]), f)
    add_t("f16_ext", ext_tensor("f16_ext", "model.onnx.data", 16, 8, dims=[4], dtype=TensorProto.FLOAT16), h)
    with open(os.path.join(d, "big.bin"), "wb") as fh:
        fh.seek(5 << 29)
        fh.write(f.tobytes())
        fh.truncate(3 << 30)
    add_t("f32_past_2gib", ext_tensor("f32_past_2gib", "big.bin", 5 << 29, 16, dims=[4]), f)
    # The expected values, checked against onnx's own reading where it has one.
    for name, t, expect in items:
        if t.data_location != TensorProto.EXTERNAL and t.data_type != TensorProto.BFLOAT16:
            assert np.array_equal(numpy_helper.to_array(t).reshape(-1).astype(np.float64),
                                  expect.reshape(-1).astype(np.float64)), name
    return items


def contrib_gpt2(layers=1, heads=2, unidirectional=1, qkv_cols=None, extra=(), d=4, vocab=8, ff=8):
    """An ORT-fused GPT-2 (EmbedLayerNormalization, Attention, SkipLayerNormalization, FastGelu) with
    shared initializers, as the transformers optimizer deduplicates them."""
    rng = np.random.default_rng(7)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32) * 0.1
    inits = {"wte": f(vocab, d), "wpe": f(8, d), "g": np.ones(d, np.float32), "b": np.zeros(d, np.float32),
             "qkv": f(d, qkv_cols or 3 * d), "qkv_b": np.zeros(qkv_cols or 3 * d, np.float32), "o": f(d, d),
             "fc": f(d, ff), "fc_b": np.zeros(ff, np.float32), "proj": f(ff, d), "head": f(d, vocab)}
    inits.update(extra)
    ms = "com.microsoft"
    nodes = [helper.make_node("EmbedLayerNormalization", ["input_ids", "", "wte", "wpe", "", "g", "b"],
                              ["y0", "", "x0"], domain=ms, name="emb", epsilon=1e-5)]
    y, x = "y0", "x0"
    for i in range(layers):
        nodes += [
            helper.make_node("Attention", [y, "qkv", "qkv_b"], [f"a{i}"], domain=ms, name=f"attn{i}",
                             num_heads=heads, unidirectional=unidirectional),
            helper.make_node("MatMul", [f"a{i}", "o"], [f"ao{i}"], name=f"o{i}"),
            helper.make_node("SkipLayerNormalization", [f"ao{i}", x, "g", "b"], [f"y{i}m", "", "", f"x{i}m"],
                             domain=ms, name=f"ln2_{i}", epsilon=1e-5),
            helper.make_node("MatMul", [f"y{i}m", "fc"], [f"h{i}"], name=f"fc{i}"),
            helper.make_node("FastGelu", [f"h{i}", "fc_b"], [f"g{i}"], domain=ms, name=f"gelu{i}"),
            helper.make_node("MatMul", [f"g{i}", "proj"], [f"p{i}"], name=f"proj{i}")]
        last = i == layers - 1
        nodes.append(helper.make_node("SkipLayerNormalization", [f"p{i}", f"x{i}m", "g", "b"],
                                      [f"y{i + 1}"] + ([] if last else ["", "", f"x{i + 1}"]), domain=ms,
                                      name=f"ln1_{i + 1}", epsilon=1e-5))
        y, x = f"y{i + 1}", f"x{i + 1}"
    nodes.append(helper.make_node("MatMul", [y, "head"], ["logits"], name="head"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input_ids", TensorProto.INT32, ["b", "s"])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", "s", vocab])],
                          initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ms, 1)],
                             producer_name="make_onnx_cases")


def contrib_llama(theta=500.0, d=16, heads=2, vocab=64, ff=32, positions=64, gqa=False):
    """onnxruntime-genai's Llama layout (SimplifiedLayerNormalization, q/k/v MatMuls, RotaryEmbedding
    with cos/sin caches, MultiHeadAttention unidirectional, SkipSimplifiedLayerNormalization, SiLU-gated
    MLP), one layer, weights large enough that attention depends on the positions."""
    rng = np.random.default_rng(11)
    f = lambda scale, *shape: (rng.standard_normal(shape) * scale).astype(np.float32)
    dh = d // heads
    kvd = dh if gqa else d  # GQA: one kv head
    inv = theta ** (-np.arange(0, dh, 2, dtype=np.float64) / dh)
    ang = np.arange(positions, dtype=np.float64)[:, None] * inv[None, :]
    inits = {"embed": f(1.0, vocab, d), "g1": 1 + f(0.1, d), "wq": f(0.6, d, d), "wk": f(0.6, d, kvd),
             "wv": f(0.3, d, kvd), "wo": f(0.3, d, d), "g2": 1 + f(0.1, d), "wg": f(0.3, d, ff), "wu": f(0.3, d, ff),
             "wd": f(0.3, ff, d), "gf": 1 + f(0.1, d), "head": f(0.3, d, vocab),
             "cos_cache": np.cos(ang).astype(np.float32), "sin_cache": np.sin(ang).astype(np.float32)}
    ms = "com.microsoft"
    n = helper.make_node
    nodes = [n("Gather", ["embed", "input_ids"], ["e"], name="embed"),
             n("SimplifiedLayerNormalization", ["e", "g1"], ["y"], name="ln1", epsilon=1e-5, axis=-1),
             n("MatMul", ["y", "wq"], ["q"], name="q"), n("MatMul", ["y", "wk"], ["k"], name="k"),
             n("MatMul", ["y", "wv"], ["v"], name="v"),
             n("RotaryEmbedding", ["q", "position_ids", "cos_cache", "sin_cache"], ["qr"], domain=ms, name="rq",
               interleaved=0),
             n("RotaryEmbedding", ["k", "position_ids", "cos_cache", "sin_cache"], ["kr"], domain=ms, name="rk",
               interleaved=0),
             n("MultiHeadAttention", ["qr", "kr", "v"], ["a"], domain=ms, name="mha", num_heads=heads,
               unidirectional=1)]
    if gqa:  # rotary inside the attention, positions from seqlens_k
        nodes = nodes[:5] + [n("GroupQueryAttention", ["q", "k", "v", "", "", "seqlens_k", "total_sequence_length",
                                                       "cos_cache", "sin_cache"], ["a"], domain=ms, name="gqa",
                               num_heads=heads, kv_num_heads=1, do_rotary=1)]
    nodes += [
             n("MatMul", ["a", "wo"], ["o"], name="o"),
             n("SkipSimplifiedLayerNormalization", ["e", "o", "g2"], ["y2", "", "", "x2"], domain=ms, name="ln2",
               epsilon=1e-5),
             n("MatMul", ["y2", "wg"], ["gt"], name="gate"), n("MatMul", ["y2", "wu"], ["up"], name="up"),
             n("Sigmoid", ["gt"], ["sg"], name="sig"), n("Mul", ["gt", "sg"], ["silu"], name="silu"),
             n("Mul", ["silu", "up"], ["h"], name="gated"), n("MatMul", ["h", "wd"], ["dn"], name="down"),
             n("SkipSimplifiedLayerNormalization", ["x2", "dn", "gf"], ["yf"], domain=ms, name="lnf", epsilon=1e-5),
             n("MatMul", ["yf", "head"], ["logits"], name="lm_head")]
    ins = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])]
    ins += [helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["b"]),
            helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, [])] if gqa else \
        [helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["b", "s"])]
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", "s", vocab])],
                          initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ms, 1)],
                             producer_name="make_onnx_cases")


def recover_cases():
    """Decoders the recovery must refuse with a clear line, in bounded time."""
    out = []

    def put(name, code, sub, model):
        d = os.path.join(OUT, "recover", name)
        os.makedirs(d)
        with open(os.path.join(d, "model.onnx"), "wb") as fh:
            fh.write(model.SerializeToString())
        out.append((name, code, sub))

    put("ok_contrib_gpt2", "OK", "", contrib_gpt2(layers=2))
    put("ok_contrib_llama", "OK", "", contrib_llama())
    put("ok_contrib_llama_gqa", "OK", "", contrib_llama(gqa=True, d=32))  # ORT: head_size a multiple of 16
    put("heads_zero", "CP_EONNX_RECOVER", "(Attention): num_heads does not divide the hidden size",
        contrib_gpt2(heads=0))
    put("heads_3", "CP_EONNX_RECOVER", "(Attention): num_heads does not divide the hidden size", contrib_gpt2(heads=3))
    put("not_causal", "CP_EONNX_RECOVER", "not unidirectional (a decoder needs causal attention)",
        contrib_gpt2(unidirectional=0))
    put("qkv_shape", "CP_EONNX_RECOVER",
        "initializer 'qkv' is [4, 8]; as transformer.h.0.attn.c_attn of layer 0 it should be [4, 12]",
        contrib_gpt2(qkv_cols=8))
    put("unused_weight", "CP_EONNX_RECOVER",
        "initializer 'stray' has a d_model (4) side but no role in the recovered model (contrib recovery",
        contrib_gpt2(extra={"stray": np.ones((4, 4), np.float32)}))
    put("layers_1025", "CP_EONNX_RECOVER", "more than 1024 layers recovered", contrib_gpt2(layers=1025))
    # plain ops: the token Gather's ids behind 40 Reshapes (the walk back gives up after 32)
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, 2])
    shape = numpy_helper.from_array(np.array([1, 2], np.int64), "shape")
    chain = [helper.make_node("Reshape", ["input_ids" if i == 0 else f"r{i - 1}", "shape"], [f"r{i}"], name=f"r{i}")
             for i in range(40)]
    emb = numpy_helper.from_array(np.ones((8, 4), np.float32), "emb")
    chain.append(helper.make_node("Gather", ["emb", "r39"], ["e"], name="tok"))
    m = helper.make_model(helper.make_graph(chain, "g", [ids], [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)],
                                            initializer=[shape, emb]),
                          opset_imports=[helper.make_opsetid("", 17)])
    put("ids_behind_40_reshapes", "CP_EONNX_RECOVER", "no token embedding to recover a model from", m)
    # plain ops: the token embedding feeds 100000 consumers (scans are capped, the walk ends fast)
    wide = [helper.make_node("Gather", ["emb", "input_ids"], ["e"], name="tok")]
    wide += [helper.make_node("Identity", ["e"], [f"i{i}"]) for i in range(100000)]
    m = helper.make_model(helper.make_graph(wide, "g", [ids], [helper.make_tensor_value_info("i0", TensorProto.FLOAT, None)],
                                            initializer=[emb]),
                          opset_imports=[helper.make_opsetid("", 17)])
    put("embedding_100000_consumers", "CP_EONNX_RECOVER", "is not added to a learned position embedding", m)
    with open(os.path.join(OUT, "recover", "cases.tsv"), "w") as fh:
        for name, code, sub in out:
            fh.write(f"{name}\t{code}\t{sub}\n")
    return len(out)


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(HOSTILE)
    protobuf_cases()
    graph_cases()
    tensor_cases()
    external_cases()
    n_recover = recover_cases()
    with open(os.path.join(HOSTILE, "cases.tsv"), "w") as f:
        for name, code, sub in cases:
            f.write(f"{name}\t{code}\t{sub}\n")
    good = os.path.join(OUT, "good")
    os.makedirs(os.path.join(good, "elements"))
    onnx.save(structure_model(), os.path.join(good, "structure.onnx"))
    ed = os.path.join(good, "elements")
    items = elements_model(ed)
    nodes = [helper.make_node("Identity", [n], [n + "_out"], name=n) for n, _, _ in items]
    g = helper.make_graph(nodes, "elements", [], [helper.make_tensor_value_info(n + "_out", t.data_type, None)
                                                  for n, t, _ in items], initializer=[t for _, t, _ in items])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with open(os.path.join(ed, "model.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    with open(os.path.join(ed, "elements.tsv"), "w") as f:
        for name, t, expect in items:
            is_int = expect.dtype.kind in "iub"
            f.write(f"{name}\t{expect.size}\t{int(is_int)}\n")
            expect.reshape(-1).astype("<f4").tofile(os.path.join(ed, name + ".f32"))
            if is_int:
                expect.reshape(-1).astype("<i8").tofile(os.path.join(ed, name + ".i64"))
    print(f"onnx cases: {len(cases)} hostile, {n_recover} recovery, {len(items)} element tensors, in {OUT}")


if __name__ == "__main__":
    main()
