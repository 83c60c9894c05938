import sys, json
sys.path.insert(0, "/work/main/tools")
import _engines
from tunecache.tvm_layer import frontend as fe
from tunecache.tvm_layer.loopnest import analyze
from tunecache.tvm_layer.tir import argument_bytes
from tunecache.tvm_layer.target import resolve_target
spec = sys.argv[1]
module, inputs, name = _engines.load(spec)
t = resolve_target(None)
tasks = fe.extract_tasks(fe.prepare_for_tuning(fe.import_model(module, inputs), t), t)
rows = []
for task in tasks:
    n = analyze(task.mod)
    rows.append((task.name, int(task.weight), float(n.work), argument_bytes(task.mod), n.family))
tw = sum(w * x for _, w, x, _, _ in rows)
prof = {}
if len(sys.argv) > 2:
    d = json.load(open(sys.argv[2]))
    for m in d["models"]:
        if m["model"] == spec:
            for k in m["profile"]["tunecache@128"]["top_kernels"]:
                prof[k["kernel"].removesuffix("_prepacked")] = k["ms"]
ptot = sum(prof.values()) or 1
for r in (0, 2, 4, 8):
    est = {name: w * max(x, r * b) for name, w, x, b, _ in rows}
    tot = sum(est.values())
    small = [n for n in est if est[n] / tot < 0.02]
    print(f"ridge {r}: minor {len(small)} of {len(rows)}; minor's in-model ms", round(sum(prof.get(n, 0) for n in small), 3), "of", round(ptot, 3))
for name, w, x, b, fam in sorted(rows, key=lambda r: -r[1] * max(r[2], 4 * r[3])):
    print(f"{name[:50]:50s} {fam:17s} w{w:2d} flopshare {w*x/tw:6.3f}  ridge4 {w*max(x,4*b)/sum(ww*max(xx,4*bb) for _,ww,xx,bb,_ in rows):6.3f} in-model {prof.get(name, 0)/ptot:6.3f}")
