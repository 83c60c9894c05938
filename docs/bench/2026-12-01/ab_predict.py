"""Sessions 25-26: predicted programs under variants of constants, side by side.

    VARIANTS='{"base": {"SPLIT_WEIGHTS_ABOVE": 1e30}, "new": {"SPLIT_WEIGHTS_ABOVE": 2.0}}' ROUNDS=10 \
        python docs/bench/2026-12-01/ab_predict.py resnet18 [name,patterns]

For each tiled task of the zoo model (or those whose names contain a pattern) the task's
predicted program under each variant, measured in the same interleaved rounds
(``measure_side_by_side``; fastest sample and median, ms); tasks whose variants give one program
are said so; the last line is the weight-weighted sums of the tasks that differ. A constant is
set on ``tunecache.search.predict`` where it has one, else on ``tunecache.search.narrow.align``
(``INLINE_ALONG_VECTOR``, session 26). Logs beside it and in ``docs/bench/2026-12-02/``.
"""
import sys, itertools
from tunecache.models import load_model_spec
from tunecache.tvm_layer import frontend
from tunecache.tvm_layer.target import resolve_target, hardware_key
import tunecache.search.predict as P
import tunecache.search.narrow.align as A
from tunecache.search.remeasure import measure_side_by_side
from tunecache.tvm_layer.measure import make_builder, make_runner
model, inputs, name = load_model_spec(sys.argv[1])
target = resolve_target(None)
mod = frontend.prepare_for_tuning(frontend.import_model(model, tuple(inputs)), target)
tasks = frontend.extract_tasks(mod, target)
import json, os
variants = json.loads(os.environ["VARIANTS"]) if "VARIANTS" in os.environ else {"base": dict(MAX_VECTORS=2, SPLIT_WEIGHTS_ABOVE=1e18, MID_ROWS_SPLIT=False, MID_K_FULL=False),
            "new": dict(MAX_VECTORS=8, SPLIT_WEIGHTS_ABOVE=2.0, MID_ROWS_SPLIT=True, MID_K_FULL=True)}
b = make_builder(); r = make_runner()
pat = sys.argv[2].split(",") if len(sys.argv) > 2 else None
tot = {v: 0.0 for v in variants}; totm = {v: 0.0 for v in variants}
for t in tasks:
    if pat and not any(p in t.name for p in pat): continue
    if pat is None and "conv" not in t.name and "matmul" not in t.name and "dense" not in t.name: continue
    traces = {}
    for v, kw in variants.items():
        for k, val in kw.items(): setattr(P if hasattr(P, k) else A, k, val)
        tr = P.predicted_trace(t.mod, target)
        traces[v] = tr
    uniq = {}
    for v, tr in traces.items():
        uniq.setdefault(repr(tr), []).append(v)
    if len(uniq) == 1:
        print(f"{t.name[:50]:50s} w{t.weight} all variants the same", flush=True); continue
    keys = list(uniq)
    got = measure_side_by_side([(t.mod, eval_tr) for eval_tr in [traces[uniq[k][0]] for k in keys]], target, runner=r, builder=b, rounds=int(__import__("os").environ.get("ROUNDS", "8")))
    ms = {}; med = {}
    for k, g in zip(keys, got):
        import statistics
        m = min(g.samples) * 1e3 if not isinstance(g, str) else float("nan")
        md = statistics.median(g.samples) * 1e3 if not isinstance(g, str) else float("nan")
        for v in uniq[k]: ms[v] = m; med[v] = md
    for v in variants: tot[v] += ms[v] * t.weight; totm[v] += med[v] * t.weight
    print(f"{t.name[:50]:50s} w{t.weight} " + " ".join(f"{v} {ms[v]:.3f} (med {med[v]:.3f})" for v in variants), flush=True)
print("weighted sums (min)", {v: round(x, 3) for v, x in tot.items()}, "(median)", {v: round(x, 3) for v, x in totm.items()})
