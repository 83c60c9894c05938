"""Variants of a stored conv program's tile decisions, measured side by side (cold runner)."""
import json, os, sys, statistics, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _stored import stored  # noqa: E402
from tunecache.search.narrow.align import Materializer, Skeleton
from tunecache.tvm_layer.measure import make_builder, make_runner, measure_mods
from tunecache.search.predict import predicted_trace
db, name = sys.argv[1], sys.argv[2]
variants = json.loads(sys.argv[3])  # list of {inst_index: decision}
mod, target, (tr,), (lat,) = stored(db, name)
sk = Skeleton(0, tr)
mat = Materializer(mod, target, 0)
print("stored", lat * 1e6, {i: sk.decisions[i] for i in sorted(sk.decisions)})
pt = predicted_trace(mod, target)
psk = Skeleton(0, pt) if pt is not None else None
if psk: print("predicted", {i: psk.decisions[i] for i in sorted(psk.decisions)})
cands = [("stored", mat.materialize(sk, dict(sk.decisions)))]
if psk: cands.append(("predicted", Materializer(mod, target, 0).materialize(psk, dict(psk.decisions))))
for v in variants:
    d = dict(sk.decisions); d.update({int(k): val for k, val in v.items()})
    cands.append((json.dumps(v), mat.materialize(sk, d)))
ok = [(n, cnd) for n, cnd in cands if cnd is not None]
for n, cnd in cands:
    if cnd is None: print("no materialize", n)
b, r = make_builder(), make_runner()
res = measure_mods([cnd.sch.mod for _, cnd in ok], target, builder=b, runner=r, rounds=int(sys.argv[4]) if len(sys.argv) > 4 else 5)
for (n, _), m in zip(ok, res):
    print(f"{n:60s}", f"{statistics.median(m.run_secs)*1e6:9.1f} us  min {min(m.run_secs)*1e6:9.1f}" if m.ok else m.error[:200])
