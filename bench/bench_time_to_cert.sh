#!/usr/bin/env bash
# Time to certificate (issue 34; docs/perf.md "Time to certificate"): `patch --method temperature
# --tau 0.9` and `patch --method lm-infinite` on a Llama-3.2-1B-shaped BF16 checkpoint trained at
# 2K (bench/make_llama_bf16.py llama3.2-1b-2k: random weights, the Llama 3.2 tokenizer) with the
# four retrieval probes at the training length and 4x, patch's default 40 prompts a probe and
# length, for each lever combination: none (--no-shared-prefix), shared prefixes (the default),
# sequential (--sequential --looks K), both; each with the 16-bit kernels (default) and with
# CTXPATCH_WEIGHTS=f32 (widened tiles). The four probes are the default probe set of a model that
# answers them; a random model answers none, so they are named with --verify and the default set's
# screening (10 prompts a probe at the training length, the original alone) is added.
#
# What runs where (a whole configuration is hours of the 2-core VM's CPU):
#  - counts: the same patch commands on micro-llama3-2k (the same config but d_model 32, 1 layer,
#    1 head: the same tokenizer, lengths and prompts) give the verdicts, prompts, and tokens
#    computed and reused per length (certificate run.by_length). Its random weights answer like
#    the 1B's (nothing right on either side), so the sequential stops are the same; a trained
#    model's answers stop elsewhere. One thread: the counts do not depend on it, and a loaded
#    machine makes two threads wait on each other at every product. Unshared runs are not needed: a prompt set's tokens + reused
#    rows is what every prompt alone computes (tests/test_cli_verify.sh checks that identity).
#  - cost: CPU seconds per token of one whole prompt and its 10-token answer (`verify --probe
#    passkey --depths 0.5 --samples 1 --no-shared-prefix --no-stats`) on the 1B at 2K, and on
#    llama3.2-1b-2k-1l (one 1B layer, the embedding and tied head) at 2K and 4x, with the 16-bit
#    kernels and f32 tiles, and at 4x under the LM-Infinite rule. The 1B at 4x is computed: its
#    cost per token = head + 16 x layer, the layer's from the one-layer model at 4x less its head
#    (taken as at 2K: the head works only on the answer's rows), the head's from the 1B and the
#    one-layer model at 2K. f32 tiles: the 1B at 2K plus the one-layer model's difference at 4x.
#  - table: configuration CPU = sum over lengths of tokens x cost per token (the patched side of
#    lm-infinite at the LM-Infinite rule's cost), plus the screening; minutes at 2 threads = CPU /
#    (CPU / wall of the 2-thread 1B cost run) / 60. All labelled computed. No rates from elsewhere.
#
# usage: bench/bench_time_to_cert.sh WORK        (WORK: a folder with room for 3 GB)
#   CTXPATCH_BIN  ctxpatch binary (default build/ctxpatch)
#   TOKENIZER     the Llama 3.2 tokenizer.json.gz (default ../shared/fixtures/tokenizers/modern/...)
#   LONG (default 8192), LOOKS (K, default 8), THREADS (default 2), NICE (default 5: a shared VM)
#   PARTS         of "cost counts table" (default all; PARTS=cost and PARTS=counts may run at
#                 once into one WORK, then PARTS=table); a run that printed is kept (NAME.done)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
bin=${CTXPATCH_BIN:-$src/build/ctxpatch}
py=$here/../scripts/py
tokgz=${TOKENIZER:-$src/../shared/fixtures/tokenizers/modern/llama3/llama-3.2/tokenizer.json.gz}
work=${1:?usage: bench_time_to_cert.sh WORK}
L=2048 long=${LONG:-8192} looks=${LOOKS:-8} threads=${THREADS:-2} nice=${NICE:-5}
parts=" ${PARTS:-cost counts table} "
[ -x "$bin" ] || { echo "bench_time_to_cert: $bin is not built (set CTXPATCH_BIN)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench_time_to_cert: needs GNU time" >&2; exit 2; }
[ -f "$tokgz" ] || { echo "bench_time_to_cert: no tokenizer at $tokgz (set TOKENIZER)" >&2; exit 2; }
mkdir -p "$work"
load() { cut -d' ' -f1-3 /proc/loadavg; }
model() { # model PRESET DIR
  [ -f "$2/model.safetensors" ] || nice -n "$nice" "$py" "$here/make_llama_bf16.py" "$2" "$1" 0 bf16
  [ -f "$2/tokenizer.json" ] || zcat "$tokgz" >"$2/tokenizer.json"
  cp "$(dirname "$tokgz")/tokenizer_config.json" "$2/"
}
# timed NAME CMD...: CMD niced under /usr/bin/time (NAME.time: user, system, wall seconds)
timed() {
  local name=$1
  shift
  [ -f "$work/$name.done" ] && return 0
  load >"$work/$name.load"
  /usr/bin/time -f '%U %S %e' -o "$work/$name.time" nice -n "$nice" "$@" >"$work/$name.out" 2>"$work/$name.err" || true
  [ ! -s "$work/$name.out" ] || touch "$work/$name.done"
}
probes=passkey,lines,needle,multikey
echo "{\"lambda_mask\": {\"n_global\": 10, \"n_local\": $L}, \"distance_ceiling\": $L}" >"$work/lminf.json"

if [[ $parts == *" cost "* ]]; then
  model llama3.2-1b-2k "$work/m1b"
  model llama3.2-1b-2k-1l "$work/m1l"
  # cost NAME MODEL LENGTH WEIGHTS [verify args]
  cost() {
    local name=$1 m=$2 len=$3 w=$4
    shift 4
    timed "cost.$name" env CTXPATCH_WEIGHTS="$w" "$bin" verify "$work/$m" --probe passkey --lengths "$len" --depths 0.5 \
      --samples 1 --no-shared-prefix --no-stats --threads "$threads" --certificate "$work/cost.$name.json" "$@"
  }
  cost 1b.k16.$L m1b $L 16
  cost 1l.k16.$L m1l $L 16
  cost 1l.k16.$long m1l "$long" 16
  cost 1l.f32.$long m1l "$long" f32
  cost 1l.lmi.$long m1l "$long" 16 --rule "$work/lminf.json"
  cost 1l.f32.$L m1l $L f32
  cost 1b.f32.$L m1b $L f32
fi

if [[ $parts == *" counts "* ]]; then
  model micro-llama3-2k "$work/micro"
  methods=("temperature --tau 0.9" "lm-infinite --for ctxpatch")
  # lm-infinite's fixed design after its sequential one (the same prompts); then lm-infinite again as
  # a later patch of the same original: its side read from the cache lm-infinite's fixed run wrote
  for cfg in 0.prefix 0.seq 1.seq 1.prefix 1.prefixc 1.seqc; do
    mi=${cfg%.*} lv=${cfg#*.} extra=()
    [ "${lv%c}" = seq ] && extra=(--sequential --looks "$looks")
    [ "$cfg" = 1.prefix ] || [ "${lv%c}" != "$lv" ] && extra+=(--baseline-cache "$work/bcache") # 1.prefix writes it
    out=$work/out.$mi.$lv
    [ -f "$work/run.$mi.$lv.done" ] || rm -rf "$out"
    # shellcheck disable=SC2086
    timed "run.$mi.$lv" "$bin" patch "$work/micro" "$out" --method ${methods[$mi]} --target-len "$long" \
      --verify "$probes" --threads 1 --work-budget 100000000000 --json "${extra[@]}"
  done
  timed screen "$bin" verify "$work/micro" --probe "$probes" --lengths $L --depths 0:1:5 --samples 2 --no-stats \
    --threads 1 --certificate "$work/screen.json"
fi

[[ $parts == *" table "* ]] || exit 0
"$py" - "$work" "$L" "$long" "$(git -C "$src" rev-parse --short HEAD)" "$(nproc)" <<'PY'
import json, os, sys
work, L, long, commit, ncpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
rd = lambda p: open(os.path.join(work, p)).read()
have = lambda p: os.path.exists(os.path.join(work, p))
def cpu(name):
    u, s, e = rd(name + ".time").split()[-3:]
    return float(u) + float(s), float(e)
print("commit %s, 2K = %d, 4x = %d, %s CPUs" % (commit, L, long, ncpu))
c = {}
print("\n| run (one whole prompt, 10-token answer) | tokens | CPU s | wall s | CPU s / token | load (1, 5, 15 min) |")
print("|---|---:|---:|---:|---:|---|")
for n in ("1b.k16.%d" % L, "1b.f32.%d" % L, "1l.k16.%d" % L, "1l.f32.%d" % L, "1l.k16.%d" % long, "1l.f32.%d" % long,
          "1l.lmi.%d" % long):
    if not have("cost.%s.json" % n):
        print("| %s | not run |" % n)
        continue
    t = json.load(open(os.path.join(work, "cost.%s.json" % n)))["run"]["tokens"]
    cs, e = cpu("cost." + n)
    c[n] = cs / t
    print("| %s | %d | %.1f | %.1f | %.5f | %s |" % (n, t, cs, e, cs / t, rd("cost.%s.load" % n).strip()))
cost = {}
if all(k in c for k in ("1b.k16.%d" % L, "1l.k16.%d" % L, "1l.k16.%d" % long)):
    layer2k = (c["1b.k16.%d" % L] - c["1l.k16.%d" % L]) / 15
    head = c["1l.k16.%d" % L] - layer2k
    layer4x = c["1l.k16.%d" % long] - head
    cost["k16", L], cost["k16", long] = c["1b.k16.%d" % L], head + 16 * layer4x
    if "1l.lmi.%d" % long in c:
        cost["lmi", long] = head + 16 * (c["1l.lmi.%d" % long] - head)
    if "1b.f32.%d" % L in c and "1l.f32.%d" % long in c:
        cost["f32", L] = c["1b.f32.%d" % L]
        cost["f32", long] = cost["k16", long] + (c["1l.f32.%d" % long] - c["1l.k16.%d" % long]) * 16
    print("\ncomputed CPU s / token of the 1B: " + ", ".join("%s at %d: %.5f" % (k[0], k[1], v) for k, v in sorted(cost.items())))
if not cost:
    print("(no CPU columns: the cost runs are missing; rates from another machine are not used)")
# the 2-thread runs' own CPU / wall ratio: what 2 threads give on this machine
par = cpu("cost.1b.k16.%d" % L)[0] / cpu("cost.1b.k16.%d" % L)[1] if "1b.k16.%d" % L in c else None
if par:
    print("CPU s per wall s of the 2-thread 1B run: %.2f" % par)
scr = json.load(open(os.path.join(work, "screen.json")))["run"] if have("screen.json") else None
if scr:
    print("screening (micro, the original alone, 40 prompts at %d): %d tokens computed, %d reused" % (L, scr["tokens"], scr["tokens_reused"]))
hdr = "| method | levers | verdict | prompts run | tokens computed at %d / %d | 1B CPU s, 16-bit (computed) | 1B CPU s, f32 tiles (computed) | 1B minutes at 2 threads, 16-bit (computed) |" % (L, long)
print("\n" + hdr + "\n|---|---|---|---:|---:|---:|---:|---:|")
for mi, mname in ((0, "temperature 0.9"), (1, "lm-infinite")):
    for lv in ("prefix", "seq") + (("prefixc", "seqc") if mi == 1 else ()):
        n = "run.%d.%s" % (mi, lv)
        if not have(n + ".out") or not rd(n + ".out").strip():
            print("| %s | %s | not run |" % (mname, lv))
            continue
        o = json.loads(rd(n + ".out"))
        cert = o["certificate"]
        runb = {e["length"]: e for e in cert["run"]["by_length"]}
        prompts = 2 * sum(e.get("prompts", cert["probes"]["samples"] * len(cert["probes"]["depths"]))
                          for name, cells in cert["results"]["patched"].items() if name != "attention" for e in cells)
        if lv.endswith("c"):  # the original's side read from the cache: only the patched side ran
            prompts //= 2
        for shared in (False, True):
            toks = {ln: runb[ln]["tokens"] + (0 if shared else runb[ln]["tokens_reused"]) for ln in (L, long)}
            s_t = (scr["tokens"] + (0 if shared else scr["tokens_reused"])) if scr else 0
            seqk = "sequential (K = %d)" % cert["statistics"]["sequential"]["looks_every"] if "seq" in lv else ""
            levers = {"prefix": "shared prefixes" if shared else "none",
                      "seq": "sequential + shared prefixes" if shared else seqk,
                      "prefixc": "baseline cache (a later patch)" + (" + shared prefixes" if shared else ""),
                      "seqc": ("sequential + shared prefixes" if shared else seqk) + " + baseline cache (a later patch)"}[lv]
            row = "| %s | %s | %s | %d | %d / %d |" % (mname, levers, cert["verdict"]["result"], prompts, toks[L], toks[long])
            def total(w):
                at4 = None  # the patched side at 4x under the LM-Infinite rule (f32: plus the tiles' difference)
                if mi == 1 and ("lmi", long) in cost:
                    at4 = cost["lmi", long] + (cost[w, long] - cost["k16", long])
                side4 = toks[long] / 2
                c4 = side4 * cost[w, long] + side4 * (at4 if at4 else cost[w, long])
                if lv.endswith("c"):  # every token computed at 4x is the patched side's
                    c4 = toks[long] * (at4 if at4 else cost[w, long])
                return toks[L] * cost[w, L] + c4 + s_t * cost[w, L]
            if ("k16", long) in cost and par:
                k = total("k16")
                f = total("f32") if ("f32", long) in cost else float("nan")
                row += " %.0f | %.0f | %.0f |" % (k, f, k / par / 60)
            print(row)
PY
