"""Gradient search against MetaSchedule's evolutionary search on tasks with nothing to reuse (issue 28).

    python tools/bench_gradient.py --workload matmul:512,512,512 --workload conv2d:1,56,56,64,64,3,3,1,1 \
        --budget 256 --seeds 3 --json out.json [--plot out.png]
    python tools/bench_gradient.py --replot out.json --plot out.png
    python tools/bench_gradient.py --model resnet18 --model bert_base --trials-per-task 32 --json out.json

Workloads: ``matmul:M,N,K``, ``bmm:B,M,N,K`` and ``conv2d:N,H,W,CI,CO,KH,KW,STRIDE,PAD`` (NHWC data,
HWIO weights: how tunecache lays convolutions out on CPU). For every workload and seed, with the
same builder and runner:

* ``evolutionary``: tunecache's full search (MetaSchedule's evolutionary search, XGBoost cost
  model), not seeded with the predicted program, no early stopping;
* ``gradient``: :func:`tunecache.search.gradient.gradient_search` as ``compile(search="gradient")``
  runs it on an empty store: from the cost model that ships with the package;
* ``gradient_warm``: the same, the shipped model first refitted on the evolutionary search's
  records of the *other* workloads of this run and seed, and their best programs as stored
  neighbours to start from (a store warmed by other workloads);
* ``gradient_cold`` (only when named in ``--arms``): a fresh, untrained model (its first round
  measures random points).

The first trial of ``gradient`` and ``gradient_warm`` is the model's top prediction, measured (the
zero-measurement pick); it is reported beside the zero-measurement rung's program
(``tunecache.search.predict``, measured once here).

Reported per workload (medians over seeds): trials and wall seconds (model training included)
each search needed to come within 1/0.9 of the best latency any arm found for that seed
(``trials_to_90``, ``seconds_to_90``; budget + 1 where never), each arm's final best
(``best_ms``), the warm arm's first-round best against its final best, and every curve. Latencies
are the searches' own measurements. Prints JSON; ``--plot`` draws best latency against trials
(median and range over seeds) per workload.

``--model NAME`` (a ``tunecache.zoo`` name, repeatable) compiles whole models instead, what the
default search governs: ``tunecache.compile(search=...)`` from an empty store with each search at
``--trials-per-task``, per seed, then the two compiled models timed in alternating rounds.
Reported per model: tuning wall seconds, trials, and the median latency of each (key ``models``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

#: Within this fraction of the best latency found counts as reached (Felix's "90% of the best").
WITHIN = 0.9
ARMS = ("evolutionary", "gradient", "gradient_warm", "gradient_cold")
DEFAULT_ARMS = ("evolutionary", "gradient", "gradient_warm")


def workload(spec: str) -> Any:
    """The TIR module of ``KIND:DIMS``; ``SystemExit`` with the accepted forms otherwise."""
    from tunecache.tvm_layer import load_tvm

    tvm = load_tvm("llvm")
    from tvm import te, topi

    kind, _, dims_text = spec.partition(":")
    try:
        dims = [int(x) for x in dims_text.split(",") if x]
    except ValueError:
        dims = []
    forms = {"matmul": 3, "bmm": 4, "conv2d": 9}
    if kind not in forms or len(dims) != forms[kind] or min(dims, default=0) < 0:
        raise SystemExit(f"bad --workload {spec!r}: use matmul:M,N,K, bmm:B,M,N,K or "
                         "conv2d:N,H,W,CI,CO,KH,KW,STRIDE,PAD (positive integers)")
    if kind == "matmul":
        m, n, k = dims
        a, b = te.placeholder((m, k), name="a"), te.placeholder((k, n), name="b")
        r = te.reduce_axis((0, k), name="r")
        c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")
        return tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    if kind == "bmm":
        bs, m, n, k = dims
        a, b = te.placeholder((bs, m, k), name="a"), te.placeholder((bs, k, n), name="b")
        r = te.reduce_axis((0, k), name="r")
        c = te.compute((bs, m, n), lambda z, i, j: te.sum(a[z, i, r] * b[z, r, j], axis=r), name="c")
        return tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    n, h, w, ci, co, kh, kw, stride, pad = dims
    x = te.placeholder((n, h, w, ci), name="x")
    wt = te.placeholder((kh, kw, ci, co), name="w")
    y = topi.nn.conv2d_nhwc(x, wt, stride, pad, 1)
    return tvm.IRModule({"main": te.create_prim_func([x, wt, y])})


def evolutionary(mod: Any, target: Any, budget: int, seed: int, builder: Any, runner: Any) -> dict[str, Any]:
    """One full search: best-so-far curve, wall seconds at each trial, the records' traces and latencies."""
    from tunecache.search.full import FullSearchTask, tune_tasks
    from tunecache.tvm_layer import ms

    db = ms().database.MemoryDatabase()
    events: list[tuple[int, float]] = []
    with tempfile.TemporaryDirectory() as work:
        tune_tasks([FullSearchTask("task", mod)], target, db, trials_per_task=budget, max_trials_global=budget,
                   early_stopping=None, seed=seed, work_dir=work, builder=builder, runner=runner,
                   seed_predicted=False, progress=lambda p: events.append((p.total_trials, p.elapsed_s)))
    curve, rows, best = [], [], math.inf
    for rec in db.get_all_tuning_records():
        secs = [float(x) for x in (rec.run_secs or [])]
        if secs and max(secs) < 1e9:
            lat = statistics.median(secs)
            best = min(best, lat)
            rows.append((rec.trace.as_json(), lat))
        curve.append(best)
    return {"curve": curve, "seconds": _seconds_per_trial(events, len(curve)), "rows": rows}


def _seconds_per_trial(events: list[tuple[int, float]], n: int) -> list[float]:
    """Wall seconds after each trial: the end of the round that measured it."""
    out: list[float] = []
    for trials, elapsed in sorted(events):
        while len(out) < min(trials, n):
            out.append(elapsed)
    last = out[-1] if out else 0.0
    return out + [last] * (n - len(out))


def training_rows(mod_rows: list[tuple[Any, list[tuple[Any, float]]]], target: Any) -> tuple[Any, Any]:
    """Features and targets of measured traces of other workloads (a warm store's rows)."""
    import numpy as np

    from tunecache.search.gradient.training import trace_row

    cache: dict[Any, Any] = {}  # the block's reads, per workload and sketch
    rows = [r for mod, pairs in mod_rows for trace, lat in pairs
            if (r := trace_row(trace, lat, mod, cache)) is not None]
    return np.array([x for x, _ in rows]), np.array([y for _, y in rows])


def neighbours(mod_rows: list[tuple[Any, list[tuple[Any, float]]]]) -> list[Any]:
    """The best measured tiling of each other workload and sketch (a warm store's neighbours)."""
    from tunecache.search.gradient.starts import best_tilings
    from tunecache.search.gradient.training import trace_tiling

    cache: dict[Any, Any] = {}
    tilings = ((i, trace_tiling(trace, lat, mod, cache)) for i, (mod, pairs) in enumerate(mod_rows)
               for trace, lat in pairs)
    return list(best_tilings(((i, t.structure, t.write_kind), t) for i, t in tilings if t is not None))


def gradient(mod: Any, target: Any, budget: int, seed: int, builder: Any, runner: Any,
             rows: tuple[Any, Any] | None, shipped: bool = True, near: list[Any] | None = None,
             penalty: float = 1.0, cache_penalty: float = 0.0, diverse: float | None = None,
             own_share: float | None = None) -> dict[str, Any]:
    """One gradient search started as :func:`tunecache.search.gradient.training.start_model` starts
    it (``rows`` standing for the store's, ``near`` for its neighbours), or from a fresh model
    (``shipped=False``); ``penalty`` and ``cache_penalty`` weigh the CPU's limits (0: none);
    ``diverse`` is the round's share measured one per start, ``own_share`` the least share of the
    refit's weight on the task's own measurements (``None``: the search's defaults)."""
    from tunecache.search.gradient import gradient_search
    from tunecache.search.gradient.search import DIVERSE_SHARE, OWN_SHARE, host_limits
    from tunecache.search.gradient.training import start_model

    t0 = time.perf_counter()
    model = None
    if shipped:  # what compile(search="gradient") starts from, ``rows`` standing for the store's
        model, rows = start_model(rows=rows, seed=seed)
    pretrain_s = time.perf_counter() - t0
    events: list[tuple[int, float]] = []
    limits = dataclasses.replace(host_limits(target), weight=penalty, cache_weight=cache_penalty)
    res = gradient_search(mod, target, builder=builder, runner=runner, max_trials=budget, model=model,
                          store_rows=rows, seed=seed, progress=lambda p: events.append((p.total_trials, p.elapsed_s)),
                          neighbours=near or (), limits=limits,
                          diverse_share=DIVERSE_SHARE if diverse is None else diverse,
                          own_share=OWN_SHARE if own_share is None else own_share)
    secs = [s + pretrain_s for s in _seconds_per_trial(events, len(res.curve))]
    return {"curve": list(res.curve), "seconds": secs, "rounds": res.rounds, "cold_rounds": res.cold_rounds,
            "failed_replay": res.failed_replay, "model_seconds": round(res.model_seconds + pretrain_s, 2)}


def predicted_ms(mod: Any, target: Any, builder: Any, runner: Any) -> float | None:
    """The zero-measurement rung's program for ``mod``, measured once (ms)."""
    from tunecache.search.predict import predict_program
    from tunecache.tvm_layer.measure import measure_mods

    pred = predict_program(mod, target)
    if isinstance(pred, str):
        return None
    res = measure_mods([pred.sch.mod], target, builder=builder, runner=runner)
    return round(statistics.median(res[0].run_secs) * 1e3, 4) if res and res[0].ok else None


def reached(curve: list[float], goal: float) -> int | None:
    """Trials (1-based) after which ``curve`` is at most ``goal``."""
    return next((i + 1 for i, v in enumerate(curve) if v <= goal), None)


def plot(out: dict[str, Any], path: str) -> None:
    """Best latency against trials, median and range over seeds, one panel per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = list(out["workloads"])
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.8 * rows), squeeze=False)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for ax, name in zip(axes.flat, names, strict=False):
        for arm, curves in out["workloads"][name]["curves_ms"].items():
            n = min(len(c) for c in curves)
            if n == 0:
                continue
            arr = np.array([c[:n] for c in curves])
            x = np.arange(1, n + 1)
            ax.plot(x, np.median(arr, axis=0), label=arm)
            ax.fill_between(x, arr.min(axis=0), arr.max(axis=0), alpha=0.2)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("trials")
        ax.set_ylabel("best latency (ms)")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    fig.suptitle(f"gradient vs evolutionary search, {out['cpu']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def whole_model(name: str, trials: int, seed: int, rounds: int = 6, calls: int = 10) -> dict[str, Any]:
    """Compile zoo model ``name`` with each search from an empty store, then time both compiled
    models alternately (``_engines.alternate``: ``rounds`` rounds of ``calls`` calls an arm)."""
    import numpy as np
    import torch

    import tunecache
    from tunecache import zoo

    zm = zoo.get(name)
    out: dict[str, Any] = {"trials_per_task": trials, "seed": seed}
    compiled = {}
    with tempfile.TemporaryDirectory() as tmp:
        for search in ("evolutionary", "gradient"):
            t0 = time.perf_counter()
            cm = tunecache.compile(zm.module, example_inputs=zm.example_inputs, store=os.path.join(tmp, f"{search}.db"),
                                   trials_per_task=trials, seed=seed, progress=False, search=search,
                                   library_cache=False)
            out[search] = {"tune_s": round(time.perf_counter() - t0, 1), "trials": cm.report.trials,
                           "tasks": len(cm.report.tasks),
                           "gradient_tasks": sum("(gradient)" in (t.note or "") for t in cm.report.tasks)}
            compiled[search] = cm
            print(f"{name} seed {seed} {search}: {out[search]}", file=sys.stderr)
    x = zm.example_inputs
    np.testing.assert_allclose(compiled["gradient"](*x).numpy(), compiled["evolutionary"](*x).numpy(),
                               rtol=1e-3, atol=1e-3)
    from _engines import alternate  # the engines benchmark's timing protocol: rotated turns, a settle call

    with torch.no_grad():
        times, _ = alternate({s: (lambda cm=cm: cm(*x)) for s, cm in compiled.items()}, rounds, calls, gap=0.0)
    for s, ts in times.items():
        out[s]["latency_ms"] = round(statistics.median(ts) * 1e3, 4)
    out["gradient_over_evolutionary"] = {
        "latency": out["gradient"]["latency_ms"] / out["evolutionary"]["latency_ms"],
        "tune_s": out["gradient"]["tune_s"] / out["evolutionary"]["tune_s"]}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", action="append", default=[], help="KIND:DIMS (repeatable)")
    ap.add_argument("--budget", type=int, default=256, help="trials of each search")
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0..S-1")
    ap.add_argument("--arms", default=",".join(DEFAULT_ARMS), help=f"comma-separated subset of {','.join(ARMS)}")
    ap.add_argument("--penalty", type=float, default=1.0,
                    help="weight of the descent's vector-width penalty (0: none; an ablation)")
    ap.add_argument("--cache-penalty", type=float, default=0.0,
                    help="weight of the descent's L1/L2 working-set penalties (default 0: off, as in the library)")
    ap.add_argument("--diverse", type=float, default=None,
                    help="share of each gradient round measured one per start (default: the search's)")
    ap.add_argument("--own-share", type=float, default=None,
                    help="least share of the refit's weight on the task's own measurements (default: the search's)")
    ap.add_argument("--model", action="append", default=[],
                    help="a tunecache.zoo model compiled whole with each search (repeatable)")
    ap.add_argument("--trials-per-task", type=int, default=32, help="with --model: trials of each task")
    ap.add_argument("--json", default="")
    ap.add_argument("--plot", default="")
    ap.add_argument("--replot", default="", metavar="JSON", help="only draw --plot from this run's JSON")
    args = ap.parse_args()
    if args.replot:
        if not args.plot:
            ap.error("--replot needs --plot PNG")
        with open(args.replot, encoding="utf-8") as f:
            plot(json.load(f), args.plot)
        return 0
    if args.model:
        from tunecache.tvm_layer.target import host_fingerprint

        if args.trials_per_task < 1 or args.seeds < 1:
            ap.error("--trials-per-task and --seeds must be >= 1")
        doc: dict[str, Any] = {"cpu": host_fingerprint().cpu_model or "unknown", "load_before": os.getloadavg(),
                               "models": {m: [whole_model(m, args.trials_per_task, s) for s in range(args.seeds)]
                                          for m in args.model}}
        doc["load_after"] = os.getloadavg()
        text = json.dumps(doc, indent=1)
        print(text)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                f.write(text)
        return 0
    if not args.workload:
        ap.error("give at least one --workload KIND:DIMS (or --model NAME)")
    arms = [a for a in args.arms.split(",") if a]
    if not arms or set(arms) - set(ARMS):
        ap.error(f"--arms: choose from {','.join(ARMS)}")
    if args.budget < 1 or args.seeds < 1:
        ap.error("--budget and --seeds must be >= 1")

    from tunecache.tvm_layer import load_tvm
    from tunecache.tvm_layer.measure import make_builder, make_runner
    from tunecache.tvm_layer.target import host_fingerprint, resolve_target

    load_tvm("llvm")
    target = resolve_target(None)
    mods = {spec: workload(spec) for spec in args.workload}
    out: dict[str, Any] = {"cpu": host_fingerprint().cpu_model or "unknown", "target": str(target),
                           "budget": args.budget, "seeds": args.seeds, "within": WITHIN, "penalty": args.penalty,
                           "cache_penalty": args.cache_penalty, "diverse": args.diverse, "own_share": args.own_share,
                           "load_before": os.getloadavg(), "workloads": {}}
    builder, runner = make_builder(), make_runner()

    def fresh() -> Any:
        """A new runner for each search: MetaSchedule's LocalRunner keeps one worker process for
        every run, and its memory grew to 23 GB over ~10,000 candidates here (docs/NOTES.md)."""
        nonlocal runner
        runner.pool.shutdown(wait=True)
        runner = make_runner()
        return runner

    t0 = time.time()
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {s: {a: [] for a in arms} for s in mods}
    try:
        for seed in range(args.seeds):
            evo: dict[str, dict[str, Any]] = {}
            if "evolutionary" in arms or "gradient_warm" in arms:
                for spec, mod in mods.items():
                    evo[spec] = evolutionary(mod, target, args.budget, seed, builder, fresh())
                    if "evolutionary" in arms:
                        runs[spec]["evolutionary"].append(evo[spec])
                    print(f"{spec} seed {seed} evolutionary: {evo[spec]['curve'][-1] * 1e3:.4f} ms", file=sys.stderr)
            for spec, mod in mods.items():
                for arm in ("gradient", "gradient_cold"):
                    if arm in arms:
                        runs[spec][arm].append(gradient(mod, target, args.budget, seed, builder, fresh(), None,
                                                        shipped=arm == "gradient", penalty=args.penalty,
                                                        cache_penalty=args.cache_penalty, diverse=args.diverse,
                                                        own_share=args.own_share))
                        print(f"{spec} seed {seed} {arm}: {runs[spec][arm][-1]['curve'][-1] * 1e3:.4f} ms",
                              file=sys.stderr)
                if "gradient_warm" in arms:
                    others = [(mods[s], evo[s]["rows"]) for s in mods if s != spec]
                    rows = training_rows(others, target) if others else None
                    near = neighbours(others)
                    r = gradient(mod, target, args.budget, seed, builder, fresh(), rows, near=near,
                                 penalty=args.penalty, cache_penalty=args.cache_penalty,
                                 diverse=args.diverse, own_share=args.own_share)
                    r["store_rows"] = 0 if rows is None else len(rows[0])
                    r["neighbours"] = len(near)
                    runs[spec]["gradient_warm"].append(r)
                    print(f"{spec} seed {seed} gradient_warm ({r['store_rows']} rows): {r['curve'][-1] * 1e3:.4f} ms",
                          file=sys.stderr)
            if args.json:  # every finished seed's curves, in case the run is cut short
                with open(args.json + ".partial", "w", encoding="utf-8") as f:
                    json.dump({"seeds_done": seed + 1, "runs": {s: {a: [{k: v for k, v in r.items() if k != "rows"}
                                                                        for r in rs] for a, rs in per.items()}
                                                                for s, per in runs.items()}}, f)
        for spec, mod in mods.items():
            per = runs[spec]
            to90: dict[str, list[int]] = {a: [] for a in arms}
            s90: dict[str, list[float]] = {a: [] for a in arms}
            for i in range(args.seeds):
                best = min(per[a][i]["curve"][-1] for a in arms if per[a][i]["curve"])
                for a in arms:
                    k = reached(per[a][i]["curve"], best / WITHIN)
                    to90[a].append(k if k is not None else args.budget + 1)
                    s90[a].append(per[a][i]["seconds"][k - 1] if k is not None else math.inf)
            entry: dict[str, Any] = {
                "trials_to_90": {a: statistics.median(v) for a, v in to90.items()},
                "seconds_to_90": {a: statistics.median(v) for a, v in s90.items()},
                "best_ms": {a: statistics.median(r["curve"][-1] * 1e3 for r in per[a]) for a in arms},
                "trials_to_90_per_seed": to90,
                "curves_ms": {a: [[round(v * 1e3, 5) for v in r["curve"]] for r in per[a]] for a in arms},
                "predicted_program_ms": predicted_ms(mod, target, builder, runner),
            }
            for arm in ("gradient", "gradient_warm"):
                if arm in arms:  # the top prediction (first trial) and the first round's best (16 trials)
                    entry[f"{arm}_first_trial_ms"] = statistics.median(r["curve"][0] * 1e3 for r in per[arm])
                    entry[f"{arm}_first_round_over_final"] = statistics.median(
                        r["curve"][min(15, len(r["curve"]) - 1)] / r["curve"][-1] for r in per[arm])
            for a in arms:
                if a != "evolutionary":
                    entry.setdefault("search_details", {})[a] = [
                        {k: r[k] for k in ("rounds", "cold_rounds", "failed_replay", "model_seconds", "store_rows",
                                           "neighbours")
                         if k in r} for r in per[a]]
            out["workloads"][spec] = entry
    finally:
        builder.close()
        runner.pool.shutdown(wait=True)
    out["seconds"] = round(time.time() - t0, 1)
    out["load_after"] = os.getloadavg()
    text = json.dumps(out, indent=1, default=lambda v: None)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    if args.plot:
        plot(out, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
