#!/usr/bin/env python3
"""Writes a tiny random HF checkpoint folder of a fused-QKV family (config.json, model.safetensors in
float32, the probe models' byte-level BPE tokenizer.json) for the GGUF family tests, since the probe
models hold no GPT-NeoX and no MPT. No reference is computed here: llama.cpp is the reference.
usage: make_random_family.py OUTDIR gpt_neox|gpt_neox_seq|mpt|gpt2|qwen2|llama3|qwen3|qwen3_yarn|mistral_hd|phi3|phi3_tied|
                              gemma|gemma2|gemma3|granite|olmo2|starcoder2 [SEED]
  gpt_neox      parallel residual, rotary_pct 0.25 (4 of 16 dims), rope_theta 10000
  gpt_neox_seq  sequential residual, rotary_pct 0.5, rope_theta 500
  mpt           ALiBi (max bias 8), no biases, clip_qkv 0.5 (the clamp acts on most rows)
  gpt2          learned positions (n_positions 512), Conv1D matrices stored [n_in, n_out], tied head
  qwen2         the Llama body with q/k/v biases, GQA (4 heads, 2 kv heads), tied head
  llama3        the Llama body, GQA 4/2, untied head, Llama 3.1's rope_scaling (llama3: factor 8,
                low/high 1/32 over an original 2048, so 3 of the 8 pairs are blended)
  qwen3         the Llama body with per-head q/k RMSNorm, head_dim 32 (hidden 64 / 4 heads is 16), GQA
                4/2, no biases, tied head, rope_theta 1e6
  qwen3_yarn    qwen3 with rope_theta 1e4 and rope_scaling yarn (factor 8 over an original 64,
                max_position_embeddings 512: pairs 0-5 of 16 on the ramp, the rest interpolated)
  mistral_hd    qwen3 without the q/k norms, as model_type mistral (explicit head_dim, no sliding window)
  phi3          Phi3ForCausalLM: fused qkv_proj (GQA 4/2) and gate_up_proj, partial_rotary_factor 0.5,
                untied head, sliding_window null
  phi3_tied     the same with a tied head, whole-head rotary, sliding_window 256 (= max_position_embeddings)
  gemma         GemmaForCausalLM: norms stored as w of (1 + w), head_dim 32 (not D / H = 16), GQA 4/2, GeGLU
                (gelu_pytorch_tanh), tied head, rope_theta 10000
  gemma2        Gemma2ForCausalLM, 3 layers (0 and 2 slide): the same with the post-attention and post-FFN
                norms, query_pre_attn_scalar = head_dim (llama.cpp's scale), soft-caps 1.5 (attention) and 10
                (final logits) so both act on these weights, sliding_window 32
  gemma3        Gemma3ForCausalLM (model_type gemma3_text), 6 layers: gemma2's body without soft-caps, per-head
                q_norm / k_norm (stored as w of (1 + w)), sliding_window 32 on layers 0-4 (the default
                sliding_window_pattern 6; layer 5 full), rope_local_base_freq 10000 on them, rope_theta 1e5
                with rope_scaling linear 8 on layer 5
  granite       GraniteForCausalLM: the Llama body (GQA 4/2, tied head) with embedding_multiplier 6,
                residual_multiplier 0.25, attention_multiplier 0.375 (not 16^-1/2) and logits_scaling 3
  olmo2         Olmo2ForCausalLM: no pre-norms, post_attention_layernorm and post_feedforward_layernorm on
                the module outputs, q_norm [64] / k_norm [32] over the whole projections (wide gains), GQA
                4/2, untied head, rope_theta 10000
  starcoder2    Starcoder2ForCausalLM: LayerNorms with bias, biased q/k/v/o, c_fc -> gelu tanh -> c_proj with
                biases, GQA 4/2, tied head, rope_theta 100000, sliding_window null
numpy only (Debian's /usr/bin/python3)."""
import json
import os
import shutil
import struct
import sys

import numpy as np

D, H, L, V, T = 64, 4, 2, 559, 256
HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER = os.path.join(HERE, "..", "..", "examples", "probe-models", "tokenizer.json")


def write_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], "<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        blobs.append(a.tobytes())
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    out, kind = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    w = lambda *shape: rng.normal(0, 0.1, shape)
    norm = lambda: 1 + rng.normal(0, 0.1, D)
    bias = lambda n: rng.normal(0, 0.05, n)
    t = {}
    if kind.startswith("gpt_neox"):
        p = "gpt_neox."
        t[p + "embed_in.weight"] = rng.normal(0, 1, (V, D))
        for i in range(L):
            q = f"{p}layers.{i}."
            for n in ("input_layernorm", "post_attention_layernorm"):
                t[q + n + ".weight"], t[q + n + ".bias"] = norm(), bias(D)
            t[q + "attention.query_key_value.weight"], t[q + "attention.query_key_value.bias"] = w(3 * D, D), bias(3 * D)
            t[q + "attention.dense.weight"], t[q + "attention.dense.bias"] = w(D, D), bias(D)
            t[q + "mlp.dense_h_to_4h.weight"], t[q + "mlp.dense_h_to_4h.bias"] = w(4 * D, D), bias(4 * D)
            t[q + "mlp.dense_4h_to_h.weight"], t[q + "mlp.dense_4h_to_h.bias"] = w(D, 4 * D), bias(D)
        t[p + "final_layer_norm.weight"], t[p + "final_layer_norm.bias"] = norm(), bias(D)
        t["embed_out.weight"] = w(V, D)
        seq = kind == "gpt_neox_seq"
        cfg = {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "vocab_size": V, "hidden_size": D,
               "num_hidden_layers": L, "num_attention_heads": H, "intermediate_size": 4 * D, "hidden_act": "gelu",
               "rotary_pct": 0.5 if seq else 0.25, "rotary_emb_base": 500.0 if seq else 10000.0,
               "max_position_embeddings": T, "layer_norm_eps": 1e-5, "use_parallel_residual": not seq,
               "attention_bias": True, "tie_word_embeddings": False, "bos_token_id": 2, "eos_token_id": 1,
               "pad_token_id": 0, "torch_dtype": "float32"}
    elif kind == "mpt":
        t["transformer.wte.weight"] = rng.normal(0, 1, (V, D))
        for i in range(L):
            q = f"transformer.blocks.{i}."
            t[q + "norm_1.weight"], t[q + "norm_2.weight"] = norm(), norm()
            t[q + "attn.Wqkv.weight"], t[q + "attn.out_proj.weight"] = w(3 * D, D), w(D, D)
            t[q + "ffn.up_proj.weight"], t[q + "ffn.down_proj.weight"] = w(4 * D, D), w(D, 4 * D)
        t["transformer.norm_f.weight"] = norm()
        cfg = {"architectures": ["MptForCausalLM"], "model_type": "mpt", "vocab_size": V, "d_model": D,
               "n_layers": L, "n_heads": H, "expansion_ratio": 4, "max_seq_len": T, "no_bias": True,
               "layer_norm_epsilon": 1e-5, "attn_config": {"alibi": True, "alibi_bias_max": 8, "clip_qkv": 0.5},
               "tie_word_embeddings": True, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
               "torch_dtype": "float32"}
    elif kind == "gpt2":
        t["transformer.wte.weight"] = rng.normal(0, 1, (V, D))
        t["transformer.wpe.weight"] = rng.normal(0, 0.3, (512, D))
        for i in range(L):
            q = f"transformer.h.{i}."
            for n in ("ln_1", "ln_2"):
                t[q + n + ".weight"], t[q + n + ".bias"] = norm(), bias(D)
            # Conv1D: weight [n_in, n_out], y = x W + b
            t[q + "attn.c_attn.weight"], t[q + "attn.c_attn.bias"] = w(D, 3 * D), bias(3 * D)
            t[q + "attn.c_proj.weight"], t[q + "attn.c_proj.bias"] = w(D, D), bias(D)
            t[q + "mlp.c_fc.weight"], t[q + "mlp.c_fc.bias"] = w(D, 4 * D), bias(4 * D)
            t[q + "mlp.c_proj.weight"], t[q + "mlp.c_proj.bias"] = w(4 * D, D), bias(D)
        t["transformer.ln_f.weight"], t["transformer.ln_f.bias"] = norm(), bias(D)
        cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_embd": D,
               "n_layer": L, "n_head": H, "n_inner": None, "n_positions": 512, "activation_function": "gelu_new",
               "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "bos_token_id": 2, "eos_token_id": 1,
               "torch_dtype": "float32"}
    elif kind == "qwen2":  # modeling_qwen2.py: Llama body, q/k/v biases, GQA 4/2, tied head
        t["model.embed_tokens.weight"] = rng.normal(0, 1, (V, D))
        kvd = D // 2
        for i in range(L):
            q = f"model.layers.{i}."
            t[q + "input_layernorm.weight"], t[q + "post_attention_layernorm.weight"] = norm(), norm()
            t[q + "self_attn.q_proj.weight"], t[q + "self_attn.q_proj.bias"] = w(D, D), bias(D)
            t[q + "self_attn.k_proj.weight"], t[q + "self_attn.k_proj.bias"] = w(kvd, D), bias(kvd)
            t[q + "self_attn.v_proj.weight"], t[q + "self_attn.v_proj.bias"] = w(kvd, D), bias(kvd)
            t[q + "self_attn.o_proj.weight"] = w(D, D)
            t[q + "mlp.gate_proj.weight"], t[q + "mlp.up_proj.weight"] = w(4 * D, D), w(4 * D, D)
            t[q + "mlp.down_proj.weight"] = w(D, 4 * D)
        t["model.norm.weight"] = norm()
        cfg = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": V, "hidden_size": D,
               "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": H // 2,
               "intermediate_size": 4 * D, "hidden_act": "silu", "max_position_embeddings": T,
               "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "use_sliding_window": False, "sliding_window": 4096,
               "max_window_layers": L, "tie_word_embeddings": True, "bos_token_id": 2, "eos_token_id": 1,
               "torch_dtype": "float32"}
    elif kind == "llama3":  # modeling_llama.py with rope_scaling llama3 (modeling_rope_utils)
        t["model.embed_tokens.weight"] = rng.normal(0, 1, (V, D))
        kvd = D // 2
        for i in range(L):
            q = f"model.layers.{i}."
            t[q + "input_layernorm.weight"], t[q + "post_attention_layernorm.weight"] = norm(), norm()
            t[q + "self_attn.q_proj.weight"], t[q + "self_attn.k_proj.weight"] = w(D, D), w(kvd, D)
            t[q + "self_attn.v_proj.weight"], t[q + "self_attn.o_proj.weight"] = w(kvd, D), w(D, D)
            t[q + "mlp.gate_proj.weight"], t[q + "mlp.up_proj.weight"] = w(4 * D, D), w(4 * D, D)
            t[q + "mlp.down_proj.weight"] = w(D, 4 * D)
        t["model.norm.weight"], t["lm_head.weight"] = norm(), w(V, D)
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": D,
               "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": H // 2,
               "intermediate_size": 4 * D, "hidden_act": "silu", "max_position_embeddings": 16384,
               "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
               "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 32.0, "original_max_position_embeddings": 2048},
               "tie_word_embeddings": False, "bos_token_id": 2, "eos_token_id": 1, "torch_dtype": "float32"}
    elif kind in ("qwen3", "qwen3_yarn", "mistral_hd"):  # modeling_qwen3.py: Llama body, per-head q/k RMSNorm, head_dim 32 (not
        # D / H), GQA 4/2; mistral_hd: the same without the norms, as a Mistral with explicit head_dim (Mistral Nemo)
        qk_norm = kind in ("qwen3", "qwen3_yarn")
        t["model.embed_tokens.weight"] = rng.normal(0, 1, (V, D))
        hd = 32
        qd, kvd = H * hd, H // 2 * hd
        for i in range(L):
            q = f"model.layers.{i}."
            t[q + "input_layernorm.weight"], t[q + "post_attention_layernorm.weight"] = norm(), norm()
            t[q + "self_attn.q_proj.weight"], t[q + "self_attn.k_proj.weight"] = w(qd, D), w(kvd, D)
            t[q + "self_attn.v_proj.weight"], t[q + "self_attn.o_proj.weight"] = w(kvd, D), w(D, qd)
            if qk_norm:
                t[q + "self_attn.q_norm.weight"] = 1 + rng.normal(0, 0.3, hd)
                t[q + "self_attn.k_norm.weight"] = 1 + rng.normal(0, 0.3, hd)
            t[q + "mlp.gate_proj.weight"], t[q + "mlp.up_proj.weight"] = w(4 * D, D), w(4 * D, D)
            t[q + "mlp.down_proj.weight"] = w(D, 4 * D)
        t["model.norm.weight"] = norm()
        cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": V, "hidden_size": D,
               "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": H // 2, "head_dim": hd,
               "intermediate_size": 4 * D, "hidden_act": "silu", "max_position_embeddings": T,
               "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "attention_bias": False, "use_sliding_window": False,
               "sliding_window": None, "max_window_layers": L, "tie_word_embeddings": True, "bos_token_id": 2,
               "eos_token_id": 1, "torch_dtype": "float32"}
        if kind == "qwen3_yarn":  # modeling_rope_utils _compute_yarn_parameters
            cfg.update({"rope_theta": 10000.0, "max_position_embeddings": 512,
                        "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64}})
        if not qk_norm:
            cfg.update({"architectures": ["MistralForCausalLM"], "model_type": "mistral"})
            for k in ("attention_bias", "use_sliding_window", "max_window_layers"):
                del cfg[k]
    elif kind in ("phi3", "phi3_tied"):  # modeling_phi3.py: qkv_proj = q | k | v rows, gate_up_proj = gate | up
        tied = kind == "phi3_tied"
        t["model.embed_tokens.weight"] = rng.normal(0, 1, (V, D))
        dh = D // H
        for i in range(L):
            q = f"model.layers.{i}."
            t[q + "input_layernorm.weight"], t[q + "post_attention_layernorm.weight"] = norm(), norm()
            t[q + "self_attn.qkv_proj.weight"] = w((H + 2 * (H // 2)) * dh, D)
            t[q + "self_attn.o_proj.weight"] = w(D, D)
            t[q + "mlp.gate_up_proj.weight"], t[q + "mlp.down_proj.weight"] = w(2 * 4 * D, D), w(D, 4 * D)
        t["model.norm.weight"] = norm()
        if not tied:
            t["lm_head.weight"] = w(V, D)
        cfg = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "vocab_size": V, "hidden_size": D,
               "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": H // 2,
               "intermediate_size": 4 * D, "hidden_act": "silu", "max_position_embeddings": T,
               "original_max_position_embeddings": T, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
               "rope_scaling": None, "sliding_window": T if tied else None, "tie_word_embeddings": tied,
               "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "torch_dtype": "float32"}
        if not tied:
            cfg["partial_rotary_factor"] = 0.5
    elif kind in ("gemma", "gemma2", "gemma3"):  # modeling_gemma{,2,3}.py (GemmaRMSNorm: x * (1 + w))
        g3 = kind == "gemma3"
        g2 = g3 or kind == "gemma2"
        layers, hd = (6 if g3 else 3 if g2 else L), 32
        t["model.embed_tokens.weight"] = rng.normal(0, 1, (V, D))
        for i in range(layers):
            q = f"model.layers.{i}."
            norms = ["input_layernorm", "post_attention_layernorm"]
            norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"] if g2 else []
            for n in norms:
                t[q + n + ".weight"] = rng.normal(0, 0.1, D)
            t[q + "self_attn.q_proj.weight"], t[q + "self_attn.k_proj.weight"] = w(H * hd, D), w(H // 2 * hd, D)
            t[q + "self_attn.v_proj.weight"], t[q + "self_attn.o_proj.weight"] = w(H // 2 * hd, D), w(D, H * hd)
            t[q + "mlp.gate_proj.weight"], t[q + "mlp.up_proj.weight"] = w(4 * D, D), w(4 * D, D)
            t[q + "mlp.down_proj.weight"] = w(D, 4 * D)
            if g3:
                t[q + "self_attn.q_norm.weight"] = rng.normal(0, 0.1, hd)
                t[q + "self_attn.k_norm.weight"] = rng.normal(0, 0.1, hd)
        t["model.norm.weight"] = rng.normal(0, 0.1, D)
        arch = "Gemma3ForCausalLM" if g3 else "Gemma2ForCausalLM" if g2 else "GemmaForCausalLM"
        cfg = {"architectures": [arch], "model_type": "gemma3_text" if g3 else kind,
               "vocab_size": V, "hidden_size": D, "num_hidden_layers": layers, "num_attention_heads": H,
               "num_key_value_heads": H // 2, "head_dim": hd, "intermediate_size": 4 * D,
               "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": T, "rms_norm_eps": 1e-6,
               "rope_theta": 10000.0, "attention_bias": False, "tie_word_embeddings": True, "bos_token_id": 2,
               "eos_token_id": 1, "pad_token_id": 0, "torch_dtype": "float32"}
        if g3:
            cfg.update({"query_pre_attn_scalar": hd, "attn_logit_softcapping": None, "final_logit_softcapping": None,
                        "sliding_window": 32, "sliding_window_pattern": 6, "rope_local_base_freq": 10000.0,
                        "rope_theta": 100000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0}})
        elif g2:
            cfg.update({"query_pre_attn_scalar": hd, "attn_logit_softcapping": 1.5, "final_logit_softcapping": 10.0,
                        "sliding_window": 32})
    elif kind == "granite":  # modeling_granite.py: Llama's names; the multipliers are config keys only
        t["model.embed_tokens.weight"] = rng.normal(0, 0.3, (V, D))
        kvd = D // 2
        for i in range(L):
            q = f"model.layers.{i}."
            t[q + "input_layernorm.weight"], t[q + "post_attention_layernorm.weight"] = norm(), norm()
            t[q + "self_attn.q_proj.weight"], t[q + "self_attn.k_proj.weight"] = w(D, D), w(kvd, D)
            t[q + "self_attn.v_proj.weight"], t[q + "self_attn.o_proj.weight"] = w(kvd, D), 4 * w(D, D)
            t[q + "mlp.gate_proj.weight"], t[q + "mlp.up_proj.weight"] = w(4 * D, D), w(4 * D, D)
            t[q + "mlp.down_proj.weight"] = 4 * w(D, 4 * D)
        t["model.norm.weight"] = norm()
        cfg = {"architectures": ["GraniteForCausalLM"], "model_type": "granite", "vocab_size": V, "hidden_size": D,
               "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": H // 2,
               "intermediate_size": 4 * D, "hidden_act": "silu", "max_position_embeddings": T,
               "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False,
               "mlp_bias": False, "embedding_multiplier": 6.0, "residual_multiplier": 0.25,
               "attention_multiplier": 0.375, "logits_scaling": 3.0, "tie_word_embeddings": True,
               "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0, "torch_dtype": "float32"}
    elif kind == "olmo2":  # modeling_olmo2.py: Llama's projections and MLP, norms after the modules
        t["model.embed_tokens.weight"] = rng.normal(0, 0.3, (V, D))
        kvd = D // 2
        for i in range(L):
            q = f"model.layers.{i}."
            t[q + "post_attention_layernorm.weight"] = 1 + rng.normal(0, 0.3, D)
            t[q + "post_feedforward_layernorm.weight"] = 1 + rng.normal(0, 0.3, D)
            t[q + "self_attn.q_norm.weight"] = 1 + rng.normal(0, 0.4, D)
            t[q + "self_attn.k_norm.weight"] = 1 + rng.normal(0, 0.4, kvd)
            t[q + "self_attn.q_proj.weight"], t[q + "self_attn.k_proj.weight"] = w(D, D), w(kvd, D)
            t[q + "self_attn.v_proj.weight"], t[q + "self_attn.o_proj.weight"] = w(kvd, D), 4 * w(D, D)
            t[q + "mlp.gate_proj.weight"], t[q + "mlp.up_proj.weight"] = w(4 * D, D), w(4 * D, D)
            t[q + "mlp.down_proj.weight"] = 4 * w(D, 4 * D)
        t["model.norm.weight"] = norm()
        t["lm_head.weight"] = rng.normal(0, 0.3, (V, D))
        cfg = {"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": V, "hidden_size": D,
               "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": H // 2,
               "intermediate_size": 4 * D, "hidden_act": "silu", "max_position_embeddings": T,
               "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False,
               "tie_word_embeddings": False, "bos_token_id": None, "eos_token_id": 1, "pad_token_id": 0,
               "torch_dtype": "float32"}
    elif kind == "starcoder2":  # modeling_starcoder2.py: nn.LayerNorm, use_bias, Starcoder2MLP c_fc / c_proj
        t["model.embed_tokens.weight"] = rng.normal(0, 1, (V, D))
        kvd = D // 2
        for i in range(L):
            q = f"model.layers.{i}."
            for n in ("input_layernorm", "post_attention_layernorm"):
                t[q + n + ".weight"], t[q + n + ".bias"] = norm(), bias(D)
            for n, rows in (("q_proj", D), ("k_proj", kvd), ("v_proj", kvd)):
                t[q + "self_attn." + n + ".weight"], t[q + "self_attn." + n + ".bias"] = w(rows, D), bias(rows)
            t[q + "self_attn.o_proj.weight"], t[q + "self_attn.o_proj.bias"] = w(D, D), bias(D)
            t[q + "mlp.c_fc.weight"], t[q + "mlp.c_fc.bias"] = w(4 * D, D), bias(4 * D)
            t[q + "mlp.c_proj.weight"], t[q + "mlp.c_proj.bias"] = w(D, 4 * D), bias(D)
        t["model.norm.weight"], t["model.norm.bias"] = norm(), bias(D)
        cfg = {"architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2", "vocab_size": V,
               "hidden_size": D, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": H // 2,
               "intermediate_size": 4 * D, "hidden_act": "gelu_pytorch_tanh", "max_position_embeddings": T,
               "norm_epsilon": 1e-5, "rope_theta": 100000.0, "sliding_window": None, "use_bias": True,
               "tie_word_embeddings": True, "bos_token_id": 2, "eos_token_id": 1, "torch_dtype": "float32"}
    else:
        sys.exit(f"unknown kind {kind}")
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), t)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    shutil.copyfile(TOKENIZER, os.path.join(out, "tokenizer.json"))


if __name__ == "__main__":
    main()
