#!/usr/bin/python3
"""Independent side of tests/test_onnx_rewrite.sh (python3-onnx and numpy only; nothing of
ctxpatch's C code): inputs for the third-party fixtures, reference graphs that carry the rule by
other means, output comparison, and the byte-level check of what a rewrite kept.

  rewrite_check.py inputs KIND DIR          inputs + DIR/spec.json for ort_feed.mjs
  rewrite_check.py ref-tau MODEL OUT TAU[,TAU...]
        the temperature baked into the query weights (q / tau: softmax(q.k c / tau)), the way
        `patch` bakes it into safetensors: per Attention node the q third of its packed weight
        and bias, per MultiHeadAttention its query projection, per plain attention Softmax the
        q third of the GPT-2 c_attn Gemm/MatMul weight and bias of that layer; one TAU or one per
        site in graph order; shared tensors are scaled once (one TAU only)
  rewrite_check.py ref-sched MODEL OUT T POINTS_JSON
        ref-tau at the one tau the spec's schedule gives a row that sees T keys (linear in log T
        between the points, the end points' taus outside): the fixtures' single decode row
  rewrite_check.py ref-lambda MODEL OUT NGLOBAL NLOCAL S T [MASK.bin]
        Add(logits, bias) before every attention Softmax (com.microsoft Attention and
        MultiHeadAttention: as their attention_bias [1, 1, S, T], input 5; GroupQueryAttention:
        input 10), bias [S, T] a numpy constant: 0 where kpos < n_global or qpos - kpos < n_local
        (qpos = T - S + i), else -FLT_MAX; an Attention with a past (onnxruntime refuses it an
        attention_bias): its mask_index = the numpy keep [1, S, T] AND MASK.bin (the graph's
        attention_mask input, int32 [1, T]) as an int32 constant; a GroupQueryAttention with
        MASK.bin (its seqlens_k input, int32 [B]): the bias [B, 1, S, T] with sequence b's
        queries at seqlens_k[b] + 1 - S + i (i on a first prompt, S = T), as onnxruntime places them
  rewrite_check.py randomize MODEL OUT
        MODEL with every float initializer of 2+ dims drawn at random (seed 3): a fixture whose
        weights are degenerate (onnxruntime's attention_opt.onnx: all ones, so every score ties)
        becomes one whose outputs depend on the attention probabilities
  rewrite_check.py compare DIR_A DIR_B NAME[,NAME...] [TOL]
        max|a-b| / max|b| per output (b the reference), printed; exit 1 over TOL (1e-4)
  rewrite_check.py kept ORIG REWRITTEN N_CHANGED [N_INIT_CHANGED]
        every node of ORIG is in REWRITTEN, in order, serialised byte-equal, but for exactly
        N_CHANGED nodes whose name and op are kept; every initializer (but exactly N_INIT_CHANGED,
        default 0, which keep their name, type and dims and change their values), input, output,
        value_info, opset and metadata entry of ORIG is byte-equal in REWRITTEN; new nodes and
        initializers are named ctxpatch/rewrite/...; no initializer name occurs twice; metadata
        ctxpatch.rule is present
  rewrite_check.py alibi-variant KIND EXPORT_DIR OUT_DIR
        a copy of ctxpatch's ALiBi export folder (its data file kept) whose graph the rewriter
        must refuse for dynamic / progressive ALiBi: KIND "affine" adds 0 to the slopes before
        the distance product (the term is no longer proportional to them: node 'affine/add');
        "noterm" makes layer 0's Add(scores, term) a Sub(term, scores) (no ALiBi term added)
"""
import json
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

FLT_MAX = float(np.finfo(np.float32).max)


def write(d, name, arr, spec, typ):
    path = os.path.join(d, name.replace("/", "_") + ".bin")
    arr.tofile(path)
    spec["inputs"][name] = {"type": typ, "dims": list(arr.shape), "file": path}


def inputs(kind, d):
    rng = np.random.default_rng(7)
    spec = {"inputs": {}, "outputs": []}
    if kind == "gpt2_past":  # input_ids [B, 1], past_i [2, B, 2, P, 2]; T = P + 1 = 6 (n_ctx 8)
        write(d, "input_ids", np.array([[3]], dtype=np.int64), spec, "int64")
        for i in range(12):
            write(d, f"past_{i}", rng.standard_normal((2, 1, 2, 5, 2)).astype(np.float32), spec, "float32")
        spec["outputs"] = ["last_state"] + [f"present_{i}" for i in range(12)]
    elif kind == "genai_gpt2":  # S = 5 new tokens after P = 3 cached
        S, P = 5, 3
        write(d, "input_ids", np.array([[11, 52, 7, 998, 3]], dtype=np.int32), spec, "int32")
        write(d, "position_ids", np.arange(P, P + S, dtype=np.int32)[None], spec, "int32")
        write(d, "attention_mask", np.ones((1, P + S), dtype=np.int32), spec, "int32")
        for i in range(5):
            write(d, f"past_{i}", rng.standard_normal((2, 1, 4, P, 8)).astype(np.float32), spec, "float32")
        spec["outputs"] = ["logits", "present_0"]
    elif kind == "llama_fp16":  # a prefill (its causal-mask subgraph takes a past only with one new token)
        S, P = 6, 0
        write(d, "input_ids", np.array([[5, 900, 31, 17, 2, 444]], dtype=np.int64), spec, "int64")
        write(d, "attention_mask", np.ones((1, P + S), dtype=np.int64), spec, "int64")
        write(d, "position_ids", np.arange(P, P + S, dtype=np.int64)[None], spec, "int64")
        for i in range(2):
            for kv in ("key", "value"):
                a = (0.5 * rng.standard_normal((1, 1, P, 16))).astype(np.float16)
                write(d, f"past_key_values.{i}.{kv}", a.view(np.uint16), spec, "float16")
        spec["outputs"] = ["logits", "present.0.key"]
    elif kind in ("genai_gpt2_prefill", "genai_gpt2_decode", "genai_gpt2_nomask"):  # no past (S = 8); 2 after 9 cached
        S, P = (8, 0) if kind.endswith("prefill") else (2, 9)
        write(d, "input_ids", rng.integers(0, 1000, (1, S)).astype(np.int32), spec, "int32")
        write(d, "position_ids", np.arange(P, P + S, dtype=np.int32)[None], spec, "int32")
        mask = np.ones((1, P + S), dtype=np.int32)
        if P:
            mask[0, 7] = 0  # a padded key inside the local window: the Lambda mask is ANDed with it
        if kind.endswith("nomask"):  # a copy of the graph whose Attention nodes have no mask_index
            np.ones((1, P + S), dtype=np.int32).tofile(os.path.join(d, "ones.bin"))
        else:
            write(d, "attention_mask", mask, spec, "int32")
        for i in range(5):
            write(d, f"past_{i}", rng.standard_normal((2, 1, 4, P, 8)).astype(np.float32), spec, "float32")
        spec["outputs"] = ["logits", "present_0"]
    elif kind.startswith(("mha_", "gqa_")):  # tests/onnx/make_mha_graph.py: prefill S = 8, or 2 after 9 cached
        S, P = (8, 0) if kind.endswith("prefill") else (2, 9)
        B = 2 if kind == "gqa_batch" else 1  # one token each, the second sequence 2 shorter (onnxruntime:
        if B == 2:                            # a batch with a past takes one new token)
            S = 1
        lens = np.array([P + S, P + S - 2][:B], dtype=np.int32)
        kv = 1 if kind.startswith("gqa") else 2
        write(d, "input_ids", rng.integers(0, 64, (B, S)).astype(np.int64), spec, "int64")
        write(d, "position_ids", (lens[:, None] - S + np.arange(S)).astype(np.int64), spec, "int64")
        for i in range(2):
            for n in ("past_key", "past_value"):
                write(d, f"{n}.{i}", rng.standard_normal((B, kv, P, 16)).astype(np.float32), spec, "float32")
        if kind.startswith("gqa"):
            write(d, "seqlens_k", lens - 1, spec, "int32")
            write(d, "total_sequence_length", np.array(P + S, dtype=np.int32), spec, "int32")
        spec["outputs"] = ["logits", "present_key.0"]
    elif kind == "attention_opt":  # one com.microsoft Attention (no past), S = T = 3
        write(d, "input_1", rng.standard_normal((1, 3, 16)).astype(np.float32), spec, "float32")
        write(d, "input_2", rng.standard_normal((1, 3, 16)).astype(np.float32), spec, "float32")
        write(d, "input_mask", np.ones((1, 3), dtype=np.int64), spec, "int64")
        spec["outputs"] = ["output"]
    else:
        sys.exit(f"unknown kind {kind}")
    json.dump(spec, open(os.path.join(d, "spec.json"), "w"))


def producers(g):
    return {o: n for n in g.node for o in n.output}


def is_attention_softmax(g, n, prod):
    """A Softmax fed by a MatMul through elementwise ops (python's own walk)."""
    if n.op_type != "Softmax":
        return False
    todo, seen = [(n.input[0], 0)], set()
    while todo:
        name, depth = todo.pop()
        p = prod.get(name)
        if p is None or depth > 8 or id(p) in seen:
            continue
        seen.add(id(p))
        if p.op_type == "MatMul":
            return True
        if p.op_type in ("Where", "Add", "Sub", "Mul", "Div", "Cast", "Reshape", "Identity", "Transpose"):
            todo += [(i, depth + 1) for i in p.input]
    return False


def scale_q(inits, wname, bname, width, inv, done):
    for name, axis in ((wname, 1), (bname, 0)):
        if not name or name in done:
            continue
        t = inits[name]
        a = numpy_helper.to_array(t).copy()
        if axis == 1:
            a[:, :width] *= inv
        else:
            a[:width] *= inv
        t.CopyFrom(numpy_helper.from_array(a.astype(a.dtype), name))
        done.add(name)


def upstream_matmul(prod, inits, name, steps=8):
    for _ in range(steps):
        p = prod.get(name)
        if p is None:
            return None
        if p.op_type == "MatMul" and p.input[1] in inits:
            return p
        name = p.input[0]
    return None


def ref_tau(model, out, taus):
    m = onnx.load(model)  # external data loaded: saved again below
    g = m.graph
    prod, inits = producers(g), {t.name: t for t in g.initializer}
    sites = []
    for n in g.node:  # file order is topological in these fixtures
        if n.domain == "com.microsoft" and n.op_type in ("Attention", "MultiHeadAttention"):
            sites.append(n)
        elif is_attention_softmax(g, n, prod):
            sites.append(n)
    if len(taus) not in (1, len(sites)):
        sys.exit(f"{len(taus)} taus for {len(sites)} sites")
    done = set()
    for k, n in enumerate(sites):
        inv = 1.0 / (taus[0] if len(taus) == 1 else taus[k])
        if n.op_type == "Attention":
            w = inits[n.input[1]]
            scale_q(inits, n.input[1], n.input[2] if len(n.input) > 2 else "", w.dims[1] // 3, inv, done)
        elif n.op_type == "MultiHeadAttention":
            mm = upstream_matmul(prod, inits, n.input[0])
            scale_q(inits, mm.input[1], "", inits[mm.input[1]].dims[1], inv, done)
        else:  # GPT-2: the layer's c_attn weight and bias by name (gpt2_past: h.N.attn.c_attn.*_resize)
            scale_q(inits, f"h.{k}.attn.c_attn.weight_resize", f"h.{k}.attn.c_attn.bias_resize",
                    inits[f"h.{k}.attn.c_attn.weight_resize"].dims[1] // 3, inv, done)
    save(m, out)


def sched_tau(T, points):
    lens = [float(p[0]) for p in points]
    taus = [float(p[1]) for p in points]
    if T <= lens[0]:
        return taus[0]
    if T >= lens[-1]:
        return taus[-1]
    for (la, ta), (lb, tb) in zip(zip(lens, taus), zip(lens[1:], taus[1:])):
        if la <= T <= lb:
            return ta + (tb - ta) * (np.log(T) - np.log(la)) / (np.log(lb) - np.log(la))
    raise AssertionError


def set_input(n, i, name):
    while len(n.input) <= i:
        n.input.append("")
    n.input[i] = name


def ref_lambda(model, out, n_global, n_local, S, T, mask_file=None):
    m = onnx.load(model)
    g = m.graph
    prod = producers(g)
    qpos = np.arange(T - S, T)[:, None]
    kpos = np.arange(T)[None, :]
    keep = (kpos < n_global) | (qpos - kpos < n_local)
    bias = np.where(keep, 0.0, -FLT_MAX).astype(np.float32)
    g.initializer.append(numpy_helper.from_array(bias, "ref/lambda_bias"))
    g.initializer.append(numpy_helper.from_array(bias[None, None], "ref/lambda_bias4"))
    is_gqa = any(n.op_type == "GroupQueryAttention" for n in g.node)
    if mask_file and not is_gqa:  # an Attention with a past: the mask [1, S, T] int32, the graph's 2-D mask ANDed in
        mask = np.fromfile(mask_file, dtype="<i4").reshape(1, T) > 0
        g.initializer.append(numpy_helper.from_array((keep[None] & mask[:, None, :]).astype(np.int32), "ref/lambda_mask"))
    if mask_file and is_gqa:  # seqlens_k [B]: sequence b's queries at seqlens_k[b] + 1 - S + i (0 + i on a first prompt)
        past = np.fromfile(mask_file, dtype="<i4").astype(np.int64) + 1 - S
        if S == T:
            past[:] = 0
        qb = past[:, None, None] + np.arange(S)[None, :, None]
        keep_b = (kpos[None] < n_global) | (qb - kpos[None] < n_local)
        bias_b = np.where(keep_b, 0.0, -FLT_MAX).astype(np.float32)[:, None]
        del g.initializer[-1]
        g.initializer.append(numpy_helper.from_array(bias_b, "ref/lambda_bias4"))
    nodes = []
    for k, n in enumerate(g.node):
        if n.domain == "com.microsoft" and n.op_type == "Attention" and len(n.input) > 4 and n.input[4]:
            assert mask_file, "an Attention with a past needs the mask file"
            set_input(n, 3, "ref/lambda_mask")
        elif n.domain == "com.microsoft" and n.op_type in ("Attention", "MultiHeadAttention"):
            assert len(n.input) <= 5 or not n.input[5]  # attention_bias is input 5
            set_input(n, 5, "ref/lambda_bias4")
        elif n.domain == "com.microsoft" and n.op_type == "GroupQueryAttention":
            assert len(n.input) <= 10 or not n.input[10]  # attention_bias is input 10
            set_input(n, 10, "ref/lambda_bias4")
        elif is_attention_softmax(g, n, prod):
            x = f"ref/lambda_{k}"
            nodes.append(onnx.helper.make_node("Add", [n.input[0], "ref/lambda_bias"], [x], name=f"ref/add_{k}"))
            n.input[0] = x
        nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    save(m, out)


def save(m, out):
    if any(t.data_location == onnx.TensorProto.EXTERNAL or t.raw_data and len(t.raw_data) > 1024
           for t in m.graph.initializer) and m.ByteSize() > (1 << 20):
        onnx.save(m, out, save_as_external_data=True, location=os.path.basename(out) + ".data")
    else:
        onnx.save(m, out)


def randomize(model, out):
    m = onnx.load(model)
    rng = np.random.default_rng(3)
    for t in m.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) >= 2:
            a = (0.5 * rng.standard_normal(tuple(t.dims))).astype(np.float32)
            t.CopyFrom(numpy_helper.from_array(a, t.name))
    onnx.save(m, out)


def alibi_variant(kind, src, dst):
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    m = onnx.load(f"{src}/onnx/model.onnx", load_external_data=False)
    g = m.graph
    prod = {o: n for n in g.node for o in n.output}
    if kind == "affine":
        cast = next(n for n in g.node if n.op_type == "Cast" and n.input[0] in prod
                    and prod[n.input[0]].op_type == "Reshape" and prod[n.input[0]].input[0] == "const/9")
        user = next(n for n in g.node if cast.output[0] in n.input)
        g.initializer.append(numpy_helper.from_array(np.zeros((), np.float32), "affine/zero"))
        add = helper.make_node("Add", [cast.output[0], "affine/zero"], ["affine/sum"], name="affine/add")
        user.input[list(user.input).index(cast.output[0])] = "affine/sum"
        nodes = list(g.node)
        nodes.insert(nodes.index(user), add)
        del g.node[:]
        g.node.extend(nodes)
    else:
        n = prod[next(n for n in g.node if n.op_type == "Softmax").input[0]]
        while n.op_type != "Add":
            n = next(prod[i] for i in n.input if i in prod and prod[i].op_type in ("Where", "Add", "Mul"))
        n.op_type = "Sub"
        n.input[0], n.input[1] = n.input[1], n.input[0]
    onnx.save(m, f"{dst}/onnx/model.onnx")


def compare(da, db, names, tol):
    worst = 0.0
    for name in names:
        safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in name)
        a = np.fromfile(os.path.join(da, safe + ".bin"), dtype="<f4").astype(np.float64)
        b = np.fromfile(os.path.join(db, safe + ".bin"), dtype="<f4").astype(np.float64)
        if a.shape != b.shape or not np.isfinite(a).all() or not np.isfinite(b).all():
            print(f"{name}: cannot compare (sizes {a.size}, {b.size} or non-finite values)")
            return 1
        rel = float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))
        worst = max(worst, rel)
        print(f"{name}: rel_err={rel:.3g}", end="  ")
    print("ok" if worst <= tol else "FAIL")
    return 0 if worst <= tol else 1


def kept(orig, new, n_changed, n_init_changed=0):
    a = onnx.load(orig, load_external_data=False)
    b = onnx.load(new, load_external_data=False)
    ga, gb = a.graph, b.graph
    old = [n for n in gb.node if not n.name.startswith("ctxpatch/rewrite/")]
    added = [n for n in gb.node if n.name.startswith("ctxpatch/rewrite/")]
    assert len(old) == len(ga.node), (len(old), len(ga.node))
    changed = 0
    for x, y in zip(ga.node, old):
        if x.SerializeToString() != y.SerializeToString():
            assert (x.name, x.op_type, x.domain) == (y.name, y.op_type, y.domain), (x.name, y.name)
            changed += 1
    assert changed == n_changed, f"{changed} nodes changed, expected {n_changed}"
    names = [t.name for t in gb.initializer]  # what onnx's checker asks: each initializer once
    assert len(names) == len(set(names)), sorted({k for k in names if names.count(k) > 1})[:5]
    ia = {t.name: t.SerializeToString() for t in ga.initializer}
    ib = {t.name: t.SerializeToString() for t in gb.initializer}
    diff = [k for k, v in ia.items() if ib.get(k) != v]
    assert len(diff) == n_init_changed, diff[:5]
    ta, tb = {t.name: t for t in ga.initializer}, {t.name: t for t in gb.initializer}
    for k in diff:
        assert (ta[k].data_type, list(ta[k].dims)) == (tb[k].data_type, list(tb[k].dims)), k
        assert not np.array_equal(numpy_helper.to_array(ta[k]), numpy_helper.to_array(tb[k])), k
    assert [t.name for t in ga.initializer] == [t.name for t in gb.initializer][:len(ga.initializer)]
    assert all(k.startswith("ctxpatch/rewrite/") for k in set(ib) - set(ia)), sorted(set(ib) - set(ia))[:5]
    for field in ("input", "output", "value_info"):
        assert [v.SerializeToString() for v in getattr(ga, field)] == [v.SerializeToString() for v in getattr(gb, field)], field
    assert [o.SerializeToString() for o in a.opset_import] == [o.SerializeToString() for o in b.opset_import]
    mb = {p.key: p.value for p in b.metadata_props}
    for p in a.metadata_props:
        if not p.key.startswith("ctxpatch."):
            assert mb.get(p.key) == p.value, p.key
    assert "ctxpatch.rule" in mb and mb["ctxpatch.fidelity"] == "graph-rewrite", mb
    assert (a.ir_version, a.producer_name, a.producer_version) == (b.ir_version, b.producer_name, b.producer_version)
    # raw bytes: every untouched node's serialisation occurs verbatim in the new file
    raw = open(new, "rb").read()
    for x, y in zip(ga.node, old):
        if x.SerializeToString() == y.SerializeToString():
            assert x.SerializeToString() in raw, x.name
    print(f"kept: {len(ga.node) - changed} nodes and {len(ia) - len(diff)} initializers byte-equal, {changed} nodes "
          f"and {len(diff)} initializers changed, {len(added)} nodes added")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "inputs":
        inputs(*args)
    elif cmd == "ref-tau":
        ref_tau(args[0], args[1], [float(t) for t in args[2].split(",")])
    elif cmd == "ref-sched":
        tau = sched_tau(int(args[2]), json.loads(args[3]))
        print(f"tau({args[2]}) = {tau:.6f}")
        ref_tau(args[0], args[1], [tau])
    elif cmd == "ref-lambda":
        ref_lambda(args[0], args[1], *[int(v) for v in args[2:6]], *args[6:7])
    elif cmd == "randomize":
        randomize(args[0], args[1])
    elif cmd == "compare":
        return compare(args[0], args[1], args[2].split(","), float(args[3]) if len(args) > 3 else 1e-4)
    elif cmd == "alibi-variant":
        alibi_variant(*args)
    elif cmd == "kept":
        kept(args[0], args[1], int(args[2]), int(args[3]) if len(args) > 3 else 0)
    else:
        sys.exit(f"unknown command {cmd}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
