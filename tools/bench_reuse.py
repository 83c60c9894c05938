"""Benchmark reuse methods side by side on this CPU: full search vs replay vs narrowed search.

For each (beta, alpha) pair: full search of beta (``--budget`` trials), then for alpha

- ``full``: full search with the same budget (the reference);
- ``zero_trial``: beta's best trace replayed on alpha (no measurement);
- ``top3``: beta's three best traces replayed, each measured once, the best kept;
- ``resample``: beta's best sketch re-sampled with random decisions (as many trials as the
  narrowed search used), the best kept;
- ``narrowed``: :func:`tunecache.search.narrow.narrowed_search` from beta's top 3.

Every final pick is then built in this process and re-measured head to head, interleaved
(``--repeats`` rounds, median), and checked against numpy. Output: a JSON report (stdout and
``--out``) and a PNG plot (``--plot``) of alpha's throughput normalized to full search.

``--sets`` adds ETO's operator-set evaluation (``tools/reuse_sets.py``): the BERT-base layer's
matmul tasks and resnet50's distinct conv2d tasks, full search vs tunecache's plan vs TopK,
zero-trial replay and sketch re-sampling, weighted by call counts (``--sets-plot``).

Examples::

    python tools/bench_reuse.py --budget 32 --pairs mm-small,conv-small --out reuse.json
    python tools/bench_reuse.py --pairs '' --sets bert,resnet50 --budget 48
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "tools"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from tunecache.tvm_layer import load_tvm  # noqa: E402

METHODS = ("full", "zero_trial", "top3", "resample", "narrowed")


# ---------------------------------------------------------------------------------------------
# Workloads


def matmul(m: int, n: int, k: int) -> Any:
    tvm = load_tvm("llvm")
    from tvm import te

    a = te.placeholder((m, k), name="A")
    b = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def batch_matmul(bs: int, m: int, n: int, k: int) -> Any:
    tvm = load_tvm("llvm")
    from tvm import te

    a = te.placeholder((bs, m, k), name="A")
    b = te.placeholder((bs, k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((bs, m, n), lambda x, i, j: te.sum(a[x, i, r] * b[x, r, j], axis=r), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def conv2d(cin: int, cout: int, hw: int) -> Any:
    tvm = load_tvm("llvm")
    from tvm import te, topi

    d = te.placeholder((1, cin, hw, hw), name="data")
    w = te.placeholder((cout, cin, 3, 3), name="weight")
    o = topi.nn.conv2d_nchw(d, w, 1, 1, 1)
    return tvm.IRModule({"main": te.create_prim_func([d, w, o])})


def depthwise(c: int, hw: int) -> Any:
    tvm = load_tvm("llvm")
    from tvm import te, topi

    d = te.placeholder((1, c, hw, hw), name="data")
    w = te.placeholder((c, 1, 3, 3), name="weight")
    o = topi.nn.depthwise_conv2d_nchw(d, w, 1, 1, 1)
    return tvm.IRModule({"main": te.create_prim_func([d, w, o])})


PAIRS: dict[str, tuple[str, Callable[[], Any], str, Callable[[], Any]]] = {
    "mm-small": ("mm256x256x256", lambda: matmul(256, 256, 256), "mm128x256x256", lambda: matmul(128, 256, 256)),
    "mm-large": ("mm256x256x256", lambda: matmul(256, 256, 256), "mm512x512x256", lambda: matmul(512, 512, 256)),
    "conv-small": ("conv64-64@28", lambda: conv2d(64, 64, 28), "conv32-32@28", lambda: conv2d(32, 32, 28)),
    "conv-wide": ("conv64-64@28", lambda: conv2d(64, 64, 28), "conv128-64@28", lambda: conv2d(128, 64, 28)),
    "bmm": ("bmm8x128x128x64", lambda: batch_matmul(8, 128, 128, 64), "bmm12x128x64x128",
            lambda: batch_matmul(12, 128, 64, 128)),
    "depthwise": ("dw64@56", lambda: depthwise(64, 56), "dw128@28", lambda: depthwise(128, 28)),
}


# ---------------------------------------------------------------------------------------------
# Methods


def _postprocs(mod: Any, target: Any) -> list[Any]:
    from tvm.s_tir import meta_schedule as ms

    ctx = ms.TuneContext(
        mod=mod, target=target,
        space_generator=ms.space_generator.PostOrderApply(sch_rules=[], postprocs="from-target",
                                                          mutator_probs={}),
    )
    return list(ctx.space_generator.postprocs)


def resample_sketch(trace: Any, mod: Any, target: Any, n: int, seed: int) -> list[Any]:
    """``n`` postprocessed schedules of beta's best sketch with fresh random decisions."""
    from tvm.s_tir.schedule import Schedule, Trace

    from tunecache.search.narrow import sketch_on
    from tunecache.store.records import decode_trace

    skeleton = sketch_on(trace, mod, target)
    if skeleton is None:
        return []
    posts = _postprocs(mod, target)
    out, seen, attempt = [], set(), 0
    while len(out) < n and attempt < 20 * n:
        attempt += 1
        try:
            sch = Schedule(mod, seed=(seed * 7919 + attempt) % (2**31 - 1) + 1)
            Trace.apply_json_to_schedule(skeleton, sch)
            key = json.dumps(decode_trace(sch.trace.as_json())[1])
            if key in seen:
                continue
            seen.add(key)
            sch.enter_postproc()
            if all(p.apply(sch) for p in posts):
                out.append(sch)
        except Exception:  # noqa: BLE001 - a failed sample is skipped
            continue
    return out


def measure_once(schs: list[Any], mod: Any, target: Any, builder: Any, runner: Any) -> list[float | None]:
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    built = builder.build([BuilderInput(s.mod, target) for s in schs])
    out: list[float | None] = [None] * len(schs)
    idx = [i for i, b in enumerate(built) if b.error_msg is None]
    futs = runner.run([
        RunnerInput(str(built[i].artifact_path), "cpu",
                    ms.arg_info.ArgInfo.from_entry_func(schs[i].mod, remove_preproc=True))
        for i in idx
    ])  # fmt: skip
    for i, fut in zip(idx, futs, strict=False):
        res = fut.result()
        if res.error_msg is None:
            out[i] = statistics.median(float(x) for x in res.run_secs)
    return out


def _inputs(mod: Any, seed: int = 0) -> tuple[list[Any], list[Any]]:
    import numpy as np
    tvm = load_tvm("llvm")

    func = next(f for _, f in mod.functions.items())
    rng = np.random.default_rng(seed)
    arrays = []
    for p in func.params:
        shape = [int(x) for x in p.shape]
        # positive, away from zero: fused batch-norm epilogues divide by an input
        arrays.append(rng.uniform(0.5, 1.5, shape).astype(str(p.dtype)))
    dev = tvm.cpu()
    return arrays, [tvm.runtime.tensor(a, dev) for a in arrays]


def head_to_head(picks: dict[str, Any], mod: Any, target: Any, repeats: int) -> dict[str, dict[str, Any]]:
    """Build each pick here, check it against the untuned reference, time interleaved."""
    import numpy as np
    tvm = load_tvm("llvm")

    dev = tvm.cpu()
    ref_rt = tvm.tirx.build(mod, target)
    arrays, ref_args = _inputs(mod)
    ref_rt["main"](*ref_args)
    expected = ref_args[-1].numpy()
    timers, out, same = {}, {}, {}
    first_of: dict[int, str] = {}
    for name, sch in picks.items():
        if sch is None:
            out[name] = {"latency_s": None, "correct": None}
            continue
        if id(sch) in first_of:  # the same program picked by two methods: measured once, shared
            same[name] = first_of[id(sch)]
            continue
        first_of[id(sch)] = name
        rt = tvm.tirx.build(sch.mod, target)
        _, args = _inputs(mod)
        rt["main"](*args)
        ok = bool(np.allclose(args[-1].numpy(), expected, rtol=1e-3, atol=1e-3))
        timers[name] = (rt.time_evaluator("main", dev, number=10, repeat=1), args)
        out[name] = {"latency_s": None, "correct": ok, "samples": []}
    for _ in range(repeats):
        for name, (f, args) in timers.items():
            out[name]["samples"].append(float(f(*args).mean))
    for name in timers:
        out[name]["latency_s"] = statistics.median(out[name]["samples"])
    for name, first in same.items():
        out[name] = out[first]
    return out


def run_pair(name: str, budget: int, narrow_trials: int, repeats: int, seed: int,
             builder: Any, runner: Any, target: Any, work: str) -> dict[str, Any]:
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule, Trace

    from tunecache.search.full import FullSearchTask, tune_tasks
    from tunecache.search.narrow import narrowed_search, replay_on
    from tunecache.store.records import decode_trace

    beta_name, beta_fn, alpha_name, alpha_fn = PAIRS[name]
    beta, alpha = beta_fn(), alpha_fn()
    report: dict[str, Any] = {"pair": name, "beta": beta_name, "alpha": alpha_name, "budget": budget}
    log = lambda msg: print(f"[{name}] {msg}", file=sys.stderr, flush=True)  # noqa: E731

    db_b = ms.database.MemoryDatabase()
    t = time.perf_counter()
    rb = tune_tasks([FullSearchTask("beta", beta)], target, db_b, trials_per_task=budget, seed=seed,
                    work_dir=f"{work}/{name}-beta", builder=builder, runner=runner)[0]
    report["beta_search"] = {"seconds": time.perf_counter() - t, "trials": rb.trials,
                             "best_latency_s": rb.best_latency_s}
    top = db_b.get_top_k(db_b.commit_workload(beta), 3)
    traces = [decode_trace(r.trace.as_json()) for r in top]
    log(f"beta tuned: {report['beta_search']}")

    methods: dict[str, dict[str, Any]] = {}
    picks: dict[str, Any] = {}

    db_a = ms.database.MemoryDatabase()
    t = time.perf_counter()
    ra = tune_tasks([FullSearchTask("alpha", alpha)], target, db_a, trials_per_task=budget,
                    seed=seed + 1, work_dir=f"{work}/{name}-alpha", builder=builder, runner=runner)[0]
    sec = time.perf_counter() - t
    best_a = db_a.get_top_k(db_a.commit_workload(alpha), 1)
    sch = None
    if best_a:
        sch = Schedule(alpha)
        Trace.apply_json_to_schedule(decode_trace(best_a[0].trace.as_json()), sch)
    picks["full"] = sch
    methods["full"] = {"seconds": sec, "trials": ra.trials, "search_latency_s": ra.best_latency_s}
    log(f"alpha full: {methods['full']}")

    t = time.perf_counter()
    picks["zero_trial"] = replay_on(traces[0], alpha, target)
    methods["zero_trial"] = {"seconds": time.perf_counter() - t, "trials": 0}

    t = time.perf_counter()
    replays = [s for s in (replay_on(tr, alpha, target) for tr in traces) if s is not None]
    lat = measure_once(replays, alpha, target, builder, runner) if replays else []
    ok = [(x, s) for x, s in zip(lat, replays, strict=False) if x is not None]
    picks["top3"] = min(ok, key=lambda p: p[0])[1] if ok else None
    methods["top3"] = {"seconds": time.perf_counter() - t, "trials": len(replays),
                       "search_latency_s": min(ok, key=lambda p: p[0])[0] if ok else None}

    t = time.perf_counter()
    res = narrowed_search(traces, alpha, target, builder=builder, runner=runner,
                          max_trials=narrow_trials, seed=seed)
    sch = None
    if res.best_trace is not None:
        sch = Schedule(alpha)
        Trace.apply_json_to_schedule(res.best_trace, sch)
    picks["narrowed"] = sch
    methods["narrowed"] = {
        "seconds": res.seconds, "trials": res.trials, "valid_trials": res.valid_trials,
        "search_latency_s": res.best_latency_s, "zero_trial_latency_s": res.zero_trial_latency_s,
        "failed": [res.failed_replay, res.failed_postproc, res.failed_build, res.failed_run],
        "rounds": [[h.phase, h.proposed, h.measured, h.best_latency_s, h.improved] for h in res.history],
    }
    log(f"narrowed: {methods['narrowed']}")

    t = time.perf_counter()
    n = max(1, res.trials)
    samples = resample_sketch(traces[0], alpha, target, n, seed)
    lat = measure_once(samples, alpha, target, builder, runner) if samples else []
    ok = [(x, s) for x, s in zip(lat, samples, strict=False) if x is not None]
    picks["resample"] = min(ok, key=lambda p: p[0])[1] if ok else None
    methods["resample"] = {"seconds": time.perf_counter() - t, "trials": len(samples),
                           "search_latency_s": min(ok, key=lambda p: p[0])[0] if ok else None}

    h2h = head_to_head(picks, alpha, target, repeats)
    full_lat = h2h["full"]["latency_s"]
    for m in METHODS:
        methods[m].update(latency_s=h2h[m]["latency_s"], correct=h2h[m]["correct"])
        lat_m = h2h[m]["latency_s"]
        methods[m]["throughput_vs_full"] = (full_lat / lat_m) if (full_lat and lat_m) else None
    report["methods"] = methods
    log("head to head: " + ", ".join(
        f"{m}={methods[m]['throughput_vs_full']:.2f}x" for m in METHODS
        if methods[m]["throughput_vs_full"] is not None))
    return report


def bar_pair(path: str | Path, labels: list[str], series: dict[str, tuple[list[float], list[float]]],
             ylabels: tuple[str, str], title: str, goal: float | None = None) -> None:
    """Two bar charts side by side: throughput vs full search (left) and search seconds (right, log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / len(series)
    xs = range(len(labels))
    for k, (name, (thr, sec)) in enumerate(series.items()):
        ax1.bar([x + k * width for x in xs], thr, width, label=name)
        ax2.bar([x + k * width for x in xs], sec, width, label=name)
    for ax in (ax1, ax2):
        ax.set_xticks([x + 0.4 - width / 2 for x in xs])
        ax.set_xticklabels(labels, fontsize=7)
    ax1.axhline(1.0, color="grey", lw=0.8)
    if goal is not None:
        ax1.axhline(goal, color="red", lw=0.6, ls="--")
    ax1.set_ylabel(ylabels[0])
    ax2.set_ylabel(ylabels[1])
    ax2.set_yscale("log")
    ax1.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot(reports: list[dict[str, Any]], path: str) -> None:
    series = {m: ([r["methods"][m]["throughput_vs_full"] or 0 for r in reports],
                  [r["methods"][m]["seconds"] for r in reports]) for m in METHODS}
    bar_pair(path, [f"{r['beta']}\n-> {r['alpha']}" for r in reports], series,
             ("alpha throughput / full search (higher is better)", "search seconds for alpha"),
             f"Reuse on this CPU (budget {reports[0]['budget']} trials)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=int, default=64, help="full-search trials for beta and alpha")
    ap.add_argument("--narrow-trials", type=int, default=32, help="max_trials of narrowed search")
    ap.add_argument("--pairs", default="mm-small,mm-large,conv-small,conv-wide,bmm",
                    help=f"comma-separated, from {sorted(PAIRS)}")
    ap.add_argument("--sets", default="", help="comma-separated operator sets, from ['bert', 'resnet50']")
    ap.add_argument("--reuse-trials", type=int, default=None,
                    help="narrowed-search budget of the operator-set plan (default budget // 4, >= 4)")
    ap.add_argument("--no-bridges", action="store_true", help="operator-set plan without bridge operators")
    ap.add_argument("--sets-plot", default="bench_reuse_sets.png")
    ap.add_argument("--repeats", type=int, default=7, help="interleaved re-measurement rounds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="bench_reuse.json")
    ap.add_argument("--plot", default="bench_reuse.png")
    args = ap.parse_args(argv)
    names = [p for p in args.pairs.split(",") if p]
    unknown = [p for p in names if p not in PAIRS]
    if unknown:
        ap.error(f"unknown pairs {unknown}; choose from {sorted(PAIRS)}")
    from reuse_sets import SETS, plot_sets, run_set

    sets = [x for x in args.sets.split(",") if x]
    if [x for x in sets if x not in SETS]:
        ap.error(f"unknown operator sets {sets}; choose from {sorted(SETS)}")

    tvm = load_tvm("llvm")
    from tunecache.tvm_layer.measure import make_builder, make_runner

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2,
                                "mcpu": tvm.target.codegen.llvm_get_system_cpu()})
    work = tempfile.mkdtemp(prefix="bench-reuse-")
    builder = make_builder(artifact_dir=f"{work}/artifacts")
    runner = make_runner()
    reports: list[dict[str, Any]] = []
    set_reports: list[dict[str, Any]] = []
    start = time.perf_counter()
    doc: dict[str, Any] = {"target": str(target), "budget": args.budget, "narrow_trials": args.narrow_trials,
                           "repeats": args.repeats, "pairs": reports, "sets": set_reports}
    try:
        for name in names:
            reports.append(run_pair(name, args.budget, args.narrow_trials, args.repeats, args.seed,
                                    builder, runner, target, work))
            Path(args.out).write_text(json.dumps(doc, indent=1))
    finally:
        builder.close()
    reuse_trials = args.reuse_trials or max(4, args.budget // 4)
    for name in sets:
        set_reports.append(run_set(name, args.budget, reuse_trials, args.repeats, args.seed, not args.no_bridges,
                                   work, measure_once, resample_sketch, head_to_head))
        Path(args.out).write_text(json.dumps(doc, indent=1))
    doc["seconds"] = time.perf_counter() - start
    Path(args.out).write_text(json.dumps(doc, indent=1))
    if reports:
        plot(reports, args.plot)
    if set_reports:
        plot_sets(set_reports, args.sets_plot)
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
