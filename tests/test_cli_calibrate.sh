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

# --schedule: the schedule's points are the single-length calibrations at the same lengths (same
# seed), behind [train length, 1]; the rule file parses and runs with forward.
sched() { # NAME MODEL ARGS...: the schedule of ARGS --lengths 96,48 against single runs at 48 and 96
  local name=$1 model=$2; shift 2
  if "$bin" calibrate "$model" "$@" --lengths 96,48 --seed 3 --samples 2 --threads 2 --schedule \
      --out "$work/$name.rule.json" >"$work/$name.txt" 2>"$work/err"; then ok; else bad "$name --schedule: $(cat "$work/err")"; return; fi
  for L in 48 96; do
    "$bin" calibrate "$model" "$@" --lengths $L --seed 3 --samples 2 --threads 2 --json >"$work/$name.$L.json" \
      2>"$work/err" || bad "$name single $L: $(cat "$work/err")"
  done
  "$py" - "$work/$name.rule.json" "$work/$name.48.json" "$work/$name.96.json" <<'EOF3' && ok || bad "$name: schedule != single-length calibrations"
import json, sys
rule = json.load(open(sys.argv[1]))
pts = rule["temperature_schedule"]["points"]
singles = [json.load(open(f)) for f in sys.argv[2:]]
assert list(rule) == ["temperature_schedule"], rule
assert [p[0] for p in pts] == [singles[0]["train_len"], 48, 96], pts
def tau(e): return e["layer_tau"] if e.get("layer_tau") else e["tau"]
first = pts[0][1]
assert first == 1 or first == [1] * len(first), pts[0]
# cJSON prints the table's numbers to 15 digits when they round-trip within DBL_EPSILON, so the
# table side may be 1 ulp off; the rule printer round-trips exactly.
def close(x, y): return abs(x - y) <= 4e-16 * abs(y)
for p, s in zip(pts[1:], singles):
    (e,) = s["entries"]
    got, want = p[1], tau(e)
    assert (close(got, want) if isinstance(want, float) else
            len(got) == len(want) and all(close(x, y) for x, y in zip(got, want))), (p, want)
taus = [p[1] if isinstance(p[1], (int, float)) else min(p[1]) for p in pts]
assert taus[2] < 1, taus  # something was calibrated
EOF3
}
sched t5pmax "$m/t5_relu" --method pmax --train-len 24 --refine
sched bloomlayer "$m/bloom" --method pmax --per-layer --grid 1.0:0.5:0.1
sched t5prop2 "$m/t5_relu" --method prop2 --train-len 24
sched bloomlog "$m/bloom" --method log
grep -q '^schedule (pmax): {"temperature_schedule"' "$work/t5pmax.txt" && ok || bad "schedule line: $(tail -2 "$work/t5pmax.txt")"
# --json carries the rule; --no-train-point leaves [24, 1] out
"$bin" calibrate "$m/bloom" --method log --lengths 48,96 --schedule --no-train-point --json 2>"$work/err" |
  "$py" -c 'import json,sys,math; d=json.load(sys.stdin); p=d["schedule_rule"]["temperature_schedule"]["points"]; assert [x[0] for x in p]==[48,96] and abs(p[0][1]-math.log(24)/math.log(48))<1e-15, p' \
  && ok || bad "--json schedule_rule / --no-train-point: $(cat "$work/err")"
# forward under the schedule: rows up to the training length (24) keep tau 1, later ones change
seq 1 40 | paste -sd, >"$work/ids"
"$bin" forward "$m/bloom" --ids @"$work/ids" --threads 1 --out "$work/plain.bin" 2>"$work/err" || bad "forward: $(cat "$work/err")"
if "$bin" forward "$m/bloom" --ids @"$work/ids" --threads 1 --rule "$work/bloomlog.rule.json" --out "$work/sched.bin" \
    2>"$work/err"; then ok; else bad "forward --rule schedule: $(cat "$work/err")"; fi
"$py" - "$work/plain.bin" "$work/sched.bin" <<'EOF4' && ok || bad "forward under the schedule"
import struct, sys
a, b = (open(f, "rb").read() for f in sys.argv[1:])
assert len(a) == len(b) and len(a) % (40 * 4) == 0
row = len(a) // 40
assert a[:24 * row] == b[:24 * row], "rows 0..23 (T <= 24) changed"
assert a[24 * row:] != b[24 * row:], "rows T > 24 did not change"
EOF4
refuse 2 "$t5" --method pmax,log --train-len 24 --lengths 48 --schedule
refuse 2 "$t5" --method pmax --train-len 24 --lengths 48 --out "$work/x.json"
refuse 2 "$t5" --method pmax --train-len 24 --lengths 48 --no-train-point
[ ! -e "$work/x.json" ] && ok || bad "--out without --schedule wrote a file"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
