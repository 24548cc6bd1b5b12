#!/usr/bin/env bash
# ctxpatch patch end to end: certify-before-write, refusals, --no-verify, atomicity under kill -9,
# `ctxpatch verify OUT` reproducing the certificate, and (when the trained probe models exist) a
# harmful patch failing certification.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

tok=$src/examples/probe-models/tokenizer.json
[ -f "$tok" ] || { echo "SKIP: $tok is absent"; exit 77; }

# A tiny random Llama whose vocabulary fits the probe tokenizer (stdlib Python only): it does
# not retrieve, but it exercises every step of the pipeline in well under a second per verify.
model=$work/model
"$py" - "$tok" "$model" <<'EOF' || { echo "FAIL: could not build the test model"; exit 1; }
import json, os, random, shutil, struct, sys
tok, out = sys.argv[1], sys.argv[2]
t = json.load(open(tok))
V = max([max(t["model"]["vocab"].values())] + [a["id"] for a in t.get("added_tokens", [])]) + 1
D, F, L, H, KV = 32, 64, 2, 4, 2
dh = D // H
rng = random.Random(1234)
shapes = {"model.embed_tokens.weight": [V, D], "model.norm.weight": [D], "lm_head.weight": [V, D]}
for l in range(L):
    p = f"model.layers.{l}."
    shapes.update({p + "input_layernorm.weight": [D], p + "post_attention_layernorm.weight": [D],
                   p + "self_attn.q_proj.weight": [H * dh, D], p + "self_attn.k_proj.weight": [KV * dh, D],
                   p + "self_attn.v_proj.weight": [KV * dh, D], p + "self_attn.o_proj.weight": [D, H * dh],
                   p + "mlp.gate_proj.weight": [F, D], p + "mlp.up_proj.weight": [F, D],
                   p + "mlp.down_proj.weight": [D, F]})
header, blobs, off = {}, [], 0
for name in sorted(shapes):
    n = 1
    for s in shapes[name]: n *= s
    vals = [1.0] * n if name.endswith("norm.weight") else [rng.gauss(0, 0.3) for _ in range(n)]
    b = struct.pack("<%df" % n, *vals)
    header[name] = {"dtype": "F32", "shape": shapes[name], "data_offsets": [off, off + len(b)]}
    blobs.append(b); off += len(b)
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
os.makedirs(out)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h))); f.write(h)
    for b in blobs: f.write(b)
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": D,
       "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV,
       "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
       "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
shutil.copy(tok, os.path.join(out, "tokenizer.json"))
EOF

vopts="--verify passkey --lengths 128,256 --depths 0:1:3 --samples 1 --threads 1 --accept-no-gain --accept-underpowered"

# 1. certified write: artifact layout, metadata, certificate digest, SHA256SUMS
out=$work/out
"$bin" patch "$model" "$out" --method lm-infinite --n-global 4 --n-local 64 --for ctxpatch $vopts >"$work/p1.log" 2>&1 \
  && ok || { bad "certified lm-infinite patch exited nonzero"; cat "$work/p1.log"; }
grep -q "fidelity: ctxpatch-metadata" "$work/p1.log" && ok || bad "fidelity not printed"
for f in config.json model.safetensors tokenizer.json certificate.json report.html SHA256SUMS; do
  check test -f "$out/$f"
done
(cd "$out" && sha256sum --quiet -c SHA256SUMS) && ok || bad "sha256sum -c SHA256SUMS"
"$py" - "$out" <<'EOF' && ok || bad "metadata blocks"
import hashlib, json, struct, sys
out = sys.argv[1]
cfg = json.load(open(out + "/config.json"))["ctxpatch"]
raw = open(out + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
meta = json.loads(json.loads(raw[8:8 + n])["__metadata__"]["ctxpatch"])
digest = hashlib.sha256(open(out + "/certificate.json", "rb").read()).hexdigest()
assert cfg == meta, (cfg, meta)
assert cfg["certified"] is True and cfg["certificate_sha256"] == digest, cfg
assert cfg["fidelity"] == "ctxpatch-metadata" and cfg["rule"]["lambda_mask"]["n_local"] == 64, cfg
cert = json.load(open(out + "/certificate.json"))
assert cert["verdict"]["result"] == "pass" and "baseline" in cert["results"], cert["verdict"]
assert cert["rule"]["lambda_mask"]["n_local"] == 64, cert["rule"]  # the rule the engine applied
# The certificate hashes the certified files with the digest field still 64 zeros (patch.h).
files = {f["path"]: f["sha256"] for f in cert["model"]["files"]}
assert sorted(files) == ["config.json", "model.safetensors", "tokenizer.json"], files
for name, want in files.items():
    b = open(out + "/" + name, "rb").read().replace(digest.encode(), b"0" * 64)
    assert hashlib.sha256(b).hexdigest() == want, name
EOF

# 1b. --shard-size: shards + index (as `convert` writes them) that inspect and forward read, with
#     the same logits as the one-file artifact and the digest in every shard's header
"$bin" patch "$model" "$work/sh" --method temperature --tau 0.8 --shard-size 20K $vopts >"$work/sh.log" 2>&1 \
  && ok || { bad "sharded patch exited nonzero"; cat "$work/sh.log"; }
check "$bin" patch "$model" "$work/one" --method temperature --tau 0.8 $vopts >/dev/null 2>&1
n=$(ls "$work/sh"/model-*-of-*.safetensors 2>/dev/null | wc -l)
[ "$n" -ge 2 ] && ok || bad "expected >= 2 shards, got $n"
check test -f "$work/sh/model.safetensors.index.json"
check test ! -e "$work/sh/model.safetensors"
(cd "$work/sh" && sha256sum --quiet -c SHA256SUMS) && ok || bad "sha256sum -c sharded"
"$bin" inspect "$work/sh" --json >/dev/null && ok || bad "inspect sharded artifact"
check "$bin" forward "$work/sh" --ids 3,17,5,9,11 --threads 1 --out "$work/sh.f32"
check "$bin" forward "$work/one" --ids 3,17,5,9,11 --threads 1 --out "$work/one.f32"
check cmp -s "$work/sh.f32" "$work/one.f32"
"$py" - "$work/sh" <<'EOF' && ok || bad "sharded metadata blocks"
import glob, hashlib, json, struct, sys
out = sys.argv[1]
cfg = json.load(open(out + "/config.json"))["ctxpatch"]
digest = hashlib.sha256(open(out + "/certificate.json", "rb").read()).hexdigest()
assert cfg["certificate_sha256"] == digest, cfg
for shard in glob.glob(out + "/model-*-of-*.safetensors"):
    raw = open(shard, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    assert json.loads(json.loads(raw[8:8 + n])["__metadata__"]["ctxpatch"]) == cfg, shard
EOF

# 2. `ctxpatch verify OUT` applies the metadata rule and reproduces the certificate's accuracies
"$bin" verify "$out" --probe passkey --lengths 128,256 --depths 0:1:3 --samples 1 --threads 1 --certificate "$work/v.json" \
  >"$work/v.log" 2>&1 && ok || { bad "verify OUT exited nonzero"; cat "$work/v.log"; }
"$py" - "$out/certificate.json" "$work/v.json" <<'EOF' && ok || bad "verify OUT differs from the certificate"
import json, sys
a = json.load(open(sys.argv[1]))["results"]["patched"]
b = json.load(open(sys.argv[2]))["results"]["patched"]
assert a == b, (a, b)
EOF

# 2b. reproducible: the same inputs and options give the same bytes in every file of the artifact
#     (timings are printed, never written: docs/certificate.md)
"$bin" patch "$model" "$work/out2" --method lm-infinite --n-global 4 --n-local 64 --for ctxpatch $vopts >/dev/null 2>&1 \
  && ok || bad "second certified patch exited nonzero"
diff -r "$out" "$work/out2" >"$work/diff.log" 2>&1 && ok || { bad "two identical patch runs differ"; head -5 "$work/diff.log"; }
grep -q '"wall_seconds"\|"tokens_per_second"' "$out/certificate.json" && bad "timings in certificate.json" || ok

# 3. --no-verify: written, marked uncertified, no certificate
check "$bin" patch "$model" "$work/nv" --method temperature --tau 0.8 --no-verify
"$py" -c 'import json,sys; c=json.load(open(sys.argv[1]))["ctxpatch"]; assert c["certified"] is False and c["certificate_sha256"] is None and c["fidelity"]=="exact-weights", c' \
  "$work/nv/config.json" && ok || bad "--no-verify metadata"
check test ! -e "$work/nv/certificate.json"

# 3b. temperature calibrated (pmax at the target length), baked exactly, calibration recorded
"$bin" patch "$model" "$work/cal" --method temperature --calibrate pmax --target-len 256 $vopts >"$work/c.log" 2>&1 \
  && ok || { bad "calibrated temperature patch exited nonzero"; cat "$work/c.log"; }
"$py" -c 'import json,sys; c=json.load(open(sys.argv[1]))["ctxpatch"]; e=c["calibration"]["entries"][0]; assert c["fidelity"]=="exact-weights" and c["rule"]=={} and e["method"]=="pmax" and e["length"]==256 and c["baked_rule"]["temperature"]==e["tau"], c' \
  "$work/cal/config.json" && ok || bad "calibration metadata"

# 3c. IN without a tokenizer: --tokenizer FILE travels into OUT (self-contained artifact)
mkdir "$work/notok" && cp "$model/config.json" "$model/model.safetensors" "$work/notok/"
check "$bin" patch "$work/notok" "$work/nt" --method temperature --tau 0.9 --tokenizer "$tok" $vopts >/dev/null
check cmp -s "$tok" "$work/nt/tokenizer.json"
# the report says what was baked (the certificate's rule is empty once the weights carry it)
grep -q "baked into the artifact (exact-weights)" "$work/nt/report.html" && ok || bad "report hides the baked rule"

# 4. refusals: one line, nonzero, nothing written
for args in "--method alibi-pi --factor 2" "--method fire-threshold --threshold 8" \
            "--method lm-infinite --require exact --for ctxpatch --no-verify"; do
  "$bin" patch "$model" "$work/refused" $args >"$work/r.out" 2>"$work/r.err" && bad "accepted: $args" || ok
  [ "$(wc -l <"$work/r.err")" -eq 1 ] && ok || { bad "not one line: $args"; cat "$work/r.err"; }
  check test ! -e "$work/refused"
done
"$bin" patch "$out" "$work/refused" --method temperature --tau 0.9 --no-verify 2>/dev/null && bad "re-patching accepted" || ok

# 5. a failing verdict writes nothing and prints the table (the random model retrieves nothing)
"$bin" patch "$model" "$work/fail" --method temperature --tau 0.5 $vopts --min-accuracy 0.5 >"$work/f.log" 2>&1 \
  && bad "failing verdict exited 0" || ok
grep -q "verdict: fail" "$work/f.log" && ok || bad "no verdict line"
grep -q "passkey" "$work/f.log" && ok || bad "no accuracy table"
check test ! -e "$work/fail"
# ... and leaves a previous artifact in place under --force
cp -r "$work/nv" "$work/prev"
"$bin" patch "$model" "$work/prev" --force --method temperature --tau 0.5 $vopts --min-accuracy 0.5 >/dev/null 2>&1
check cmp -s "$work/nv/model.safetensors" "$work/prev/model.safetensors"

# 6. kill -9 during the verify stage: no OUT and, once the patch's watchdog has run, no
#    temporary folder either
"$bin" patch "$model" "$work/killed" --method temperature --tau 0.8 --verify passkey --lengths 1024,2048 \
  --depths 0:1:10 --samples 4 --threads 1 >/dev/null 2>&1 &
pid=$!
# wait until patch has written into its temporary folder (so the watchdog it starts right after
# making the folder runs) or patch ends, however long a loaded machine takes (a 5 s bound failed
# under load), then 0.5 s more (bake done, verify running)
while kill -0 "$pid" 2>/dev/null && [ -z "$(find "$work" -mindepth 2 -path "$work/.*/*" -print -quit)" ]; do
  sleep 0.1
done
sleep 0.5
if kill -0 "$pid" 2>/dev/null; then
  [ "$(ls -A "$work" | grep -c '^\.' || true)" -ge 1 ] && ok || bad "no temporary folder while patching"
  kill -9 "$pid"; wait "$pid" 2>/dev/null
  # the watchdog acts when the killed process is gone: waited for (60 s only bounds a hang)
  for i in $(seq 1 600); do [ "$(ls -A "$work" | grep -c '^\.' || true)" -eq 0 ] && break; sleep 0.1; done
  check test ! -e "$work/killed"
  [ "$(ls -A "$work" | grep -c '^\.' || true)" -eq 0 ] && ok || bad "temporary folders remain: $(ls -A "$work" | grep '^\.')"
else
  wait "$pid"; bad "patch finished within 0.5 s; the kill test was not exercised"
fi

# 6b. exact-weights bakes against the independent PyTorch reference (when torch is installed)
tpy=${CTXPATCH_PYTHON:-/usr/bin/python3}
if "$tpy" -c 'import torch' 2>/dev/null; then
  "$tpy" "$src/tests/cli_patch_torchref.py" "$bin" "$src" "$work" >"$work/tr.log" 2>&1 \
    && ok || { bad "torchref bake exactness"; cat "$work/tr.log"; }
else
  echo "note: no torch in $tpy; torchref bake check skipped"
fi

# 7. a harmful patch on a trained probe model fails certification (only when the models exist)
t5=$src/examples/probe-models/t5-probe
if [ -f "$t5/model.safetensors" ]; then
  "$bin" patch "$t5" "$work/harm" --method temperature --tau 0.2 --tokenizer "$tok" --verify passkey \
    --lengths 256 --depths 0:1:3 >"$work/h.log" 2>&1 && bad "tau 0.2 certified" || ok
  check test ! -e "$work/harm"
else
  echo "note: examples/probe-models/t5-probe is absent; harmful-patch check skipped"
fi

# 8. work budget (docs/reliability.md): a config claiming max_position_embeddings 200000 makes the
#    default probe and calibration lengths cost hours; every command refuses the plan before it
#    runs, naming the work, the budget and --work-budget, and writes nothing. `timeout` only keeps
#    a regression from hanging CI: the assertion is the refusal line.
hostile=$work/hostile
cp -r "$model" "$hostile"
"$py" - "$hostile/config.json" <<'EOF2' || bad "could not write the hostile config"
import json, sys
c = json.load(open(sys.argv[1])); c["max_position_embeddings"] = 200000
json.dump(c, open(sys.argv[1], "w"))
EOF2
budget_refused() { # LOG: the one-line refusal
  grep -q "CP_EVERIFY_WORK: .*attention pairs of work, over the work budget of 10000000000 (the default); raise it with --work-budget N" "$1" \
    && ok || { bad "no work-budget refusal in $1"; head -c 1000 "$1"; }
}
timeout 120 "$bin" patch "$hostile" "$work/wb1" --method temperature --threads 1 >"$work/wb1.log" 2>&1
check test $? -eq 1
budget_refused "$work/wb1.log"
check test ! -e "$work/wb1"
timeout 120 "$bin" patch "$hostile" "$work/wb2" --method auto --budget 1 --threads 1 >"$work/wb2.log" 2>&1
check test $? -eq 1
budget_refused "$work/wb2.log"
check test ! -e "$work/wb2"
timeout 120 "$bin" calibrate "$hostile" --method pmax --lengths 400000 --threads 1 >"$work/wb3.log" 2>&1
check test $? -eq 1
budget_refused "$work/wb3.log"
timeout 120 "$bin" verify "$hostile" --probe passkey --lengths 200000 --threads 1 >"$work/wb4.log" 2>&1
check test $? -eq 1
budget_refused "$work/wb4.log"
# the figure is the plan's: 3 depths x 1 sample at 128 + 10 new tokens, 138 x 139 / 2 pairs each,
# and once more at 128 for the attention statistics (2 sides with --baseline)
"$bin" verify "$model" --probe passkey --lengths 128 --depths 0:1:3 --samples 1 --threads 1 --baseline \
  --work-budget 1000 >"$work/wb5.log" 2>&1
check test $? -eq 1
grep -q "the plan needs $(( (3 * 138 * 139 / 2 + 128 * 129 / 2) * 2 )) attention pairs of work, over the work budget of 1000;" \
  "$work/wb5.log" && ok || { bad "verify --work-budget figure"; cat "$work/wb5.log"; }
check "$bin" verify "$model" --probe passkey --lengths 128 --depths 0:1:3 --samples 1 --threads 1 --baseline \
  --work-budget $(( (3 * 138 * 139 / 2 + 128 * 129 / 2) * 2 )) --json >/dev/null 2>&1
# a raised budget lets the plan run (the hostile patch with explicit short lengths and probes)
check "$bin" patch "$hostile" "$work/wb6" --method temperature --tau 0.8 $vopts --for ctxpatch >/dev/null 2>&1

# 9. check --rerun never runs after a failed static check: a certificate edited to ask for
#    200000-token probes (its manifest and digests now fail) is not re-run; the re-run of an
#    intact artifact is bounded by --work-budget.
cp -r "$out" "$work/edited"
"$py" - "$work/edited/certificate.json" <<'EOF2' || bad "could not edit the certificate"
import json, sys
c = json.load(open(sys.argv[1]))
c["probes"]["lengths"][0] = 200000
for side in c["results"].values():
    for cells in side.values():
        if isinstance(cells, list) and cells and cells[0].get("length") == 128: cells[0]["length"] = 200000
json.dump(c, open(sys.argv[1], "w"), indent=2)
EOF2
timeout 120 "$bin" check "$work/edited" --rerun --threads 1 --json >"$work/ck1.json" 2>&1
check test $? -eq 1
"$py" - "$work/ck1.json" <<'EOF2' && ok || { bad "check --rerun after a failed static check"; head -c 2000 "$work/ck1.json"; }
import json, sys
r = json.load(open(sys.argv[1]))
kinds = {f["check"] for f in r["failures"]}
assert "sums-mismatch" in kinds and "rerun-error" not in kinds, kinds
assert r["rerun"]["done"] is False and r["rerun"]["cells"] == 0, r["rerun"]
EOF2
"$bin" check "$out" --rerun --threads 1 --work-budget 1000 >"$work/ck2.log" 2>&1
check test $? -eq 1
grep -q "FAIL rerun-error: rerun: verify: the plan needs [0-9]* attention pairs of work, over the work budget of 1000;" \
  "$work/ck2.log" && ok || { bad "check --rerun --work-budget"; cat "$work/ck2.log"; }
check "$bin" check "$out" --rerun --threads 1 >/dev/null 2>&1

# Baseline cache on patch (docs/certificate.md, "Baseline cache"): the first patch computes the
# original's side and writes it, a second one of the same base model reads it: the same certificate
# outside run, whose counts are the patched side's (fewer) and which names the file; check and
# check --rerun accept it. --method auto and --no-verify do not take the option.
bcache=$work/bcache
for n in 1 2; do
  "$bin" patch "$model" "$work/bc$n" --method lm-infinite --n-global 4 --n-local 64 --for ctxpatch $vopts \
    --baseline-cache "$bcache" >"$work/bc$n.log" 2>&1 && ok || { bad "patch --baseline-cache ($n)"; cat "$work/bc$n.log"; }
done
grep -q "^baseline: computed" "$work/bc1.log" && grep -q "^baseline: taken from the baseline cache" "$work/bc2.log" \
  && ok || bad "where the baseline came from: $(head -3 "$work/bc1.log" "$work/bc2.log")"
"$py" - "$work/bc1/certificate.json" "$work/bc2/certificate.json" "$bcache" <<'EOF2' && ok || bad "certificate from the cache"
import hashlib, json, os, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ra, rb = a.pop("run"), b.pop("run")
assert a == b, [k for k in a if a[k] != b.get(k)]
assert "baseline_from_cache" not in ra and 0 < rb["tokens"] < ra["tokens"], (ra, rb)
(name,) = os.listdir(sys.argv[3])
f = os.path.join(sys.argv[3], name)
assert rb["baseline_from_cache"] == {"key_sha256": name[:-5], "file_sha256": hashlib.sha256(open(f, "rb").read()).hexdigest(),
                                     "prompts_read": 6}, rb  # passkey at 128 and 256, 3 depths, 1 sample
EOF2
check "$bin" check "$work/bc2" --rerun --threads 1 >/dev/null 2>&1
"$bin" patch "$model" "$work/bc3" --method auto $vopts --baseline-cache "$bcache" >/dev/null 2>&1
check test $? -eq 2
"$bin" patch "$model" "$work/bc3" --method lm-infinite --n-local 64 --no-verify --baseline-cache "$bcache" >/dev/null 2>&1
check test $? -eq 2

finish
