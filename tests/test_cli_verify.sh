#!/usr/bin/env bash
# ctxpatch verify: accuracy at the training length, deterministic certificates, the report,
# thresholds and refusals (one line, nonzero exit, nothing written).
set -uo pipefail
bin=$CTXPATCH_BIN; py=$CTXPATCH_PYTHON; src=$CTXPATCH_SOURCE_DIR
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }
refused() { # refused CODE CMD...: exit 1, one line naming CODE, no output files
  local code=$1; shift
  "$@" >"$work/out" 2>"$work/err"; local rc=$?
  if [ $rc = 1 ] && grep -q "$code" "$work/err" && [ "$(wc -l <"$work/err")" = 1 ] && [ ! -e "$work/never.json" ]; then ok
  else bad "expected $code (rc=$rc): $(cat "$work/err")"; fi
}

model=$src/examples/probe-models/rope-probe
tiny=$src/tests/goldens/engine/models/llama
if [ ! -f "$model/model.safetensors" ]; then echo "SKIP: $model is absent"; exit 77; fi

# The trained model retrieves at its training length; the certificate is deterministic.
common=(--probe passkey --lengths 256 --depths 0:1:5 --samples 4 --seed 3 --threads 2)
"$bin" verify "$model" "${common[@]}" --certificate "$work/c1.json" --report "$work/r.html" >"$work/table" \
  && ok || bad "verify at 256: $(cat "$work/table")"
"$bin" verify "$model" "${common[@]}" --certificate "$work/c2.json" >/dev/null && ok || bad "second verify"
"$py" - "$work/c1.json" "$work/c2.json" <<'PY' && ok || bad "certificate checks"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for d in (a, b):
    d.pop("run")
assert a == b, "certificates differ outside the run block"
acc = a["results"]["patched"]["passkey"][0]["accuracy"]
# rope-probe retrieves every passkey of its evaluation set at 256 (its MODEL_CARD, PyTorch);
# two misses in these 20 samples are allowed, an untrained or broken engine scores ~0.
assert acc >= 0.9, f"passkey accuracy at the training length is {acc}"
assert a["probes"]["depths"] == [0, 0.25, 0.5, 0.75, 1]
assert [f["path"] for f in a["model"]["files"]] == sorted(f["path"] for f in a["model"]["files"])
assert a["verdict"]["result"] == "none"  # no criterion given: measured, not passed
PY
grep -q 'class="hm-cell"' "$work/r.html" && ok || bad "report has no heatmap"

# Shared prefixes change no result (docs/certificate.md): the same certificate outside the run
# block when every prompt runs alone, and run.tokens + run.tokens_reused is that run's count.
"$bin" verify "$model" "${common[@]}" --no-shared-prefix --certificate "$work/c3.json" >/dev/null && ok \
  || bad "verify --no-shared-prefix"
"$py" - "$work/c1.json" "$work/c3.json" <<'PY' && ok || bad "shared vs unshared certificates"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ra, rb = a.pop("run"), b.pop("run")
assert a == b, "results differ with and without shared prefixes"
assert rb["tokens_reused"] == 0 and ra["tokens_reused"] > 0, (ra, rb)
assert ra["tokens"] + ra["tokens_reused"] == rb["tokens"], (ra, rb)
# run.by_length: the same counts per length, summing to the run's
for r in (ra, rb):
    assert [e["length"] for e in r["by_length"]] == a["probes"]["lengths"], r
    assert sum(e["tokens"] for e in r["by_length"]) == r["tokens"], r
    assert sum(e["tokens_reused"] for e in r["by_length"]) == r["tokens_reused"], r
assert all(e["tokens"] > 0 for e in ra["by_length"]), ra
PY

# A threshold that fails: exit 1, verdict fail recorded with its reason.
echo '{"temperature": 0.05}' >"$work/harmful.json"
"$bin" verify "$model" --probe passkey --lengths 256 --depths 0.5 --samples 2 --rule "$work/harmful.json" \
  --min-accuracy 0.9 --certificate "$work/fail.json" >/dev/null; [ $? = 1 ] && ok || bad "harmful rule passed"
grep -q '"fail"' "$work/fail.json" && ok || bad "verdict fail not recorded"

# The verdicts beyond pass and fail (docs/certificate.md, "Verdicts"): the model beside itself (no
# rule) at 288 tokens, past its training length 256, on 6 prompts, which detect only a drop of
# 0.731: "inconclusive"; with --accept-underpowered nothing is gained: "no effect"; with
# --accept-no-gain too, the old "pass". (40 prompts and the no-effect line: tests/test_stats.c.)
cmp=(--probe passkey --lengths 288 --baseline --no-regression-at 288 --depths 0:1:6 --samples 1 --seed 3 --threads 2
  --no-stats)
"$bin" verify "$model" "${cmp[@]}" --certificate "$work/in.json" --report "$work/in.html" >"$work/in.txt"
[ $? = 1 ] && grep -q "^verdict: inconclusive" "$work/in.txt" && grep -q "0.731 with 80% power" "$work/in.txt" && ok \
  || bad "6 prompts: $(tail -3 "$work/in.txt")"
grep -q '<section class="verdict weak"><span class="big">INCONCLUSIVE</span>not certified: too few prompts' "$work/in.html" \
  && ok || bad "the report does not show the inconclusive verdict"
"$bin" verify "$model" "${cmp[@]}" --accept-underpowered --certificate "$work/ne.json" >"$work/ne.txt"
[ $? = 1 ] && grep -q "^verdict: no effect" "$work/ne.txt" && ok || bad "no-op: $(tail -3 "$work/ne.txt")"
"$bin" verify "$model" "${cmp[@]}" --accept-underpowered --accept-no-gain --certificate "$work/old.json" >"$work/old.txt" \
  && grep -q "^verdict: pass" "$work/old.txt" && ok || bad "both options: $(tail -3 "$work/old.txt")"
"$py" - "$work/in.json" "$work/ne.json" "$work/old.json" <<'PY' && ok || bad "verdict certificates"
import json, sys
inc, ne, old = (json.load(open(p)) for p in sys.argv[1:])
assert inc["verdict"]["result"] == "inconclusive" and inc["statistics"]["detectable_drop"] == 0.731351, inc["statistics"]
assert [r.split(":")[0] for r in inc["verdict"]["reasons"]] == ["inconclusive", "no effect"], inc["verdict"]
assert inc["thresholds"]["require_gain"] is True and inc["thresholds"]["max_detectable_drop"] == 0.2, inc["thresholds"]
assert ne["verdict"]["result"] == "no effect" and len(ne["verdict"]["reasons"]) == 1, ne["verdict"]
assert ne["thresholds"]["require_gain"] is True and ne["thresholds"]["max_detectable_drop"] is None, ne["thresholds"]
g = ne["statistics"]["gain"]
assert g["lengths"] == [288] and g["lost"] == 0 and g["gained"] == 0 and g["p_value"] == 1 and g["found"] is False, g
assert old["verdict"] == {"result": "pass", "reasons": []}, old["verdict"]
assert old["thresholds"]["require_gain"] is False and old["thresholds"]["max_detectable_drop"] is None
PY

# Sequential verdicts (docs/certificate.md, "Sequential verdicts"): the same verdict as the fixed
# design on fewer prompts, counted. The model beside itself at its training length (40 prompts a
# cell, --accept-no-gain: no length past 256 to gain at): both designs pass, the sequential one
# after 16 prompts (futility: no lost pair, so no regression). A harmful rule: both fail, the
# sequential one at the second look (16 prompts, every one lost).
seq=(--probe passkey --lengths 256 --baseline --no-regression-at 256 --depths 0:1:5 --samples 8 --seed 3 --threads 2
  --no-stats --accept-no-gain)
"$bin" verify "$model" "${seq[@]}" --certificate "$work/fx.json" --baseline-cache "$work/seqcache" >/dev/null && ok \
  || bad "fixed design, model beside itself"
"$bin" verify "$model" "${seq[@]}" --sequential --certificate "$work/sq.json" --report "$work/sq.html" >"$work/sq.txt" && ok \
  || bad "sequential design, model beside itself: $(tail -3 "$work/sq.txt")"
# A baseline cache written by the fixed run serves the sequential one (the prompts it asks, by
# their place in the plan): the same certificate outside run. A sequential run that stops early
# writes the prompts it asked ('-' for the others); a fixed run from that file asks the original
# only the others, gives the fixed certificate outside run, and completes the file.
"$bin" verify "$model" "${seq[@]}" --sequential --baseline-cache "$work/seqcache" --certificate "$work/sqc.json" \
  >/dev/null 2>"$work/err" && [ ! -s "$work/err" ] && ok || bad "sequential from the cache: $(cat "$work/err")"
"$py" - "$work/sq.json" "$work/sqc.json" <<'PY' && ok || bad "sequential certificate from the cache"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ra, rb = a.pop("run"), b.pop("run")
assert a == b, [k for k in a if a[k] != b.get(k)]
assert "baseline_from_cache" in rb and rb["tokens"] < ra["tokens"], (ra, rb)
PY
s2=$work/seqcache2
"$bin" verify "$model" "${seq[@]}" --sequential --baseline-cache "$s2" --certificate "$work/sqw.json" >/dev/null \
  2>"$work/err" && [ ! -s "$work/err" ] && grep -q '"answers":[[:space:]]*"1111----' "$s2"/*.json && ok \
  || bad "a sequential run's cache: $(cat "$work/err")"
"$bin" verify "$model" "${seq[@]}" --baseline-cache "$s2" --certificate "$work/fxp.json" >"$work/fxp.txt" 2>"$work/err" \
  && grep -q "for 16 prompts; the others ran here" "$work/fxp.txt" && cmp -s "$s2"/*.json "$work/seqcache"/*.json && ok \
  || bad "a fixed run from a sequential run's cache: $(cat "$work/err")"
"$py" - "$work/fx.json" "$work/fxp.json" <<'PY' && ok || bad "fixed certificate from a sequential run's cache"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ra, rb = a.pop("run"), b.pop("run")
assert a == b, [k for k in a if a[k] != b.get(k)]
assert rb["baseline_from_cache"]["prompts_read"] == 16 and rb["tokens"] < ra["tokens"], (ra, rb)
PY
# the report's heatmap divides by the prompts each depth ran (4 of 4, not 4 of 8)
grep -q "patched, length 256, depth 0.000: 4 of 4 correct" "$work/sq.html" && ok || bad "sequential heatmap denominators"
"$bin" verify "$model" "${seq[@]}" --rule "$work/harmful.json" --certificate "$work/fxh.json" >/dev/null
[ $? = 1 ] && ok || bad "fixed design: the harmful rule did not fail"
"$bin" verify "$model" "${seq[@]}" --rule "$work/harmful.json" --sequential --looks 8 --certificate "$work/sqh.json" >/dev/null
[ $? = 1 ] && ok || bad "sequential design: the harmful rule did not fail"
"$py" - "$work"/fx.json "$work"/sq.json "$work"/fxh.json "$work"/sqh.json <<'PY' && ok || bad "sequential certificates"
import json, sys
fx, sq, fxh, sqh = (json.load(open(p)) for p in sys.argv[1:])
assert fx["verdict"]["result"] == sq["verdict"]["result"] == "pass", (fx["verdict"], sq["verdict"])
assert fxh["verdict"]["result"] == sqh["verdict"]["result"] == "fail", (fxh["verdict"], sqh["verdict"])
assert "sequential" not in fx["statistics"] and "looks" not in fx["results"]["comparison"]["passkey"][0]
c, p = sq["results"]["comparison"]["passkey"][0], sq["results"]["patched"]["passkey"][0]
assert fx["results"]["comparison"]["passkey"][0]["pairs"] == 40 and c["pairs"] == 16 and p["prompts"] == 16, (c, p)
assert c["stop"] == "futility" and c["looks"] == [[8, 0, 0], [16, 0, 0]], c
assert p["prompts_by_depth"] == [4, 3, 3, 3, 3] and p["correct_by_depth"] == [4, 3, 3, 3, 3], p
q = sq["statistics"]["sequential"]
assert q["looks_every"] == 8 and q["looks"] == 5 and q["prompts_max"] == 40 and q["prompts_used"] == 16, q
assert q["fail_levels"] == [0.00125] * 4 + [0.045], q
# the power criterion judges the design: 0.193 (the fixed 40 prompts: 0.162), both within 0.2
assert sq["statistics"]["detectable_drop"] == 0.192822 and fx["statistics"]["detectable_drop"] == 0.162328
# 16 of 40 prompts; the rounds over the depths share less of each prompt with the one before
tot = lambda c: c["run"]["tokens"] + c["run"]["tokens_reused"]
assert tot(sq) < 0.45 * tot(fx) and sq["run"]["tokens"] < 0.55 * fx["run"]["tokens"], (sq["run"], fx["run"])
h = sqh["results"]["comparison"]["passkey"][0]
assert h["stop"] == "regression" and h["pairs"] == 16 and h["lost"] == 16, h
assert fxh["results"]["comparison"]["passkey"][0]["pairs"] == 40
PY
# `patch --sequential` certifies the same way, and `check --rerun` takes each cell's recorded prompts
# in the same order (the 16 of the futility stop: correct_by_depth 4,3,3,3,3, not 8 a depth).
"$bin" patch "$model" "$work/sqart" --method temperature --tau 0.9 --lengths 256 --depths 0:1:5 --threads 2 \
  --accept-no-gain --sequential >"$work/sqp.txt" 2>&1 && ok || bad "patch --sequential: $(tail -3 "$work/sqp.txt")"
"$bin" check "$work/sqart" --rerun >"$work/sqc.txt" 2>&1 && grep -q "re-run: 1 cells equal" "$work/sqc.txt" && ok \
  || bad "check --rerun of a sequential artifact: $(cat "$work/sqc.txt")"
"$py" - "$work/sqart/certificate.json" <<'PY' && ok || bad "the sequential artifact's certificate"
import json, sys
c = json.load(open(sys.argv[1]))
p = c["results"]["patched"]["passkey"][0]
assert p["prompts"] == 16 and p["correct_by_depth"] == [4, 3, 3, 3, 3], p
assert c["results"]["comparison"]["passkey"][0]["stop"] == "futility", c["results"]["comparison"]
PY
# Within a look the prompts run by depth (the look judges counts only): the 16 prompts' rows reused
# are those of the two looks' depth lists run as fixed designs, one prompt a depth (the ranks 0-4
# of rounds 0,1,2,3,4,0,1,2 and 3,4,0,1,2,3,4,0; no prefix carries across the looks, the second
# starting at depth 0). Rounds order reused 768 rows here, by depth 1280.
for d in 0,0,0.25,0.25,0.5,0.5,0.75,1 0,0,0.25,0.5,0.75,0.75,1,1; do
  "$bin" verify "$model" --probe passkey --lengths 256 --depths "$d" --samples 1 --baseline --threads 2 --no-stats \
    --certificate "$work/look$d.json" >/dev/null 2>&1
done
"$py" - "$work/sqart/certificate.json" "$work"/look0,0,0.25,0.25*.json "$work"/look0,0,0.25,0.5*.json <<'PY' && ok \
  || bad "a sequential look's prompts run by depth"
import json, sys
reused = [json.load(open(p))["run"]["tokens_reused"] for p in sys.argv[1:4]]
assert reused[0] == reused[1] + reused[2] > 0, reused
PY
# patch takes --no-shared-prefix as verify does (it was refused: timing the saving on a patch needed
# verify): the same certificate outside the run block, every row computed.
"$bin" patch "$model" "$work/sqart1" --method temperature --tau 0.9 --lengths 256 --depths 0:1:5 --threads 2 \
  --accept-no-gain --sequential --no-shared-prefix >"$work/sqp1.txt" 2>&1 && ok || bad "patch --no-shared-prefix: $(tail -3 "$work/sqp1.txt")"
"$py" - "$work/sqart/certificate.json" "$work/sqart1/certificate.json" <<'PY' && ok || bad "patch --no-shared-prefix's certificate"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ra, rb = a.pop("run"), b.pop("run")
assert a == b, [k for k in a if a[k] != b.get(k)]
assert rb["tokens_reused"] == 0 < ra["tokens_reused"] and ra["tokens"] + ra["tokens_reused"] == rb["tokens"], (ra, rb)
PY
# Once a cell has failed the verdict is fail: a later cell stops at its first look (curtailed).
"$bin" verify "$model" "${seq[@]:0:3}" 256,288 --baseline --no-regression-at 256,288 "${seq[@]:7}" \
  --rule "$work/harmful.json" --sequential --certificate "$work/sqh2.json" >/dev/null
[ $? = 1 ] && ok || bad "sequential design, two lengths: the harmful rule did not fail"
"$py" - "$work/sqh2.json" <<'PY' && ok || bad "a cell after a failed one"
import json, sys
c = json.load(open(sys.argv[1]))["results"]["comparison"]["passkey"]
assert [(x["length"], x["pairs"], x["stop"]) for x in c] == [(256, 16, "regression"), (288, 8, "curtailed")], c
PY
# Gain futility: temperature 0.95 at 256 and 512 (past the training length: the gain cell) gains
# one prompt of 32 and loses none, so the 512 cell stops once the pooled gain test's conditional
# power under the design's target gain falls below gamma (the design before the rule ran its 40);
# the pairs then show no gain, and the patch passes on its ppl gain (0.0165 nats lower at 512, over
# --ppl-margin 0.01). The stops are the Python twin's (python/ctxpatch_ref/seqdesign.py, written
# from the rule's definition) on the looks' outcomes (only counts at the looks matter), and
# `check --rerun` takes the cells' recorded prompts again.
corpus=${CTXPATCH_FIXTURES:-$src/../shared/fixtures}/third_party/text/tinystories_val_1000_eot.txt
if [ -f "$corpus" ]; then
  "$bin" patch "$model" "$work/gfart" --method temperature --tau 0.95 --lengths 256,512 --verify passkey,ppl \
    --corpus "$corpus" --ppl-windows 2 --ppl-margin 0.01 --threads 2 --sequential >"$work/gf.txt" 2>&1 && ok \
    || bad "patch --sequential with a gain-futility stop: $(tail -3 "$work/gf.txt")"
  "$bin" check "$work/gfart" --rerun >"$work/gfc.txt" 2>&1 && grep -q "re-run: 2 cells equal" "$work/gfc.txt" && ok \
    || bad "check --rerun of an artifact with a gain-futility stop: $(cat "$work/gfc.txt")"
  "$py" - "$work/gfart/certificate.json" <<'PY' && ok || bad "gain futility"
import json, sys
from ctxpatch_ref import seqdesign as sd
c = json.load(open(sys.argv[1]))
cells = c["results"]["comparison"]["passkey"]
q = c["statistics"]["sequential"]
d = sd.Design(q["prompts_max"], every=q["looks_every"], gain_cells=q["gain_cells"])
runs = []  # each cell's outcomes rebuilt from its looks (+1 lost, -1 gained, 0 both or neither)
for x in cells:
    out, prev = [], [0, 0, 0]
    for look in x["looks"]:
        db, dc = look[1] - prev[1], look[2] - prev[2]
        out += [1] * db + [-1] * dc + [0] * (look[0] - prev[0] - db - dc)
        prev = look
    runs.append((out + [0] * (40 - len(out)), True, x["length"] == 512))
want, fail, gain = sd.run_cells(d, runs, has_ppl=True)
assert [(x["stop"], x["pairs"]) for x in cells] == [(s, n) for s, n, _, _ in want], (cells, want)
assert [x["stop"] for x in cells] == ["futility", "gain-futility"] and cells[1]["pairs"] < 40, cells
assert not fail and not gain, (fail, gain)
gf = q["gain_futility"]
assert gf["gamma"] == sd.GAIN_GAMMA and abs(gf["gained"] - d.gain_target()) < 1e-6 and gf["power"] == 0.8, gf
g = c["statistics"]["gain"]
assert g["futility"] is True and g["found"] is True and g["ppl_nll_saved"] > 0.01, g  # found by the ppl
assert c["verdict"] == {"result": "pass", "reasons": []}, c["verdict"]
PY
  # an edited stop fails the schema: the gain cell's, a gain-futility stop outside the gain test,
  # and one in a certificate without the rule (before it)
  for edit in 's/"stop":[[:space:]]*"gain-futility"/"stop": "curtailed"/' \
      '0,/"stop":[[:space:]]*"futility"/s//"stop": "gain-futility"/'; do
    rm -rf "$work/gfforged" && cp -r "$work/gfart" "$work/gfforged" && sed -i "$edit" "$work/gfforged/certificate.json"
    "$bin" check "$work/gfforged" >"$work/gff.txt"; [ $? = 1 ] \
      && grep -q "cert-schema: .*stop is not what the design decides on the last look's pairs" "$work/gff.txt" && ok \
      || bad "an edited stop ($edit): $(cat "$work/gff.txt")"
  done
  rm -rf "$work/gfforged" && cp -r "$work/gfart" "$work/gfforged"
  "$py" - "$work/gfforged/certificate.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
del c["statistics"]["sequential"]["gain_futility"]
json.dump(c, open(sys.argv[1], "w"), indent=2)
PY
  "$bin" check "$work/gfforged" >"$work/gff.txt"; [ $? = 1 ] \
    && grep -q "cert-schema: .*passkey\[\]: stop is not what the design decides" "$work/gff.txt" && ok \
    || bad "a gain-futility stop without the rule: $(cat "$work/gff.txt")"
else
  echo "note: $corpus is absent: the gain-futility case is skipped"
fi
# A stop the recorded pairs do not give (an edited certificate) fails check's schema.
cp -r "$work/sqart" "$work/sqforged" && sed -i 's/"stop":[[:space:]]*"futility"/"stop": "last look"/' "$work/sqforged/certificate.json"
"$bin" check "$work/sqforged" >"$work/sqf.txt"; [ $? = 1 ] \
  && grep -q "cert-schema: .*stop is not what the design decides on the last look's pairs" "$work/sqf.txt" && ok \
  || bad "an edited stop: $(cat "$work/sqf.txt")"
"$bin" verify "$model" "${seq[@]}" --looks 8 2>"$work/err"; [ $? = 2 ] && ok || bad "--looks without --sequential accepted"
"$bin" verify "$model" "${seq[@]:0:7}" --depths 0:1:5 --samples 500 --sequential 2>"$work/err"; [ $? = 2 ] \
  && grep -q "2000" "$work/err" \
  && ok || bad "a design past 2000 prompts a cell: $(cat "$work/err")"

# Baseline cache (docs/certificate.md, "Baseline cache"). A run with --baseline-cache computes the
# original's side and writes DIR/<key>.json; a later run with another rule takes that side from the
# file: the same certificate as a run without the cache but for run, whose counts are the patched
# side's alone (a run without --baseline) plus run.baseline_from_cache. Another training length
# misses the key.
# A corrupted, truncated, oversized or mismatching file is one warning, ignored (the original runs,
# the same certificate) and written again; a symlink or FIFO in its place is read through or
# refused as input, never written through.
head -c 8000 "$src/docs/certificate.md" >"$work/corpus.txt" # a short corpus: tokenized at every run
bc=(--probe passkey,ppl --corpus "$work/corpus.txt" --ppl-windows 1 --lengths 256 --depths 0:1:3 --samples 2 --seed 5
  --threads 2)
echo '{"temperature": 0.9}' >"$work/t09.json"
cache=$work/bcache
vb() { # vb NAME ARGS...: verify with the rule t09 into $work/NAME.json, stdout NAME.txt, stderr NAME.err
  local n=$1; shift
  "$bin" verify "$model" "${bc[@]}" --rule "$work/t09.json" "$@" --certificate "$work/$n.json" >"$work/$n.txt" 2>"$work/$n.err"
}
vb b0 --baseline && ok || bad "baseline run without a cache: $(cat "$work/b0.err")"
vb p0 && ok || bad "patched side alone: $(cat "$work/p0.err")"
"$bin" verify "$model" "${bc[@]}" --rule "$work/harmful.json" --baseline --baseline-cache "$cache" \
  --certificate "$work/bh.json" >/dev/null 2>"$work/bh.err" && [ ! -s "$work/bh.err" ] && ok \
  || bad "writing the cache: $(cat "$work/bh.err")"
key=$(cd "$cache" && ls) && [ "$(echo "$key" | wc -l)" = 1 ] && ok || bad "cache folder: $key"
vb b1 --baseline --baseline-cache "$cache" && [ ! -s "$work/b1.err" ] && grep -q "^baseline: taken from the baseline cache" \
  "$work/b1.txt" && ok || bad "reading the cache: $(cat "$work/b1.err" "$work/b1.txt")"
same_as_b0() { # same_as_b0 NAME CACHED: NAME.json is b0.json outside run; cached: its run is p0's
  "$py" - "$work/b0.json" "$work/$1.json" "$work/p0.json" "$2" "$cache/$key" <<'PY'
import hashlib, json, sys
a, b, p = (json.load(open(x)) for x in sys.argv[1:4])
ra, rb, rp = a.pop("run"), b.pop("run"), p.pop("run")
assert a == b, [k for k in a if a[k] != b.get(k)]
if sys.argv[4] == "1":
    bc = rb.pop("baseline_from_cache")
    assert bc["key_sha256"] + ".json" == sys.argv[5].rsplit("/", 1)[1], bc
    assert bc["file_sha256"] == hashlib.sha256(open(sys.argv[5], "rb").read()).hexdigest(), bc
    assert rb == rp and rb["tokens"] < ra["tokens"], (rb, rp, ra)
else:
    assert rb == ra, (rb, ra)
PY
}
same_as_b0 b1 1 && ok || bad "certificate from the cache"
vb b2 --baseline --baseline-cache "$cache" --train-len 300 && grep -q "^baseline: computed" "$work/b2.txt" \
  && [ "$(ls "$cache" | wc -l)" = 2 ] && ok || bad "another training length took the cache: $(cat "$work/b2.err")"
mv "$(ls -d "$cache"/* | grep -v "$key")" "$work/other.json"
cp "$cache/$key" "$work/good.json"
bad_cache() { # bad_cache WHAT PLACE: the file prepared; one warning naming the file and PLACE, b0's certificate
  vb bx --baseline --baseline-cache "$cache" && [ "$(wc -l <"$work/bx.err")" = 1 ] \
    && grep -q "^ctxpatch: warning: .*$key: .*$2.*(ignored: the original runs)$" "$work/bx.err" \
    && same_as_b0 bx 0 && cmp -s "$cache/$key" "$work/good.json" && ok || bad "$1 cache file: $(cat "$work/bx.err")"
}
head -c 150 "$work/good.json" >"$cache/$key"; bad_cache truncated "offset"
sed 's/\("answers":[[:space:]]*"\)./\12/' "$work/good.json" >"$cache/$key"; bad_cache "a bad answer" "answers\[0\]"
sed 's/"prompts":[[:space:]]*/&1/' "$work/good.json" >"$cache/$key"; bad_cache "another plan's" "prompts"
cp "$work/other.json" "$cache/$key"; bad_cache "another key's" "key_sha256"
{ cat "$work/good.json"; head -c 70000 /dev/zero | tr '\0' ' '; } >"$cache/$key"; bad_cache oversized "over the"
ln -s "$work/never.json" "$work/link" && rm "$cache/$key" && ln -s "$work/link" "$cache/$key"
vb bs --baseline --baseline-cache "$cache"; [ $? = 0 ] && [ -L "$cache/$key" ] && [ ! -e "$work/never.json" ] \
  && grep -q "warning: .*symlink" "$work/bs.err" && ok || bad "a symlink in the cache: $(cat "$work/bs.err")"
rm "$cache/$key" && mkfifo "$cache/$key"
vb bf --baseline --baseline-cache "$cache"; [ $? = 0 ] && [ -p "$cache/$key" ] && [ "$(wc -l <"$work/bf.err")" = 2 ] \
  && ok || bad "a FIFO in the cache: $(cat "$work/bf.err")"
"$bin" verify "$model" "${bc[@]}" --baseline-cache "$cache" 2>"$work/err"; [ $? = 2 ] && ok \
  || bad "--baseline-cache without --baseline accepted"

# Refusals
refused CP_EVERIFY_PROBE "$bin" verify "$model" --probe passkeys --lengths 256 --certificate "$work/never.json"
refused CP_EVERIFY_LENGTH "$bin" verify "$model" --probe passkey --lengths 40 --certificate "$work/never.json"
refused CP_ETOK_MISSING "$bin" verify "$tiny" --probe passkey --lengths 256 --certificate "$work/never.json"
printf '' >"$work/empty.json"
refused CP_ERULE_JSON "$bin" verify "$model" --probe passkey --lengths 256 --rule "$work/empty.json" --certificate "$work/never.json"
echo '{"lambda_mask": {"n_local": 0, "n_global": 1}}' >"$work/badrule.json"
refused CP_ERULE_VALUE "$bin" verify "$model" --probe passkey --lengths 256 --rule "$work/badrule.json" --certificate "$work/never.json"
refused CP_EVERIFY_THRESHOLD "$bin" verify "$model" --probe passkey --lengths 256 --no-regression-at 256 --certificate "$work/never.json"
"$bin" verify "$model" --probe passkey 2>/dev/null; [ $? = 2 ] && ok || bad "missing --lengths is not a usage error"
"$bin" verify "$model" --probe passkey --lengths 256 --device cuda 2>/dev/null; [ $? = 2 ] && ok || bad "--device cuda accepted"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
