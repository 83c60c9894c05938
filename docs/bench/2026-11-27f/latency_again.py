"""Re-measure end-to-end latency of the arms a bench_newmodel run left in its work directory.

Each arm is compiled again from its own store with tune="never" (full, tunecache: every task a
hit; replay, predicted: the same deterministic replays and predictions), then measured in more
alternating rounds than the run did. Usage: latency_again.py SPEC WORKDIR ROUNDS
"""
import json, statistics, sys
sys.path.insert(0, "tools")
import bench_newmodel as b
import tunecache
from tunecache.models import load_model_spec

spec, work, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
model, inputs, _ = load_model_spec(spec)
inputs = tuple(inputs)
arms = {}
for arm in ("predicted", "replay", "tunecache", "full"):
    db = f"{work}/{b.slug(spec)}-{arm}.db"
    cm = tunecache.compile(model, example_inputs=inputs, store=b.url(__import__('pathlib').Path(db)), tune="never",
                           progress=False, library_cache=False)
    arms[arm] = cm
    print(arm, cm.report.summary(), flush=True)
res = b.measure_latency(arms, inputs, rounds)
full = res["full"]
out = {}
for arm, r in res.items():
    xs = r["rounds"]
    out[arm] = {"median_ms": statistics.median(xs) * 1e3, "min_ms": min(xs) * 1e3,
                "median_vs_full": statistics.median(xs) / statistics.median(full["rounds"]),
                "min_vs_full": min(xs) / min(full["rounds"]),
                "paired_median_vs_full": statistics.median(x / y for x, y in zip(xs, full["rounds"]))}
    print("%-10s median %.2f ms (%.3fx)  min %.2f ms (%.3fx)  paired %.3fx" % (
        arm, out[arm]["median_ms"], out[arm]["median_vs_full"], out[arm]["min_ms"], out[arm]["min_vs_full"],
        out[arm]["paired_median_vs_full"]))
print(json.dumps({"spec": spec, "rounds": rounds, "arms": out, "raw": {a: r["rounds"] for a, r in res.items()}}))
