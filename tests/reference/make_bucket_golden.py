#!/usr/bin/python3
"""Writes tests/goldens/t5_buckets.json: reference values for cp_t5_bucket and cp_alibi_slopes,
computed with PyTorch exactly as Hugging Face computes them (independent of the C code).

Run with Debian's /usr/bin/python3 (torch 1.13), the reference package on its path:
    scripts/py tests/reference/make_bucket_golden.py tests/goldens/t5_buckets.json

Output (format_version 1):
  "t5_buckets":   [[r, bidirectional (0/1), num_buckets, max_distance, bucket], ...]
                  from transformers' T5Attention._relative_position_bucket (torch, CPU, float32
                  log part) for num_buckets in {8, 32} x max_distance in {20, 128}, and
                  (36|72, 50), (48|96, 81), both directions, every r with |r| <= max_distance + 3
                  plus large |r| up to 1e6.
  "alibi_slopes": [{"n_heads", "max_bias", "family", "f32", "f64"}, ...]
                  family "bloom" (max_bias 8): transformers' build_alibi_tensor slope code;
                  family "mpt" (max_bias 16): transformers' build_mpt_alibi_tensor slope code.
                  "f32" is the code as written (float32); "f64" the same code in float64.
  "checks":       the script's comparison of the BLOOM and MPT rules (spec claim: the same
                  function of the head count once BLOOM's 8 is replaced by max_bias).
"""
import json
import math
import sys

import torch

from ctxpatch_ref.torchref.rules import t5_bucket


def hf_relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    # transformers/models/t5/modeling_t5.py, T5Attention._relative_position_bucket: the reference's
    # one copy of it (python/ctxpatch_ref/torchref/rules.py)
    return t5_bucket(relative_position, bidirectional, num_buckets, max_distance)


def hf_relative_position_bucket_f64(relative_position, bidirectional, num_buckets, max_distance):
    # The same in float64: only to show the table tells float32 from float64 arithmetic.
    nb = num_buckets // 2 if bidirectional else num_buckets
    base = (relative_position > 0).to(torch.long) * nb if bidirectional else 0
    n = relative_position.abs() if bidirectional else (-relative_position).clamp(min=0)
    me = nb // 2
    large = me + (torch.log(n.double() / me) / math.log(max_distance / me) * (nb - me)).to(torch.long)
    large = torch.clamp(large, max=nb - 1)
    return base + torch.where(n < me, n, large)


def bloom_slopes(num_heads, dtype, max_bias=8.0):
    # transformers/models/bloom/modeling_bloom.py, build_alibi_tensor (slope part); the "3" in
    # log2(p) - 3 is log2(8), generalised to log2(max_bias) for the spec's max_bias form.
    mb = math.log2(max_bias)
    closest_power_of_2 = 2 ** math.floor(math.log2(num_heads))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(closest_power_of_2) - mb))), dtype=dtype)
    powers = torch.arange(1, 1 + closest_power_of_2, dtype=torch.int32)
    slopes = torch.pow(base, powers)
    if closest_power_of_2 != num_heads:
        extra_base = torch.tensor(2 ** (-(2 ** -(math.log2(2 * closest_power_of_2) - mb))), dtype=dtype)
        num_remaining_heads = min(closest_power_of_2, num_heads - closest_power_of_2)
        extra_powers = torch.arange(1, 1 + 2 * num_remaining_heads, 2, dtype=torch.int32)
        slopes = torch.cat([slopes, torch.pow(extra_base, extra_powers)], dim=0)
    return slopes


def mpt_slopes(num_heads, dtype, alibi_bias_max=8):
    # transformers/models/mpt/modeling_mpt.py, build_mpt_alibi_tensor (slope part)
    num_heads_power_of_2 = 2 ** math.ceil(math.log2(num_heads))
    base = torch.arange(1, num_heads_power_of_2 + 1, dtype=torch.int64).to(dtype)
    base = base * (alibi_bias_max / num_heads_power_of_2)
    slopes = 1.0 / torch.pow(2, base)
    slopes = slopes.view(1, num_heads_power_of_2, 1, 1)
    if num_heads_power_of_2 != num_heads:
        slopes = torch.concat([slopes[:, 1::2, ...], slopes[:, ::2, ...]], dim=1)[:, :num_heads, ...]
    return slopes.view(num_heads)


def main():
    out_path = sys.argv[1]
    buckets = []
    # The grid asked for, plus configurations where float32 and float64 arithmetic give
    # different buckets (36/72 with 50: r = 30; 48/96 with 81: r = 36, 54), so the table
    # also checks that the C code follows PyTorch's float32 steps.
    configs = [(8, 20), (8, 128), (32, 20), (32, 128), (36, 50), (72, 50), (48, 81), (96, 81)]
    float64_differs = 0
    for nb, maxd in configs:
        rs = list(range(-(maxd + 3), maxd + 4))
        for big in (200, 1000, 4095, 65536, 123457, 999999, 1000000):
            rs += [big, -big]
        for bidir in (True, False):
            # One batched call, as HF makes (vectorised float32 log), and one call per r
            # (scalar path): they must agree for the golden to be meaningful.
            t = torch.tensor(rs, dtype=torch.long)
            batched = hf_relative_position_bucket(t, bidir, nb, maxd).tolist()
            as_f64 = hf_relative_position_bucket_f64(t, bidir, nb, maxd).tolist()
            for r, b, b64 in zip(rs, batched, as_f64):
                single = hf_relative_position_bucket(torch.tensor([r]), bidir, nb, maxd).item()
                assert single == b, (r, bidir, nb, maxd, single, b)
                buckets.append([r, int(bidir), nb, maxd, b])
                float64_differs += b != b64
    assert float64_differs > 0

    slopes = []
    max_rel_f64 = {8: 0.0, 16: 0.0}
    max_rel_f32 = {8: 0.0, 16: 0.0}
    heads = list(range(1, 17)) + [20, 32, 40]
    for family, mb in (("bloom", 8), ("mpt", 16)):
        for h in heads:
            if family == "bloom":
                f32 = bloom_slopes(h, torch.float32)
                f64 = bloom_slopes(h, torch.float64)
            else:
                f32 = mpt_slopes(h, torch.float32, mb)
                f64 = mpt_slopes(h, torch.float64, mb)
            slopes.append({"n_heads": h, "max_bias": mb, "family": family,
                           "f32": [float(x) for x in f32.tolist()],
                           "f64": [float(x) for x in f64.tolist()]})
    # The spec's claim: BLOOM's rule with max_bias and MPT's rule with alibi_bias_max are one
    # function. Compare both rules for every head count, at max_bias 8 and 16.
    for mb in (8, 16):
        for h in range(1, 65):
            a64, b64 = bloom_slopes(h, torch.float64, mb), mpt_slopes(h, torch.float64, mb)
            a32, b32 = bloom_slopes(h, torch.float32, mb), mpt_slopes(h, torch.float32, mb)
            assert a64.shape == b64.shape == (h,)
            max_rel_f64[mb] = max(max_rel_f64[mb], float(((a64 - b64).abs() / b64).max()))
            max_rel_f32[mb] = max(max_rel_f32[mb], float(((a32 - b32).abs() / b32).max()))
    for mb in (8, 16):
        # Same function up to rounding: float64 agrees to a few ulp; in float32 BLOOM raises a
        # rounded base to powers up to 64, which accumulates up to ~1e-6 relative.
        assert max_rel_f64[mb] < 1e-14, max_rel_f64
        assert max_rel_f32[mb] < 1e-5, max_rel_f32

    doc = {
        "format_version": 1,
        "generator": "tests/reference/make_bucket_golden.py",
        "torch": torch.__version__,
        "checks": {
            "t5_buckets_where_float64_math_differs": float64_differs,
            "bloom_vs_mpt_heads": "1..64",
            "bloom_vs_mpt_max_rel_diff_f64": {str(k): v for k, v in max_rel_f64.items()},
            "bloom_vs_mpt_max_rel_diff_f32": {str(k): v for k, v in max_rel_f32.items()},
        },
        "t5_buckets": buckets,
        "alibi_slopes": slopes,
    }
    with open(out_path, "w") as f:
        f.write("{\n")
        keys = list(doc)
        for n, k in enumerate(keys):
            sep = "," if n + 1 < len(keys) else ""
            if k == "t5_buckets":
                f.write(' "t5_buckets": [\n')
                f.write(",\n".join("  " + json.dumps(e) for e in doc[k]))
                f.write("\n ]" + sep + "\n")
            elif k == "alibi_slopes":
                f.write(' "alibi_slopes": [\n')
                f.write(",\n".join("  " + json.dumps(e) for e in doc[k]))
                f.write("\n ]" + sep + "\n")
            else:
                f.write(" " + json.dumps(k) + ": " + json.dumps(doc[k]) + sep + "\n")
        f.write("}\n")
    print(f"{out_path}: {len(buckets)} buckets, {len(slopes)} slope sets; "
          f"bloom vs mpt max rel diff f64 {max_rel_f64}, f32 {max_rel_f32}")


if __name__ == "__main__":
    main()
