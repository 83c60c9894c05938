import sys
sys.path.insert(0, "/work/main/tools")
import _engines
from tunecache.tvm_layer import frontend as fe
from tunecache.tvm_layer.loopnest import analyze
from tunecache.tvm_layer.tir import argument_bytes
from tunecache.tvm_layer.target import resolve_target
from tunecache.models import load_model_spec
for spec in sys.argv[1:]:
    module, inputs, _ = load_model_spec(spec)
    t = resolve_target(None)
    tasks = fe.extract_tasks(fe.prepare_for_tuning(fe.import_model(module, tuple(inputs)), t), t)
    rows = [(x.name, float(x.weight), float(analyze(x.mod).work), argument_bytes(x.mod)) for x in tasks]
    llc = 32 << 20
    tw = sum(w * x for _, w, x, _ in rows); tb = sum(w * b for _, w, _, b in rows)
    old = {n: max(w * x / tw, w * b / tb if b > llc else 0) for n, w, x, b in rows}
    est = {n: w * max(x, 4 * b) for n, w, x, b in rows}; te = sum(est.values())
    new = {n: e / te for n, e in est.items()}
    changed = [(n[:50], round(old[n], 4), round(new[n], 4)) for n in old if (old[n] < 0.02) != (new[n] < 0.02)]
    print(spec, len(rows), "tasks; minor old", sum(v < 0.02 for v in old.values()), "new", sum(v < 0.02 for v in new.values()), "changed:", changed, flush=True)
