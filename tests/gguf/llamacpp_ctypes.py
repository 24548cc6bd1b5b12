#!/usr/bin/env python3
"""Runs a GGUF model in llama.cpp through its C API (python3 ctypes), for what node-llama-cpp's addon
cannot do: an encoder-decoder (llama_encode, then llama_decode from the decoder start token) and raw
logits at every position. The library is the one node-llama-cpp 3.22.1's prebuilt package ships
(@node-llama-cpp/linux-x64/bins/linux-x64/libllama.v0.5.0.so, llama.cpp release tag v0.5.0, the
tag in node-llama-cpp/llama/llama.cpp.info.json).

The structs below are written from include/llama.h of that exact release (node-llama-cpp ships its
source as node-llama-cpp/llama/gitRelease.bundle); each is checked against the library where it
can be: the defaults llama_context_default_params() returns are asserted field by field (a field
layout off by one would fail there), and only plain fields at known offsets are changed.

usage: llamacpp_ctypes.py BINS_DIR MODEL MODE ...  -> JSON on stdout
  decoder IDS GEN_N      decoder-only: logits at every prompt position, greedy GEN_N tokens
  t5 ENC_IDS DEC_IDS GEN_N
                         encoder-decoder: encode ENC_IDS; logits of the decoder fed the start
                         token then DEC_IDS (one row per decoder position), then greedy GEN_N from
                         the start token
IDS are comma-separated token ids. Output: {"logits": [[V floats] ...], "greedy": [ids],
"decoder_start": id}. The K/V cache is F32 and flash attention off (float32 like the engine).
numpy-free (Debian python3)."""
import ctypes as C
import json
import os
import sys


class ModelParams(C.Structure):  # struct llama_model_params
    _fields_ = [("devices", C.c_void_p), ("tensor_buft_overrides", C.c_void_p), ("n_gpu_layers", C.c_int32),
                ("split_mode", C.c_int), ("load_mode", C.c_int), ("lazy_mode", C.c_int), ("main_gpu", C.c_int32),
                ("tensor_split", C.c_void_p), ("progress_callback", C.c_void_p),
                ("progress_callback_user_data", C.c_void_p), ("kv_overrides", C.c_void_p),
                ("vocab_only", C.c_bool), ("check_tensors", C.c_bool), ("use_extra_bufts", C.c_bool),
                ("no_host", C.c_bool), ("no_alloc", C.c_bool), ("load_mtp", C.c_bool)]


class ContextParams(C.Structure):  # struct llama_context_params
    _fields_ = [("n_ctx", C.c_uint32), ("n_batch", C.c_uint32), ("n_ubatch", C.c_uint32), ("n_seq_max", C.c_uint32),
                ("n_rs_seq", C.c_uint32), ("n_outputs_max", C.c_uint32), ("n_outputs_max_per_seq", C.c_uint32),
                ("n_threads", C.c_int32), ("n_threads_batch", C.c_int32), ("ctx_type", C.c_int),
                ("rope_scaling_type", C.c_int), ("pooling_type", C.c_int), ("attention_type", C.c_int),
                ("flash_attn_type", C.c_int), ("rope_freq_base", C.c_float), ("rope_freq_scale", C.c_float),
                ("yarn_ext_factor", C.c_float), ("yarn_attn_factor", C.c_float), ("yarn_beta_fast", C.c_float),
                ("yarn_beta_slow", C.c_float), ("yarn_orig_ctx", C.c_uint32), ("defrag_thold", C.c_float),
                ("cb_eval", C.c_void_p), ("cb_eval_user_data", C.c_void_p), ("type_k", C.c_int), ("type_v", C.c_int),
                ("abort_callback", C.c_void_p), ("abort_callback_data", C.c_void_p), ("embeddings", C.c_bool),
                ("offload_kqv", C.c_bool), ("no_perf", C.c_bool), ("op_offload", C.c_bool), ("swa_full", C.c_bool),
                ("kv_unified", C.c_bool), ("samplers", C.c_void_p), ("n_samplers", C.c_size_t),
                ("ctx_other", C.c_void_p)]


class Batch(C.Structure):  # struct llama_batch
    _fields_ = [("n_tokens", C.c_int32), ("token", C.POINTER(C.c_int32)), ("embd", C.POINTER(C.c_float)),
                ("pos", C.POINTER(C.c_int32)), ("n_seq_id", C.POINTER(C.c_int32)),
                ("seq_id", C.POINTER(C.POINTER(C.c_int32))), ("logits", C.POINTER(C.c_int8))]


# llama_context_default_params() of release v0.5.0 (src/llama-context.cpp), asserted before use.
CTX_DEFAULTS = {"n_ctx": 512, "n_batch": 2048, "n_ubatch": 512, "n_seq_max": 1, "n_rs_seq": 0, "n_outputs_max": 0,
                "n_outputs_max_per_seq": 1, "rope_freq_base": 0.0, "rope_freq_scale": 0.0, "yarn_ext_factor": -1.0,
                "yarn_attn_factor": -1.0, "yarn_beta_fast": -1.0, "yarn_beta_slow": -1.0, "yarn_orig_ctx": 0,
                "defrag_thold": -1.0, "cb_eval": None, "type_k": 1, "type_v": 1, "abort_callback": None,
                "embeddings": False, "offload_kqv": True, "no_perf": True, "op_offload": True, "swa_full": True,
                "kv_unified": False, "samplers": None, "n_samplers": 0, "ctx_other": None, "flash_attn_type": -1}
GGML_TYPE_F32 = 0


class Llama:
    def __init__(self, bins):
        ggml = C.CDLL(os.path.join(bins, "libggml.v0.5.0.so"), mode=C.RTLD_GLOBAL)
        self.L = L = C.CDLL(os.path.join(bins, "libllama.v0.5.0.so"), mode=C.RTLD_GLOBAL)
        assert C.sizeof(ContextParams) == 160 and C.sizeof(ModelParams) == 80 and C.sizeof(Batch) == 56
        ggml.ggml_backend_load_all_from_path.argtypes = [C.c_char_p]
        self._log = C.CFUNCTYPE(None, C.c_int, C.c_char_p, C.c_void_p)(lambda lvl, txt, ud: None)
        L.llama_log_set.argtypes = [C.c_void_p, C.c_void_p]
        L.llama_log_set(C.cast(self._log, C.c_void_p), None)
        ggml.ggml_backend_load_all_from_path(bins.encode())
        L.llama_backend_init()
        sig = {
            "llama_model_default_params": ([], ModelParams), "llama_context_default_params": ([], ContextParams),
            "llama_model_load_from_file": ([C.c_char_p, ModelParams], C.c_void_p),
            "llama_init_from_model": ([C.c_void_p, ContextParams], C.c_void_p),
            "llama_encode": ([C.c_void_p, Batch], C.c_int32), "llama_decode": ([C.c_void_p, Batch], C.c_int32),
            "llama_get_logits_ith": ([C.c_void_p, C.c_int32], C.POINTER(C.c_float)),
            "llama_model_get_vocab": ([C.c_void_p], C.c_void_p), "llama_vocab_n_tokens": ([C.c_void_p], C.c_int32),
            "llama_model_decoder_start_token": ([C.c_void_p], C.c_int32),
            "llama_model_has_encoder": ([C.c_void_p], C.c_bool), "llama_free": ([C.c_void_p], None),
            "llama_model_free": ([C.c_void_p], None), "llama_vocab_eos": ([C.c_void_p], C.c_int32),
        }
        for name, (args, res) in sig.items():
            f = getattr(L, name)
            f.argtypes, f.restype = args, res

    def load(self, path, threads):
        L = self.L
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            raise SystemExit(f"llama.cpp could not load {path}")
        cp = L.llama_context_default_params()
        for k, v in CTX_DEFAULTS.items():  # the layout read from llama.h matches the library
            got = getattr(cp, k)
            assert got == v, f"llama_context_params.{k}: library default {got!r}, expected {v!r}"
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_outputs_max_per_seq = 1024, 1024, 1024, 0
        cp.n_threads = cp.n_threads_batch = threads
        cp.type_k = cp.type_v = GGML_TYPE_F32
        cp.flash_attn_type = 0  # disabled
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise SystemExit(f"llama.cpp could not make a context for {path}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)

    def batch(self, ids, pos0, want_logits):
        n = len(ids)
        self._keep = arrs = ((C.c_int32 * n)(*ids), (C.c_int32 * n)(*range(pos0, pos0 + n)), (C.c_int32 * n)(*[1] * n),
                             (C.c_int32 * 1)(0), (C.c_int8 * n)(*[1 if want_logits(i) else 0 for i in range(n)]))
        seq = (C.POINTER(C.c_int32) * n)(*[C.cast(arrs[3], C.POINTER(C.c_int32))] * n)
        self._keep += (seq,)
        return Batch(n, C.cast(arrs[0], C.POINTER(C.c_int32)), None, C.cast(arrs[1], C.POINTER(C.c_int32)),
                     C.cast(arrs[2], C.POINTER(C.c_int32)), C.cast(seq, C.POINTER(C.POINTER(C.c_int32))),
                     C.cast(arrs[4], C.POINTER(C.c_int8)))

    def decode(self, ids, pos0, all_logits):
        rc = self.L.llama_decode(self.ctx, self.batch(ids, pos0, lambda i: all_logits or i == len(ids) - 1))
        if rc != 0:
            raise SystemExit(f"llama_decode returned {rc}")
        rows = range(len(ids)) if all_logits else [len(ids) - 1]
        return [self.L.llama_get_logits_ith(self.ctx, i)[:self.n_vocab] for i in rows]

    def encode(self, ids):
        rc = self.L.llama_encode(self.ctx, self.batch(ids, 0, lambda i: True))
        if rc != 0:
            raise SystemExit(f"llama_encode returned {rc}")

    def greedy(self, first_logits, pos, n):
        out, lg = [], first_logits
        eos = self.L.llama_vocab_eos(self.vocab)
        while len(out) < n:
            t = max(range(len(lg)), key=lg.__getitem__)
            out.append(t)
            if t == eos:
                break
            lg = self.decode([t], pos, False)[0]
            pos += 1
        return out

    def close(self):
        self.L.llama_free(self.ctx)
        self.L.llama_model_free(self.model)


def ids_of(s):
    return [int(x) for x in s.split(",") if x != ""]


def main():
    bins, model, mode = sys.argv[1:4]
    lm = Llama(bins)
    lm.load(model, 1)
    out = {}
    if mode == "decoder":
        ids, n = ids_of(sys.argv[4]), int(sys.argv[5])
        out["logits"] = lm.decode(ids, 0, True)
        out["greedy"] = lm.greedy(out["logits"][-1], len(ids), n)
    elif mode == "t5":
        enc, dec, n = ids_of(sys.argv[4]), ids_of(sys.argv[5]), int(sys.argv[6])
        assert lm.L.llama_model_has_encoder(lm.model)
        start = lm.L.llama_model_decoder_start_token(lm.model)
        out["decoder_start"] = start
        lm.encode(enc)
        out["logits"] = lm.decode([start] + dec, 0, True)
        lm.close()  # a fresh context for the greedy run (the decoder's cache holds the forced tokens)
        lm.load(model, 1)
        lm.encode(enc)
        out["greedy"] = lm.greedy(lm.decode([start], 0, False)[0], 1, n)
    else:
        raise SystemExit(f"unknown mode {mode}")
    lm.close()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
