import sys
from tunecache.warming import collect_model_tasks
from tunecache.tvm_layer.target import resolve_target, hardware_key
from tunecache.store import open_store
spec, a, b = sys.argv[1:4]
tgt = resolve_target(None); hw = hardware_key(tgt); A = open_store(a); B = open_store(b)
ta = tb = 0
for t in collect_model_tasks([spec], tgt):
    ra, rb = A.best_k(t.key, hw, 1), B.best_k(t.key, hw, 1)
    la = ra[0].latency_s * 1e3 if ra else float("nan"); lb = rb[0].latency_s * 1e3 if rb else float("nan")
    ta += la * t.weight; tb += lb * t.weight
    print(f"{t.name[:45]:45s} x{t.weight}  {la:8.4f}  {lb:8.4f}  {lb/la:6.3f}")
print("weighted sum", round(ta, 3), round(tb, 3), round(tb / ta, 3))
