"""Does re-ranking a store on the serving machine make its model faster? (session 42, #21)

    python rerank_model.py MODEL STORE WORKDIR [TOP ROUNDS]

Copies STORE twice (SQLite backup API) into WORKDIR; in the second copy, every task of MODEL
with 2 or more records has its TOP best records re-measured side by side in ROUNDS interleaved
rounds of 3 cold samples (``remeasure_best(force=True)``), which re-ranks them. Then MODEL is
compiled from each copy with ``tune="never"`` (every task a hit) and called round robin with
ONNX Runtime, one call each a round, NT threads for all (default 2: the cores). Prints JSON:
the re-rank (which tasks changed their best, their stored and new figures), and the latencies.
"""
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
import _engines  # noqa: E402

NT = int(os.environ.get("NT", "2"))
_engines.set_threads(NT)
import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402

import tunecache  # noqa: E402
from tunecache.search.remeasure import remeasure_best  # noqa: E402
from tunecache.store import open_store  # noqa: E402
from tunecache.tvm_layer.convert import workload_from_json  # noqa: E402
from tunecache.tvm_layer.frontend import building  # noqa: E402
from tunecache.tvm_layer.target import hardware_key, resolve_target  # noqa: E402

spec, src, work = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
top, rounds = (int(sys.argv[4]), int(sys.argv[5])) if len(sys.argv) > 5 else (12, 8)
ROUNDS = int(os.environ.get("CALLS", "60"))
work.mkdir(parents=True, exist_ok=True)
copies = {}
REUSE = os.environ.get("REUSE") == "1"  # time the copies a previous run re-ranked, without re-ranking
for arm in ("stored", "reranked"):
    dst = work / f"{arm}.db"
    copies[arm] = dst
    if REUSE:
        continue
    if dst.exists():
        dst.unlink()
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)

module, inputs, name = _engines.load(spec)


def compiled(path):
    return tunecache.compile(module, example_inputs=inputs, store=str(path), tune="never", seed=0, progress=False,
                             library_cache=False)


target = resolve_target(None)
hw = hardware_key(target)
cm = compiled(copies["stored"])
keys = {t.workload for t in cm.report.tasks if t.outcome == "hit"}
out = {"model": spec, "threads": NT, "ort_spin": os.environ.get("ORT_SPIN", "1"), "top": top, "rounds": rounds,
       "tasks": []}
t0 = time.time()
with open_store(str(copies["reranked"])) as store:
    for sw in [] if REUSE else store.workloads():
        if str(sw.key) not in keys:
            continue
        before = store.best_k(sw.key, hw, top)
        if len(before) < 2:
            continue
        mod = workload_from_json(sw.key, sw.mod_json).mod
        done = remeasure_best(store, hw, sw.key, mod, target, k=top, force=True, rounds=rounds, repeats=3 * rounds,
                              number=1)
        after = store.best_k(sw.key, hw, 1)[0]
        new = {d.uid: d.remeasurement.median_s for d in done if d.remeasurement is not None}
        out["tasks"].append({"name": sw.desc.name, "records": len(before), "changed": after.uid != before[0].uid,
                             "old_best_now_us": round(new.get(before[0].uid, float("nan")) * 1e6),
                             "new_best_now_us": round(after.latency_s * 1e6),
                             "old_best_stored_us": round(before[0].latency_s * 1e6)})
        print(json.dumps(out["tasks"][-1]), flush=True)
out["rerank_s"] = round(time.time() - t0, 1)

models = {arm: compiled(p) for arm, p in copies.items()}
tvm = __import__("tvm")
tin = [tvm.runtime.tensor(x.numpy()) for x in inputs]
calls = {arm: building.make_vm(m.executable)["main"] for arm, m in models.items()}
p = os.path.join(tempfile.mkdtemp(), "m.onnx")
torch.onnx.export(module, inputs, p, dynamo=False)
opts = ort.SessionOptions()
opts.intra_op_num_threads = NT
if os.environ.get("ORT_SPIN") == "0":  # ORT's pool spins after a run by default, beside the next arm's threads
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
sess = ort.InferenceSession(p, opts, providers=["CPUExecutionProvider"])
feed = {i.name: x.numpy() for i, x in zip(sess.get_inputs(), inputs, strict=True)}
calls["onnxruntime"] = lambda: sess.run(None, feed)
for arm in ("stored", "reranked"):
    f = calls[arm]
    calls[arm] = lambda f=f: f(*tin)
for _ in range(5):
    for f in calls.values():
        f()
times = {arm: [] for arm in calls}
order = list(calls)
for r in range(ROUNDS):
    for arm in order[r % len(order):] + order[:r % len(order)]:
        s = time.perf_counter()
        calls[arm]()
        times[arm].append((time.perf_counter() - s) * 1e3)
med = {arm: float(np.median(v)) for arm, v in times.items()}
paired = {arm: float(np.median(np.array(times[arm]) / np.array(times["onnxruntime"])))
          for arm in ("stored", "reranked")}
pct = {arm: [round(float(np.percentile(v, q)), 2) for q in (10, 25, 50, 75, 90)] for arm, v in times.items()}
out["percentiles_10_25_50_75_90_ms"] = pct
out["latency_ms"] = {arm: round(v, 2) for arm, v in med.items()}
out["p10_ms"] = {arm: round(float(np.percentile(v, 10)), 2) for arm, v in times.items()}
out["over_ort_median_of_round_ratios"] = {arm: round(v, 3) for arm, v in paired.items()}
out["reranked_over_stored_median_of_round_ratios"] = round(float(np.median(
    np.array(times["reranked"]) / np.array(times["stored"]))), 3)
print(json.dumps(out, indent=1))
