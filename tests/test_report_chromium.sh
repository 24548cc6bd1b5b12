#!/usr/bin/env bash
# The verify report in a real headless Chromium: a sample report (tests/test_report.c given a
# path writes one, with baseline, attention and hostile names) is loaded, screenshotted and
# DOM-dumped. The screenshot must be a PNG of the requested size that is not blank and shows
# the heatmap's red and green; the DOM must hold every heatmap cell and no script element.
# Installs nothing: without `chromium` on PATH (scripts/install-deps.sh installs it) it skips.
set -uo pipefail
if ! command -v chromium >/dev/null 2>&1; then
  echo "SKIP: chromium not installed"
  exit 77
fi
build=$CTXPATCH_BUILD_DIR; py=$CTXPATCH_PYTHON
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
passed=0; failed=0
ok() { passed=$((passed+1)); }
bad() { failed=$((failed+1)); echo "FAIL: $*"; }

html=$build/report-sample.html; png=$build/report-sample.png
rm -f "$png"
cells=$("$build/tests/test_report" "$html" | sed -n 's/^cells //p')
[ -n "$cells" ] && [ -s "$html" ] && ok || { bad "sample report not written"; echo "$passed passed, $failed failed"; exit 1; }

# Every network-ish feature off: the page must render from the file alone.
chrome() {
  timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
    --user-data-dir="$(mktemp -d -p "$work")" --window-size=1200,1600 "$@" "file://$html" 2>>"$work/chromium.log"
}
chrome --screenshot="$png" >/dev/null && ok || bad "chromium --screenshot failed (rc $?): $(tail -3 "$work/chromium.log")"
chrome --dump-dom >"$work/dom.html" && ok || bad "chromium --dump-dom failed: $(tail -3 "$work/chromium.log")"

"$py" - "$png" 1200 1600 <<'PY' && ok || bad "screenshot checks"
# PNG decoding with the stdlib only: chunks, zlib, and the five scanline filters.
import struct, sys, zlib
path, want_w, want_h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = open(path, "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, ihdr = 8, [], None
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    assert zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0], "bad CRC"
    if kind == b"IHDR": ihdr = struct.unpack(">IIBBBBB", body)
    elif kind == b"IDAT": idat.append(body)
    elif kind == b"IEND": break
    pos += 12 + n
w, h, depth, ctype, _, _, interlace = ihdr
assert (w, h) == (want_w, want_h), f"size {w}x{h}, want {want_w}x{want_h}"
assert depth == 8 and ctype in (2, 6) and interlace == 0, f"unexpected PNG format {ihdr}"
bpp = 3 if ctype == 2 else 4
raw = zlib.decompress(b"".join(idat))
stride = w * bpp
assert len(raw) == h * (stride + 1), "IDAT size"
prev = bytearray(stride)
colours = {}
for y in range(h):
    f = raw[y * (stride + 1)]
    line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    if f == 1:
        for i in range(bpp, stride): line[i] = (line[i] + line[i - bpp]) & 255
    elif f == 2:
        line = bytearray((a + b) & 255 for a, b in zip(line, prev))
    elif f == 3:
        for i in range(stride):
            line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
    elif f == 4:
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    else:
        assert f == 0, f"filter {f}"
    for x in range(0, stride, bpp):
        px = bytes(line[x:x + 3])
        colours[px] = colours.get(px, 0) + 1
    prev = line
def near(rgb, tol=6):
    return sum(n for px, n in colours.items() if all(abs(a - b) <= tol for a, b in zip(px, rgb)))
red, green = near((0xd7, 0x30, 0x27)), near((0x1a, 0x98, 0x50))
print(f"{w}x{h}, {len(colours)} distinct colours, heatmap red {red} px, green {green} px")
assert len(colours) > 64, "page looks blank"
top = max(colours.values())
assert top < 0.95 * w * h, "one colour covers the page"
assert red > 2000 and green > 2000, "heatmap colours missing"
PY

"$py" - "$work/dom.html" "$cells" <<'PY' && ok || bad "DOM checks"
import re, sys
dom, cells = open(sys.argv[1], encoding="utf-8").read(), int(sys.argv[2])
n = len(re.findall(r'<g class="hm-cell">', dom))
assert n == cells, f"{n} heatmap cells in the DOM, want {cells}"
assert len(re.findall(r'<svg class="heatmap"', dom)) == 4
assert len(re.findall(r'<svg class="chart ', dom)) == 4
assert not re.search(r"<script", dom, re.I), "script element in the DOM"
assert not re.search(r"<img", dom, re.I), "img element in the DOM"
# the hostile file name arrived as text
assert "&lt;script&gt;alert(1)&lt;/script&gt;&amp;model.safetensors" in dom
print(f"{n} heatmap cells")
PY

echo "screenshot: $png"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
