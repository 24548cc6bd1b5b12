#!/usr/bin/env bash
# GGUF "gpt2" (byte-level BPE) vocabularies read into the C tokenizer (export/gguf/gguf_vocab.c,
# tokenizers/hf_vocab.c), against references that are not the code under test:
#   - GPT-2's own vocabulary: a tiny random Llama whose folder holds ../shared/fixtures' GPT-2
#     tokenizer.json, written as GGUF by `convert --to gguf` (tokenizer.ggml.model "gpt2", tokens,
#     token_type, merges, pre "gpt-2"): `ctxpatch tokenize` on the GGUF gives the ids of the first 24
#     rows of goldens/gpt2.jsonl (produced by HF tokenizers / transformers, the real tokenizer; all
#     153 rows run in-process in test_tokenizer), llama.cpp (node-llama-cpp) tokenizes every
#     single-line row into the golden ids from the same file, and decoding gives the text back;
#   - the probe models' byte-level tokenizer (rope-probe exported to GGUF): `tokenize` on the GGUF
#     gives the folder's ids, `forward --ids` with them the folder's logits bit for bit, and
#     `verify` on the GGUF (probes tokenized by the GGUF vocabulary) scores the passkey probe
#     exactly as on the folder. (`forward` has no --text option.)
# Refusals of inconsistent vocabularies (bounds, duplicates, bad merges, other pre) are in
# tests/test_gguf_vocab.c. Skips (77) without ../shared/fixtures; the llama.cpp part without npm.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"
fx=$CTXPATCH_FIXTURES
nm=${CTXPATCH_NODE_MODULES:-$src/tests/runtimes/node_modules}
gpt2=$fx/tokenizers/gpt2/tokenizer.json; goldens=$fx/tokenizers/goldens/gpt2.jsonl
[ -f "$gpt2" ] && [ -f "$goldens" ] || { echo "SKIP: ../shared/fixtures (tokenizers/gpt2) not found at $fx"; exit 77; }

# --- a tiny random Llama with GPT-2's vocabulary (50257 tokens), as GGUF
"$py" - "$work/g2" <<'PY' && cp "$gpt2" "$work/g2/tokenizer.json" && ok || bad "tiny gpt2-vocab llama"
import json, os, struct, sys
import numpy as np
out = sys.argv[1]; os.makedirs(out)
V, D, F = 50257, 16, 32
rng = np.random.default_rng(1)
shapes = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,), "lm_head.weight": (V, D)}
p = "model.layers.0."
for n, s in [("self_attn.q_proj", (D, D)), ("self_attn.k_proj", (D, D)), ("self_attn.v_proj", (D, D)),
             ("self_attn.o_proj", (D, D)), ("mlp.gate_proj", (F, D)), ("mlp.up_proj", (F, D)), ("mlp.down_proj", (D, F)),
             ("input_layernorm", (D,)), ("post_attention_layernorm", (D,))]:
    shapes[p + n + ".weight"] = s
header, blobs, off = {}, [], 0
for name, s in shapes.items():
    b = (rng.standard_normal(s) * 0.2).astype("<f4").tobytes()
    header[name] = {"dtype": "F32", "shape": list(s), "data_offsets": [off, off + len(b)]}
    blobs.append(b); off += len(b)
h = json.dumps(header).encode(); h += b" " * (-len(h) % 8)
open(f"{out}/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": D,
           "intermediate_size": F, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
           "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
           "tie_word_embeddings": False, "bos_token_id": 50256, "eos_token_id": 50256}, open(f"{out}/config.json", "w"))
PY
"$bin" convert "$work/g2" "$work/g2.gguf" --to gguf >/dev/null && ok || bad "convert gpt2-vocab llama to GGUF"

# --- every golden row through `ctxpatch tokenize` on the GGUF (one text file per row)
"$py" - "$goldens" "$work/rows" <<'PY' || bad "split goldens"
import json, os, sys
os.makedirs(sys.argv[2])
rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
for i, r in enumerate(rows):
    open(f"{sys.argv[2]}/{i:04d}.txt", "wb").write(r["text"].encode("utf-8"))
single = [r["text"] for r in rows if r["text"] and "\n" not in r["text"] and "\r" not in r["text"]]
open(f"{sys.argv[2]}/../lines.txt", "w", encoding="utf-8").write("\n".join(single) + "\n")
PY
for f in $(ls "$work"/rows/*.txt | head -24); do
  "$bin" tokenize "$work/g2.gguf" --text-file "$f" --no-special || echo "ERROR"
done >"$work/ours.txt" && ok || bad "ctxpatch tokenize on the GGUF"
"$bin" tokenize "$work/g2.gguf" --decode 15496,995,11,314,1101,257,1332,50256 --no-special >"$work/dec.txt" && ok ||
  bad "decode"

llama_ok=0
if [ -d "$nm/node-llama-cpp" ] && [ -d "$nm/@node-llama-cpp/linux-x64" ] && command -v node >/dev/null; then
  cp "$src/tests/gguf/llamacpp_run.mjs" "$work/run.mjs"; ln -s "$nm" "$work/node_modules"
  node "$work/run.mjs" "$work/g2.gguf" 1 50256 1 "$work/lines.txt" >"$work/lc.json" && llama_ok=1 && ok ||
    bad "llama.cpp on the gpt2-vocab GGUF"
else
  echo "note: node-llama-cpp not installed in $nm: the llama.cpp comparison is skipped"
fi

"$py" - "$goldens" "$work" "$llama_ok" <<'PY' && ok || bad "GPT-2 goldens through the GGUF vocabulary"
import json, sys
goldens, w, llama_ok = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
rows = [json.loads(l) for l in open(goldens, encoding="utf-8")]
ours = open(f"{w}/ours.txt").read().split("\n")[:-1]
assert len(rows) == 153 and len(ours) == 24, (len(ours), len(rows))
for r, line in zip(rows, ours):
    ids = [int(x) for x in line.split(",") if x]
    assert ids == r["ids"], (r["text"][:60], r["ids"][:20], ids[:20])
assert open(f"{w}/dec.txt").read().rstrip("\n") == "Hello world, I'm a test", open(f"{w}/dec.txt").read()
n_lc = 0
if llama_ok:
    lc = json.load(open(f"{w}/lc.json"))["tokenize"]
    for r in rows:
        if r["text"] in lc:
            assert lc[r["text"]] == r["ids"], (r["text"][:60], lc[r["text"]][:20], r["ids"][:20])
            n_lc += 1
    assert n_lc >= 100, n_lc
print(f"gpt2 GGUF vocabulary: {len(ours)} golden rows equal through the CLI; {n_lc} single-line rows also equal llama.cpp's ids")
PY

# --- the probe models' tokenizer: tokenize, forward and verify on the GGUF
pm=$src/examples/probe-models/rope-probe
"$bin" convert "$pm" "$work/rp.gguf" --to gguf >/dev/null && ok || bad "convert rope-probe"
text="The grass is green. The sky is blue. The pass key is 48213. Remember it. What is the pass key?"
ids=$("$bin" tokenize "$pm" --text "$text")
[ -n "$ids" ] && [ "$("$bin" tokenize "$work/rp.gguf" --text "$text")" = "$ids" ] && ok || bad "tokenize on the GGUF"
"$bin" forward "$work/rp.gguf" --ids "$ids" --out "$work/g.bin" --threads 1 >/dev/null &&
  "$bin" forward "$pm" --ids "$ids" --out "$work/f.bin" --threads 1 >/dev/null &&
  cmp -s "$work/g.bin" "$work/f.bin" && [ -s "$work/g.bin" ] && ok || bad "forward on the GGUF equals the folder"
"$bin" verify "$work/rp.gguf" --probe passkey --lengths 128 --samples 2 --threads 2 --certificate "$work/vg.json" \
  --no-stats >/dev/null 2>&1 && ok || bad "verify on the GGUF"
"$bin" verify "$pm" --probe passkey --lengths 128 --samples 2 --threads 2 --certificate "$work/vf.json" \
  --no-stats >/dev/null 2>&1 && ok || bad "verify on the folder"
"$py" - "$work" <<'PY' && ok || bad "verify on the GGUF equals the folder"
import json, sys
w = sys.argv[1]
def cells(f):
    c = json.load(open(f))
    return json.dumps([c["results"], c["run"]["tokens"]], sort_keys=True)
g, f = cells(f"{w}/vg.json"), cells(f"{w}/vf.json")
assert g == f and '"correct_by_depth"' in g, (g, f)
PY

finish
