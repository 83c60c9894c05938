import os, sys, time, warnings
warnings.simplefilter("ignore")
import torch, tunecache
import tunecache.tvm_layer.measure as me
real = me.make_builder
B = int(sys.argv[1])
m = torch.nn.Linear(512, 1000).eval(); x = torch.randn(1, 512)
for arm in sys.argv[2].split(","):
    me.make_builder = (lambda **k: real(**{**k, "slow_factor": None})) if arm == "uncapped" else real
    db = f"/tmp/s35/dense_{arm}.db"
    if os.path.exists(db): os.remove(db)
    t = time.time()
    cm = tunecache.compile(m, example_inputs=(x,), store="sqlite:///" + db, trials_per_task=B, seed=0, progress=False, library_cache=False)
    tk = cm.report.tasks[0]
    print(arm, "wall %.1f" % (time.time() - t), tk.trials, "search %.1f s" % tk.seconds, "best %.1f us" % (tk.latency_s * 1e6), flush=True)
