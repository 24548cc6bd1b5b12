#!/usr/bin/env bash
# ctxpatch calibrate end to end on the golden tiny models: the table (text and --json, the latter
# against the PyTorch reference tests/goldens/calibrate.json) and the refusals (one line on
# stderr, exit 2 for usage and 1 for a library error, nothing on stdout).
set -uo pipefail
bin=$CTXPATCH_BIN; src=$CTXPATCH_SOURCE_DIR
py=${CTXPATCH_PYTHON:-python3}
m=$src/tests/goldens/engine/models
golden=$src/tests/goldens/calibrate.json
[ -f "$golden" ] || { echo "SKIP: $golden is absent"; exit 77; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }

"$bin" calibrate --help | grep >/dev/null -- "--grid HI:LO:STEP" && ok || bad "calibrate --help"

# JSON against the reference (same inputs: seed 0, 2 samples, lengths 48 and 96)
if "$bin" calibrate "$m/t5_relu" --method all --train-len 24 --lengths 48,96 --samples 2 --threads 2 --json \
    >"$work/t5.json" 2>"$work/err"; then ok; else bad "calibrate --json: $(cat "$work/err")"; fi
"$py" - "$work/t5.json" "$golden" <<'EOF' && ok || bad "JSON table disagrees with the reference"
import json, math, sys
got = json.load(open(sys.argv[1]))
ref = json.load(open(sys.argv[2]))["models"]["t5_relu"]
assert got["train_len"] == 24 and got["scope"] == "encoder_self" and got["inputs"] == "random"
by = {(e["method"], e["length"]): e for e in got["entries"]}
assert len(by) == 10, by.keys()
for l in ref["lengths"]:
    L = l["length"]
    for meth in ("pmax", "entropy"):
        if l["tau_%s_gap" % meth] > 1e-4:
            assert abs(by[(meth, L)]["tau"] - l["tau_" + meth]) < 1e-9, (meth, L)
    assert abs(by[("log", L)]["tau"] - math.log(24) / math.log(L)) < 1e-12
    assert abs(by[("prop2", L)]["tau"] - l["prop2"]) < 1e-5
    assert (by[("prop1", L)]["tau"] is None) == (l["prop1"] is None)
assert abs(got["layer0"]["sigma_tr"] - ref["sigma_tr"]) < 1e-5 * ref["sigma_tr"]
EOF

# text table, per layer, refined, on a decoder-only model (train length from its config)
if "$bin" calibrate "$m/bloom" --method pmax,entropy --lengths 48 --samples 1 --per-layer --refine \
    --grid 1.0:0.5:0.1 --threads 2 >"$work/bloom.txt" 2>"$work/err"; then ok; else bad "per-layer: $(cat "$work/err")"; fi
grep -q 'tau \\ length' "$work/bloom.txt" && grep -q '^pmax\[2\]' "$work/bloom.txt" && grep -q 'refined, per layer' \
  "$work/bloom.txt" && ok || bad "per-layer text table: $(cat "$work/bloom.txt")"

# probe inputs: the golden T5 with its vocabulary widened to the probe tokenizer's (stdlib only),
# the tokenizer beside the weights, so the default picks passkey prompts
tok=$src/examples/probe-models/tokenizer.json
if [ -f "$tok" ]; then
  mkdir -p "$work/t5tok"
  cp "$tok" "$work/t5tok/tokenizer.json"
  "$py" - "$m/t5_relu" "$work/t5tok" "$tok" <<'EOF2' && ok || bad "making the widened T5"
import json, random, struct, sys
src, dst, tok = sys.argv[1:4]
vocab = max(len(json.load(open(tok))["model"]["vocab"]), 600)
cfg = json.load(open(src + "/config.json")); cfg["vocab_size"] = vocab
json.dump(cfg, open(dst + "/config.json", "w"))
data = open(src + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", data[:8])[0]; hdr = json.loads(data[8:8 + n]); base = 8 + n
rnd = random.Random(7); out = {}; blobs = []; off = 0
for name in sorted(k for k in hdr if k != "__metadata__"):
    info = hdr[name]; s, e = info["data_offsets"]; raw = data[base + s:base + e]; shape = info["shape"]
    if name == "shared.weight":
        shape = [vocab, shape[1]]
        raw = struct.pack("<%df" % (vocab * shape[1]), *[rnd.gauss(0, 0.3) for _ in range(vocab * shape[1])])
    out[name] = {"dtype": info["dtype"], "shape": shape, "data_offsets": [off, off + len(raw)]}
    blobs.append(raw); off += len(raw)
h = json.dumps(out).encode(); h += b" " * (-len(h) % 8)
open(dst + "/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
EOF2
  if "$bin" calibrate "$work/t5tok" --method pmax --train-len 64 --lengths 128 --samples 2 --threads 2 --json \
      >"$work/probe.json" 2>"$work/err"; then ok; else bad "probe inputs: $(cat "$work/err")"; fi
  "$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["inputs"]=="probe", d["inputs"]; assert 0.5<=d["entries"][0]["tau"]<=1' \
    "$work/probe.json" && ok || bad "probe inputs not used: $(head -c 300 "$work/probe.json")"
  "$bin" calibrate "$work/t5tok" --method pmax --train-len 64 --lengths 128 --samples 1 --threads 2 --inputs random \
    --json | grep >/dev/null '"inputs":.*"random"' && ok || bad "--inputs random"
fi

# the seed's findings on the trained probe models, where present: tau falls with the length,
# entropy tau <= P_max tau (training length 256 from their configs; the models checked to show
# them, docs/calibration.md)
for pm in "$src"/examples/probe-models/{t5-probe,alibi-probe,rope-probe}; do
  [ -f "$pm/model.safetensors" ] && [ -f "$pm/config.json" ] || continue
  cp "$src/examples/probe-models/tokenizer.json" "$work/probe-tok.json" 2>/dev/null
  tokarg=(); [ -f "$pm/tokenizer.json" ] || tokarg=(--tokenizer "$work/probe-tok.json")
  if "$bin" calibrate "$pm" --method pmax,entropy --lengths 512,1024 --samples 1 --threads 2 "${tokarg[@]}" \
      --json >"$work/pm.json" 2>"$work/err"; then ok; else bad "$pm: $(cat "$work/err")"; continue; fi
  "$py" - "$work/pm.json" <<'EOF2' && ok || bad "$pm: the seed's findings do not hold: $(cat "$work/pm.json")"
import json, sys
d = json.load(open(sys.argv[1]))
tau = {(e["method"], e["length"]): e["tau"] for e in d["entries"]}
assert d["inputs"] == "probe"
assert tau[("pmax", 1024)] <= tau[("pmax", 512)] + 1e-9
for L in (512, 1024):
    assert tau[("entropy", L)] <= tau[("pmax", L)] + 1e-9, L
EOF2
done

# refusals: exit code, exactly one line on stderr, nothing on stdout
refuse() {
  local want=$1; shift
  "$bin" calibrate "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  if [ $rc -ne "$want" ]; then bad "calibrate $* exited $rc, want $want"; return; fi
  if [ -s "$work/out" ]; then bad "calibrate $* wrote to stdout"; return; fi
  if [ "$(wc -l <"$work/err")" -ne 1 ]; then bad "calibrate $*: not one line: $(cat "$work/err")"; return; fi
  ok
}
t5=$m/t5_relu
refuse 2 "$t5" --method pmax --train-len 24 --lengths 48 --grid 1.0:0.5
refuse 2 "$t5" --method pmax --train-len 24 --lengths 48 --grid 0.5:1.0:0.05
refuse 2 "$t5" --method pmax --train-len 24 --lengths 48 --grid 1.0:0.5:0
refuse 2 "$t5" --method pmax --train-len 24 --lengths 48 --grid a:b:c
refuse 2 "$t5" --method pmaxx --train-len 24 --lengths 48
refuse 2 "$t5" --method pmax,,log --train-len 24 --lengths 48
refuse 2 "$t5" --method pmax --train-len 24 --lengths 24
refuse 2 "$t5" --method pmax --train-len 24 --lengths 48,12
refuse 2 "$t5" --method pmax --train-len 24
refuse 2 "$t5" --lengths 48 --train-len 24
refuse 2 "$t5" --method pmax --train-len 24 --lengths 48 --samples 0
refuse 2 "$t5" --method pmax --train-len 24 --lengths 48 --inputs text
refuse 2 "$t5" --method pmax --train-len 24 --lengths 48 --bogus
refuse 1 "$t5" --method pmax --lengths 48                      # T5 config: no training length
refuse 1 "$m/bloom" --method pmax --lengths 20                  # not longer than seq_length 24
refuse 1 "$t5" --method pmax --train-len 24 --lengths 48 --inputs probe   # no tokenizer
refuse 1 "$work/none" --method pmax --train-len 24 --lengths 48

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
