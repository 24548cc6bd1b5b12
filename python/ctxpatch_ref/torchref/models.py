"""Tiny random models in Hugging Face layout (config.json field names, tensor names) and their
forward passes in plain torch (float64), following HF's modeling code:
modeling_t5.py, modeling_bloom.py, modeling_mpt.py, modeling_llama.py, modeling_gpt_neox.py,
modeling_gpt2.py, modeling_phi3.py, modeling_gemma.py, modeling_gemma2.py, modeling_gemma3.py,
modeling_granite.py, modeling_olmo2.py, modeling_starcoder2.py;
FIRE follows docs/fire-layout.md (a Llama body without rotary plus a FIRE bias).

Every forward takes a rule (spec JSON as a dict) and returns (logits [rows, V], stats), where
stats is a list of (pmax [H], entropy [H]) per attention module in the order of
docs/attention-decisions.md item 3.
"""
import collections
import math

import torch

from . import rules as R

DTYPE = R.DTYPE


# ---------------------------------------------------------------- building blocks

def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    y = (x - mu) / torch.sqrt(var + eps) * w
    return y + b if b is not None else y


def rms_norm(x, w, eps):
    """T5LayerNorm / LlamaRMSNorm: no mean subtraction, no bias."""
    return w * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps))


def gelu_tanh(x):
    """gelu_new (T5 gated-gelu) and bloom_gelu_forward: the tanh approximation."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_exact(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def silu(x):
    return x * torch.sigmoid(x)


def linear(x, w, b=None):
    y = x @ w.t()
    return y + b if b is not None else y


def heads(x, n_heads):
    """[T, n*dh] -> [n, T, dh]"""
    T = x.shape[0]
    return x.view(T, n_heads, -1).transpose(0, 1)


def merge(x):
    """[n, T, dh] -> [T, n*dh]"""
    return x.transpose(0, 1).reshape(x.shape[1], -1)


class Init:
    """Seeded float32 initialiser; values are then rounded to the model's storage dtype."""

    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def normal(self, shape, std, mean=0.0):
        return torch.randn(shape, generator=self.g, dtype=torch.float32) * std + mean

    def uniform(self, shape, lo, hi):
        return torch.rand(shape, generator=self.g, dtype=torch.float32) * (hi - lo) + lo


class Model:
    fmt = "safetensors"       # or "bin" (torch.save zip)
    storage = torch.float32

    def finish(self, tensors):
        """Rounds to the storage dtype; the float64 working copy is made from the rounded values so
        that the reference computes exactly what a loader that widens would see."""
        self.tensors = collections.OrderedDict(
            (k, tensors[k].to(self.storage)) for k in sorted(tensors))
        self.set_working_dtype(DTYPE)

    def set_working_dtype(self, dtype):
        """float64 for the goldens; float32 only for the self-check that replays every case in
        single precision (what an engine computes in)."""
        self.w = {k: v.to(dtype) for k, v in self.tensors.items()}


# ---------------------------------------------------------------- T5

class T5(Model):
    def __init__(self, name, seed, gated, tied, storage=torch.float32, mix=1.0, emb_std=1.0, final_gain=1.0):
        self.name = name
        self.storage = storage
        V, D, H = 96, 32, 4
        dkv = 12 if gated else 8       # gated: inner dim 48 != d_model, as in T5 v1.1
        dff = 48 if gated else 64
        L = 2
        nb, md = 8, 20
        self.V, self.D, self.H, self.dkv, self.L, self.nb, self.md = V, D, H, dkv, L, nb, md
        self.gated, self.tied = gated, tied
        self.eps = 1e-6
        self.config = collections.OrderedDict([
            ("architectures", ["T5ForConditionalGeneration"]),
            ("d_ff", dff), ("d_kv", dkv), ("d_model", D),
            ("decoder_start_token_id", 0), ("dropout_rate", 0.0), ("eos_token_id", 1),
            ("feed_forward_proj", "gated-gelu" if gated else "relu"),
            ("initializer_factor", 1.0), ("is_encoder_decoder", True),
            ("layer_norm_epsilon", self.eps), ("model_type", "t5"),
            ("num_decoder_layers", L), ("num_heads", H), ("num_layers", L),
            ("pad_token_id", 0),
            ("relative_attention_max_distance", md), ("relative_attention_num_buckets", nb),
            ("tie_word_embeddings", tied),
            ("torch_dtype", {torch.float32: "float32", torch.float16: "float16"}[storage]),
            ("use_cache", True), ("vocab_size", V),
        ])
        self.facts = R.ModelFacts(True, L, L, None, "t5")
        g = Init(seed)
        inner = H * dkv
        sq = 0.17 if not gated else 0.14   # T5 has no 1/sqrt(d): this gives logits of std ~2-3
        t = {"shared.weight": g.normal([V, D], emb_std)}
        for stack in ("encoder", "decoder"):
            for l in range(L):
                p = "%s.block.%d.layer." % (stack, l)
                for m, std in (("q", sq), ("k", sq), ("v", 0.15)):
                    t[p + "0.SelfAttention.%s.weight" % m] = g.normal([inner, D], std)
                t[p + "0.SelfAttention.o.weight"] = g.normal([D, inner], 0.15 * mix)
                if l == 0:
                    t[p + "0.SelfAttention.relative_attention_bias.weight"] = g.normal([nb, H], 1.5)
                t[p + "0.layer_norm.weight"] = g.normal([D], 0.1, 1.0)
                ff = "1"
                if stack == "decoder":
                    for m, std in (("q", sq), ("k", sq), ("v", 0.15)):
                        t[p + "1.EncDecAttention.%s.weight" % m] = g.normal([inner, D], std)
                    t[p + "1.EncDecAttention.o.weight"] = g.normal([D, inner], 0.15 * mix)
                    t[p + "1.layer_norm.weight"] = g.normal([D], 0.1, 1.0)
                    ff = "2"
                if gated:
                    t[p + ff + ".DenseReluDense.wi_0.weight"] = g.normal([dff, D], 0.2)
                    t[p + ff + ".DenseReluDense.wi_1.weight"] = g.normal([dff, D], 0.2)
                else:
                    t[p + ff + ".DenseReluDense.wi.weight"] = g.normal([dff, D], 0.2)
                t[p + ff + ".DenseReluDense.wo.weight"] = g.normal([D, dff], 0.15 * mix)
                t[p + ff + ".layer_norm.weight"] = g.normal([D], 0.1, 1.0)
            t["%s.final_layer_norm.weight" % stack] = g.normal([D], 0.1, 1.0) * (
                final_gain if stack == "decoder" else 1.0)
        if not tied:
            t["lm_head.weight"] = g.normal([V, D], 0.3)
        self.finish(t)

    def _ff(self, p, h):
        w = self.w
        x = rms_norm(h, w[p + ".layer_norm.weight"], self.eps)
        if self.gated:
            y = gelu_tanh(linear(x, w[p + ".DenseReluDense.wi_0.weight"])) * \
                linear(x, w[p + ".DenseReluDense.wi_1.weight"])
        else:
            y = torch.relu(linear(x, w[p + ".DenseReluDense.wi.weight"]))
        return h + linear(y, w[p + ".DenseReluDense.wo.weight"])

    def _self_attn(self, stack, l, h, rule, pinfo, margins, stats):
        w, H = self.w, self.H
        p = "%s.block.%d.layer.0." % (stack, l)
        x = rms_norm(h, w[p + "layer_norm.weight"], self.eps)
        q = heads(linear(x, w[p + "SelfAttention.q.weight"]), H)
        k = heads(linear(x, w[p + "SelfAttention.k.weight"]), H)
        v = heads(linear(x, w[p + "SelfAttention.v.weight"]), H)
        # the bucket table of block 0 serves every layer of the stack
        table = w["%s.block.0.layer.0.SelfAttention.relative_attention_bias.weight" % stack]
        enc = stack == "encoder"
        plan = R.Plan(rule, self.facts, "enc" if enc else "dec", l)
        score = R.t5_scorer(q, k, table, enc, self.nb, self.md)
        out, P = R.attention(plan, pinfo, score, v, h.shape[0], margins)
        stats.append(R.head_stats(P))
        return h + linear(merge(out), w[p + "SelfAttention.o.weight"])

    def encode(self, ids, rule, margins=None):
        w = self.w
        h = w["shared.weight"][ids]
        stats = []
        pinfo = R.PassInfo(len(ids))
        for l in range(self.L):
            h = self._self_attn("encoder", l, h, rule, pinfo, margins, stats)
            h = self._ff("encoder.block.%d.layer.1" % l, h)
        return rms_norm(h, w["encoder.final_layer_norm.weight"], self.eps), stats

    def forward(self, ids, rule, dec_ids, n_prompt=None, margins=None):
        w, H = self.w, self.H
        R.check_rule(rule, self.facts)
        enc, enc_stats = self.encode(ids, rule, margins)
        Td = len(dec_ids)
        pinfo = R.PassInfo(Td if n_prompt is None else n_prompt)
        h = w["shared.weight"][dec_ids]
        self_stats, cross_stats = [], []
        for l in range(self.L):
            h = self._self_attn("decoder", l, h, rule, pinfo, margins, self_stats)
            p = "decoder.block.%d.layer.1." % l
            x = rms_norm(h, w[p + "layer_norm.weight"], self.eps)
            q = heads(linear(x, w[p + "EncDecAttention.q.weight"]), H)
            k = heads(linear(enc, w[p + "EncDecAttention.k.weight"]), H)
            v = heads(linear(enc, w[p + "EncDecAttention.v.weight"]), H)
            plan = R.Plan(rule, self.facts, "cross", l)
            out, P = R.attention(plan, pinfo, R.qk_dot(q, k, 1.0), v, Td, margins)
            cross_stats.append(R.head_stats(P))
            h = h + linear(merge(out), w[p + "EncDecAttention.o.weight"])
            h = self._ff("decoder.block.%d.layer.2" % l, h)
        h = rms_norm(h, w["decoder.final_layer_norm.weight"], self.eps)
        if self.tied:
            h = h * (self.D ** -0.5)    # HF rescales before the tied lm_head
            logits = linear(h, w["shared.weight"])
        else:
            logits = linear(h, w["lm_head.weight"])
        return logits, enc_stats + self_stats + cross_stats


# ---------------------------------------------------------------- BLOOM

class Bloom(Model):
    def __init__(self, name, seed, train_len=24, mix=1.0):
        self.name = name
        V, D, H, L = 96, 32, 4, 3
        self.V, self.D, self.H, self.L = V, D, H, L
        self.eps = 1e-5
        self.config = collections.OrderedDict([
            ("apply_residual_connection_post_layernorm", False),
            ("architectures", ["BloomForCausalLM"]),
            ("attention_dropout", 0.0), ("bos_token_id", 1), ("eos_token_id", 2),
            ("hidden_dropout", 0.0), ("hidden_size", D), ("initializer_range", 0.02),
            ("layer_norm_epsilon", self.eps), ("model_type", "bloom"),
            ("n_head", H), ("n_layer", L), ("pad_token_id", 3), ("pretraining_tp", 1),
            ("seq_length", train_len), ("slow_but_exact", False),
            ("tie_word_embeddings", True), ("torch_dtype", "float32"),
            ("use_cache", True), ("vocab_size", V),
        ])
        self.facts = R.ModelFacts(False, 0, L, train_len, "alibi")
        self.slopes = R.bloom_slopes(H)
        g = Init(seed)
        dh = D // H
        t = {"transformer.word_embeddings.weight": g.normal([V, D], 0.5),
             "transformer.word_embeddings_layernorm.weight": g.normal([D], 0.1, 1.0),
             "transformer.word_embeddings_layernorm.bias": g.normal([D], 0.05)}
        for l in range(L):
            p = "transformer.h.%d." % l
            t[p + "input_layernorm.weight"] = g.normal([D], 0.1, 1.0)
            t[p + "input_layernorm.bias"] = g.normal([D], 0.05)
            wq, wk, wv = g.normal([D, D], 0.3), g.normal([D, D], 0.3), g.normal([D, D], 0.2)
            bq, bk, bv = g.normal([D], 0.1), g.normal([D], 0.1), g.normal([D], 0.05)
            # fused [3D, D], output dim laid out [H, 3, dh] (BLOOM interleaves per head)
            t[p + "self_attention.query_key_value.weight"] = torch.stack(
                [wq.view(H, dh, D), wk.view(H, dh, D), wv.view(H, dh, D)], dim=1).reshape(3 * D, D)
            t[p + "self_attention.query_key_value.bias"] = torch.stack(
                [bq.view(H, dh), bk.view(H, dh), bv.view(H, dh)], dim=1).reshape(3 * D)
            self.check_split = (p, wq, wk, wv)
            t[p + "self_attention.dense.weight"] = g.normal([D, D], 0.2 * mix)
            t[p + "self_attention.dense.bias"] = g.normal([D], 0.05)
            t[p + "post_attention_layernorm.weight"] = g.normal([D], 0.1, 1.0)
            t[p + "post_attention_layernorm.bias"] = g.normal([D], 0.05)
            t[p + "mlp.dense_h_to_4h.weight"] = g.normal([4 * D, D], 0.2)
            t[p + "mlp.dense_h_to_4h.bias"] = g.normal([4 * D], 0.05)
            t[p + "mlp.dense_4h_to_h.weight"] = g.normal([D, 4 * D], 0.1 * mix)
            t[p + "mlp.dense_4h_to_h.bias"] = g.normal([D], 0.05)
        t["transformer.ln_f.weight"] = g.normal([D], 0.1, 1.0)
        t["transformer.ln_f.bias"] = g.normal([D], 0.05)
        self.finish(t)

    def split_qkv(self, fused):
        """HF BloomAttention._split_heads: view [T, H, 3, dh]."""
        T = fused.shape[0]
        f = fused.view(T, self.H, 3, self.D // self.H)
        return (f[:, :, 0].transpose(0, 1), f[:, :, 1].transpose(0, 1), f[:, :, 2].transpose(0, 1))

    def forward(self, ids, rule, n_prompt=None, margins=None):
        w, H, T = self.w, self.H, len(ids)
        R.check_rule(rule, self.facts)
        pinfo = R.PassInfo(T if n_prompt is None else n_prompt)
        h = w["transformer.word_embeddings.weight"][ids]
        h = layer_norm(h, w["transformer.word_embeddings_layernorm.weight"],
                       w["transformer.word_embeddings_layernorm.bias"], self.eps)
        stats = []
        c = 1.0 / math.sqrt(self.D // H)
        for l in range(self.L):
            p = "transformer.h.%d." % l
            x = layer_norm(h, w[p + "input_layernorm.weight"], w[p + "input_layernorm.bias"], self.eps)
            q, k, v = self.split_qkv(linear(x, w[p + "self_attention.query_key_value.weight"],
                                            w[p + "self_attention.query_key_value.bias"]))
            plan = R.Plan(rule, self.facts, "dec", l)
            score = R.alibi_scorer(q, k, c, self.slopes, plan.alibi_divisor(T, pinfo, h.dtype))
            out, P = R.attention(plan, pinfo, score, v, T, margins)
            stats.append(R.head_stats(P))
            h = h + linear(merge(out), w[p + "self_attention.dense.weight"], w[p + "self_attention.dense.bias"])
            x = layer_norm(h, w[p + "post_attention_layernorm.weight"], w[p + "post_attention_layernorm.bias"], self.eps)
            y = gelu_tanh(linear(x, w[p + "mlp.dense_h_to_4h.weight"], w[p + "mlp.dense_h_to_4h.bias"]))
            h = h + linear(y, w[p + "mlp.dense_4h_to_h.weight"], w[p + "mlp.dense_4h_to_h.bias"])
        h = layer_norm(h, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], self.eps)
        return linear(h, w["transformer.word_embeddings.weight"]), stats


# ---------------------------------------------------------------- MPT

class Mpt(Model):
    def __init__(self, name, seed, n_heads=6, alibi_bias_max=6.0, train_len=24, mix=1.0):
        self.name = name
        V, D, H, L = 96, 6 * n_heads, n_heads, 2
        self.V, self.D, self.H, self.L = V, D, H, L
        self.eps = 1e-5
        self.config = collections.OrderedDict([
            ("architectures", ["MptForCausalLM"]),
            ("attn_config", collections.OrderedDict([
                ("alibi", True), ("alibi_bias_max", alibi_bias_max), ("attn_impl", "torch"),
                ("attn_pdrop", 0.0), ("attn_type", "multihead_attention"), ("clip_qkv", None),
                ("prefix_lm", False), ("qk_ln", False), ("softmax_scale", None)])),
            ("d_model", D), ("emb_pdrop", 0.0), ("expansion_ratio", 4),
            ("init_device", "cpu"), ("layer_norm_epsilon", self.eps),
            ("learned_pos_emb", False), ("logit_scale", None),
            ("max_seq_len", train_len), ("model_type", "mpt"),
            ("n_heads", H), ("n_layers", L), ("no_bias", True),
            ("norm_type", "low_precision_layernorm"), ("resid_pdrop", 0.0),
            ("torch_dtype", "float32"), ("use_cache", True), ("vocab_size", V),
        ])
        self.facts = R.ModelFacts(False, 0, L, train_len, "alibi")
        self.slopes = R.mpt_slopes(H, alibi_bias_max)
        g = Init(seed)
        t = {"transformer.wte.weight": g.normal([V, D], 0.5)}
        for l in range(L):
            p = "transformer.blocks.%d." % l
            t[p + "norm_1.weight"] = g.normal([D], 0.1, 1.0)
            # q, k, v concatenated along the output dim (not interleaved)
            t[p + "attn.Wqkv.weight"] = torch.cat(
                [g.normal([D, D], 0.25), g.normal([D, D], 0.25), g.normal([D, D], 0.2)], dim=0)
            t[p + "attn.out_proj.weight"] = g.normal([D, D], 0.15 * mix)
            t[p + "norm_2.weight"] = g.normal([D], 0.1, 1.0)
            t[p + "ffn.up_proj.weight"] = g.normal([4 * D, D], 0.15)
            t[p + "ffn.down_proj.weight"] = g.normal([D, 4 * D], 0.08 * mix)
        t["transformer.norm_f.weight"] = g.normal([D], 0.1, 1.0)
        self.finish(t)

    def forward(self, ids, rule, n_prompt=None, margins=None):
        w, H, T, D = self.w, self.H, len(ids), self.D
        R.check_rule(rule, self.facts)
        pinfo = R.PassInfo(T if n_prompt is None else n_prompt)
        h = w["transformer.wte.weight"][ids]
        stats = []
        c = 1.0 / math.sqrt(D // H)
        for l in range(self.L):
            p = "transformer.blocks.%d." % l
            x = layer_norm(h, w[p + "norm_1.weight"], None, self.eps)
            qkv = linear(x, w[p + "attn.Wqkv.weight"])
            q, k, v = (heads(t, H) for t in qkv.chunk(3, dim=-1))
            plan = R.Plan(rule, self.facts, "dec", l)
            score = R.alibi_scorer(q, k, c, self.slopes, plan.alibi_divisor(T, pinfo, h.dtype))
            out, P = R.attention(plan, pinfo, score, v, T, margins)
            stats.append(R.head_stats(P))
            h = h + linear(merge(out), w[p + "attn.out_proj.weight"])
            x = layer_norm(h, w[p + "norm_2.weight"], None, self.eps)
            h = h + linear(gelu_exact(linear(x, w[p + "ffn.up_proj.weight"])), w[p + "ffn.down_proj.weight"])
        h = layer_norm(h, w["transformer.norm_f.weight"], None, self.eps)
        return linear(h, w["transformer.wte.weight"]), stats


# ---------------------------------------------------------------- Llama and FIRE (Llama body)

class Llama(Model):
    """pos = "rope" (Llama) or "fire" (docs/fire-layout.md)."""

    def __init__(self, name, seed, pos="rope", rope_factor=None, storage=torch.float32,
                 train_len=24, fire_shared=False, fire_c=0.5, fire_L=20.0, fire_layers=1, n_layers=3,
                 n_heads=4, n_kv=2, D=32, dff=64, V=96, tied=False, mix=1.0, rope_scaling=None, qwen2=False,
                 qwen3=False, head_dim=None, mistral=False, window=None, max_window_layers=None):
        self.name = name
        self.storage = storage
        self.pos = pos
        self.V, self.D, self.H, self.Hkv, self.L = V, D, n_heads, n_kv, n_layers
        # explicit head_dim (Qwen3Config.head_dim): q is [H*dh, D] and o [D, H*dh], whatever D / H is
        self.dh = head_dim or D // n_heads
        self.eps = 1e-6
        self.theta = 10000.0
        self.rope_factor = rope_factor or 1.0
        # a llama3 / yarn rope_scaling (rope_factor is the linear one): its table and cos/sin factor
        self.rope_inv, self.rope_mscale = (R.rope_scaled_inv_freq(self.dh, self.theta, rope_scaling, train_len)
                                           if rope_scaling else (None, 1.0))
        # dynamic / longrope: the table of each forward, by its length (forward sets it)
        self.rope_scaling, self.train_len = rope_scaling, train_len
        self.tied = tied
        self.qwen2 = qwen2   # modeling_qwen2.py: q/k/v projections with biases, o without
        # modeling_qwen3.py (Qwen3Attention.forward): q_norm / k_norm, RMSNorm over each head's
        # head_dim (eps rms_norm_eps), applied to the projections before apply_rotary_pos_emb
        self.qwen3 = qwen3
        self.fire_shared = fire_shared
        self.fire_layers = fire_layers
        # sliding windows (transformers' masking_utils.sliding_window_overlay: key j visible to
        # query i when i - j < window): MistralModel on every layer when config.sliding_window is
        # set; Qwen2Config (Qwen3Config alike) only with use_sliding_window, on the layers from
        # max_window_layers on (its default layer_types)
        if mistral:
            self.windows = [window] * n_layers
        elif window:
            self.windows = [window if l >= max_window_layers else None for l in range(n_layers)]
        else:
            self.windows = [None] * n_layers
        dtype_name = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}[storage]
        cfg = [("architectures", ["Qwen2ForCausalLM" if qwen2 else "Qwen3ForCausalLM" if qwen3 else
                                  "MistralForCausalLM" if mistral else
                                  "LlamaForCausalLM" if pos == "rope" else "CtxpatchFireForCausalLM"]),
               ("attention_bias", False), ("bos_token_id", 1), ("eos_token_id", 2)]
        if head_dim is not None:
            cfg += [("head_dim", head_dim)]
        cfg += [("hidden_act", "silu"), ("hidden_size", D), ("initializer_range", 0.02),
                ("intermediate_size", dff), ("max_position_embeddings", train_len),
                ("model_type", "qwen2" if qwen2 else "qwen3" if qwen3 else "mistral" if mistral else
                 "llama" if pos == "rope" else "ctxpatch_fire"),
                ("num_attention_heads", n_heads), ("num_hidden_layers", n_layers),
                ("num_key_value_heads", n_kv), ("rms_norm_eps", self.eps)]
        if pos == "rope":
            cfg += [("rope_scaling", rope_scaling if rope_scaling else None if rope_factor is None else
                     collections.OrderedDict([("type", "linear"), ("factor", float(rope_factor))])),
                    ("rope_theta", self.theta)]
        else:
            cfg += [("fire_c_init", 1.0)]
            if fire_layers != 1:   # the key is absent from the one-layer models (their bytes kept)
                cfg += [("fire_mlp_layers", fire_layers)]
            cfg += [("fire_mlp_width", 32), ("fire_shared", fire_shared),
                    ("fire_threshold", float(train_len))]
        if mistral:
            cfg += [("sliding_window", window)]
        elif window:
            cfg += [("use_sliding_window", True), ("sliding_window", window), ("max_window_layers", max_window_layers)]
        cfg += [("tie_word_embeddings", tied), ("torch_dtype", dtype_name), ("use_cache", True),
                ("vocab_size", V)]
        self.config = collections.OrderedDict(cfg)
        self.facts = R.ModelFacts(False, 0, n_layers, train_len, pos)
        g = Init(seed)
        kvd, qd = n_kv * self.dh, n_heads * self.dh
        t = {"model.embed_tokens.weight": g.normal([V, D], 0.5)}
        for l in range(n_layers):
            p = "model.layers.%d." % l
            t[p + "input_layernorm.weight"] = g.normal([D], 0.1, 1.0)
            t[p + "self_attn.q_proj.weight"] = g.normal([qd, D], 0.3)
            t[p + "self_attn.k_proj.weight"] = g.normal([kvd, D], 0.3)
            t[p + "self_attn.v_proj.weight"] = g.normal([kvd, D], 0.2)
            if qwen2:
                t[p + "self_attn.q_proj.bias"] = g.normal([qd], 0.3)
                t[p + "self_attn.k_proj.bias"] = g.normal([kvd], 0.3)
                t[p + "self_attn.v_proj.bias"] = g.normal([kvd], 0.2)
            t[p + "self_attn.o_proj.weight"] = g.normal([D, qd], 0.2 * mix)
            if qwen3:   # wide gains, so that a missing or misplaced norm shows in the logits
                t[p + "self_attn.q_norm.weight"] = g.normal([self.dh], 0.4, 1.0)
                t[p + "self_attn.k_norm.weight"] = g.normal([self.dh], 0.4, 1.0)
            t[p + "post_attention_layernorm.weight"] = g.normal([D], 0.1, 1.0)
            t[p + "mlp.gate_proj.weight"] = g.normal([dff, D], 0.2)
            t[p + "mlp.up_proj.weight"] = g.normal([dff, D], 0.2)
            t[p + "mlp.down_proj.weight"] = g.normal([D, dff], 0.15 * mix)
            if pos == "fire" and not fire_shared:
                self._fire_params(t, p + "self_attn.fire.", g, fire_c, fire_L)
        if pos == "fire" and fire_shared:
            self._fire_params(t, "model.fire.", g, fire_c, fire_L)
        t["model.norm.weight"] = g.normal([D], 0.1, 1.0)
        if not tied:
            t["lm_head.weight"] = g.normal([V, D], 0.3)
        self.finish(t)

    def _fire_params(self, t, P, g, c, L):
        W, H = 32, self.H
        t[P + "mlp.0.weight"] = g.normal([W, 1], 3.0)
        t[P + "mlp.0.bias"] = g.normal([W], 0.5)
        out = 2
        if self.fire_layers == 2:   # nn.Sequential(Linear, ReLU, Linear, ReLU, Linear)
            t[P + "mlp.2.weight"] = g.normal([W, W], 0.2)
            t[P + "mlp.2.bias"] = g.normal([W], 0.3)
            out = 4
        t[P + "mlp.%d.weight" % out] = g.normal([H, W], 0.4)
        t[P + "mlp.%d.bias" % out] = g.normal([H], 0.5)
        t[P + "c"] = torch.tensor(c, dtype=torch.float32)
        t[P + "L"] = torch.tensor(L, dtype=torch.float32)

    def fire_prefix(self, l):
        return "model.fire." if self.fire_shared else "model.layers.%d.self_attn.fire." % l

    def scorer(self, l, q, k, plan):
        c = 1.0 / math.sqrt(self.dh)
        if self.pos == "rope":
            inv = None if self.rope_inv is None else self.rope_inv.to(q.dtype)   # the fp32 replay too
            return R.rope_scorer(q, k, c, self.dh, self.theta, self.rope_factor, inv, self.rope_mscale)
        w, P = self.w, self.fire_prefix(l)
        idx = (0, 2, 4) if self.fire_layers == 2 else (0, 2)
        mlp = tuple(w[P + "mlp.%d.%s" % (i, s)] for i in idx for s in ("weight", "bias"))
        L = float(plan.fire_threshold) if plan.fire_threshold is not None else float(w[P + "L"])
        return R.fire_scorer(q, k, c, mlp, float(w[P + "c"]), L)

    def forward(self, ids, rule, n_prompt=None, margins=None):
        w, H, T = self.w, self.H, len(ids)
        R.check_rule(rule, self.facts)
        pinfo = R.PassInfo(T if n_prompt is None else n_prompt)
        h = w["model.embed_tokens.weight"][ids]
        stats = []
        rep = self.H // self.Hkv
        if R.rope_scaling_kind(self.rope_scaling) in R.ROPE_BY_LENGTH:
            self.rope_inv, self.rope_mscale = R.rope_scaled_inv_freq(self.dh, self.theta, self.rope_scaling,
                                                                     self.train_len, seq_len=T)
        for l in range(self.L):
            p = "model.layers.%d." % l
            x = rms_norm(h, w[p + "input_layernorm.weight"], self.eps)
            def proj(name):
                b = w.get(p + "self_attn.%s_proj.bias" % name)
                return linear(x, w[p + "self_attn.%s_proj.weight" % name], b) if b is not None else \
                    linear(x, w[p + "self_attn.%s_proj.weight" % name])
            q = heads(proj("q"), H)
            k = heads(proj("k"), self.Hkv)
            if self.qwen3:   # per head [.., T, dh], before RoPE (the scorer rotates)
                q = rms_norm(q, w[p + "self_attn.q_norm.weight"], self.eps)
                k = rms_norm(k, w[p + "self_attn.k_norm.weight"], self.eps)
            # repeat_kv: query head h reads kv head h // rep
            k = k.repeat_interleave(rep, dim=0)
            v = heads(proj("v"), self.Hkv).repeat_interleave(rep, dim=0)
            plan = R.Plan(rule, self.facts, "dec", l)
            plan.window = self.windows[l]
            out, P = R.attention(plan, pinfo, self.scorer(l, q, k, plan), v, T, margins)
            stats.append(R.head_stats(P))
            h = h + linear(merge(out), w[p + "self_attn.o_proj.weight"])
            x = rms_norm(h, w[p + "post_attention_layernorm.weight"], self.eps)
            y = silu(linear(x, w[p + "mlp.gate_proj.weight"])) * linear(x, w[p + "mlp.up_proj.weight"])
            h = h + linear(y, w[p + "mlp.down_proj.weight"])
        h = rms_norm(h, w["model.norm.weight"], self.eps)
        head = w["model.embed_tokens.weight"] if self.tied else w["lm_head.weight"]
        return linear(h, head), stats


# ---------------------------------------------------------------- Granite

class Granite(Llama):
    """transformers' models/granite/modeling_granite.py (read with the search tool) and
    configuration_granite.py: Llama's weights and names (drawn by Llama.__init__), and four
    multipliers: GraniteModel.forward embeds as embed_tokens(ids) * embedding_multiplier;
    GraniteAttention.scaling = attention_multiplier (head_dim = hidden_size // num_heads, no
    head_dim key); GraniteDecoderLayer.forward: residual + hidden_states * residual_multiplier,
    after the attention and after the MLP; GraniteForCausalLM.forward: logits / logits_scaling."""

    def __init__(self, name, seed, emb_mult=2.0, resid_mult=0.5, attn_mult=0.35, logits_scaling=2.0, **kw):
        super().__init__(name, seed, pos="rope", **kw)
        self.emb_mult, self.resid_mult, self.attn_mult, self.logits_scaling = \
            emb_mult, resid_mult, attn_mult, logits_scaling
        cfg = collections.OrderedDict()
        for k, v in self.config.items():
            if k == "architectures":
                v = ["GraniteForCausalLM"]
            elif k == "model_type":
                v = "granite"
            cfg[k] = v
            if k == "attention_bias":
                cfg["attention_multiplier"] = attn_mult
            elif k == "bos_token_id":
                cfg["embedding_multiplier"] = emb_mult
            elif k == "intermediate_size":
                cfg["logits_scaling"] = logits_scaling
            elif k == "num_key_value_heads":
                cfg["residual_multiplier"] = resid_mult
        self.config = cfg

    def forward(self, ids, rule, n_prompt=None, margins=None):
        w, H, T = self.w, self.H, len(ids)
        R.check_rule(rule, self.facts)
        pinfo = R.PassInfo(T if n_prompt is None else n_prompt)
        h = w["model.embed_tokens.weight"][ids] * self.emb_mult
        stats = []
        rep = self.H // self.Hkv
        for l in range(self.L):
            p = "model.layers.%d." % l
            x = rms_norm(h, w[p + "input_layernorm.weight"], self.eps)
            q = heads(linear(x, w[p + "self_attn.q_proj.weight"]), H)
            k = heads(linear(x, w[p + "self_attn.k_proj.weight"]), self.Hkv).repeat_interleave(rep, dim=0)
            v = heads(linear(x, w[p + "self_attn.v_proj.weight"]), self.Hkv).repeat_interleave(rep, dim=0)
            plan = R.Plan(rule, self.facts, "dec", l)
            score = R.rope_scorer(q, k, self.attn_mult, self.dh, self.theta, 1.0)
            out, P = R.attention(plan, pinfo, score, v, T, margins)
            stats.append(R.head_stats(P))
            h = h + linear(merge(out), w[p + "self_attn.o_proj.weight"]) * self.resid_mult
            x = rms_norm(h, w[p + "post_attention_layernorm.weight"], self.eps)
            y = silu(linear(x, w[p + "mlp.gate_proj.weight"])) * linear(x, w[p + "mlp.up_proj.weight"])
            h = h + linear(y, w[p + "mlp.down_proj.weight"]) * self.resid_mult
        h = rms_norm(h, w["model.norm.weight"], self.eps)
        head = w["model.embed_tokens.weight"] if self.tied else w["lm_head.weight"]
        return linear(h, head) / self.logits_scaling, stats


# ---------------------------------------------------------------- OLMo 2

class Olmo2(Model):
    """transformers' models/olmo2/modeling_olmo2.py (read with the search tool) and
    configuration_olmo2.py. Olmo2DecoderLayer.forward has no pre-norms:
    h = h + post_attention_layernorm(self_attn(h)); h = h + post_feedforward_layernorm(mlp(h)).
    Olmo2Attention.forward: query_states = q_norm(q_proj(h)), key_states = k_norm(k_proj(h)), RMSNorms
    over the whole projection (q_norm [H*dh], k_norm [Hkv*dh], eps rms_norm_eps) before the view
    into heads and apply_rotary_pos_emb (rotate-half); scaling head_dim^-0.5; no biases
    (attention_bias false); Olmo2MLP is Llama's SiLU gate; untied lm_head."""

    def __init__(self, name, seed, n_layers=2, n_heads=4, n_kv=2, D=64, dff=96, V=96, train_len=32, tied=False,
                 mix=1.0):
        self.name = name
        self.V, self.D, self.H, self.Hkv, self.L = V, D, n_heads, n_kv, n_layers
        self.dh = D // n_heads
        self.eps = 1e-6
        self.theta = 10000.0
        self.tied = tied
        self.config = collections.OrderedDict([
            ("architectures", ["Olmo2ForCausalLM"]), ("attention_bias", False), ("attention_dropout", 0.0),
            ("eos_token_id", 2), ("hidden_act", "silu"), ("hidden_size", D), ("initializer_range", 0.02),
            ("intermediate_size", dff), ("max_position_embeddings", train_len), ("model_type", "olmo2"),
            ("num_attention_heads", n_heads), ("num_hidden_layers", n_layers), ("num_key_value_heads", n_kv),
            ("pad_token_id", 1), ("rms_norm_eps", self.eps), ("rope_scaling", None), ("rope_theta", self.theta),
            ("tie_word_embeddings", tied), ("torch_dtype", "float32"), ("use_cache", True), ("vocab_size", V)])
        self.facts = R.ModelFacts(False, 0, n_layers, train_len, "rope")
        g = Init(seed)
        kvd, qd = n_kv * self.dh, n_heads * self.dh
        t = {"model.embed_tokens.weight": g.normal([V, D], 0.5)}
        for l in range(n_layers):
            p = "model.layers.%d." % l
            t[p + "self_attn.q_proj.weight"] = g.normal([qd, D], 0.3)
            t[p + "self_attn.k_proj.weight"] = g.normal([kvd, D], 0.3)
            t[p + "self_attn.v_proj.weight"] = g.normal([kvd, D], 0.2)
            t[p + "self_attn.o_proj.weight"] = g.normal([D, qd], 0.2 * mix)
            # wide gains, so that a per-head (Qwen3's) or a missing norm shows in the logits
            t[p + "self_attn.q_norm.weight"] = g.normal([qd], 0.4, 1.0)
            t[p + "self_attn.k_norm.weight"] = g.normal([kvd], 0.4, 1.0)
            t[p + "post_attention_layernorm.weight"] = g.normal([D], 0.3, 1.0)
            t[p + "mlp.gate_proj.weight"] = g.normal([dff, D], 0.2)
            t[p + "mlp.up_proj.weight"] = g.normal([dff, D], 0.2)
            t[p + "mlp.down_proj.weight"] = g.normal([D, dff], 0.15 * mix)
            t[p + "post_feedforward_layernorm.weight"] = g.normal([D], 0.3, 1.0)
        t["model.norm.weight"] = g.normal([D], 0.1, 1.0)
        if not tied:
            t["lm_head.weight"] = g.normal([V, D], 0.3)
        self.finish(t)

    def forward(self, ids, rule, n_prompt=None, margins=None):
        w, H, T = self.w, self.H, len(ids)
        R.check_rule(rule, self.facts)
        pinfo = R.PassInfo(T if n_prompt is None else n_prompt)
        h = w["model.embed_tokens.weight"][ids]
        stats = []
        rep = self.H // self.Hkv
        for l in range(self.L):
            p = "model.layers.%d." % l
            q = rms_norm(linear(h, w[p + "self_attn.q_proj.weight"]), w[p + "self_attn.q_norm.weight"], self.eps)
            k = rms_norm(linear(h, w[p + "self_attn.k_proj.weight"]), w[p + "self_attn.k_norm.weight"], self.eps)
            q = heads(q, H)
            k = heads(k, self.Hkv).repeat_interleave(rep, dim=0)
            v = heads(linear(h, w[p + "self_attn.v_proj.weight"]), self.Hkv).repeat_interleave(rep, dim=0)
            plan = R.Plan(rule, self.facts, "dec", l)
            score = R.rope_scorer(q, k, 1.0 / math.sqrt(self.dh), self.dh, self.theta, 1.0)
            out, P = R.attention(plan, pinfo, score, v, T, margins)
            stats.append(R.head_stats(P))
            a = linear(merge(out), w[p + "self_attn.o_proj.weight"])
            h = h + rms_norm(a, w[p + "post_attention_layernorm.weight"], self.eps)
            y = silu(linear(h, w[p + "mlp.gate_proj.weight"])) * linear(h, w[p + "mlp.up_proj.weight"])
            y = linear(y, w[p + "mlp.down_proj.weight"])
            h = h + rms_norm(y, w[p + "post_feedforward_layernorm.weight"], self.eps)
        h = rms_norm(h, w["model.norm.weight"], self.eps)
        head = w["model.embed_tokens.weight"] if self.tied else w["lm_head.weight"]
        return linear(h, head), stats


# ---------------------------------------------------------------- Phi-3

class Phi3(Model):
    """transformers' models/phi3/modeling_phi3.py (Phi3Attention, Phi3MLP, Phi3DecoderLayer) and
    configuration_phi3.py: qkv_proj [H*dh + 2*Hkv*dh, D] sliced q | k | v, gate_up_proj [2*dff, D]
    chunked gate | up, no biases, RMSNorm, SiLU, rotate-half RoPE on the first
    int(dh * partial_rotary_factor) dims of each head (Phi3RotaryEmbedding with
    compute_default_rope_parameters; apply_rotary_pos_emb passes the rest through)."""

    def __init__(self, name, seed, n_layers=2, n_heads=4, n_kv=2, D=64, dff=96, V=96, train_len=32,
                 partial=1.0, tied=False, mix=1.0, rope_scaling=None, original=None, window=None):
        self.name = name
        # rope_scaling (longrope): its table per forward, by the length (original: the top-level
        # original_max_position_embeddings, train_len when None)
        self.rope_scaling, self.train_len, self.original = rope_scaling, train_len, original or train_len
        self.window = window   # Phi3Model: every layer masked with config.sliding_window when set
        self.V, self.D, self.H, self.Hkv, self.L = V, D, n_heads, n_kv, n_layers
        self.dh = D // n_heads
        self.rot = int(self.dh * partial)   # Phi3RotaryEmbedding: dim = int(head_dim * partial_rotary_factor)
        self.eps = 1e-5                     # Phi3Config.rms_norm_eps default, written out below
        self.theta = 10000.0
        self.tied = tied
        cfg = [("architectures", ["Phi3ForCausalLM"]), ("attention_bias", False), ("attention_dropout", 0.0),
               ("bos_token_id", 1), ("embd_pdrop", 0.0), ("eos_token_id", 2), ("hidden_act", "silu"),
               ("hidden_size", D), ("initializer_range", 0.02), ("intermediate_size", dff),
               ("max_position_embeddings", train_len), ("model_type", "phi3"),
               ("num_attention_heads", n_heads), ("num_hidden_layers", n_layers), ("num_key_value_heads", n_kv),
               ("original_max_position_embeddings", self.original), ("pad_token_id", 0)]
        if partial != 1.0:
            cfg += [("partial_rotary_factor", partial)]
        cfg += [("resid_pdrop", 0.0), ("rms_norm_eps", self.eps), ("rope_scaling", rope_scaling),
                ("rope_theta", self.theta), ("sliding_window", window), ("tie_word_embeddings", tied),
                ("torch_dtype", "float32"), ("use_cache", True), ("vocab_size", V)]
        self.config = collections.OrderedDict(cfg)
        self.facts = R.ModelFacts(False, 0, n_layers, train_len, "rope")
        g = Init(seed)
        qd, kvd = n_heads * self.dh, n_kv * self.dh
        t = {"model.embed_tokens.weight": g.normal([V, D], 0.5)}
        for l in range(n_layers):
            p = "model.layers.%d." % l
            t[p + "input_layernorm.weight"] = g.normal([D], 0.1, 1.0)
            # q, k and v drawn with their own scales, then fused as HF stores them
            t[p + "self_attn.qkv_proj.weight"] = torch.cat(
                [g.normal([qd, D], 0.3), g.normal([kvd, D], 0.3), g.normal([kvd, D], 0.2)])
            t[p + "self_attn.o_proj.weight"] = g.normal([D, qd], 0.2 * mix)
            t[p + "post_attention_layernorm.weight"] = g.normal([D], 0.1, 1.0)
            t[p + "mlp.gate_up_proj.weight"] = torch.cat([g.normal([dff, D], 0.3), g.normal([dff, D], 0.2)])
            t[p + "mlp.down_proj.weight"] = g.normal([D, dff], 0.15 * mix)
        t["model.norm.weight"] = g.normal([D], 0.1, 1.0)
        if not tied:
            t["lm_head.weight"] = g.normal([V, D], 0.3)
        self.finish(t)

    def forward(self, ids, rule, n_prompt=None, margins=None):
        w, H, T = self.w, self.H, len(ids)
        R.check_rule(rule, self.facts)
        pinfo = R.PassInfo(T if n_prompt is None else n_prompt)
        h = w["model.embed_tokens.weight"][ids]
        stats = []
        rep = H // self.Hkv
        qd, kvd = H * self.dh, self.Hkv * self.dh
        c = 1.0 / math.sqrt(self.dh)   # Phi3Attention.scaling = head_dim ** -0.5
        inv, mscale = (R.rope_scaled_inv_freq(self.rot, self.theta, self.rope_scaling, self.train_len, seq_len=T,
                                              original=self.original) if self.rope_scaling else (None, 1.0))
        if inv is not None:
            inv = inv.to(w["model.norm.weight"].dtype)   # the fp32 replay too
        for l in range(self.L):
            p = "model.layers.%d." % l
            x = rms_norm(h, w[p + "input_layernorm.weight"], self.eps)
            qkv = linear(x, w[p + "self_attn.qkv_proj.weight"])
            q = heads(qkv[:, :qd], H)
            k = heads(qkv[:, qd:qd + kvd], self.Hkv).repeat_interleave(rep, dim=0)
            v = heads(qkv[:, qd + kvd:], self.Hkv).repeat_interleave(rep, dim=0)
            plan = R.Plan(rule, self.facts, "dec", l)
            plan.window = self.window
            score = R.rope_scorer(q, k, c, self.rot, self.theta, 1.0, inv, mscale)
            out, P = R.attention(plan, pinfo, score, v, T, margins)
            stats.append(R.head_stats(P))
            h = h + linear(merge(out), w[p + "self_attn.o_proj.weight"])
            x = rms_norm(h, w[p + "post_attention_layernorm.weight"], self.eps)
            gate, up = linear(x, w[p + "mlp.gate_up_proj.weight"]).chunk(2, dim=-1)
            h = h + linear(up * silu(gate), w[p + "mlp.down_proj.weight"])
        h = rms_norm(h, w["model.norm.weight"], self.eps)
        head = w["model.embed_tokens.weight"] if self.tied else w["lm_head.weight"]
        return linear(h, head), stats


# ---------------------------------------------------------------- Gemma, Gemma 2

class Gemma(Model):
    """GemmaForCausalLM (transformers src/transformers/models/gemma/modeling_gemma.py) and
    Gemma2ForCausalLM (models/gemma2/modeling_gemma2.py), read with the search tool:
      - Gemma2RMSNorm.forward: x * rsqrt(mean(x^2) + eps) in float32, times (1.0 + weight);
      - Gemma2Model.forward: the embedding times normalizer = tensor(hidden_size ** 0.5, dtype of
        the activations) (float64 here; sqrt(64) = 8 is exact in every dtype);
      - Gemma2MLP.forward: down(act(gate(x)) * up(x)), act = ACT2FN[hidden_activation],
        gelu_pytorch_tanh;
      - Gemma2Attention.__init__: scaling = query_pre_attn_scalar ** -0.5, sliding_window on layers
        with not bool(layer_idx % 2) (layer_types when given); eager_attention_forward: scores
        / softcap, tanh, * softcap, then the mask (Gemma2DecoderLayer.forward: key j hidden when
        j <= i - sliding_window, torch.tril(..., diagonal=-sliding_window));
      - Gemma2DecoderLayer.forward: h + post_attention_layernorm(attn(input_layernorm(h))), then
        h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)));
      - Gemma2ForCausalLM.forward: logits / final_logit_softcapping, tanh, * final_logit_softcapping.
    Gemma 1 has none of the Gemma 2 items (its FFN norm is post_attention_layernorm, as Llama's).
    Rules (decision 17): the temperature divides c q.k before the soft-cap; the Lambda mask and
    top-k candidates are intersected with a sliding layer's window."""

    def __init__(self, name, seed, gemma2=True, n_layers=3, n_heads=4, n_kv=2, D=64, head_dim=32, dff=128,
                 V=96, train_len=32, window=16, qpas=24.0, attn_cap=4.0, final_cap=3.0, layer_types=None):
        self.name = name
        self.storage = torch.float32
        self.V, self.D, self.H, self.Hkv, self.L, self.dh = V, D, n_heads, n_kv, n_layers, head_dim
        self.eps = 1e-6
        self.theta = 10000.0
        self.gemma2 = gemma2
        self.c = qpas ** -0.5 if gemma2 else head_dim ** -0.5
        self.attn_cap = attn_cap if gemma2 else None
        self.final_cap = final_cap if gemma2 else None
        if gemma2:
            types = layer_types or ["sliding_attention" if l % 2 == 0 else "full_attention" for l in range(n_layers)]
            self.windows = [window if t == "sliding_attention" else None for t in types]
        else:
            self.windows = [None] * n_layers
        cfg = [("architectures", ["Gemma2ForCausalLM" if gemma2 else "GemmaForCausalLM"])]
        if gemma2:
            cfg += [("attn_logit_softcapping", attn_cap)]
        cfg += [("attention_bias", False), ("bos_token_id", 2), ("eos_token_id", 1)]
        if gemma2:
            cfg += [("final_logit_softcapping", final_cap)]
        cfg += [("head_dim", head_dim), ("hidden_act", "gelu_pytorch_tanh"),
                ("hidden_activation", "gelu_pytorch_tanh"), ("hidden_size", D), ("initializer_range", 0.02),
                ("intermediate_size", dff)]
        if gemma2 and layer_types:
            cfg += [("layer_types", layer_types)]
        cfg += [("max_position_embeddings", train_len), ("model_type", "gemma2" if gemma2 else "gemma"),
                ("num_attention_heads", n_heads), ("num_hidden_layers", n_layers), ("num_key_value_heads", n_kv),
                ("pad_token_id", 0)]
        if gemma2:
            cfg += [("query_pre_attn_scalar", qpas)]
        cfg += [("rms_norm_eps", self.eps), ("rope_theta", self.theta)]
        if gemma2:
            cfg += [("sliding_window", window)]
        cfg += [("tie_word_embeddings", True), ("torch_dtype", "float32"), ("use_cache", True), ("vocab_size", V)]
        self.config = collections.OrderedDict(cfg)
        self.facts = R.ModelFacts(False, 0, n_layers, train_len, "rope")
        g = Init(seed)
        kvd, qd = n_kv * head_dim, n_heads * head_dim
        # norms are stored as w of (1 + w): small values around 0, wide enough that a missing 1
        # (or a 1 added twice) shows in the logits
        t = {"model.embed_tokens.weight": g.normal([V, D], 0.1)}
        for l in range(n_layers):
            p = "model.layers.%d." % l
            t[p + "input_layernorm.weight"] = g.normal([D], 0.3)
            t[p + "self_attn.q_proj.weight"] = g.normal([qd, D], 0.2)
            t[p + "self_attn.k_proj.weight"] = g.normal([kvd, D], 0.2)
            t[p + "self_attn.v_proj.weight"] = g.normal([kvd, D], 0.2)
            t[p + "self_attn.o_proj.weight"] = g.normal([D, qd], 0.2)
            t[p + "post_attention_layernorm.weight"] = g.normal([D], 0.3)
            if gemma2:
                t[p + "pre_feedforward_layernorm.weight"] = g.normal([D], 0.3)
                t[p + "post_feedforward_layernorm.weight"] = g.normal([D], 0.3)
            t[p + "mlp.gate_proj.weight"] = g.normal([dff, D], 0.2)
            t[p + "mlp.up_proj.weight"] = g.normal([dff, D], 0.2)
            t[p + "mlp.down_proj.weight"] = g.normal([D, dff], 0.15)
        t["model.norm.weight"] = g.normal([D], 0.3)
        self.finish(t)

    qk_norm = False

    def norm(self, x, name):
        return rms_norm(x, 1.0 + self.w[name], self.eps)

    def rope_of(self, l):
        """(theta, linear factor) of layer l's rotation."""
        return self.theta, 1.0

    def forward(self, ids, rule, n_prompt=None, margins=None):
        w, H, T = self.w, self.H, len(ids)
        R.check_rule(rule, self.facts)
        pinfo = R.PassInfo(T if n_prompt is None else n_prompt)
        emb = w["model.embed_tokens.weight"]
        h = emb[ids] * math.sqrt(self.D)
        stats = []
        rep = self.H // self.Hkv
        for l in range(self.L):
            p = "model.layers.%d." % l
            x = self.norm(h, p + "input_layernorm.weight")
            q = heads(linear(x, w[p + "self_attn.q_proj.weight"]), H)
            k = heads(linear(x, w[p + "self_attn.k_proj.weight"]), self.Hkv)
            if self.qk_norm:   # Gemma3Attention.forward: q_norm / k_norm per head, before RoPE
                q = self.norm(q, p + "self_attn.q_norm.weight")
                k = self.norm(k, p + "self_attn.k_norm.weight")
            k = k.repeat_interleave(rep, dim=0)
            v = heads(linear(x, w[p + "self_attn.v_proj.weight"]), self.Hkv).repeat_interleave(rep, dim=0)
            plan = R.Plan(rule, self.facts, "dec", l)
            plan.window = self.windows[l]
            plan.softcap = self.attn_cap
            theta, factor = self.rope_of(l)
            out, P = R.attention(plan, pinfo, R.rope_scorer(q, k, self.c, self.dh, theta, factor), v, T, margins)
            stats.append(R.head_stats(P))
            a = linear(merge(out), w[p + "self_attn.o_proj.weight"])
            if self.gemma2:
                a = self.norm(a, p + "post_attention_layernorm.weight")
            h = h + a
            x = self.norm(h, p + ("pre_feedforward_layernorm.weight" if self.gemma2 else
                                  "post_attention_layernorm.weight"))
            y = linear(gelu_tanh(linear(x, w[p + "mlp.gate_proj.weight"])) * linear(x, w[p + "mlp.up_proj.weight"]),
                       w[p + "mlp.down_proj.weight"])
            if self.gemma2:
                y = self.norm(y, p + "post_feedforward_layernorm.weight")
            h = h + y
        logits = linear(self.norm(h, "model.norm.weight"), emb)
        if self.final_cap:
            logits = self.final_cap * torch.tanh(logits / self.final_cap)
        return logits, stats


class Gemma3(Gemma):
    """Gemma3ForCausalLM, model_type gemma3_text (transformers src/transformers/models/gemma3/
    modeling_gemma3.py and configuration_gemma3.py, read with the search tool): Gemma 2's body
    (Gemma3RMSNorm (1 + weight), Gemma3TextScaledWordEmbedding x hidden_size ** 0.5, Gemma3MLP,
    the sandwich norms of Gemma3DecoderLayer.forward, scaling = query_pre_attn_scalar ** -0.5) plus:
      - Gemma3Attention.forward: q_norm / k_norm (Gemma3RMSNorm over head_dim) on each head of
        q and k after the projections, before apply_rotary_pos_emb;
      - Gemma3TextModel.__init__: rotary_emb with rope_theta and rope_scaling (a linear factor
        here) for the full layers, rotary_emb_local with rope_local_base_freq and no scaling for
        the sliding ones (Gemma3DecoderLayer.forward picks position_embeddings_local when
        self_attn.is_sliding);
      - sliding layers: layer_types, else Gemma3TextConfig's (l + 1) % sliding_window_pattern != 0;
        create_sliding_window_causal_mask hides key j when i - j >= sliding_window, as Gemma 2;
      - no attention soft-cap (Gemma3Attention.forward passes none to the attention function);
        Gemma3ForCausalLM.forward's final soft-cap when final_logit_softcapping is set."""

    qk_norm = True

    def __init__(self, name, seed, n_layers=3, n_heads=4, n_kv=2, D=64, head_dim=32, dff=128, V=96,
                 train_len=32, window=16, qpas=24.0, final_cap=None, pattern=3, layer_types=None,
                 theta=1e6, theta_local=1e4, rope_factor=8.0):
        self.name = name
        self.storage = torch.float32
        self.V, self.D, self.H, self.Hkv, self.L, self.dh = V, D, n_heads, n_kv, n_layers, head_dim
        self.eps = 1e-6
        self.theta, self.theta_local, self.rope_factor = theta, theta_local, rope_factor or 1.0
        self.gemma2 = True   # the sandwich norms and the window of Gemma 2
        self.c = qpas ** -0.5
        self.attn_cap = None
        self.final_cap = final_cap
        types = layer_types or ["sliding_attention" if (l + 1) % pattern else "full_attention" for l in range(n_layers)]
        self.sliding = [t == "sliding_attention" for t in types]
        self.windows = [window if s else None for s in self.sliding]
        cfg = [("architectures", ["Gemma3ForCausalLM"]), ("attention_bias", False), ("attn_logit_softcapping", None),
               ("bos_token_id", 2), ("eos_token_id", 1), ("final_logit_softcapping", final_cap),
               ("head_dim", head_dim), ("hidden_activation", "gelu_pytorch_tanh"), ("hidden_size", D),
               ("initializer_range", 0.02), ("intermediate_size", dff)]
        if layer_types:
            cfg += [("layer_types", layer_types)]
        cfg += [("max_position_embeddings", train_len), ("model_type", "gemma3_text"),
                ("num_attention_heads", n_heads), ("num_hidden_layers", n_layers), ("num_key_value_heads", n_kv),
                ("pad_token_id", 0), ("query_pre_attn_scalar", qpas), ("rms_norm_eps", self.eps),
                ("rope_local_base_freq", theta_local),
                ("rope_scaling", collections.OrderedDict([("factor", float(rope_factor)), ("rope_type", "linear")])
                 if rope_factor else None),
                ("rope_theta", theta), ("sliding_window", window)]
        if not layer_types:
            cfg += [("sliding_window_pattern", pattern)]
        cfg += [("tie_word_embeddings", True), ("torch_dtype", "float32"), ("use_cache", True), ("vocab_size", V)]
        self.config = collections.OrderedDict(cfg)
        self.facts = R.ModelFacts(False, 0, n_layers, train_len, "rope")
        g = Init(seed)
        kvd, qd = n_kv * head_dim, n_heads * head_dim
        t = {"model.embed_tokens.weight": g.normal([V, D], 0.1)}
        for l in range(n_layers):
            p = "model.layers.%d." % l
            t[p + "input_layernorm.weight"] = g.normal([D], 0.3)
            t[p + "self_attn.q_proj.weight"] = g.normal([qd, D], 0.2)
            t[p + "self_attn.k_proj.weight"] = g.normal([kvd, D], 0.2)
            t[p + "self_attn.v_proj.weight"] = g.normal([kvd, D], 0.2)
            t[p + "self_attn.o_proj.weight"] = g.normal([D, qd], 0.2)
            # wide gains around 0 of (1 + w): a missing or doubled 1, or a missing norm, shows
            t[p + "self_attn.q_norm.weight"] = g.normal([head_dim], 0.4)
            t[p + "self_attn.k_norm.weight"] = g.normal([head_dim], 0.4)
            t[p + "post_attention_layernorm.weight"] = g.normal([D], 0.3)
            t[p + "pre_feedforward_layernorm.weight"] = g.normal([D], 0.3)
            t[p + "post_feedforward_layernorm.weight"] = g.normal([D], 0.3)
            t[p + "mlp.gate_proj.weight"] = g.normal([dff, D], 0.2)
            t[p + "mlp.up_proj.weight"] = g.normal([dff, D], 0.2)
            t[p + "mlp.down_proj.weight"] = g.normal([D, dff], 0.15)
        t["model.norm.weight"] = g.normal([D], 0.3)
        self.finish(t)

    def rope_of(self, l):
        return (self.theta_local, 1.0) if self.sliding[l] else (self.theta, self.rope_factor)


# ---------------------------------------------------------------- GPT-NeoX

class NeoX(Model):
    fmt = "bin"

    def __init__(self, name, seed, train_len=24):
        self.name = name
        V, D, H, L, dff = 96, 48, 3, 2, 64   # d_head 16: rotary on the first 4 dims
        self.V, self.D, self.H, self.L = V, D, H, L
        self.dh = D // H
        self.rotary_pct = 0.25
        self.rot = int(self.dh * self.rotary_pct)   # HF: int(head_size * rotary_pct)
        self.theta = 10000.0
        self.eps = 1e-5
        self.config = collections.OrderedDict([
            ("architectures", ["GPTNeoXForCausalLM"]), ("attention_bias", True),
            ("attention_dropout", 0.0), ("bos_token_id", 0), ("eos_token_id", 0),
            ("hidden_act", "gelu"), ("hidden_dropout", 0.0), ("hidden_size", D),
            ("initializer_range", 0.02), ("intermediate_size", dff),
            ("layer_norm_eps", self.eps), ("max_position_embeddings", train_len),
            ("model_type", "gpt_neox"), ("num_attention_heads", H), ("num_hidden_layers", L),
            ("rope_scaling", None), ("rotary_emb_base", 10000), ("rotary_pct", self.rotary_pct),
            ("tie_word_embeddings", False), ("torch_dtype", "float32"),
            ("use_cache", True), ("use_parallel_residual", True), ("vocab_size", V),
        ])
        self.facts = R.ModelFacts(False, 0, L, train_len, "rope")
        g = Init(seed)
        dh = self.dh
        t = {"gpt_neox.embed_in.weight": g.normal([V, D], 0.5)}
        for l in range(L):
            p = "gpt_neox.layers.%d." % l
            t[p + "input_layernorm.weight"] = g.normal([D], 0.1, 1.0)
            t[p + "input_layernorm.bias"] = g.normal([D], 0.05)
            t[p + "post_attention_layernorm.weight"] = g.normal([D], 0.1, 1.0)
            t[p + "post_attention_layernorm.bias"] = g.normal([D], 0.05)
            wq, wk, wv = g.normal([D, D], 0.22), g.normal([D, D], 0.22), g.normal([D, D], 0.15)
            bq, bk, bv = g.normal([D], 0.1), g.normal([D], 0.1), g.normal([D], 0.05)
            # fused [3D, D], output dim laid out [H, 3, dh] as HF GPTNeoX views it
            t[p + "attention.query_key_value.weight"] = torch.stack(
                [wq.view(H, dh, D), wk.view(H, dh, D), wv.view(H, dh, D)], dim=1).reshape(3 * D, D)
            t[p + "attention.query_key_value.bias"] = torch.stack(
                [bq.view(H, dh), bk.view(H, dh), bv.view(H, dh)], dim=1).reshape(3 * D)
            self.check_split = (p, wq, wk, wv)
            t[p + "attention.dense.weight"] = g.normal([D, D], 0.15)
            t[p + "attention.dense.bias"] = g.normal([D], 0.05)
            t[p + "mlp.dense_h_to_4h.weight"] = g.normal([dff, D], 0.15)
            t[p + "mlp.dense_h_to_4h.bias"] = g.normal([dff], 0.05)
            t[p + "mlp.dense_4h_to_h.weight"] = g.normal([D, dff], 0.1)
            t[p + "mlp.dense_4h_to_h.bias"] = g.normal([D], 0.05)
        t["gpt_neox.final_layer_norm.weight"] = g.normal([D], 0.1, 1.0)
        t["gpt_neox.final_layer_norm.bias"] = g.normal([D], 0.05)
        t["embed_out.weight"] = g.normal([V, D], 0.3)
        self.finish(t)

    def split_qkv(self, fused):
        """HF GPTNeoXAttention: view [T, H, 3*dh], then q, k, v = chunks of dh."""
        T = fused.shape[0]
        f = fused.view(T, self.H, 3 * self.dh).transpose(0, 1)
        return f[..., :self.dh], f[..., self.dh:2 * self.dh], f[..., 2 * self.dh:]

    def forward(self, ids, rule, n_prompt=None, margins=None):
        w, T = self.w, len(ids)
        R.check_rule(rule, self.facts)
        pinfo = R.PassInfo(T if n_prompt is None else n_prompt)
        h = w["gpt_neox.embed_in.weight"][ids]
        stats = []
        c = 1.0 / math.sqrt(self.dh)
        for l in range(self.L):
            p = "gpt_neox.layers.%d." % l
            x1 = layer_norm(h, w[p + "input_layernorm.weight"], w[p + "input_layernorm.bias"], self.eps)
            q, k, v = self.split_qkv(linear(x1, w[p + "attention.query_key_value.weight"],
                                            w[p + "attention.query_key_value.bias"]))
            plan = R.Plan(rule, self.facts, "dec", l)
            score = R.rope_scorer(q, k, c, self.rot, self.theta, 1.0)
            out, P = R.attention(plan, pinfo, score, v, T, margins)
            stats.append(R.head_stats(P))
            attn = linear(merge(out), w[p + "attention.dense.weight"], w[p + "attention.dense.bias"])
            # parallel residual: both branches read the same input
            x2 = layer_norm(h, w[p + "post_attention_layernorm.weight"], w[p + "post_attention_layernorm.bias"], self.eps)
            mlp = linear(gelu_exact(linear(x2, w[p + "mlp.dense_h_to_4h.weight"], w[p + "mlp.dense_h_to_4h.bias"])),
                         w[p + "mlp.dense_4h_to_h.weight"], w[p + "mlp.dense_4h_to_h.bias"])
            h = h + attn + mlp
        h = layer_norm(h, w["gpt_neox.final_layer_norm.weight"], w["gpt_neox.final_layer_norm.bias"], self.eps)
        return linear(h, w["embed_out.weight"]), stats


# ---------------------------------------------------------------- GPT-2

class GPT2(Model):
    """HF GPT2LMHeadModel (modeling_gpt2.py): Conv1D layers (y = x W + b, W stored [in, out]),
    c_attn = q | k | v along its output, learned absolute positions wpe added to the input,
    LayerNorms with biases, gelu_new, head tied to wte. prefix "transformer." (GPT2LMHeadModel's
    state dict) or "" (the original hub checkpoints, which also carry the causal-mask buffer
    h.N.attn.bias, ignored by loaders). inverse_layer: scale_attn_by_inverse_layer_idx."""

    def __init__(self, name, seed, n_positions=64, prefix="transformer.", fmt="safetensors",
                 inverse_layer=False, n_inner=None, act="gelu_new", mask_buffer=False):
        self.name = name
        self.fmt = fmt
        V, D, H, L = 96, 32, 4, 3
        self.V, self.D, self.H, self.L, self.dh = V, D, H, L, D // H
        self.dff = n_inner or 4 * D
        self.eps = 1e-5
        self.prefix = prefix
        self.inverse_layer = inverse_layer
        self.act = {"gelu_new": gelu_tanh, "gelu": gelu_exact, "relu": torch.relu}[act]
        self.n_positions = n_positions
        self.config = collections.OrderedDict([
            ("activation_function", act), ("architectures", ["GPT2LMHeadModel"]),
            ("attn_pdrop", 0.0), ("bos_token_id", 0), ("embd_pdrop", 0.0), ("eos_token_id", 0),
            ("initializer_range", 0.02), ("layer_norm_epsilon", self.eps), ("model_type", "gpt2"),
            ("n_embd", D), ("n_head", H), ("n_inner", n_inner), ("n_layer", L),
            ("n_positions", n_positions), ("reorder_and_upcast_attn", inverse_layer),
            ("resid_pdrop", 0.0), ("scale_attn_by_inverse_layer_idx", inverse_layer),
            ("scale_attn_weights", True), ("torch_dtype", "float32"), ("use_cache", True),
            ("vocab_size", V),
        ])
        self.facts = R.ModelFacts(False, 0, L, n_positions, "learned")
        g = Init(seed)
        P = prefix
        # positions strong enough that removing or shifting them visibly moves the logits
        t = {P + "wte.weight": g.normal([V, D], 0.5), P + "wpe.weight": g.normal([n_positions, D], 0.5)}
        for l in range(L):
            p = P + "h.%d." % l
            t[p + "ln_1.weight"] = g.normal([D], 0.1, 1.0)
            t[p + "ln_1.bias"] = g.normal([D], 0.05)
            wq, wk, wv = g.normal([D, D], 0.3), g.normal([D, D], 0.3), g.normal([D, D], 0.2)
            # Conv1D stores [in, out]: the [out, in] matrices transposed, q | k | v along out
            t[p + "attn.c_attn.weight"] = torch.cat([wq, wk, wv], dim=0).t().contiguous()
            t[p + "attn.c_attn.bias"] = g.normal([3 * D], 0.1)
            self.check_split = (p, wq, wk, wv)
            t[p + "attn.c_proj.weight"] = g.normal([D, D], 0.6)
            t[p + "attn.c_proj.bias"] = g.normal([D], 0.05)
            t[p + "ln_2.weight"] = g.normal([D], 0.1, 1.0)
            t[p + "ln_2.bias"] = g.normal([D], 0.05)
            t[p + "mlp.c_fc.weight"] = g.normal([D, self.dff], 0.2)
            t[p + "mlp.c_fc.bias"] = g.normal([self.dff], 0.05)
            t[p + "mlp.c_proj.weight"] = g.normal([self.dff, D], 0.3)
            t[p + "mlp.c_proj.bias"] = g.normal([D], 0.05)
            if mask_buffer:
                t[p + "attn.bias"] = torch.tril(torch.ones(n_positions, n_positions)).view(
                    1, 1, n_positions, n_positions)
        t[P + "ln_f.weight"] = g.normal([D], 0.1, 1.0)
        t[P + "ln_f.bias"] = g.normal([D], 0.05)
        self.finish(t)

    def split_qkv(self, fused):
        """GPT2Attention: query, key, value = c_attn(x).split(n_embd, dim=2), then heads."""
        q, k, v = fused.split(self.D, dim=-1)
        return heads(q, self.H), heads(k, self.H), heads(v, self.H)

    def forward(self, ids, rule, n_prompt=None, margins=None):
        w, T, P = self.w, len(ids), self.prefix
        R.check_rule(rule, self.facts)
        if T > self.n_positions:
            raise ValueError("%d positions past n_positions %d" % (T, self.n_positions))
        pinfo = R.PassInfo(T if n_prompt is None else n_prompt)
        h = w[P + "wte.weight"][ids] + w[P + "wpe.weight"][torch.arange(T)]
        stats = []
        for l in range(self.L):
            p = P + "h.%d." % l
            x = layer_norm(h, w[p + "ln_1.weight"], w[p + "ln_1.bias"], self.eps)
            q, k, v = self.split_qkv(x @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"])
            c = 1.0 / math.sqrt(self.dh)                  # scale_attn_weights
            if self.inverse_layer:
                c = c / float(l + 1)                      # scale_attn_by_inverse_layer_idx
            plan = R.Plan(rule, self.facts, "dec", l)
            qk = R.qk_dot(q, k, c)
            out, Pr = R.attention(plan, pinfo, lambda rel, qk=qk: qk, v, T, margins)
            stats.append(R.head_stats(Pr))
            h = h + merge(out) @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            x = layer_norm(h, w[p + "ln_2.weight"], w[p + "ln_2.bias"], self.eps)
            y = self.act(x @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
            h = h + y @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        h = layer_norm(h, w[P + "ln_f.weight"], w[P + "ln_f.bias"], self.eps)
        return linear(h, w[P + "wte.weight"]), stats


# ---------------------------------------------------------------- StarCoder2

class Starcoder2(Model):
    """Starcoder2ForCausalLM (transformers src/transformers/models/starcoder2/modeling_starcoder2.py and
    configuration_starcoder2.py, read with the search tool): Starcoder2DecoderLayer.forward is
    pre-norm with nn.LayerNorm (weight and bias, eps norm_epsilon) before attention
    (input_layernorm) and before the MLP (post_attention_layernorm); Starcoder2Attention projects
    q/k/v with biases (use_bias), rotates the whole head with rotate_half (apply_rotary_pos_emb),
    scales by head_dim**-0.5, repeats k/v for GQA (repeat_kv) and projects out with o_proj's bias;
    Starcoder2MLP is c_fc -> ACT2FN[hidden_act] (gelu_pytorch_tanh) -> c_proj, both biased;
    Starcoder2Model masks every layer with config.sliding_window when set
    (create_sliding_window_causal_mask) and ends with the LayerNorm `norm`; the head is lm_head,
    tied to embed_tokens unless tie_word_embeddings is false."""

    def __init__(self, name, seed, n_layers=2, n_heads=4, n_kv=2, D=64, dff=128, V=96, train_len=32,
                 tied=True, mix=1.0, window=None, theta=10000.0):
        self.name = name
        self.window = window
        self.train_len = train_len
        self.V, self.D, self.H, self.Hkv, self.L = V, D, n_heads, n_kv, n_layers
        self.dh = D // n_heads
        self.eps = 1e-5                     # Starcoder2Config.norm_epsilon default, written out below
        self.theta = theta
        self.tied = tied
        self.config = collections.OrderedDict([
            ("architectures", ["Starcoder2ForCausalLM"]), ("attention_dropout", 0.0), ("bos_token_id", 0),
            ("embedding_dropout", 0.0), ("eos_token_id", 0), ("hidden_act", "gelu_pytorch_tanh"),
            ("hidden_size", D), ("initializer_range", 0.02), ("intermediate_size", dff),
            ("max_position_embeddings", train_len), ("model_type", "starcoder2"), ("norm_epsilon", self.eps),
            ("num_attention_heads", n_heads), ("num_hidden_layers", n_layers), ("num_key_value_heads", n_kv),
            ("residual_dropout", 0.0), ("rope_theta", theta), ("sliding_window", window),
            ("tie_word_embeddings", tied), ("torch_dtype", "float32"), ("use_bias", True), ("use_cache", True),
            ("vocab_size", V)])
        self.facts = R.ModelFacts(False, 0, n_layers, train_len, "rope")
        g = Init(seed)
        qd, kvd = n_heads * self.dh, n_kv * self.dh
        t = {"model.embed_tokens.weight": g.normal([V, D], 0.5)}
        for l in range(n_layers):
            p = "model.layers.%d." % l
            for ln in ("input_layernorm", "post_attention_layernorm"):
                t[p + ln + ".weight"] = g.normal([D], 0.1, 1.0)
                t[p + ln + ".bias"] = g.normal([D], 0.1)
            for proj, rows, std in (("q_proj", qd, 0.3), ("k_proj", kvd, 0.3), ("v_proj", kvd, 0.2)):
                t[p + "self_attn." + proj + ".weight"] = g.normal([rows, D], std)
                t[p + "self_attn." + proj + ".bias"] = g.normal([rows], 0.2)
            t[p + "self_attn.o_proj.weight"] = g.normal([D, qd], 0.2 * mix)
            t[p + "self_attn.o_proj.bias"] = g.normal([D], 0.1)
            t[p + "mlp.c_fc.weight"] = g.normal([dff, D], 0.3)
            t[p + "mlp.c_fc.bias"] = g.normal([dff], 0.2)
            t[p + "mlp.c_proj.weight"] = g.normal([D, dff], 0.15 * mix)
            t[p + "mlp.c_proj.bias"] = g.normal([D], 0.1)
        t["model.norm.weight"] = g.normal([D], 0.1, 1.0)
        t["model.norm.bias"] = g.normal([D], 0.1)
        if not tied:
            t["lm_head.weight"] = g.normal([V, D], 0.3)
        self.finish(t)

    def forward(self, ids, rule, n_prompt=None, margins=None):
        w, H, T = self.w, self.H, len(ids)
        R.check_rule(rule, self.facts)
        pinfo = R.PassInfo(T if n_prompt is None else n_prompt)
        h = w["model.embed_tokens.weight"][ids]
        stats = []
        rep = H // self.Hkv
        c = 1.0 / math.sqrt(self.dh)   # Starcoder2Attention.scaling = head_dim ** -0.5
        for l in range(self.L):
            p = "model.layers.%d." % l
            a = p + "self_attn."
            x = layer_norm(h, w[p + "input_layernorm.weight"], w[p + "input_layernorm.bias"], self.eps)
            q = heads(linear(x, w[a + "q_proj.weight"], w[a + "q_proj.bias"]), H)
            k = heads(linear(x, w[a + "k_proj.weight"], w[a + "k_proj.bias"]), self.Hkv).repeat_interleave(rep, dim=0)
            v = heads(linear(x, w[a + "v_proj.weight"], w[a + "v_proj.bias"]), self.Hkv).repeat_interleave(rep, dim=0)
            plan = R.Plan(rule, self.facts, "dec", l)
            plan.window = self.window
            score = R.rope_scorer(q, k, c, self.dh, self.theta, 1.0)
            out, P = R.attention(plan, pinfo, score, v, T, margins)
            stats.append(R.head_stats(P))
            h = h + linear(merge(out), w[a + "o_proj.weight"], w[a + "o_proj.bias"])
            x = layer_norm(h, w[p + "post_attention_layernorm.weight"], w[p + "post_attention_layernorm.bias"],
                           self.eps)
            up = gelu_tanh(linear(x, w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"]))
            h = h + linear(up, w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"])
        h = layer_norm(h, w["model.norm.weight"], w["model.norm.bias"], self.eps)
        head = w["model.embed_tokens.weight"] if self.tied else w["lm_head.weight"]
        return linear(h, head), stats
