#!/usr/bin/env bash
# Issue 33 item 4: `patch IN.onnx OUT.onnx --force` onto an OUT (in another folder) whose data file
# has other bytes leaves OUT's folder holding the old pair or the new one whatever the moment of a
# kill -9 (patchers/patch_onnx.c: the new data under a digest name, the graph flipped, the old data
# removed after). Kills land at the first and the second change seen in OUT's folder (watched by
# polling: the moments between the renames) and at random times over the run; after each, the
# graph's stored ctxpatch.graph_sha256 must match its graph and the data it reads (`check`
# reports graph-digest otherwise, as it does for the old graph beside the new data). Then the run
# completes, leaves no temporary, and the pair matches again.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

[ -f "$src/bench/make_random_llama.py" ] || { echo "SKIP: bench/make_random_llama.py is absent"; exit 77; }
cd "$work" || exit 1
# ~30 MB of float32 external data: the digest of it keeps the moments between renames wide.
"$py" "$src/bench/make_random_llama.py" m 16 1 >/dev/null && "$bin" convert m a --to onnx --external-threshold 4K >/dev/null \
  || { bad "the model and its ONNX export"; finish; exit; }
cp -r a b
"$py" - b/onnx/model.onnx.data <<'EOF' || bad "changing b's data"
import sys
with open(sys.argv[1], "r+b") as f:
    for off in range(8192, 1 << 20, 65536):
        f.seek(off)
        x = f.read(1)
        f.seek(off)
        f.write(bytes([x[0] ^ 1]))
EOF
mkdir old
"$bin" patch a/onnx/model.onnx old/p.onnx --method temperature --tau 0.9 --no-verify >/dev/null || bad "the old OUT"
cmd=("$bin" patch b/onnx/model.onnx o/p.onnx --method temperature --tau 0.9 --no-verify --force)

# consistent: the graph's digest covers the data it reads now.
# (check itself exits 1 on an uncertified graph: only its graph-digest line counts.)
consistent() {
  local c
  c=$("$bin" check o/p.onnx 2>&1)
  [[ $c != *graph-digest* ]] && [[ $c == *cert-missing* ]]
}

# kill9.py MODE: runs cmd from a fresh copy of the old OUT and kills it at MODE (first, second:
# the first / second change of OUT's folder; a number: microseconds after the start). Prints what
# it saw.
cat >kill9.py <<'EOF'
import os, random, shutil, signal, subprocess, sys, time
mode, cmd = sys.argv[1], sys.argv[2:]
def seen():
    return {n: (s.st_ino, s.st_mtime_ns) for n in os.listdir("o") if not n.startswith(".")
            for s in [os.stat(os.path.join("o", n))]}
shutil.rmtree("o", ignore_errors=True)
shutil.copytree("old", "o")
before = seen()
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
changes, t0 = 0, time.monotonic()
if mode in ("first", "second"):
    want = 1 if mode == "first" else 2
    while p.poll() is None:
        now = seen()
        if now != before:
            changes += 1
            before = now
            if changes == want:
                break
else:
    while p.poll() is None and time.monotonic() - t0 < int(mode) / 1e6:
        time.sleep(0.0002)
p.send_signal(signal.SIGKILL)
p.wait()
print(f"{mode}: {changes} changes, exit {p.returncode}")
EOF

t0=$(date +%s%N)
"$py" kill9.py 999999999 "${cmd[@]}" >/dev/null && consistent && ok || bad "an uninterrupted run"
dur=$(( ($(date +%s%N) - t0) / 1000 ))
for mode in first second first second first second; do
  "$py" kill9.py $mode "${cmd[@]}" >k.txt 2>&1
  consistent && ok || bad "a kill at the $mode change left the old graph beside other data ($(cat k.txt); $(ls o | tr '\n' ' '))"
done
for ((i = 0; i < 8; i++)); do
  delay=$(( (RANDOM * 32768 + RANDOM) % (dur + 1) ))
  "$py" kill9.py $delay "${cmd[@]}" >k.txt 2>&1
  consistent && ok || bad "a kill after ${delay}us left the old graph beside other data ($(ls o | tr '\n' ' '))"
done
# After a kill, the next run completes the pair and sweeps what the killed one left.
"$py" kill9.py first "${cmd[@]}" >/dev/null 2>&1
"${cmd[@]}" >/dev/null 2>&1 && consistent && ok || bad "the run after a kill"
[ -z "$(find o -name '.*tmp-*')" ] && ok || bad "temporaries left: $(ls -a o | tr '\n' ' ')"
# Exactly the graph and the one data file it reads are left.
[ "$(ls o | wc -l)" -eq 2 ] && ok || bad "files left in OUT's folder: $(ls o | tr '\n' ' ')"
finish
