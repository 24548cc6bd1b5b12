#!/usr/bin/python3
"""Regenerates every engine golden under tests/goldens/engine/ (format: GOLDEN_FORMAT.md).

    scripts/py tests/reference/make_engine_goldens.py [--out DIR] [--skip-checks]

Builds tiny seeded random models in Hugging Face layout, runs the independent PyTorch reference
(python/ctxpatch_ref/torchref/) for every family x every applicable rule, runs the self-checks
(which must pass before anything is written) and writes models, case files and MANIFEST.json.
Deterministic: two runs give identical bytes.
"""
import argparse
import collections
import hashlib
import json
import math
import os
import shutil
import sys

import torch

sys.dont_write_bytecode = True   # keep __pycache__ out of the source tree
HERE = os.path.dirname(os.path.abspath(__file__))

from ctxpatch_ref import stio
from ctxpatch_ref.torchref import models as M
from ctxpatch_ref.torchref import rules as R

REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_OUT = os.path.join(REPO, "tests", "goldens", "engine")
GENERATOR = "tests/reference/make_engine_goldens.py"
FORMAT_VERSION = 1
N_NEW = 8

# Discrete choices (top-k selection, greedy argmax) must not sit within fp32 noise of a tie,
# or an engine that is correct to 1e-6 could still pick differently. Inputs are re-drawn until
# every gap clears these (relative to max(1, |values|)).
TOPK_MIN_GAP = 1e-4
ARGMAX_MIN_GAP = 1e-3
# A non-identity rule must move the logits by at least this (relative, 10x the test tolerance),
# or the golden could not tell a working rule from an ignored one.
MIN_EFFECT = 1e-3
MIN_DISTINCT = 3   # distinct ids in a generated continuation
MAX_DRAWS = 100
FP32_REPLAY_TOL = 2e-5   # the engine tests compare at 1e-4


# ---------------------------------------------------------------- models

def build_models():
    return [
        # tied models get stronger block outputs (mix) so that greedy decoding does not just
        # repeat the last token through the residual embedding
        M.T5("t5_relu", 101, gated=False, tied=True, mix=3.0, emb_std=0.3, final_gain=3.0),
        M.T5("t5_gated", 102, gated=True, tied=False, storage=torch.float16),
        M.Bloom("bloom", 201, mix=3.0),
        M.Mpt("mpt", 301, n_heads=6, alibi_bias_max=6.0, mix=3.0),
        M.Llama("llama", 401, pos="rope", n_layers=3),
        M.Llama("llama_rope2", 402, pos="rope", rope_factor=2, storage=torch.bfloat16, n_layers=2),
        M.NeoX("gpt_neox", 501),
        M.Llama("fire", 601, pos="fire", n_layers=2, n_kv=2, fire_c=0.5, fire_L=20.0),
        M.Llama("fire_shared", 602, pos="fire", n_layers=2, n_kv=4, fire_shared=True,
                fire_c=2.0, fire_L=18.0, tied=True, mix=3.0),
        # learned absolute positions (appended: the models above keep their bytes)
        M.GPT2("gpt2", 701, n_positions=64),
        M.GPT2("gpt2_bin", 702, n_positions=48, prefix="", fmt="bin", inverse_layer=True, n_inner=80,
               act="gelu", mask_buffer=True),
        # the paper's FIRE MLP, two hidden layers (docs/fire-layout.md; appended likewise)
        M.Llama("fire2", 603, pos="fire", n_layers=2, n_kv=2, fire_layers=2, fire_c=0.7, fire_L=22.0),
        M.Llama("fire2_shared", 604, pos="fire", n_layers=2, n_kv=4, fire_shared=True, fire_layers=2,
                fire_c=1.5, fire_L=16.0, tied=True, mix=3.0),
        # RoPE scaling types of Llama 3.1 and YaRN (appended likewise): trained at 16, configured
        # for 64, prompts past both; head dim 16 puts pairs in every band of the two formulas
        M.Llama("llama3_scaled", 405, pos="rope", n_layers=2, D=64, n_heads=4, n_kv=2, train_len=64,
                rope_scaling=od(("rope_type", "llama3"), ("factor", 4.0), ("low_freq_factor", 1.0),
                                ("high_freq_factor", 4.0), ("original_max_position_embeddings", 16))),
        M.Llama("llama_yarn", 406, pos="rope", n_layers=2, D=64, n_heads=4, n_kv=2, train_len=64,
                rope_scaling=od(("rope_type", "yarn"), ("factor", 4.0), ("original_max_position_embeddings", 16))),
        # Qwen2: the Llama body with q/k/v biases (appended likewise)
        M.Llama("qwen2", 407, pos="rope", n_layers=2, n_heads=4, n_kv=2, train_len=32, qwen2=True, tied=True, mix=3.0),
        # Qwen3: per-head q/k RMSNorm before RoPE, explicit head_dim 32 (hidden 64 / 4 heads would be 16)
        M.Llama("qwen3", 408, pos="rope", n_layers=2, D=64, n_heads=4, n_kv=2, head_dim=32, train_len=32,
                qwen3=True, tied=True, mix=3.0),
        # Phi-3: fused qkv_proj (GQA 4/2) and gate_up_proj, partial_rotary_factor 0.5 (rotary on 8 of
        # 16 dims), untied head, forward at 41 tokens past the 32-token training length
        M.Phi3("phi3", 409, n_layers=2, D=64, n_heads=4, n_kv=2, dff=96, train_len=32, partial=0.5, mix=3.0),
        # tied, whole-head rotary, 300 tokens (two forward cases only: each is [300, V] logits)
        M.Phi3("phi3_300", 412, n_layers=2, D=64, n_heads=4, n_kv=4, dff=64, train_len=64, tied=True),
        # Gemma (41-token prompts) and Gemma 2: a window of 16 on the even layers (layer_types on
        # gemma2_types: the odd one), prompts of 300 and 41 tokens, past the window and past the
        # training length 32 (appended likewise)
        M.Gemma("gemma", 409, gemma2=False, n_layers=2),
        M.Gemma("gemma2", 410, n_layers=2, window=16),
        M.Gemma("gemma2_types", 411, n_layers=2, window=12, layer_types=["full_attention", "sliding_attention"]),
        # RoPE tables chosen by the length of the forward (appended likewise): dynamic NTK over
        # max_position_embeddings 32 (41 and 300 tokens both rescale the base, by different
        # amounts), and Phi-3's longrope over an original 64 of 128 (41 tokens take the short
        # factors, 300 the long; attention factor sqrt(1 + ln 2 / ln 64)), partial rotary 0.5
        M.Llama("llama_dynamic", 413, pos="rope", n_layers=2, D=64, n_heads=4, n_kv=2, train_len=32,
                rope_scaling=od(("rope_type", "dynamic"), ("factor", 2.0))),
        M.Llama("llama_dynamic_300", 414, pos="rope", n_layers=2, D=64, n_heads=4, n_kv=2, train_len=32,
                rope_scaling=od(("rope_type", "dynamic"), ("factor", 3.0)), tied=True),
        M.Phi3("phi3_longrope", 415, n_layers=2, D=64, n_heads=4, n_kv=2, dff=96, train_len=128, original=64,
               partial=0.5, mix=3.0, rope_scaling=LONGROPE),
        M.Phi3("phi3_longrope_300", 416, n_layers=2, D=64, n_heads=4, n_kv=2, dff=64, train_len=128, original=64,
               partial=0.5, tied=True, rope_scaling=LONGROPE),
        # sliding windows at 300 tokens (appended likewise): Mistral on every layer, Qwen2 from
        # max_window_layers 1 on (layer 1 of 2), Phi-3 on every layer
        M.Llama("mistral_swa", 413, pos="rope", n_layers=2, D=64, n_heads=4, n_kv=2, train_len=32, mistral=True,
                window=16, mix=3.0),
        M.Llama("qwen2_swa", 414, pos="rope", n_layers=2, n_heads=4, n_kv=2, train_len=32, qwen2=True, tied=True,
                mix=3.0, window=12, max_window_layers=1),
        M.Phi3("phi3_swa", 415, n_layers=2, D=64, n_heads=4, n_kv=2, dff=64, train_len=32, partial=0.5, mix=3.0,
               window=16),
        # Granite: the Llama body with its four multipliers (embedding 2, attention 0.35 in place of
        # 16^-1/2, residual 0.5, logits divided by 2), GQA 4/2, tied; 41 tokens past the 32-token
        # training length with every RoPE rule, and granite_300 (untied, 300 tokens, two cases)
        M.Granite("granite", 413, n_layers=2, D=64, n_heads=4, n_kv=2, train_len=32, tied=True, mix=3.0),
        M.Granite("granite_300", 414, n_layers=2, D=64, n_heads=4, n_kv=4, train_len=64, emb_mult=3.0,
                  resid_mult=0.25, attn_mult=0.2, logits_scaling=0.5),
        # Gemma 3 text: per-head q/k norms, rope_theta 1e6 with a linear factor 8 on the full layers,
        # rope_local_base_freq 1e4 unscaled on the sliding ones; gemma3: sliding_window_pattern 3
        # (layers 0, 1 slide, 2 is full), window 16, 300 tokens; gemma3_41: layer_types, window 12,
        # a final soft-cap, 41 tokens; both past the training length 32 (appended likewise)
        M.Gemma3("gemma3", 413, n_layers=3, window=16, pattern=3),
        M.Gemma3("gemma3_41", 414, n_layers=2, window=12, layer_types=["sliding_attention", "full_attention"],
                 final_cap=3.0),
        # OLMo 2: norms after the modules only, q/k norms over the whole projection, untied, GQA 4/2;
        # 41 tokens past the 32-token training length with every RoPE rule, and olmo2_300 (two cases)
        M.Olmo2("olmo2", 416, n_layers=2, D=64, n_heads=4, n_kv=2, train_len=32, mix=3.0),
        M.Olmo2("olmo2_300", 417, n_layers=2, D=64, n_heads=4, n_kv=2, train_len=64),
        # StarCoder2: LayerNorms with bias, biased q/k/v/o and c_fc -> gelu tanh -> c_proj, GQA 4/2,
        # tied, every layer sliding (window 16) at 41 tokens past the 32-token training length with
        # every RoPE rule (the Lambda mask intersected with the window); starcoder2_swa: untied,
        # window 24, 300 tokens (the window alone, a temperature, the Lambda mask)
        M.Starcoder2("starcoder2", 417, n_layers=2, D=64, n_heads=4, n_kv=2, dff=128, train_len=32, tied=True,
                     mix=3.0, window=16),
        M.Starcoder2("starcoder2_swa", 418, n_layers=2, D=64, n_heads=4, n_kv=2, dff=96, train_len=64, tied=False,
                     mix=3.0, window=24, theta=50000.0),
    ]


# longrope's lists for 8 rotated dims (4 pairs): the long ones stretch the low frequencies far more
LONGROPE = collections.OrderedDict([("rope_type", "longrope"), ("short_factor", [1.0, 1.1, 1.3, 1.6]),
                                    ("long_factor", [1.0, 2.5, 6.0, 12.0])])
# models whose RoPE table depends on the forward's length: no generate cases (the reference re-runs
# the growing sequence, so every key would take the last step's table, where a KV cache keeps each
# key's own, as transformers' does: docs/attention-decisions.md 15)
BY_LENGTH = ("llama_dynamic", "llama_dynamic_300", "phi3_longrope", "phi3_longrope_300")

# forward prompt length (decoder-only) or (encoder, decoder) lengths (T5)
LENGTHS = {"t5_relu": (48, 24), "t5_gated": (48, 24), "bloom": 48, "mpt": 56, "llama": 64,
           "llama_rope2": 48, "gpt_neox": 40, "fire": 64, "fire_shared": 48,
           "gpt2": 56, "gpt2_bin": 48,   # gpt2_bin: exactly its n_positions
           "fire2": 56, "fire2_shared": 40, "llama3_scaled": 72, "llama_yarn": 72, "qwen2": 56,
           "qwen3": 56, "phi3": 41, "phi3_300": 300, "gemma": 41, "gemma2": 300, "gemma2_types": 41,
           "llama_dynamic": 41, "llama_dynamic_300": 300, "phi3_longrope": 41, "phi3_longrope_300": 300,
           "mistral_swa": 300, "qwen2_swa": 300, "phi3_swa": 300,
           "granite": 41, "granite_300": 300, "gemma3": 300, "gemma3_41": 41, "olmo2": 41, "olmo2_300": 300,
           "starcoder2": 41, "starcoder2_swa": 300}
GEN_LENGTHS = {"t5_relu": (48, 16), "t5_gated": (48, 16)}   # others: prompt of 40
GEN_PROMPT = 40


def family(m):
    return m.facts.pos


# ---------------------------------------------------------------- cases

LAMBDA = collections.OrderedDict([("n_global", 2), ("n_local", 8)])


def od(*pairs):
    return collections.OrderedDict(pairs)


def cases_for(m):
    """[(case name, kind, rule)] for model m; rule keys in the spec's order."""
    L = m.L
    layer_taus = {2: [1.0, 0.75], 3: [1.0, 0.85, 0.7]}[L]
    out = [
        ("identity", "forward", od()),
        ("temp_0.8", "forward", od(("temperature", 0.8))),
        ("temp_layers", "forward", od(("temperature", layer_taus))),
    ]
    if m.facts.is_t5:
        out += [
            ("temp_self", "forward", od(("temperature", 0.8), ("temperature_scope", "self"))),
            ("temp_all", "forward", od(("temperature", 0.8), ("temperature_scope", "all"))),
            ("temp_layers_all", "forward", od(("temperature", layer_taus), ("temperature_scope", "all"))),
        ]
        if m.name == "t5_gated":
            # decision 12: a list is per layer (its length must be the depth); one tau per layer
            # equal to the scalar gives the scalar's logits (the case keeps its old file name)
            out.append(("temp_list1_self", "forward", od(("temperature", [0.8] * m.L), ("temperature_scope", "self"))))
    elif m.name == "llama":
        # decision 2: the scope is ignored on decoder-only models
        out.append(("temp_scope_encoder", "forward", od(("temperature", 0.8), ("temperature_scope", "encoder"))))
    if family(m) == "learned":
        return out + LEARNED_CASES
    if m.name in ("phi3_300", "llama_dynamic_300", "phi3_longrope_300", "granite_300", "olmo2_300"):   # the long prompt: two cases
        return out[:2]
    if m.name.endswith("_swa"):   # 300 tokens: the window alone, and intersected with the Lambda mask
        return out[:2] + [("lambda", "forward", od(("lambda_mask", LAMBDA)))]
    out += [
        ("lambda", "forward", od(("lambda_mask", LAMBDA))),
        ("ceiling_6", "forward", od(("distance_ceiling", 6))),
        ("lambda_ceiling_topk_all", "forward", od(
            ("lambda_mask", LAMBDA), ("distance_ceiling", 6),
            ("top_k", od(("k", 2), ("distance", 4), ("rows", "all"))))),
        ("lambda_topk_decode", "forward", od(
            ("lambda_mask", LAMBDA), ("top_k", od(("k", 2), ("from_layer", 1), ("rows", "decode"))))),
    ]
    pos = family(m)
    if pos == "alibi":
        out += [
            ("alibi_static_2", "forward", od(("alibi_scale", od(("mode", "static"), ("factor", 2.0))))),
            ("alibi_dynamic", "forward", od(("alibi_scale", od(("mode", "dynamic"))), ("train_len", 16))),
            ("alibi_progressive", "forward", od(("alibi_scale", od(("mode", "progressive"))))),
        ]
    if pos == "fire":
        out.append(("fire_threshold_12", "forward", od(("fire_threshold", 12))))
    combo = od(("temperature", 0.9))
    if m.facts.is_t5:
        combo["temperature_scope"] = "all"
    if pos == "alibi":
        combo["alibi_scale"] = od(("mode", "progressive"))
    combo["lambda_mask"] = LAMBDA
    combo["top_k"] = od(("k", 3), ("rows", "all"))
    if pos == "fire":
        combo["fire_threshold"] = 16
    if pos == "alibi":
        combo["train_len"] = 20
    out.append(("combo", "forward", combo))
    out += [
        ("gen_identity", "generate", od()),
        # from_layer 0 (the default): with top-k only in the last layer, KV-cache decoding and
        # re-running as a prefill would give the same ids, and the golden could not tell them apart
        ("gen_lambda_topk_decode", "generate", od(
            ("lambda_mask", LAMBDA), ("top_k", od(("k", 2), ("rows", "decode"))))),
    ]
    if pos == "alibi":
        out.append(("gen_alibi_dynamic", "generate",
                    od(("alibi_scale", od(("mode", "dynamic"))), ("train_len", 16))))
    # appended last: a case's seed depends on its index, so the older cases keep their inputs
    out += SCHEDULE_CASES.get(m.name, [])
    if m.name in BY_LENGTH:
        out = [c for c in out if c[1] != "generate"]
    if m.name in ("gemma2", "gemma3"):
        # 300 tokens: top-k on every row is a choice in each of hundreds of rows, which no draw
        # keeps TOPK_MIN_GAP clear of a tie (gemma2_types covers it at 41)
        out = [c for c in out if c[2].get("top_k", {}).get("rows", "decode") != "all"]
    return out


# Learned absolute positions (GPT-2): only the position-free rules apply (temperature, its
# schedule, lambda_mask, top_k without a distance); the reference refuses the others.
LEARNED_CASES = [
    ("lambda", "forward", od(("lambda_mask", LAMBDA))),
    ("lambda_topk_all", "forward", od(("lambda_mask", LAMBDA), ("top_k", od(("k", 2), ("rows", "all"))))),
    ("lambda_topk_decode", "forward", od(
        ("lambda_mask", LAMBDA), ("top_k", od(("k", 2), ("from_layer", 1), ("rows", "decode"))))),
    ("combo", "forward", od(("temperature", 0.9), ("lambda_mask", LAMBDA), ("top_k", od(("k", 3), ("rows", "all"))))),
    ("gen_identity", "generate", od()),
    ("gen_lambda_topk_decode", "generate", od(("lambda_mask", LAMBDA), ("top_k", od(("k", 2), ("rows", "decode"))))),
    ("sched", "forward", od(("temperature_schedule", od(("points", [[6, 1.0], [48, 0.6]]))))),
]


def sched(points, scope=None):
    rule = od(("temperature_schedule", od(("points", points))))
    if scope:
        rule["temperature_scope"] = scope
    return rule


# temperature_schedule: tau(T) per softmax row, T = i + 1 for causal rows and the key count for
# bidirectional and cross rows. The points span each case's lengths so that rows differ in tau;
# the generate cases decode with a KV cache in the engine while the reference re-runs the whole
# sequence, so equal ids show that a row gets the same tau either way.
SCHEDULE_CASES = {
    "llama": [
        ("sched", "forward", sched([[8, 1.0], [32, 0.7], [64, 0.55]])),
        ("sched_layers", "forward", sched([[4, [1.0, 0.9, 0.8]], [48, [0.6, 0.8, 0.7]]])),
        ("gen_sched", "generate", sched([[16, 1.0], [44, 0.5]])),
    ],
    "bloom": [("sched", "forward", sched([[6, 1.0], [48, 0.6]]))],
    "fire": [("sched", "forward", sched([[8, 1.0], [64, 0.6]]))],
    "t5_relu": [
        ("sched_encoder", "forward", sched([[16, 1.0], [64, 0.5]])),          # every encoder row T = 48
        ("sched_self", "forward", sched([[4, 1.0], [24, 0.6]], "self")),      # decoder rows T = 1..24
        ("sched_all", "forward", sched([[4, [1.0, 0.8]], [64, [0.5, 0.7]]], "all")),  # cross T = 48
        ("gen_sched_self", "generate", sched([[4, 1.0], [24, 0.5]], "self")),
    ],
    # one forward case on every other model, so that every family runs a schedule
    "t5_gated": [("sched_self", "forward", sched([[8, 0.9], [48, 0.6]], "self"))],
    "mpt": [("sched", "forward", sched([[4, 1.0], [56, 0.6]]))],
    "llama_rope2": [("sched", "forward", sched([[6, 1.0], [48, 0.7]]))],
    "gpt_neox": [("sched", "forward", sched([[5, 1.0], [40, 0.6]]))],
    "fire_shared": [("sched_layers", "forward", sched([[4, [1.0, 0.9]], [48, [0.6, 0.75]]]))],
    "fire2": [("sched", "forward", sched([[8, 1.0], [56, 0.6]]))],
}


def draw_inputs(m, seed, lengths):
    g = torch.Generator().manual_seed(seed)
    if m.facts.is_t5:
        te, td = lengths
        ids = torch.randint(0, m.V, (te,), generator=g)
        dec = torch.cat([torch.zeros(1, dtype=torch.long), torch.randint(0, m.V, (td - 1,), generator=g)])
        return ids, dec
    return torch.randint(0, m.V, (lengths,), generator=g), None


def run_forward(m, rule, ids, dec, n_prompt=None, margins=None):
    if m.facts.is_t5:
        return m.forward(ids, rule, dec, n_prompt=n_prompt, margins=margins)
    return m.forward(ids, rule, n_prompt=n_prompt, margins=margins)


def greedy(m, rule, ids, dec, margins, naive=False):
    """Greedy continuation with the spec's KV-cache semantics, by re-running the growing sequence
    with PassInfo(n_prompt): rows keep the pass they were computed in (dynamic ALiBi T, top_k
    decode rows). naive=True instead treats every step as a fresh prefill (the wrong semantics,
    used only to make sure the goldens can tell the two apart). Returns (new ids, smallest
    argmax gap, whole sequence)."""
    seq = (dec if m.facts.is_t5 else ids).tolist()
    n_prompt = len(seq)
    new, min_gap = [], float("inf")
    for _ in range(N_NEW):
        t = torch.tensor(seq, dtype=torch.long)
        if naive:
            n_prompt = len(seq)
        if m.facts.is_t5:
            logits, _ = m.forward(ids, rule, t, n_prompt=n_prompt, margins=margins)
        else:
            logits, _ = m.forward(t, rule, n_prompt=n_prompt, margins=margins)
        row = logits[-1]
        best = float(row.max())
        nxt = int(torch.nonzero(row == best)[0])     # first index on ties
        second = float(torch.cat([row[:nxt], row[nxt + 1:]]).max())
        min_gap = min(min_gap, (best - second) / max(1.0, float(row.abs().max())))
        seq.append(nxt)
        new.append(nxt)
    return torch.tensor(new, dtype=torch.long), min_gap, torch.tensor(seq, dtype=torch.long)


def needs_cache_semantics(rule):
    """Rules whose generation differs between KV-cache decoding and re-running as a prefill."""
    al = rule.get("alibi_scale")
    tk = rule.get("top_k")
    return bool((al and al["mode"] == "dynamic") or (tk and tk.get("rows", "decode") == "decode"))


def rel_diff(a, b):
    return float((a - b).abs().max() / b.abs().max())


def compute_case(m, ci, name, kind, rule):
    """Draws inputs (re-drawing until every discrete choice has a safe margin) and computes the
    golden tensors."""
    for attempt in range(MAX_DRAWS):
        seed = 1000 * (hash_name(m.name) % 1000) + 37 * ci + 7919 * attempt
        margins = R.Margins()
        if kind == "forward":
            ids, dec = draw_inputs(m, seed, LENGTHS[m.name])
            logits, stats = run_forward(m, rule, ids, dec, margins=margins)
            if margins.topk_gap < TOPK_MIN_GAP:
                continue
            tensors = collections.OrderedDict([("input_ids", ids)])
            if dec is not None:
                tensors["decoder_input_ids"] = dec
            tensors["logits"] = logits.to(torch.float32)
            tensors["stats_pmax"] = torch.stack([s[0] for s in stats]).to(torch.float32)
            tensors["stats_entropy"] = torch.stack([s[1] for s in stats]).to(torch.float32)
            info = {"ids": ids, "dec": dec, "logits": logits, "stats": stats,
                    "topk_gap": margins.topk_gap, "attempt": attempt}
            return tensors, info
        ids, dec = draw_inputs(m, seed, GEN_LENGTHS.get(m.name, GEN_PROMPT))
        gen, gap, full = greedy(m, rule, ids, dec, margins)
        if margins.topk_gap < TOPK_MIN_GAP or gap < ARGMAX_MIN_GAP:
            continue
        # a useful generation golden is not one token repeated, and a rule's continuation
        # differs from the identity's (else it could not tell an ignored rule)
        if len(set(gen.tolist())) < MIN_DISTINCT:
            continue
        if rule and torch.equal(gen, greedy(m, od(), ids, dec, None)[0]):
            continue
        if needs_cache_semantics(rule) and torch.equal(gen, greedy(m, rule, ids, dec, None, naive=True)[0]):
            continue
        if "top_k" in rule:
            no_topk = collections.OrderedDict((k, v) for k, v in rule.items() if k != "top_k")
            if torch.equal(gen, greedy(m, no_topk, ids, dec, None)[0]):
                continue
        tensors = collections.OrderedDict([("input_ids", ids)])
        if dec is not None:
            tensors["decoder_input_ids"] = dec
        tensors["generated"] = gen
        info = {"ids": ids, "dec": dec, "generated": gen, "full": full, "argmax_gap": gap,
                "topk_gap": margins.topk_gap, "attempt": attempt}
        return tensors, info
    raise RuntimeError("%s/%s: no suitable input after %d draws" % (m.name, name, MAX_DRAWS))


def hash_name(s):
    """Stable across runs (Python's hash() is salted)."""
    return int(hashlib.sha256(s.encode()).hexdigest()[:8], 16)


def rule_text(rule):
    return json.dumps(rule, separators=(",", ":"))


# ---------------------------------------------------------------- self-checks

class Checks:
    def __init__(self):
        self.n = 0

    def ok(self, cond, what):
        assert cond, "self-check failed: " + what
        self.n += 1

    def close(self, a, b, tol, what):
        d = rel_diff(a, b)
        self.ok(d <= tol, "%s: rel diff %.3g > %.3g" % (what, d, tol))


def check_t5_bucket(ck):
    # HF documented behaviour: exact buckets below max_exact, log buckets up to max_distance,
    # saturation at num_buckets - 1; bidirectional puts r > 0 in the upper half.
    spots = [  # (r, bidirectional, num_buckets, max_distance, bucket)
        (0, True, 32, 128, 0), (-1, True, 32, 128, 1), (1, True, 32, 128, 17),
        (-7, True, 32, 128, 7), (7, True, 32, 128, 23), (-8, True, 32, 128, 8),
        (-12, True, 32, 128, 9), (-128, True, 32, 128, 15), (-1000, True, 32, 128, 15),
        (1000, True, 32, 128, 31), (5, False, 32, 128, 0), (-1, False, 32, 128, 1),
        (-15, False, 32, 128, 15), (-20, False, 32, 128, 17), (-127, False, 32, 128, 31),
        (-128, False, 32, 128, 31),
        # the golden models' setting (8 buckets, max_distance 20)
        (-6, True, 8, 20, 2), (-7, True, 8, 20, 3), (6, True, 8, 20, 6), (7, True, 8, 20, 7),
        (-5, False, 8, 20, 4), (-6, False, 8, 20, 5), (-9, False, 8, 20, 6), (-13, False, 8, 20, 6),
        (-14, False, 8, 20, 7), (3, False, 8, 20, 0),
    ]
    for r, bi, nb, md, want in spots:
        got = int(R.t5_bucket(torch.tensor([r]), bi, nb, md)[0])
        ck.ok(got == want, "t5 bucket(%d, %s, %d, %d) = %d, want %d" % (r, bi, nb, md, got, want))
        ck.ok(R.t5_bucket_scalar(r, bi, nb, md) == want, "scalar t5 bucket %d" % r)
    for bi in (True, False):
        for nb, md in ((8, 20), (32, 128)):
            rs = torch.arange(-300, 301)
            vec = R.t5_bucket(rs, bi, nb, md).tolist()
            # skip the float32 boundary points of 32/128 (r = +-16, +-32, +-64, ...) where HF's
            # float32 log and a double log may disagree; 8/20 has none inside the range
            for r, b in zip(rs.tolist(), vec):
                if nb == 32 and abs(r) in (16, 32, 64, 128, 256):
                    continue
                ck.ok(b == R.t5_bucket_scalar(r, bi, nb, md), "t5 bucket vec/scalar r=%d" % r)


def check_slopes(ck):
    for h in range(1, 17):
        ck.close(R.bloom_slopes(h), R.spec_slopes(h, 8.0), 1e-6, "bloom slopes H=%d" % h)
        ck.close(R.mpt_slopes(h, 8.0), R.spec_slopes(h, 8.0), 1e-12, "mpt slopes H=%d" % h)
        ck.close(R.mpt_slopes(h, 6.0), R.spec_slopes(h, 6.0), 1e-12, "mpt slopes max 6 H=%d" % h)
    ck.ok(R.bloom_slopes(4).tolist() == [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8], "bloom slopes H=4")


def check_rope(ck):
    g = torch.Generator().manual_seed(5)
    q = torch.randn(3, 20, 16, generator=g, dtype=R.DTYPE)
    k = torch.randn(3, 20, 16, generator=g, dtype=R.DTYPE)
    for rot, factor in ((16, 1.0), (4, 1.0), (8, 2.0)):
        i = torch.arange(20)[:, None]
        j = torch.arange(20)[None, :]
        s = R.rope_scorer(q, k, 0.25, rot, 10000.0, factor)(j - i)
        std = R.rope_standard_scores(q, k, 0.25, rot, 10000.0, factor)
        ck.close(s, std, 1e-12, "rope decision-6 form vs HF form rot=%d F=%g" % (rot, factor))
        # under a ceiling the score equals the ordinary score of a query placed at j + d'
        D = 5
        s_c = R.rope_scorer(q, k, 0.25, rot, 10000.0, factor)(R.clamp_rel(j - i, D))
        for (ii, jj) in ((19, 0), (10, 3), (6, 1)):
            d = min(ii - jj, D)
            inv = R.rope_inv_freq(rot, 10000.0)
            qr = torch.cat([R.rope_apply(q[:, ii, :rot], torch.tensor((jj + d) / factor), inv), q[:, ii, rot:]], -1)
            kr = torch.cat([R.rope_apply(k[:, jj, :rot], torch.tensor(jj / factor), inv), k[:, jj, rot:]], -1)
            ck.close(s_c[:, ii, jj], 0.25 * (qr * kr).sum(-1), 1e-12, "rope ceiling pair (%d,%d)" % (ii, jj))


def check_blocks(ck):
    """Hand-written building blocks against torch's own (layer norm, both GELUs, SiLU)."""
    F = torch.nn.functional
    g = torch.Generator().manual_seed(3)
    x = torch.randn(7, 24, generator=g, dtype=R.DTYPE) * 3
    w = torch.randn(24, generator=g, dtype=R.DTYPE)
    b = torch.randn(24, generator=g, dtype=R.DTYPE)
    ck.close(M.layer_norm(x, w, b, 1e-5), F.layer_norm(x, (24,), w, b, 1e-5), 1e-12, "layer_norm")
    ck.close(M.gelu_exact(x), F.gelu(x), 1e-12, "gelu exact")
    ck.close(M.gelu_tanh(x), F.gelu(x, approximate="tanh"), 1e-12, "gelu tanh")
    ck.close(M.silu(x), F.silu(x), 1e-12, "silu")
    want = x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-6) * w
    ck.close(M.rms_norm(x, w, 1e-6), want, 1e-12, "rms_norm")


def check_attention_scalar(ck):
    """The vectorised attention against a scalar loop written straight from the spec, on ALiBi
    logits with every rule feature at once (progressive slopes, Lambda, ceiling, top-k, tau)."""
    g = torch.Generator().manual_seed(9)
    H, T, dh = 2, 30, 4
    q = torch.randn(H, T, dh, generator=g, dtype=R.DTYPE)
    k = torch.randn(H, T, dh, generator=g, dtype=R.DTYPE)
    v = torch.randn(H, T, dh, generator=g, dtype=R.DTYPE)
    slopes = torch.tensor([0.5, 0.125], dtype=R.DTYPE)
    rule = od(("temperature", 0.7), ("alibi_scale", od(("mode", "progressive"))),
              ("lambda_mask", od(("n_global", 3), ("n_local", 5))), ("distance_ceiling", 7),
              ("top_k", od(("k", 2), ("distance", 3), ("rows", "all"))), ("train_len", 10))
    facts = R.ModelFacts(False, 0, 1, 10, "alibi")
    plan = R.Plan(rule, facts, "dec", 0)
    pinfo = R.PassInfo(T)
    c = 0.5
    score = R.alibi_scorer(q, k, c, slopes, plan.alibi_divisor(T, pinfo))
    _, P = R.attention(plan, pinfo, score, v, T)
    for h in range(H):
        for i in range(T):
            F = max(1.0, (i + 1) / 10)
            m = float(slopes[h]) / F
            logits = {}
            hidden = []
            for j in range(i + 1):
                d = i - j
                dot = c * float((q[h, i] * k[h, j]).sum())
                if j < 3 or d < 5:
                    logits[j] = dot - m * min(d, 7)
                elif j >= 3 and d >= 5:
                    hidden.append((-(dot - m * 3), j))
            hidden.sort()
            for negval, j in hidden[:2]:
                logits[j] = -negval
            mx = max(logits.values())
            z = sum(math.exp((x - mx) / 0.7) for x in logits.values())
            for j in range(T):
                want = math.exp((logits[j] - mx) / 0.7) / z if j in logits else 0.0
                ck.ok(abs(float(P[h, i, j]) - want) < 1e-12, "scalar attention h%d i%d j%d" % (h, i, j))


def check_schedule_tau(ck):
    """tau(T) at hand-worked points of the spec's example and the refusals of the spec."""
    pts = [(256, 1.0), (1024, 0.75), (2048, 0.65)]
    for T, want in ((1, 1.0), (256, 1.0), (512, 0.875), (1024, 0.75), (2048, 0.65), (10 ** 6, 0.65),
                    (1024 * math.sqrt(2), 0.7)):
        ck.ok(abs(R.schedule_tau(pts, T) - want) < 1e-15, "schedule tau(%g)" % T)
    facts = R.ModelFacts(False, 0, 2, 64, "rope")
    for bad in (od(("temperature", 0.8), ("temperature_schedule", od(("points", [[4, 1.0]])))),
                sched([]), sched([[4, 1.0], [4, 0.9]]), sched([[0, 1.0]]), sched([[4, 0.0]]),
                sched([[4, 1.0], [8, [0.9, 0.8]]]), sched([[4, [1.0, 0.9, 0.8]]])):
        try:
            R.check_rule(bad, facts)
            ck.ok(False, "refuses %s" % rule_text(bad))
        except R.RuleError:
            ck.ok(True, "refuses %s" % rule_text(bad))


def check_model_identities(ck, m):
    """Rules that must reduce to the identity, causality, and the fused-QKV split."""
    T = LENGTHS[m.name]
    ids, dec = draw_inputs(m, 424242, T)
    n = len(dec) if dec is not None else len(ids)
    base, base_stats = run_forward(m, od(), ids, dec)
    big = 10 * len(ids)
    same = [od(("temperature", 1.0)), od(("temperature", [1.0] * m.L)),
            od(("top_k", od(("k", 3), ("rows", "all"))))]
    if family(m) == "learned":
        same += [od(("lambda_mask", od(("n_global", 0), ("n_local", big))))]
        for bad in (od(("distance_ceiling", big)), od(("alibi_scale", od(("mode", "static"), ("factor", 2.0)))),
                    od(("fire_threshold", 12)),
                    od(("lambda_mask", LAMBDA), ("top_k", od(("k", 2), ("distance", 4))))):
            try:
                R.check_rule(bad, m.facts)
                ck.ok(False, "%s refuses %s" % (m.name, rule_text(bad)))
            except R.RuleError:
                ck.ok(True, "%s refuses %s" % (m.name, rule_text(bad)))
        # the positions matter: the same tokens shifted by one position give other logits
        if len(ids) < m.n_positions:
            w = m.w[m.prefix + "wpe.weight"]
            saved = w.clone()
            w[:-1] = saved[1:]
            shifted, _ = run_forward(m, od(), ids, dec)
            w.copy_(saved)
            ck.ok(rel_diff(shifted, base) > MIN_EFFECT, "%s: learned positions move the logits" % m.name)
    else:
        same += [od(("lambda_mask", od(("n_global", 0), ("n_local", big))), ("distance_ceiling", big)),
                 od(("distance_ceiling", big))]
    same += [sched([[4, 1.0], [16, 1.0]]), sched([[2, [1.0] * m.L], [9, [1.0] * m.L]])]
    if m.facts.is_t5:
        same += [od(("temperature", 1.0), ("temperature_scope", "all")),
                 sched([[4, 1.0], [16, 1.0]], "all")]
    if family(m) == "alibi":
        same += [od(("alibi_scale", od(("mode", "static"), ("factor", 1.0)))),
                 od(("alibi_scale", od(("mode", "dynamic"))), ("train_len", len(ids))),
                 od(("alibi_scale", od(("mode", "progressive"))), ("train_len", len(ids)))]
    if family(m) == "fire":
        L = float(m.w[m.fire_prefix(0) + "L"])
        same += [od(("fire_threshold", L))]
    for rule in same:
        logits, stats = run_forward(m, rule, ids, dec)
        ck.close(logits, base, 1e-12, "%s: %s is the identity" % (m.name, rule_text(rule)))
        ck.close(torch.stack([s[0] for s in stats]), torch.stack([s[0] for s in base_stats]), 1e-12,
                 "%s: %s stats" % (m.name, rule_text(rule)))
    # a schedule of one point (or of equal taus) is that constant temperature, per layer too
    for scope in ("self", "all") if m.facts.is_t5 else ("self",):
        a, _ = run_forward(m, sched([[7, 0.8]], scope), ids, dec)
        b, _ = run_forward(m, od(("temperature", 0.8), ("temperature_scope", scope)), ids, dec)
        ck.close(a, b, 1e-15, "%s: one-point schedule is the temperature (%s)" % (m.name, scope))
        a, _ = run_forward(m, sched([[3, [0.9] * m.L], [50, [0.9] * m.L]], scope), ids, dec)
        b, _ = run_forward(m, od(("temperature", 0.9), ("temperature_scope", scope)), ids, dec)
        ck.close(a, b, 1e-15, "%s: constant per-layer schedule is the temperature (%s)" % (m.name, scope))
    a, _ = run_forward(m, od(("temperature", [0.8] * m.L), ("temperature_scope", "self")), ids, dec)
    b, _ = run_forward(m, od(("temperature", 0.8), ("temperature_scope", "self")), ids, dec)
    ck.close(a, b, 0.0, "%s: a per-layer list of equal taus is the scalar" % m.name)
    if not m.facts.is_t5:
        a, _ = run_forward(m, od(("temperature", 0.8), ("temperature_scope", "encoder")), ids, dec)
        b, _ = run_forward(m, od(("temperature", 0.8)), ids, dec)
        ck.close(a, b, 0.0, "%s: temperature_scope ignored on decoder-only" % m.name)
    # causality: a prefix's logits do not depend on later tokens (identity and progressive)
    cut = n - 7
    rules = [od()] + ([od(("alibi_scale", od(("mode", "progressive"))))] if family(m) == "alibi" else [])
    for rule in rules:
        full, _ = run_forward(m, rule, ids, dec)
        if m.facts.is_t5:
            pre, _ = run_forward(m, rule, ids, dec[:cut])
        else:
            pre, _ = run_forward(m, rule, ids[:cut], dec)
        if R.rope_scaling_kind(getattr(m, "rope_scaling", None)) == "dynamic" and cut > m.train_len:
            # dynamic NTK: a forward's table is its length's, so a shorter prefix rotates at another base
            ck.ok(rel_diff(full[:cut], pre) > MIN_EFFECT, "%s: dynamic prefix differs" % m.name)
        else:
            ck.close(full[:cut], pre, 1e-12, "%s: causal prefix %s" % (m.name, rule_text(rule)))
    # KV-cache semantics: with n_prompt = cut, the prompt rows equal a prefill of the prompt
    if family(m) == "alibi":
        rule = od(("alibi_scale", od(("mode", "dynamic"))), ("train_len", 16))
        full, _ = m.forward(ids, rule, n_prompt=cut)
        pre, _ = m.forward(ids[:cut], rule)
        ck.close(full[:cut], pre, 1e-12, "%s: dynamic prompt rows = prefill" % m.name)
        whole, _ = m.forward(ids, rule)
        ck.ok(rel_diff(full[cut:], whole[cut:]) > MIN_EFFECT, "%s: dynamic decode rows differ" % m.name)
    # Gemma 3: the goldens tell the sliding layers' base and the full layers' factor apart (an engine
    # that rotated every layer alike, or scaled the local base, would miss them by more than 1e-4)
    if isinstance(m, M.Gemma3):
        saved = (m.theta_local, m.rope_factor)
        m.theta_local = m.theta
        one_base, _ = run_forward(m, od(), ids, dec)
        m.theta_local, m.rope_factor = saved[0], 1.0
        unscaled, _ = run_forward(m, od(), ids, dec)
        m.theta_local, m.rope_factor = saved
        ck.ok(rel_diff(one_base, base) > MIN_EFFECT, "%s: rope_local_base_freq moves the logits" % m.name)
        ck.ok(rel_diff(unscaled, base) > MIN_EFFECT, "%s: the full layers' linear factor moves the logits" % m.name)
    # fused QKV layouts
    if isinstance(m, M.GPT2):
        p, wq, wk, wv = m.check_split
        eye = torch.eye(m.D, dtype=R.DTYPE)
        q, k, v = m.split_qkv(eye @ m.w[p + "attn.c_attn.weight"])   # Conv1D: x W, W [in, out]
        ck.ok(torch.equal(M.merge(q), wq.t().to(R.DTYPE)) and torch.equal(M.merge(k), wk.t().to(R.DTYPE))
              and torch.equal(M.merge(v), wv.t().to(R.DTYPE)), "%s: Conv1D c_attn split" % m.name)
    if isinstance(m, (M.Bloom, M.NeoX)):
        p, wq, wk, wv = m.check_split
        key = p + ("self_attention.query_key_value.weight" if isinstance(m, M.Bloom)
                   else "attention.query_key_value.weight")
        eye = torch.eye(m.D, dtype=R.DTYPE)
        q, k, v = m.split_qkv(M.linear(eye, m.w[key]))   # rows of W^T per head
        ck.ok(torch.equal(M.merge(q), wq.t().to(R.DTYPE)) and torch.equal(M.merge(k), wk.t().to(R.DTYPE))
              and torch.equal(M.merge(v), wv.t().to(R.DTYPE)), "%s: fused qkv split" % m.name)


def check_topk_effect(ck, m, name, rule, info):
    """top_k must matter on its own: against the same rule without top_k, rows "decode" change
    only the last row (and visibly), rows "all" change the logits visibly."""
    tk = rule.get("top_k")
    if tk is None:
        return
    no_topk = collections.OrderedDict((k, v) for k, v in rule.items() if k != "top_k")
    ref, _ = run_forward(m, no_topk, info["ids"], info["dec"])
    got = info["logits"]
    if tk.get("rows", "decode") == "decode":
        ck.close(got[:-1], ref[:-1], 0.0, "%s/%s: top_k decode leaves prompt rows alone" % (m.name, name))
        d = float((got[-1] - ref[-1]).abs().max() / ref.abs().max())
    else:
        d = rel_diff(got, ref)
    ck.ok(d > MIN_EFFECT, "%s/%s: top_k effect %.3g" % (m.name, name, d))


def check_fp32_replay(ck, models, computed):
    """Replays every case in float32 from the same inputs: an fp32 engine that is right must be
    able to meet the 1e-4 comparison with room to spare, and reproduce every generated id."""
    worst = 0.0
    for m in models:
        m.set_working_dtype(torch.float32)
    try:
        for m, name, kind, rule, t in computed:
            ids, dec = t["input_ids"], t.get("decoder_input_ids")
            if kind == "forward":
                logits, stats = run_forward(m, rule, ids, dec)
                for got, want in ((logits, t["logits"]),
                                  (torch.stack([x[0] for x in stats]), t["stats_pmax"]),
                                  (torch.stack([x[1] for x in stats]), t["stats_entropy"])):
                    d = rel_diff(got.float(), want)
                    worst = max(worst, d)
                    ck.ok(d <= FP32_REPLAY_TOL, "%s/%s: fp32 replay differs by %.3g" % (m.name, name, d))
            else:
                gen, _, _ = greedy(m, rule, ids, dec, None)
                ck.ok(torch.equal(gen, t["generated"]), "%s/%s: fp32 replay generates %s" % (
                    m.name, name, gen.tolist()))
    finally:
        for m in models:
            m.set_working_dtype(R.DTYPE)
    return worst


def check_window_effect(ck, m, info):
    """The window must move the logits, or the golden could not tell it from an ignored one."""
    saved = (getattr(m, "windows", None), getattr(m, "window", None))
    if saved[0] is not None:
        m.windows = [None] * m.L
    m.window = None
    full, _ = run_forward(m, od(), info["ids"], info["dec"])
    m.windows, m.window = saved
    d = rel_diff(info["logits"], full)
    ck.ok(d > MIN_EFFECT, "%s: the sliding window changes the logits (%.3g)" % (m.name, d))
    print("%-12s the window moves the identity's logits by %.3g" % (m.name, d))


def check_written(ck, out, manifest):
    for entry in manifest["cases"]:
        meta, t = stio.read_safetensors(os.path.join(out, entry["file"]))
        ck.ok(meta["format_version"] == "1" and meta["model"] == entry["model"]
              and meta["kind"] == entry["kind"] and json.loads(meta["rule"]) == entry["rule"],
              "metadata of " + entry["file"])
        ck.ok(("logits" in t) == (entry["kind"] == "forward"), "tensors of " + entry["file"])


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--skip-checks", action="store_true", help="debugging only")
    ap.add_argument("--only", help="comma-separated model names: compute only these, keep the other models' files "
                                   "and manifest entries as they are in --out (appending a model costs minutes, not "
                                   "the whole set's hour on a loaded 2-core machine)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    models = build_models()
    only = set(args.only.split(",")) if args.only else None
    if only:
        unknown = only - {m.name for m in models}
        if unknown:
            sys.exit("--only: no model named %s" % ", ".join(sorted(unknown)))
        models = [m for m in models if m.name in only]
    ck = Checks()
    if not args.skip_checks:
        check_t5_bucket(ck)
        check_slopes(ck)
        check_rope(ck)
        check_blocks(ck)
        check_attention_scalar(ck)
        check_schedule_tau(ck)
        for m in models:
            check_model_identities(ck, m)
        print("self-checks before the cases passed: %d assertions" % ck.n)

    files = collections.OrderedDict()   # relative path -> bytes
    manifest_cases = []
    computed = []
    for m in models:
        mdir = "models/%s/" % m.name
        files[mdir + "config.json"] = stio.json_bytes(m.config)
        if m.fmt == "bin":
            files[mdir + "pytorch_model.bin"] = stio.torch_zip_bytes(m.tensors)
        else:
            files[mdir + "model.safetensors"] = stio.safetensors_bytes(m.tensors, {"format": "pt"})
        for ci, (name, kind, rule) in enumerate(cases_for(m)):
            tensors, info = compute_case(m, ci, name, kind, rule)
            effect = ""
            if m.name.endswith("_swa") and name == "identity" and not args.skip_checks:
                check_window_effect(ck, m, info)
            if kind == "forward":
                if name != "identity":
                    base, _ = run_forward(m, od(), info["ids"], info["dec"])
                    d = rel_diff(info["logits"], base)
                    effect = "effect %.3g" % d
                    if not args.skip_checks:
                        ck.ok(d > MIN_EFFECT, "%s/%s changes the logits (%.3g)" % (m.name, name, d))
                        check_topk_effect(ck, m, name, rule, info)
            else:
                base_gen, _, _ = greedy(m, od(), info["ids"], info["dec"], None)
                effect = "generated %s%s" % (info["generated"].tolist(),
                                             "" if name == "gen_identity" else
                                             (" (identity %s)" % base_gen.tolist()))
            fname = "cases/%s__%s.safetensors" % (m.name, name)
            meta = collections.OrderedDict([("format_version", str(FORMAT_VERSION)), ("model", m.name),
                                            ("kind", kind), ("rule", rule_text(rule))])
            files[fname] = stio.safetensors_bytes(tensors, meta)
            computed.append((m, name, kind, rule, tensors))
            manifest_cases.append(collections.OrderedDict([
                ("file", fname), ("model", m.name), ("case", name), ("rule", rule), ("kind", kind)]))
            print("%-12s %-24s %-8s draw %d  %s%s" % (
                m.name, name, kind, info["attempt"], effect,
                "  topk gap %.2g" % info["topk_gap"] if info["topk_gap"] != float("inf") else ""))

    if not args.skip_checks:
        worst = check_fp32_replay(ck, models, computed)
        print("fp32 replay: worst relative difference %.3g (tolerance %g), generations equal"
              % (worst, FP32_REPLAY_TOL))

    if only:   # the other models' entries kept, every model's in build_models' order
        old = json.load(open(os.path.join(args.out, "MANIFEST.json")))
        rank = {m.name: i for i, m in enumerate(build_models())}
        kept = [e for e in old["cases"] if e["model"] not in only]
        manifest_cases = sorted(kept + manifest_cases, key=lambda e: rank[e["model"]])   # stable
    manifest = collections.OrderedDict([
        ("format_version", FORMAT_VERSION), ("cases", manifest_cases),
        ("generator", GENERATOR), ("torch", torch.__version__)])
    files["MANIFEST.json"] = stio.json_bytes(manifest)

    # replace the whole folder's content: stale cases from an older case list must not survive
    for sub in ("models", "cases"):
        if only:
            for name in only:
                for stale in ([os.path.join(args.out, "models", name)] if sub == "models" else
                              [os.path.join(args.out, "cases", f) for f in os.listdir(os.path.join(args.out, "cases"))
                               if f.startswith(name + "__")]):
                    if os.path.isdir(stale):
                        shutil.rmtree(stale)
                    elif os.path.exists(stale):
                        os.remove(stale)
        elif os.path.isdir(os.path.join(args.out, sub)):
            shutil.rmtree(os.path.join(args.out, sub))
    total = 0
    for rel, data in files.items():
        stio.write_atomic(os.path.join(args.out, rel), data)
        total += len(data)
    if not args.skip_checks:
        check_written(ck, args.out, manifest)
        print("self-checks: %d assertions in all" % ck.n)
    print("wrote %d files (%d cases), %d bytes, under %s" % (len(files), len(manifest_cases), total, args.out))


if __name__ == "__main__":
    main()
