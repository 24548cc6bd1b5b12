#!/usr/bin/env bash
# No include circle spans two folders: modules (a .c with its header, public or private) are joined
# by their includes, and every strongly connected set of more than one module must sit in one folder
# (a circle such as checkpoint.c -> onnx/onnx_import.c -> names.c -> checkpoint.c is refused: it
# makes two folders one house). Circles inside one folder are listed, not refused.
set -uo pipefail
exec "$CTXPATCH_PYTHON" - "$CTXPATCH_SOURCE_DIR" <<'EOF_PY'
import os,re,sys,collections
src=sys.argv[1]
inc=re.compile(r'^\s*#\s*include\s*"([^"]+)"',re.M)
floors=['base','formats','tokenizers','model','import','export','engine','verify','patchers','cli']
def mod(path):
    # module: folder + stem, headers in include/ctxpatch/<floor>/ map to their floor's folder by stem
    rel=os.path.relpath(path,src)
    stem=os.path.splitext(os.path.basename(rel))[0]
    return stem
files={}
for fl in floors:
    for d in (os.path.join(src,fl),os.path.join(src,'include','ctxpatch',fl)):
        for r,_,fs in os.walk(d):
            for f in fs:
                if f.endswith(('.c','.h','.cpp','.cu')): files[os.path.join(r,f)]=None
# map header include string -> path
def resolve(name):
    for base in (src,os.path.join(src,'include')):
        p=os.path.join(base,name)
        if p in files: return p
    return None
# module = directory of .c (for include/ctxpatch/X/y.h: the .c defining it, approximated by stem match)
stem_dir=collections.defaultdict(set)
for p in files:
    if p.endswith(('.c','.cpp','.cu')): stem_dir[os.path.splitext(os.path.basename(p))[0]].add(os.path.dirname(os.path.relpath(p,src)))
def node(p):
    stem=os.path.splitext(os.path.basename(p))[0]
    rel=os.path.relpath(p,src)
    if rel.startswith('include/'):
        ds=stem_dir.get(stem)
        d=sorted(ds)[0] if ds else os.path.dirname(rel)
    else: d=os.path.dirname(rel)
    return d+'/'+stem
g=collections.defaultdict(set)
for p in files:
    for name in inc.findall(open(p,encoding='utf-8').read()):
        q=resolve(name)
        if q and node(q)!=node(p): g[node(p)].add(node(q))
# Tarjan
idx={};low={};st=[];on=set();out=[];c=[0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v]=low[v]=c[0];c[0]+=1;st.append(v);on.add(v)
    for w in g[v]:
        if w not in idx: sc(w);low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],idx[w])
    if low[v]==idx[v]:
        comp=[]
        while True:
            w=st.pop();on.discard(w);comp.append(w)
            if w==v: break
        if len(comp)>1: out.append(comp)
for v in list(g):
    if v not in idx: sc(v)
bad=0
for comp in out:
    dirs={x.rsplit('/',1)[0] for x in comp}
    print(('CROSS ' if len(dirs)>1 else 'local ')+' '.join(sorted(comp)))
    bad+=len(dirs)>1
print(f"test_include_circles: {0 if bad else 1} passed, {1 if bad else 0} failed")
sys.exit(1 if bad else 0)
EOF_PY
