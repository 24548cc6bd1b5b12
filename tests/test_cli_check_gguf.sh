#!/usr/bin/env bash
# ctxpatch check on one patched .gguf file (docs/ci.md, "GGUF artifacts"): a patched rope probe
# passes (--rerun is refused, exit 2); an edited ctxpatch.rule value, a certificate
# from another artifact (with its digest key updated to match) and an edited certificate each
# fail with their own message; ctxpatch.content_sha256 equals the digest an independent reader
# (tests/gguf/content_digest.py) computes, and a flipped tensor byte or an edited hyperparameter
# key fails it; the report beside the file is titled and bound to the embedded certificate.
. "$CTXPATCH_SOURCE_DIR/tests/harness.sh"

model=$src/examples/probe-models/rope-probe
[ -f "$model/model.safetensors" ] || { echo "SKIP: $model is absent"; exit 77; }
vopts="--lengths 256 --depths 0:1:3 --samples 1 --threads 1 --to gguf --accept-no-gain --accept-underpowered"
a=$work/a.gguf b=$work/b.gguf
"$bin" patch "$model" "$a" --method lm-infinite --n-global 10 --n-local 128 --for ctxpatch $vopts >"$work/p1.log" 2>&1 \
  || { echo "FAIL: patch --to gguf"; cat "$work/p1.log"; exit 1; }
"$bin" patch "$model" "$b" --method temperature --tau 0.9 $vopts >"$work/p2.log" 2>&1 \
  || { echo "FAIL: patch --to gguf (second artifact)"; cat "$work/p2.log"; exit 1; }

# 1. The untampered files pass; --rerun is refused (exit 2: the GGUF's gpt2 vocab has no C tokenizer).
for f in "$a" "$b"; do
  "$bin" check "$f" >"$work/ok.out" 2>&1 && grep -q ": pass (gguf" "$work/ok.out" && ok || { bad "clean $f"; cat "$work/ok.out"; }
done
"$bin" check "$a" --rerun 2>"$work/rerun.out"
[ $? -eq 2 ] && grep -q "rerun: not supported for a gguf file" "$work/rerun.out" && ok \
  || { bad "--rerun on a GGUF: refused with exit 2"; cat "$work/rerun.out"; }
"$bin" check "$a" --json >"$work/json.out" && grep -q '"format":[[:space:]]*"gguf"' "$work/json.out" && ok \
  || { bad "--json names the format"; cat "$work/json.out"; }

# Same-length in-place edits of a GGUF string value (the file keeps its layout).
edit() { # edit IN OUT KEY PYEXPR(v -> new value bytes, same length)
  "$py" - "$@" <<'PY'
import struct, sys
src, dst, key, expr = sys.argv[1:5]
d = bytearray(open(src, "rb").read())
k = key.encode()
i = d.find(struct.pack("<Q", len(k)) + k)
assert i > 0, key
at = i + 8 + len(k)
assert struct.unpack_from("<I", d, at)[0] == 8, "not a string"
n = struct.unpack_from("<Q", d, at + 4)[0]
v = bytes(d[at + 12:at + 12 + n])
new = eval(expr)
assert len(new) == n, (len(new), n)
d[at + 12:at + 12 + n] = new
open(dst, "wb").write(d)
PY
}
getv() { # getv FILE KEY: prints the string value
  "$py" - "$1" "$2" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read(); k = sys.argv[2].encode()
i = d.find(struct.pack("<Q", len(k)) + k) + 8 + len(k)
n = struct.unpack_from("<Q", d, i + 4)[0]
sys.stdout.buffer.write(d[i + 12:i + 12 + n])
PY
}

# 2. An edited ctxpatch.rule value: n_local 128 -> 129.
edit "$a" "$work/rule.gguf" ctxpatch.rule 'v.replace(b"128", b"129", 1)' || bad "forging the rule"
"$bin" check "$work/rule.gguf" >"$work/rule.out"
[ $? -eq 1 ] && grep -q "FAIL meta-rule: ctxpatch.\* keys: rule .* differs from the certificate's patch.rule" "$work/rule.out" \
  && ok || { bad "edited ctxpatch.rule"; cat "$work/rule.out"; }

# 3. The certificate of the other artifact, padded with spaces to the same length, and its digest
#    written into ctxpatch.certificate_sha256: digest agrees, the method and rule do not.
ca=$(getv "$a" ctxpatch.certificate | wc -c); cb=$(getv "$b" ctxpatch.certificate | wc -c)
if [ "$ca" -ge "$cb" ]; then host=$a donor=$b; else host=$b donor=$a; fi
n=$(getv "$host" ctxpatch.certificate | wc -c)
getv "$donor" ctxpatch.certificate >"$work/donor.json"
"$py" -c "import sys; d=open(sys.argv[1],'rb').read(); open(sys.argv[1],'wb').write(d + b' ' * ($n - len(d)))" "$work/donor.json"
sum=$(sha256sum "$work/donor.json" | cut -c1-64)
edit "$host" "$work/swap1.gguf" ctxpatch.certificate "open('$work/donor.json','rb').read()" &&
  edit "$work/swap1.gguf" "$work/swap.gguf" ctxpatch.certificate_sha256 "b'$sum'" || bad "swapping certificates"
"$bin" check "$work/swap.gguf" >"$work/swap.out"
[ $? -eq 1 ] && grep -q "FAIL meta-method: ctxpatch.\* keys: method .* differs from the certificate's patch.method" "$work/swap.out" \
  && ok || { bad "certificate from another artifact"; cat "$work/swap.out"; }

# 4. An edited certificate (run.threads 1 -> 2; its digest key left alone): the digest catches it.
edit "$a" "$work/cert.gguf" ctxpatch.certificate 'v.replace(b"\"threads\":\t1", b"\"threads\":\t2", 1)' || bad "editing the certificate"
"$bin" check "$work/cert.gguf" >"$work/cert.out"
[ $? -eq 1 ] && grep -q "FAIL cert-digest: ctxpatch.\* keys: certificate_sha256 .* is not ctxpatch.certificate's" "$work/cert.out" \
  && ok || { bad "edited certificate"; cat "$work/cert.out"; }

# 5. The content digest: stored value = the independent recomputation, on both artifacts.
for f in "$a" "$b"; do
  "$py" "$src/tests/gguf/content_digest.py" "$f" >"$work/digest.out" \
    && [ "$(cut -d' ' -f1 "$work/digest.out")" = "$(cut -d' ' -f2 "$work/digest.out")" ] && ok \
    || { bad "ctxpatch.content_sha256 of $f is not the recipe's digest"; cat "$work/digest.out"; }
done
# A flipped tensor byte (the last byte of the file, inside the tensor data) fails it; so does an
# edited hyperparameter (llama.context_length, a u32 llama.cpp reads), though the file parses.
cp "$a" "$work/flip.gguf"
"$py" -c "import sys; f=open(sys.argv[1],'r+b'); f.seek(-1,2); b=f.read(1); f.seek(-1,2); f.write(bytes([b[0]^0x40]))" "$work/flip.gguf"
"$bin" check "$work/flip.gguf" >"$work/flip.out" 2>&1
[ $? -eq 1 ] && grep -q "FAIL gguf-digest: .*differs from ctxpatch.content_sha256" "$work/flip.out" && ok \
  || { bad "flipped tensor byte"; cat "$work/flip.out"; }
"$py" - "$a" "$work/ctx.gguf" <<'PY'
import struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
k = b"llama.context_length"
i = d.find(struct.pack("<Q", len(k)) + k) + 8 + len(k)
assert struct.unpack_from("<I", d, i)[0] == 4, "not a u32"
struct.pack_into("<I", d, i + 4, struct.unpack_from("<I", d, i + 4)[0] * 2)
open(sys.argv[2], "wb").write(d)
PY
"$bin" check "$work/ctx.gguf" >"$work/ctx.out" 2>&1
[ $? -eq 1 ] && grep -q "FAIL gguf-digest" "$work/ctx.out" && ok || { bad "edited llama.context_length"; cat "$work/ctx.out"; }
# 6. The report beside the file (issue 30): patch writes OUT.report.html, titled with the model,
#    method and runtime; check renders it from the embedded certificate, so an edit fails it.
grep -q '<span class="title">rope-probe, lm-infinite, for ctxpatch only</span>' "$a.report.html" &&
  grep -q '<span class="title">rope-probe, temperature, for llama.cpp</span>' "$b.report.html" &&
  grep -q 'gguf artifact &middot; fidelity <span class="fidelity">exact-weights</span>' "$b.report.html" && ok ||
  bad "the GGUF's report and its title"
cp "$b" "$work/rep.gguf"; sed 's/training length 256 tokens/training length 512 tokens/' "$b.report.html" >"$work/rep.gguf.report.html"
"$bin" check "$work/rep.gguf" >"$work/rep.out" 2>&1
[ $? -eq 1 ] && grep -q "FAIL report-mismatch: $work/rep.gguf.report.html: line [0-9]*, column [0-9]*: differs" "$work/rep.out" \
  && ok || { bad "edited GGUF report"; cat "$work/rep.out"; }
# A report already beside a new OUT is refused without --force, before any work.
: >"$work/c.gguf.report.html"
"$bin" patch "$model" "$work/c.gguf" --method temperature --tau 0.9 $vopts >"$work/c.log" 2>&1
[ $? -eq 1 ] && grep -q "c.gguf.report.html: the report of .*c.gguf already exists" "$work/c.log" && [ ! -e "$work/c.gguf" ] \
  && ok || { bad "an existing report beside OUT"; cat "$work/c.log"; }
# A truncated file no longer parses.
head -c 1000 "$a" >"$work/trunc.gguf"
"$bin" check "$work/trunc.gguf" >"$work/trunc.out" 2>&1
[ $? -eq 1 ] && grep -q "FAIL gguf-unreadable" "$work/trunc.out" && ok || { bad "truncated GGUF"; cat "$work/trunc.out"; }
finish
