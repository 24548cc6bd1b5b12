"""The attention rule of ../shared/spec/attention-rules.md and docs/attention-decisions.md, as
plain dense L x L torch code (float64; clarity over speed).

Order inside one attention call (spec, "Order"):
  positional term with d' and scaled slopes -> add to c * q.k -> visibility (causal, Lambda,
  top-k additions) -> divide by tau (or the row's tau(T) of a temperature_schedule) -> softmax.
"""
import math

import torch

DTYPE = torch.float64

_RULE_KEYS = {"temperature", "temperature_schedule", "temperature_scope", "alibi_scale", "lambda_mask",
              "distance_ceiling", "top_k", "fire_threshold", "train_len"}


class RuleError(ValueError):
    pass


class ModelFacts:
    """What a plan needs to know about the model (mirrors the spec's L_train and layer counts)."""

    def __init__(self, is_t5, n_enc, n_dec, train_len, pos):
        self.is_t5 = is_t5
        self.n_enc = n_enc          # T5 encoder depth, 0 for decoder-only
        self.n_dec = n_dec          # decoder depth (decoder-only: number of layers)
        self.train_len = train_len  # model's L_train or None
        self.pos = pos              # "t5", "alibi", "rope", "fire", "learned" (GPT-2 wpe)


def _scope_depths(rule, facts):
    """Depths of the stacks a per-layer temperature list reaches (decision 1)."""
    if facts.is_t5:
        scope = rule.get("temperature_scope", "encoder")
        return [facts.n_enc] + ([facts.n_dec] if scope in ("self", "all") else [])
    return [facts.n_dec]


def check_schedule(rule, facts):
    """temperature_schedule (spec): exclusive with temperature; points [[L, tau], ...] with
    integer L >= 1 strictly increasing and tau > 0, or every tau a per-layer list of one size
    (which must be the depth of every stack in scope)."""
    if "temperature" in rule:
        raise RuleError("temperature and temperature_schedule are exclusive")
    sched = rule["temperature_schedule"]
    if set(sched) != {"points"} or not sched["points"]:
        raise RuleError("temperature_schedule needs exactly a non-empty 'points'")
    prev = 0
    kinds = set()
    for L, tau in sched["points"]:
        if int(L) != L or L < 1 or L <= prev:
            raise RuleError("schedule lengths must be integers >= 1, strictly increasing")
        prev = L
        taus = tau if isinstance(tau, list) else [tau]
        kinds.add(len(tau) if isinstance(tau, list) else None)
        if not taus or any(not (t > 0) for t in taus):
            raise RuleError("schedule taus must be > 0")
    if len(kinds) != 1:
        raise RuleError("schedule points mix forms or sizes")
    width = kinds.pop()
    if width is not None and any(width != d for d in _scope_depths(rule, facts)):
        raise RuleError("per-layer schedule of %d taus != layer count %s" % (width, _scope_depths(rule, facts)))


def schedule_tau(points, T):
    """tau(T) as the spec states it: the first point's tau for T <= L_1, the last one's for
    T >= L_n, in between linear in log T. points: [(L, tau)] of one layer."""
    if T <= points[0][0]:
        return float(points[0][1])
    if T >= points[-1][0]:
        return float(points[-1][1])
    for (la, ta), (lb, tb) in zip(points, points[1:]):
        if T <= lb:
            return ta + (tb - ta) * (math.log(T) - math.log(la)) / (math.log(lb) - math.log(la))
    raise AssertionError("unreachable")


def check_rule(rule, facts):
    """Refuses what the spec / decisions refuse for this model (raises RuleError)."""
    unknown = set(rule) - _RULE_KEYS
    if unknown:
        raise RuleError("unknown rule keys %s" % sorted(unknown))
    if "temperature_schedule" in rule:
        check_schedule(rule, facts)
    t = rule.get("temperature")
    if isinstance(t, list) and len(t) != 1:
        # Decision 1: the list must match the depth of every stack in scope (decision 12: a
        # one-element list is the scalar).
        depths = _scope_depths(rule, facts)
        if any(len(t) != d for d in depths):
            raise RuleError("per-layer temperature list length %d != layer count %s" % (len(t), depths))
    if "alibi_scale" in rule:
        if facts.pos != "alibi":
            raise RuleError("alibi_scale on a non-ALiBi model")
        mode = rule["alibi_scale"]["mode"]
        if mode in ("dynamic", "progressive") and not (rule.get("train_len") or facts.train_len):
            raise RuleError("alibi_scale %s needs a train length" % mode)
    if "fire_threshold" in rule and facts.pos != "fire":
        raise RuleError("fire_threshold on a non-FIRE model")
    if facts.pos == "learned":
        # learned absolute positions are added to the input: attention has no distance term for
        # a ceiling or a top-k distance to act on (the spec's positional-term rules)
        if "distance_ceiling" in rule:
            raise RuleError("distance_ceiling on a learned-position model")
        if "distance" in rule.get("top_k", {}):
            raise RuleError("top_k.distance on a learned-position model")


class Plan:
    """The rule resolved for one attention call (kind: 'enc', 'dec' or 'cross'; layer within its
    stack)."""

    def __init__(self, rule, facts, kind, layer):
        self.kind = kind
        self.layer = layer
        self.causal = kind == "dec"

        # temperature or temperature_schedule (decision 2 for the scope)
        self.tau = 1.0
        self.schedule = None    # [(L, tau)] of this layer when a schedule is in scope
        t = rule.get("temperature")
        if facts.is_t5:
            scope = rule.get("temperature_scope", "encoder")
            in_scope = {"encoder": kind == "enc", "self": kind in ("enc", "dec"), "all": True}[scope]
        else:
            in_scope = kind == "dec"
        ts = rule.get("temperature_schedule")
        if ts is not None and in_scope:
            self.schedule = [(int(L), float(tau[layer] if isinstance(tau, list) else tau))
                             for L, tau in ts["points"]]
        if t is not None:
            if in_scope:
                if isinstance(t, list):
                    self.tau = float(t[0]) if len(t) == 1 else float(t[layer])
                else:
                    self.tau = float(t)

        # Lambda mask: causal attention only (decision 4)
        lam = rule.get("lambda_mask")
        self.lam = lam is not None and self.causal
        self.n_global = int(lam["n_global"]) if lam else 0
        self.n_local = int(lam["n_local"]) if lam else 0

        # distance ceiling: explicit, else implied by lambda_mask (= n_local). Rule-wide: every
        # positional term uses it (the T5 encoder too); cross-attention has no positional term.
        if facts.pos == "learned":
            self.ceiling = None     # no positional term in attention
        elif "distance_ceiling" in rule:
            self.ceiling = int(rule["distance_ceiling"])
        elif lam is not None:
            self.ceiling = int(lam["n_local"])
        else:
            self.ceiling = None

        # top-k middle tokens (decision 7); nothing is hidden without a Lambda mask
        tk = rule.get("top_k")
        self.topk = tk is not None and self.lam and layer >= int(tk.get("from_layer", 0))
        if self.topk:
            self.k = int(tk["k"])
            dist = tk.get("distance")
            # learned positions: the scorer has no positional term, the distance is never read
            self.topk_distance = int(dist) if dist is not None else (
                0 if self.ceiling is None else self.ceiling // 2)
            self.topk_rows = tk.get("rows", "decode")

        # ALiBi scaling
        al = rule.get("alibi_scale")
        self.alibi_mode = al["mode"] if al else None
        self.alibi_factor = float(al.get("factor", 1.0)) if al else 1.0
        self.train_len = rule.get("train_len") or facts.train_len

        self.fire_threshold = rule.get("fire_threshold")

    def row_tau(self, nq, nk, dtype):
        """tau of each query row [nq, 1] under a schedule: T = i + 1 for a causal row i (every
        row here is at its absolute position, also when it stands for a decode step with a cache),
        else T = nk (bidirectional and cross rows). None without a schedule."""
        if self.schedule is None:
            return None
        T = [i + 1 for i in range(nq)] if self.causal else [nk] * nq
        return torch.tensor([schedule_tau(self.schedule, t) for t in T], dtype=dtype)[:, None]

    def alibi_divisor(self, n_rows, pinfo, dtype=DTYPE):
        """F per query row [n_rows] (spec, alibi_scale)."""
        if self.alibi_mode is None:
            return torch.ones(n_rows, dtype=dtype)
        if self.alibi_mode == "static":
            return torch.full((n_rows,), self.alibi_factor, dtype=dtype)
        if self.alibi_mode == "dynamic":
            # decision 8: keys in the pass that computes the row (prefill T, decode cache + 1)
            nk = torch.tensor([pinfo.n_keys(i) for i in range(n_rows)], dtype=dtype)
            return torch.clamp(nk / self.train_len, min=1.0)
        if self.alibi_mode == "progressive":
            i = torch.arange(n_rows, dtype=dtype)
            return torch.clamp((i + 1) / self.train_len, min=1.0)
        raise RuleError("unknown alibi_scale mode %r" % self.alibi_mode)


class PassInfo:
    """Which forward pass computes each row, for the KV-cache semantics of the spec when a
    generation is reproduced by re-running the whole sequence: rows < n_prompt belong to the
    prefill (T = n_prompt keys), row i >= n_prompt to the decode step with i + 1 keys. Rows
    >= n_prompt - 1 are the 'decode rows' of top_k (the last prompt row and every generated one).
    """

    def __init__(self, n_prompt):
        self.n_prompt = n_prompt

    def n_keys(self, i):
        return max(self.n_prompt, i + 1)

    def is_decode_row(self, i):
        return i >= self.n_prompt - 1


# ---------------------------------------------------------------- positional terms

def t5_bucket(relative_position, bidirectional, num_buckets, max_distance):
    """Hugging Face T5Attention._relative_position_bucket (log in float32, as HF computes it).
    relative_position = key - query (LongTensor)."""
    relative_buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1))
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


def t5_bucket_scalar(r, bidirectional, num_buckets, max_distance):
    """Same function written with Python scalars (double), for the self-check."""
    b = 0
    if bidirectional:
        num_buckets //= 2
        if r > 0:
            b += num_buckets
        r = abs(r)
    else:
        r = -min(r, 0)
    max_exact = num_buckets // 2
    if r < max_exact:
        return b + r
    large = max_exact + int(math.log(r / max_exact) / math.log(max_distance / max_exact)
                            * (num_buckets - max_exact))
    return b + min(large, num_buckets - 1)


def bloom_slopes(n_heads):
    """HF modeling_bloom.build_alibi_tensor's slopes."""
    closest_power_of_2 = 2 ** math.floor(math.log2(n_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - 3))), dtype=torch.float32)
    powers = torch.arange(1, 1 + closest_power_of_2, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    if closest_power_of_2 != n_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - 3))), dtype=torch.float32)
        num_remaining_heads = min(closest_power_of_2, n_heads - closest_power_of_2)
        extra_powers = torch.arange(1, 1 + 2 * num_remaining_heads, 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)
    return slopes.to(DTYPE)


def mpt_slopes(n_heads, alibi_bias_max):
    """HF modeling_mpt.build_mpt_alibi_tensor's slopes (computed in double here)."""
    p = 2 ** math.ceil(math.log2(n_heads))
    base = torch.arange(1, p + 1, dtype=DTYPE) * (alibi_bias_max / p)
    slopes = 1.0 / torch.pow(2.0, base)
    if p != n_heads:
        slopes = torch.cat([slopes[1::2], slopes[::2]])[:n_heads]
    return slopes


def spec_slopes(n_heads, max_bias):
    """The spec's statement of the BLOOM rule with 8 replaced by max_bias."""
    p = 2 ** math.floor(math.log2(n_heads))
    s = [2.0 ** (-max_bias * k / p) for k in range(1, p + 1)]
    k = 1
    while len(s) < n_heads:
        s.append(2.0 ** (-(max_bias / 2) * k / p))
        k += 2
    return torch.tensor(s, dtype=DTYPE)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_inv_freq(rot_dims, theta, dtype=DTYPE):
    return 1.0 / (theta ** (torch.arange(0, rot_dims, 2, dtype=dtype) / rot_dims))


ROPE_BY_LENGTH = ("dynamic", "longrope")


def rope_scaling_kind(scaling):
    return (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))


def rope_scaled_inv_freq(rot_dims, theta, scaling, max_position_embeddings, dtype=DTYPE, seq_len=None,
                         original=None):
    """(inv_freq [rot/2], attention_factor) of a rope_scaling dict, in float64, as transformers'
    src/transformers/modeling_rope_utils.py computes them (_compute_default_rope_parameters,
    _compute_llama3_parameters, _compute_yarn_parameters, _compute_dynamic_ntk_parameters,
    _compute_longrope_parameters; transformers 5 semantics: yarn reads rope_scaling.factor, and
    original_max_position_embeddings from rope_scaling when given).
    "linear" is not here: it divides positions (rope_scorer's factor).
    dynamic and longrope depend on seq_len, which dynamic_rope_update takes as max(position_ids) + 1
    (a forward over T tokens: T); original: the config's top-level original_max_position_embeddings
    (Phi3Config), which longrope reads before rope_scaling's."""
    inv = rope_inv_freq(rot_dims, theta, dtype)
    kind = rope_scaling_kind(scaling)
    if kind in ("default", "linear"):
        return inv, 1.0
    if kind == "longrope":
        orig = original or scaling.get("original_max_position_embeddings")
        if orig:   # Phi3: the factor is the ratio of the lengths, not rope_scaling.factor
            factor = max_position_embeddings / orig
        else:
            orig, factor = max_position_embeddings, float(scaling["factor"])
        attention = scaling.get("attention_factor")
        if attention is None:
            attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
        ext = scaling["long_factor"] if seq_len and seq_len > orig else scaling["short_factor"]
        return inv / torch.tensor(ext, dtype=dtype), float(attention)
    factor = float(scaling["factor"])
    if kind == "dynamic":   # the NTK base grows with the sequence once it passes max_position_embeddings
        length = max(seq_len or 0, max_position_embeddings)
        base = theta * ((factor * length / max_position_embeddings) - (factor - 1)) ** (rot_dims / (rot_dims - 2))
        return rope_inv_freq(rot_dims, base, dtype), 1.0
    if kind == "llama3":
        lo, hi = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        old = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
        return torch.where(medium, smoothed, scaled), 1.0
    if kind == "yarn":
        original = scaling.get("original_max_position_embeddings") or max_position_embeddings
        attention = scaling.get("attention_factor") or (0.1 * math.log(factor) + 1.0)
        beta_fast, beta_slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1
        dim = rot_dims

        def correction_dim(rotations):
            return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

        low, high = correction_dim(beta_fast), correction_dim(beta_slow)
        if scaling.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=dtype) - low) / (high - low), 0, 1)
        extrapolation = 1 - ramp
        pos_freqs = theta ** (torch.arange(0, dim, 2, dtype=dtype) / dim)
        inv = 1.0 / (factor * pos_freqs) * (1 - extrapolation) + 1.0 / pos_freqs * extrapolation
        return inv, float(attention)
    raise ValueError("rope_scaling type %r is not in the reference" % kind)


def rope_apply(x, pos, inv_freq):
    """Rotate x [..., rot] at (float) positions pos (broadcast to x[..., 0]); HF rotate-half."""
    ang = pos.to(x.dtype).unsqueeze(-1) * inv_freq
    emb = torch.cat((ang, ang), dim=-1)
    return x * torch.cos(emb) + rotate_half(x) * torch.sin(emb)


# ---------------------------------------------------------------- scorers
# A scorer maps the (clamped, signed) relative position matrix rel[i, j] = j' - i (the key-minus-
# query offset that the positional term must see) to full logits [H, nq, nk] = c*q.k + bias.


def clamp_rel(rel, ceiling):
    """Decision 5: sign-preserving min(|r|, D); for causal pairs r = -d so this is -min(d, D)."""
    if ceiling is None:
        return rel
    return torch.sign(rel) * torch.clamp(torch.abs(rel), max=ceiling)


def qk_dot(q, k, c):
    return c * torch.einsum("hid,hjd->hij", q, k)


def alibi_scorer(q, k, c, slopes, divisor):
    """bias = -(m_h / F_i) * d' (decision 10: distance form)."""
    qk = qk_dot(q, k, c)

    def score(rel):
        d = torch.clamp(-rel, min=0).to(q.dtype)  # pairs with j > i are masked anyway
        m = slopes.to(q.dtype)[:, None, None] / divisor.to(q.dtype)[None, :, None]
        return qk - m * d[None]
    return score


def t5_scorer(q, k, table, bidirectional, num_buckets, max_distance):
    """c = 1; bias = table[bucket(r')][h]. table: [num_buckets, H]."""
    qk = qk_dot(q, k, 1.0)

    def score(rel):
        b = t5_bucket(rel, bidirectional, num_buckets, max_distance)
        return qk + table[b].permute(2, 0, 1)
    return score


def fire_scorer(q, k, c, mlp, c_fire, L):
    """bias = mlp_h(psi(d') / psi(max(L, i))), psi(x) = log(c x + 1) (docs/fire-layout.md,
    decision 9). mlp = (W1 [W,1], b1 [W], W2 [H,W], b2 [H]) for one hidden layer, or
    (W1, b1, Wm [W,W], bm [W], W2, b2) for two (the paper's: mlp.0, mlp.2, mlp.4)."""
    W1, b1 = mlp[0], mlp[1]
    mid = mlp[2:-2]
    W2, b2 = mlp[-2], mlp[-1]
    qk = qk_dot(q, k, c)
    nq = q.shape[1]

    def psi(x):
        return torch.log(c_fire * x + 1.0)

    def score(rel):
        d = torch.clamp(-rel, min=0).to(q.dtype)
        i = torch.arange(nq, dtype=q.dtype)[:, None]
        norm = psi(torch.clamp(i, min=L))
        x = torch.where(norm > 0, psi(d) / torch.where(norm > 0, norm, torch.ones_like(norm)),
                        torch.zeros_like(d))
        hid = torch.relu(x[..., None] * W1[:, 0] + b1)       # [nq, nk, W]
        if mid:
            hid = torch.relu(hid @ mid[0].t() + mid[1])      # [nq, nk, W]
        bias = hid @ W2.t() + b2                             # [nq, nk, H]
        return qk + bias.permute(2, 0, 1)
    return score


def rope_scorer(q, k, c, rot_dims, theta, factor, inv_freq=None, mscale=1.0):
    """Decision 6: score(i, j) = c * q_i^T R(d') k_j: the query is rotated to absolute position
    j + d' and the key to j (positions divided by the linear rope_scaling factor). Dimensions
    beyond rot_dims (GPT-NeoX partial rotary) pass through unrotated. inv_freq / mscale: a scaled
    table (rope_scaled_inv_freq) and the cos/sin factor (yarn's attention factor)."""
    if inv_freq is None:
        inv_freq = rope_inv_freq(rot_dims, theta, q.dtype)
    nk = k.shape[1]
    kpos = torch.arange(nk, dtype=q.dtype)
    k_rot = mscale * rope_apply(k[..., :rot_dims], kpos / factor, inv_freq)  # [H, nk, rot]
    pass_qk = torch.einsum("hid,hjd->hij", q[..., rot_dims:], k[..., rot_dims:])

    def score(rel):
        j = torch.arange(nk)[None, :]
        qpos = (j - rel).to(q.dtype) / factor                                  # [nq, nk]
        q_exp = q[..., :rot_dims][:, :, None, :].expand(-1, -1, nk, -1)      # [H, nq, nk, rot]
        q_rot = mscale * rope_apply(q_exp, qpos, inv_freq)
        s = torch.einsum("hijd,hjd->hij", q_rot, k_rot) + pass_qk
        return c * s
    return score


def rope_standard_scores(q, k, c, rot_dims, theta, factor, inv_freq=None, mscale=1.0):
    """Ordinary HF RoPE (q at i, k at j) for the self-check of rope_scorer without a ceiling."""
    if inv_freq is None:
        inv_freq = rope_inv_freq(rot_dims, theta, q.dtype)
    pos = torch.arange(q.shape[1], dtype=q.dtype) / factor
    qr = torch.cat([mscale * rope_apply(q[..., :rot_dims], pos, inv_freq), q[..., rot_dims:]], dim=-1)
    kr = torch.cat([mscale * rope_apply(k[..., :rot_dims], pos, inv_freq), k[..., rot_dims:]], dim=-1)
    return qk_dot(qr, kr, c)


# ---------------------------------------------------------------- attention


class Margins:
    """Smallest decision margins seen (top-k selection gaps), so the generator can reject inputs
    whose discrete choices could flip under fp32 rounding in the engine under test."""

    def __init__(self):
        self.topk_gap = float("inf")


def attention(plan, pinfo, score, v, nq, margins=None):
    """One attention call with nq query rows. score: scorer (rel -> logits [H, nq, nk]) or, for
    cross-attention, the logits themselves. v: [H, nk, dh]. Returns (out [H, nq, dh],
    probs [H, nq, nk])."""
    H, nk = v.shape[0], v.shape[1]
    if plan.kind == "cross":
        S = score.clone()
        vis = torch.ones(H, nq, nk, dtype=torch.bool)
    else:
        i = torch.arange(nq)[:, None]
        j = torch.arange(nk)[None, :]
        rel = clamp_rel(j - i, plan.ceiling)
        S = score(rel).clone()
        vis2 = torch.ones(nq, nk, dtype=torch.bool)
        if plan.causal:
            vis2 &= j <= i
        if plan.lam:
            vis2 &= (j < plan.n_global) | (i - j < plan.n_local)
        # a sliding layer's own window (Gemma 2): intersected with the rule's masks (decision 17)
        window = getattr(plan, "window", None)
        if window:
            vis2 &= i - j < window
        vis = vis2[None].expand(H, nq, nk).clone()
        if plan.topk:
            hidden = (j <= i) & (j >= plan.n_global) & (i - j >= plan.n_local)
            if window:
                hidden &= i - j < window
            St = score(torch.full((nq, nk), -plan.topk_distance, dtype=torch.long))
            for row in range(nq):
                if plan.topk_rows == "decode" and not pinfo.is_decode_row(row):
                    continue
                cand = torch.nonzero(hidden[row]).flatten()
                if cand.numel() == 0:
                    continue
                for h in range(H):
                    vals = St[h, row, cand]
                    # largest first; ties to the smaller j (stable sort over ascending j)
                    order = torch.sort(-vals, stable=True).indices
                    sel = cand[order[: plan.k]]
                    if margins is not None and cand.numel() > plan.k:
                        sv = vals[order]
                        a, b = cand[order[plan.k - 1]], cand[order[plan.k]]
                        # a tie (to rounding) between keys with equal values (the same token in
                        # layer 0, where k and v depend on the token only) gives the same output
                        # whichever is chosen, so it is not a fragile choice
                        gap = float(sv[plan.k - 1] - sv[plan.k]) / max(1.0, float(sv.abs().max()))
                        harmless = gap < 1e-9 and torch.equal(v[h, a], v[h, b])
                        if not harmless:
                            margins.topk_gap = min(margins.topk_gap, gap)
                    S[h, row, sel] = St[h, row, sel]
                    vis[h, row, sel] = True
    softcap = getattr(plan, "softcap", None)
    if softcap:
        # Gemma 2 (decision 17): the temperature divides c q.k, then cap tanh(x / cap), then the mask
        row_tau = plan.row_tau(nq, nk, S.dtype)
        S = S / plan.tau if row_tau is None else S / row_tau
        S = softcap * torch.tanh(S / softcap)
        S = torch.where(vis, S, torch.full_like(S, float("-inf")))
    else:
        S = torch.where(vis, S, torch.full_like(S, float("-inf")))
        row_tau = plan.row_tau(nq, nk, S.dtype)
        S = S / plan.tau if row_tau is None else S / row_tau
    P = torch.softmax(S, dim=-1)
    return P @ v, P


def head_stats(P):
    """Per head: mean over query rows of max_j p and of -sum p ln p (0 ln 0 = 0)."""
    pmax = P.max(dim=-1).values.mean(dim=-1)
    plogp = torch.where(P > 0, P * torch.log(torch.where(P > 0, P, torch.ones_like(P))), torch.zeros_like(P))
    ent = (-plogp.sum(dim=-1)).mean(dim=-1)
    return pmax, ent
