import time, warnings, sys, re, json, collections
warnings.simplefilter("ignore")
import torch, tunecache
from tunecache.tvm_layer import measure as me
from tunecache.models import load_model_spec
REC = []
real_bae, real_mb = me._build_and_export, me.make_builder
def bae(mod, target, root):
    t = time.time()
    try: return real_bae(mod, target, root)
    finally:
        dt = time.time() - t
        try: name = mod.attrs["global_symbol"] if mod.attrs else ""
        except Exception: name = ""
        sc = mod.script()
        u = ",".join(re.findall(r'unroll_max_step[^0-9]*([0-9]+)', sc))
        REC.append((len(sc), round(dt, 2), u, sc if dt > 2 else None))
me._build_and_export = bae
me.make_builder = lambda **k: real_mb(**{**k, "max_workers": 0})
what = sys.argv[1]; B = int(sys.argv[2])
m, inputs, _ = load_model_spec(what); inputs = tuple(inputs)
t0 = time.time()
cm = tunecache.compile(m, example_inputs=inputs, store="sqlite:////tmp/s35/bta_%s.db" % what.replace(":", "_"), trials_per_task=B, seed=0, progress=False, library_cache=False)
print("wall", round(time.time() - t0, 1), cm.report.summary())
for t in cm.report.tasks: print("  %-50s %4d %6.1fs" % (t.name[:50], t.trials, t.seconds))
bts = sorted(r[1] for r in REC)
slow = [r for r in REC if r[1] > 2]
print(f"builds n={len(REC)} sum={sum(bts):.1f}s med={bts[len(bts)//2]:.2f} >2s: {len(slow)} ({sum(r[1] for r in slow):.1f}s)")
for i, r in enumerate(slow):
    open(f"/tmp/s35/bta_slow_{i}.py", "w").write(r[3]); print("   slow", r[:3])
