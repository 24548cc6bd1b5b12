"""Compact batched PyTorch modules for the probe models (training and fast evaluation).

Parameters live in a flat dict keyed by the Hugging Face tensor names of each layout, so the
saved state dict is the HF checkpoint. The math follows python/ctxpatch_ref/torchref/models.py (the
reference the C engine is checked against); check.py asserts that torchref's float64 forward on
the saved weights equals these modules' forward.

Rules supported by the fast path (the subset the model cards use):
  T5:    {"temperature": tau} on encoder self-attention (scope "encoder").
  ALiBi: {"alibi_scale": {"mode": "dynamic"}} (PI: slopes / max(1, n_keys / L_train), n_keys of
         the pass that computes the row: prefill = prompt length, decode = cache + 1).
  RoPE:  {"lambda_mask": {"n_global": G, "n_local": W}} with the implied distance ceiling W.
  FIRE:  none (one or two hidden layers: config fire_mlp_layers).
"""
import math

import torch
import torch.nn.functional as F

NEG = -1e30


def rms(x, w, eps):
    return w * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def t5_bucket(rel, bidirectional, num_buckets, max_distance):
    """HF T5Attention._relative_position_bucket (rel = key - query)."""
    b = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        b += (rel > 0).long() * num_buckets
        rel = rel.abs()
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    me = num_buckets // 2
    small = rel < me
    large = me + (torch.log(rel.float() / me) / math.log(max_distance / me)
                  * (num_buckets - me)).long()
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return b + torch.where(small, rel, large)


def bloom_slopes(n):
    p = 2 ** math.floor(math.log2(n))
    base = 2 ** (-(2 ** -(math.log2(p) - 3)))
    s = [base ** k for k in range(1, p + 1)]
    if p != n:
        eb = 2 ** (-(2 ** -(math.log2(2 * p) - 3)))
        s += [eb ** k for k in range(1, 1 + 2 * min(p, n - p), 2)]
    return torch.tensor(s, dtype=torch.float32)


class Net:
    """Base: params dict, init helpers, causal attention with an additive bias."""

    def __init__(self, cfg, seed):
        self.cfg = cfg
        self.p = {}
        self.g = torch.Generator().manual_seed(seed)

    def add(self, name, shape, std, mean=0.0):
        t = torch.randn(shape, generator=self.g) * std + mean if std > 0 else torch.full(shape, mean)
        self.p[name] = torch.nn.Parameter(t)

    def to(self, dev):
        for k in self.p:
            self.p[k] = torch.nn.Parameter(self.p[k].detach().to(dev))
        return self

    def params(self):
        return [self.p[k] for k in sorted(self.p)]

    def state_dict(self):
        return {k: v.detach().float().cpu().contiguous() for k, v in sorted(self.p.items())}

    def load(self, sd):
        for k, v in sd.items():
            self.p[k] = torch.nn.Parameter(v.float().clone())

    def n_params(self):
        return sum(v.numel() for v in self.p.values())


def attend(q, k, v, scores_extra, mask, scale, tau=1.0):
    """q [B,H,Tq,dh], k/v [B,H,Tk,dh]; scores_extra broadcastable to [B,H,Tq,Tk]; mask bool
    (True = visible) broadcastable; returns out [B,H,Tq,dh] and probs."""
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if scores_extra is not None:
        s = s + scores_extra
    s = s.masked_fill(~mask, NEG)
    if tau != 1.0:
        s = s / tau
    P = torch.softmax(s, dim=-1)
    return torch.matmul(P, v), P


def split_heads(x, H):
    B, T, _ = x.shape
    return x.view(B, T, H, -1).transpose(1, 2)


def merge_heads(x):
    B, H, T, dh = x.shape
    return x.transpose(1, 2).reshape(B, T, H * dh)


# ---------------------------------------------------------------- Llama (RoPE) and FIRE

# pairs per chunk: a [rows, Tk, W] temporary of ~16K pairs stays in cache (7x faster at 4096
# than 4M-pair chunks; bench/bench_fire_bias.py, docs/perf.md)
FIRE_CHUNK_PAIRS = 1 << 14


def fire_mlp(x, W1, b1, W2, b2, pairs=FIRE_CHUNK_PAIRS, mid=None):
    """FIRE's MLP on normalised distances x [Tq, Tk]; W1, b1 [W]; W2 [H, W]; b2 [H] -> [Tq, Tk, H],
    evaluated a few rows at a time. mid = (Wm [W, W], bm [W]): the paper's second hidden layer
    (docs/fire-layout.md, mlp.2 of a two-hidden-layer MLP whose output is mlp.4)."""
    step = max(1, pairs // max(1, x.shape[1]))
    parts = []
    for r in range(0, x.shape[0], step):
        hid = torch.relu(x[r:r + step, :, None] * W1 + b1)                    # [rows,Tk,W]
        if mid is not None:
            hid = torch.relu(hid @ mid[0].t() + mid[1])                      # [rows,Tk,W]
        parts.append(hid @ W2.t() + b2)                                      # [rows,Tk,H]
    return torch.cat(parts, 0)


class LlamaNet(Net):
    def __init__(self, cfg, seed, pos, learn_L_multiplier=False):
        """learn_L_multiplier: the paper's learnable threshold L = |L_multiplier * init_L|
        (init_L = config fire_threshold, the training length); state_dict() then stores the
        value used as fire.L, the checkpoint layout of docs/fire-layout.md."""
        super().__init__(cfg, seed)
        self.pos = pos
        self.fire_layers = cfg.get("fire_mlp_layers", 1)
        self.learn_L_multiplier = learn_L_multiplier
        D, V, L, dff = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"], cfg["intermediate_size"]
        H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        dh = D // H
        std, ostd = 0.02, 0.02 / math.sqrt(2 * L)
        self.add("model.embed_tokens.weight", [V, D], std)
        for l in range(L):
            p = "model.layers.%d." % l
            self.add(p + "input_layernorm.weight", [D], 0, 1.0)
            self.add(p + "self_attn.q_proj.weight", [D, D], std)
            self.add(p + "self_attn.k_proj.weight", [Hkv * dh, D], std)
            self.add(p + "self_attn.v_proj.weight", [Hkv * dh, D], std)
            self.add(p + "self_attn.o_proj.weight", [D, D], ostd)
            self.add(p + "post_attention_layernorm.weight", [D], 0, 1.0)
            self.add(p + "mlp.gate_proj.weight", [dff, D], std)
            self.add(p + "mlp.up_proj.weight", [dff, D], std)
            self.add(p + "mlp.down_proj.weight", [D, dff], ostd)
            if pos == "fire":
                P = p + "self_attn.fire."
                W = cfg["fire_mlp_width"]
                self.add(P + "mlp.0.weight", [W, 1], 1.0)
                self.add(P + "mlp.0.bias", [W], 0.5)
                out = 2
                if self.fire_layers == 2:   # nn.Sequential(Linear, ReLU, Linear, ReLU, Linear)
                    self.add(P + "mlp.2.weight", [W, W], 1.0 / math.sqrt(W))
                    self.add(P + "mlp.2.bias", [W], 0.0)
                    out = 4
                self.add(P + "mlp.%d.weight" % out, [H, W], 0.1)
                self.add(P + "mlp.%d.bias" % out, [H], 0.0)
                self.add(P + "c", [], 0, cfg["fire_c_init"])
                if learn_L_multiplier:
                    self.add(P + "L_multiplier", [], 0, 1.0)
                else:
                    self.add(P + "L", [], 0, cfg["fire_threshold"])
        self.add("model.norm.weight", [D], 0, 1.0)
        self.add("lm_head.weight", [V, D], std)

    def fire_bias(self, l, i, Tk, dev):
        """i: absolute query positions [Tq]; keys 0..Tk-1."""
        P = "model.layers.%d.self_attn.fire." % l
        c = self.p[P + "c"].clamp(min=1e-3)
        Lt = self.fire_L(P) if self.learn_L_multiplier else self.p[P + "L"].detach()
        i = i.float()[:, None]
        j = torch.arange(Tk, device=dev, dtype=torch.float32)[None, :]
        d = (i - j).clamp(min=0)
        psi = lambda x: torch.log(c * x + 1.0)
        norm = psi(torch.maximum(i, Lt.expand_as(i)))
        x = torch.where(norm > 0, psi(d) / torch.where(norm > 0, norm, torch.ones_like(norm)),
                        torch.zeros_like(d))
        W1, b1 = self.p[P + "mlp.0.weight"][:, 0], self.p[P + "mlp.0.bias"]
        out, mid = 2, None
        if self.fire_layers == 2:
            out, mid = 4, (self.p[P + "mlp.2.weight"], self.p[P + "mlp.2.bias"])
        W2, b2 = self.p[P + "mlp.%d.weight" % out], self.p[P + "mlp.%d.bias" % out]
        bias = fire_mlp(x, W1, b1, W2, b2, mid=mid)
        return bias.permute(2, 0, 1)[None]

    def fire_L(self, P):
        """The paper's threshold |L_multiplier * init_L| (learn_L_multiplier)."""
        return (self.p[P + "L_multiplier"] * float(self.cfg["fire_threshold"])).abs()

    def state_dict(self):
        """The checkpoint: with learn_L_multiplier, fire.L holds the threshold used
        (docs/fire-layout.md stores the values used; train.py clamps fire.c likewise)."""
        sd = super().state_dict()
        for k in [k for k in sd if k.endswith("fire.L_multiplier")]:
            P = k[:-len("L_multiplier")]
            del sd[k]
            sd[P + "L"] = self.fire_L(P).detach().float().cpu().contiguous()
        return sd

    def load(self, sd):
        """Resuming a paper-FIRE run from a checkpoint: L_multiplier = L / init_L."""
        super().load(sd)
        if self.learn_L_multiplier:
            for k in [k for k in self.p if k.endswith("fire.L")]:
                mult = self.p.pop(k).detach() / float(self.cfg["fire_threshold"])
                self.p[k[:-1] + "L_multiplier"] = torch.nn.Parameter(mult)

    def rope(self, x, pos):
        dh = x.shape[-1]
        inv = 1.0 / (self.cfg.get("rope_theta", 10000.0) ** (torch.arange(0, dh, 2, device=x.device, dtype=torch.float32) / dh))
        ang = pos.float()[..., None] * inv
        emb = torch.cat([ang, ang], -1)
        x1, x2 = x[..., :dh // 2], x[..., dh // 2:]
        return x * emb.cos() + torch.cat([-x2, x1], -1) * emb.sin()

    def forward(self, ids, rule=None, n_prompt=None, stats=None, cache=None):
        """cache: None, or a dict filled/extended in place (KV cache: ids are the rows after
        the cached ones)."""
        rule = rule or {}
        cfg, p = self.cfg, self.p
        B, T = ids.shape
        dev = ids.device
        H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        D = cfg["hidden_size"]
        dh = D // H
        eps = cfg["rms_norm_eps"]
        P0 = cache.get("n", 0) if cache is not None else 0
        Tk = P0 + T
        i = torch.arange(P0, Tk, device=dev)[:, None]
        j = torch.arange(Tk, device=dev)[None, :]
        mask = j <= i
        lam = rule.get("lambda_mask")
        if lam:
            G, W = lam["n_global"], lam["n_local"]
            mask = mask & ((j < G) | (i - j < W))
        pos = torch.arange(P0, Tk, device=dev)
        h = p["model.embed_tokens.weight"][ids]
        for l in range(cfg["num_hidden_layers"]):
            pre = "model.layers.%d." % l
            x = rms(h, p[pre + "input_layernorm.weight"], eps)
            q = split_heads(x @ p[pre + "self_attn.q_proj.weight"].t(), H)
            k = split_heads(x @ p[pre + "self_attn.k_proj.weight"].t(), Hkv).repeat_interleave(H // Hkv, 1)
            v = split_heads(x @ p[pre + "self_attn.v_proj.weight"].t(), Hkv).repeat_interleave(H // Hkv, 1)
            extra = None
            if self.pos == "rope":
                q, k = self.rope(q, pos), self.rope(k, pos)
            if cache is not None:
                if l in cache:
                    k = torch.cat([cache[l][0], k], 2)
                    v = torch.cat([cache[l][1], v], 2)
                cache[l] = (k, v)
            if self.pos == "rope":
                qr, kr = q, k
                q = split_heads(x @ p[pre + "self_attn.q_proj.weight"].t(), H)   # unrotated
                if lam:
                    # global columns beyond the window see the ceiling distance W: the query is
                    # rotated to j + W (decision 6), one extra dot product per global column
                    G, W = lam["n_global"], lam["n_local"]
                    g = min(G, Tk)
                    far = (i - j[:, :g] >= W)                                    # [T, g]
                    qg = self.rope(q[:, :, :, None, :].expand(-1, -1, -1, g, -1),
                                   (torch.arange(g, device=dev) + W)[None, :].expand(T, g))
                    sg = (qg * kr[:, :, None, :g, :]).sum(-1) / math.sqrt(dh)    # [B,H,T,g]
                    s = torch.matmul(qr, kr.transpose(-1, -2)) / math.sqrt(dh)
                    s[..., :g] = torch.where(far, sg, s[..., :g])
                    s = s.masked_fill(~mask, NEG)
                    P = torch.softmax(s, -1)
                    out = torch.matmul(P, v)
                    if stats is not None:
                        stats.append(P)
                    h = h + merge_heads(out) @ p[pre + "self_attn.o_proj.weight"].t()
                    h = self._mlp(h, pre, eps)
                    continue
                q, k = qr, kr
            else:
                extra = self.fire_bias(l, pos, Tk, dev)
            out, P = attend(q, k, v, extra, mask, 1.0 / math.sqrt(dh))
            if stats is not None:
                stats.append(P)
            h = h + merge_heads(out) @ p[pre + "self_attn.o_proj.weight"].t()
            h = self._mlp(h, pre, eps)
        if cache is not None:
            cache["n"] = Tk
        h = rms(h, p["model.norm.weight"], eps)
        return h @ p["lm_head.weight"].t()

    def _mlp(self, h, pre, eps):
        p = self.p
        x = rms(h, p[pre + "post_attention_layernorm.weight"], eps)
        y = F.silu(x @ p[pre + "mlp.gate_proj.weight"].t()) * (x @ p[pre + "mlp.up_proj.weight"].t())
        return h + y @ p[pre + "mlp.down_proj.weight"].t()


# ---------------------------------------------------------------- BLOOM (ALiBi)

class BloomNet(Net):
    def __init__(self, cfg, seed):
        super().__init__(cfg, seed)
        D, V, L, H = cfg["hidden_size"], cfg["vocab_size"], cfg["n_layer"], cfg["n_head"]
        std, ostd = 0.02, 0.02 / math.sqrt(2 * L)
        self.add("transformer.word_embeddings.weight", [V, D], std)
        self.add("transformer.word_embeddings_layernorm.weight", [D], 0, 1.0)
        self.add("transformer.word_embeddings_layernorm.bias", [D], 0, 0.0)
        for l in range(L):
            p = "transformer.h.%d." % l
            for n in ("input_layernorm", "post_attention_layernorm"):
                self.add(p + n + ".weight", [D], 0, 1.0)
                self.add(p + n + ".bias", [D], 0, 0.0)
            self.add(p + "self_attention.query_key_value.weight", [3 * D, D], std)
            self.add(p + "self_attention.query_key_value.bias", [3 * D], 0, 0.0)
            self.add(p + "self_attention.dense.weight", [D, D], ostd)
            self.add(p + "self_attention.dense.bias", [D], 0, 0.0)
            self.add(p + "mlp.dense_h_to_4h.weight", [4 * D, D], std)
            self.add(p + "mlp.dense_h_to_4h.bias", [4 * D], 0, 0.0)
            self.add(p + "mlp.dense_4h_to_h.weight", [D, 4 * D], ostd)
            self.add(p + "mlp.dense_4h_to_h.bias", [D], 0, 0.0)
        self.add("transformer.ln_f.weight", [D], 0, 1.0)
        self.add("transformer.ln_f.bias", [D], 0, 0.0)

    def forward(self, ids, rule=None, n_prompt=None, stats=None, cache=None):
        rule = rule or {}
        cfg, p = self.cfg, self.p
        B, T = ids.shape
        dev = ids.device
        D, H = cfg["hidden_size"], cfg["n_head"]
        dh = D // H
        eps = cfg["layer_norm_epsilon"]
        ln = lambda x, n: F.layer_norm(x, (D,), p[n + ".weight"], p[n + ".bias"], eps)
        P0 = cache.get("n", 0) if cache is not None else 0
        Tk = P0 + T
        rows = torch.arange(P0, Tk, device=dev)
        i = rows[:, None]
        j = torch.arange(Tk, device=dev)[None, :]
        mask = j <= i
        slopes = bloom_slopes(H).to(dev)
        div = torch.ones(T, device=dev)
        al = rule.get("alibi_scale")
        if al:
            Ltr = rule.get("train_len") or cfg["seq_length"]
            if al["mode"] == "dynamic":
                npr = Tk if n_prompt is None else n_prompt
                nk = torch.clamp(rows + 1, min=npr).float()
                div = torch.clamp(nk / Ltr, min=1.0)
            elif al["mode"] == "static":
                div = torch.full((T,), float(al["factor"]), device=dev)
            else:
                raise ValueError(al)
        d = (i - j).clamp(min=0).float()
        bias = -(slopes[:, None, None] / div[None, :, None]) * d[None]      # [H,T,T]
        h = ln(p["transformer.word_embeddings.weight"][ids], "transformer.word_embeddings_layernorm")
        for l in range(cfg["n_layer"]):
            pre = "transformer.h.%d." % l
            x = ln(h, pre + "input_layernorm")
            f = x @ p[pre + "self_attention.query_key_value.weight"].t() + p[pre + "self_attention.query_key_value.bias"]
            f = f.view(B, T, H, 3, dh)
            q, k, v = (f[:, :, :, n].transpose(1, 2) for n in range(3))
            if cache is not None:
                if l in cache:
                    k = torch.cat([cache[l][0], k], 2)
                    v = torch.cat([cache[l][1], v], 2)
                cache[l] = (k, v)
            out, P = attend(q, k, v, bias[None], mask, 1.0 / math.sqrt(dh))
            if stats is not None:
                stats.append(P)
            h = h + merge_heads(out) @ p[pre + "self_attention.dense.weight"].t() + p[pre + "self_attention.dense.bias"]
            x = ln(h, pre + "post_attention_layernorm")
            y = gelu_tanh(x @ p[pre + "mlp.dense_h_to_4h.weight"].t() + p[pre + "mlp.dense_h_to_4h.bias"])
            h = h + y @ p[pre + "mlp.dense_4h_to_h.weight"].t() + p[pre + "mlp.dense_4h_to_h.bias"]
        if cache is not None:
            cache["n"] = Tk
        h = ln(h, "transformer.ln_f")
        return h @ p["transformer.word_embeddings.weight"].t()


# ---------------------------------------------------------------- T5

class T5Net(Net):
    def __init__(self, cfg, seed):
        super().__init__(cfg, seed)
        D, V, L, H, dkv, dff = (cfg["d_model"], cfg["vocab_size"], cfg["num_layers"], cfg["num_heads"],
                                cfg["d_kv"], cfg["d_ff"])
        nb = cfg["relative_attention_num_buckets"]
        inner = H * dkv
        self.add("shared.weight", [V, D], 1.0)
        for stack in ("encoder", "decoder"):
            for l in range(L):
                p = "%s.block.%d.layer." % (stack, l)
                atts = [("0.SelfAttention", "0.layer_norm")]
                if stack == "decoder":
                    atts.append(("1.EncDecAttention", "1.layer_norm"))
                for a, n in atts:
                    self.add(p + a + ".q.weight", [inner, D], (D * dkv) ** -0.5)
                    self.add(p + a + ".k.weight", [inner, D], D ** -0.5)
                    self.add(p + a + ".v.weight", [inner, D], D ** -0.5)
                    self.add(p + a + ".o.weight", [D, inner], inner ** -0.5)
                    self.add(p + n + ".weight", [D], 0, 1.0)
                if l == 0:
                    self.add(p + "0.SelfAttention.relative_attention_bias.weight", [nb, H], D ** -0.5)
                ff = "1" if stack == "encoder" else "2"
                self.add(p + ff + ".DenseReluDense.wi.weight", [dff, D], D ** -0.5)
                self.add(p + ff + ".DenseReluDense.wo.weight", [D, dff], dff ** -0.5)
                self.add(p + ff + ".layer_norm.weight", [D], 0, 1.0)
            self.add(stack + ".final_layer_norm.weight", [D], 0, 1.0)
        self.add("lm_head.weight", [V, D], D ** -0.5)

    def _pos_bias(self, stack, Tq, Tk, dev):
        cfg = self.cfg
        i = torch.arange(Tq, device=dev)[:, None]
        j = torch.arange(Tk, device=dev)[None, :]
        b = t5_bucket(j - i, stack == "encoder", cfg["relative_attention_num_buckets"],
                      cfg["relative_attention_max_distance"])
        table = self.p["%s.block.0.layer.0.SelfAttention.relative_attention_bias.weight" % stack]
        return table[b].permute(2, 0, 1)[None]

    def _attn(self, pre, x, kv, bias, mask, tau=1.0, stats=None):
        p, H = self.p, self.cfg["num_heads"]
        q = split_heads(x @ p[pre + ".q.weight"].t(), H)
        k = split_heads(kv @ p[pre + ".k.weight"].t(), H)
        v = split_heads(kv @ p[pre + ".v.weight"].t(), H)
        out, P = attend(q, k, v, bias, mask, 1.0, tau)
        if stats is not None:
            stats.append(P)
        return merge_heads(out) @ p[pre + ".o.weight"].t()

    def _ff(self, pre, h):
        p, eps = self.p, self.cfg["layer_norm_epsilon"]
        x = rms(h, p[pre + ".layer_norm.weight"], eps)
        return h + torch.relu(x @ p[pre + ".DenseReluDense.wi.weight"].t()) @ p[pre + ".DenseReluDense.wo.weight"].t()

    def encode(self, ids, key_mask, rule=None, stats=None):
        """ids [B,T]; key_mask [B,T] bool (False = padding)."""
        rule = rule or {}
        p, eps, L = self.p, self.cfg["layer_norm_epsilon"], self.cfg["num_layers"]
        tau = float(rule.get("temperature", 1.0))
        T = ids.shape[1]
        bias = self._pos_bias("encoder", T, T, ids.device)
        mask = key_mask[:, None, None, :]
        h = p["shared.weight"][ids]
        for l in range(L):
            pre = "encoder.block.%d.layer." % l
            x = rms(h, p[pre + "0.layer_norm.weight"], eps)
            h = h + self._attn(pre + "0.SelfAttention", x, x, bias, mask, tau, stats)
            h = self._ff(pre + "1", h)
        return rms(h, p["encoder.final_layer_norm.weight"], eps)

    def decode(self, enc, key_mask, dec_ids):
        p, eps, L = self.p, self.cfg["layer_norm_epsilon"], self.cfg["num_layers"]
        Td = dec_ids.shape[1]
        dev = dec_ids.device
        bias = self._pos_bias("decoder", Td, Td, dev)
        i = torch.arange(Td, device=dev)[:, None]
        j = torch.arange(Td, device=dev)[None, :]
        cmask = (j <= i)[None, None]
        xmask = key_mask[:, None, None, :]
        h = p["shared.weight"][dec_ids]
        for l in range(L):
            pre = "decoder.block.%d.layer." % l
            x = rms(h, p[pre + "0.layer_norm.weight"], eps)
            h = h + self._attn(pre + "0.SelfAttention", x, x, bias, cmask)
            x = rms(h, p[pre + "1.layer_norm.weight"], eps)
            h = h + self._attn(pre + "1.EncDecAttention", x, enc, None, xmask)
            h = self._ff(pre + "2", h)
        h = rms(h, p["decoder.final_layer_norm.weight"], eps)
        return h @ p["lm_head.weight"].t()
