import os, sys, tempfile, time, warnings
WORK = os.environ.get("WORK", tempfile.mkdtemp())
warnings.simplefilter("ignore")
import torch
import tunecache
import tunecache.tvm_layer.measure as me
real = me.make_runner
m = torch.nn.Linear(512, 1000).eval(); x = torch.randn(1, 512)
for cold in [c == "1" for c in sys.argv[1].split(",")]:
    me.make_runner = lambda cold=cold, **k: real(**{**k, "cold": cold})
    db = os.path.join(WORK, f"dense_{cold}.db")
    if os.path.exists(db): os.remove(db)
    t = time.time()
    cm = tunecache.compile(m, example_inputs=(x,), store="sqlite:///" + db, trials_per_task=128, seed=0, progress=False, library_cache=False)
    print("cold" if cold else "warm", round(time.time() - t, 1), cm.report.summary(), [(t.name, t.trials, round(t.seconds, 1), t.latency_s) for t in cm.report.tasks], flush=True)
