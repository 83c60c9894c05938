"""Full search on a whole model: stock scheduling vs tunecache's engine, same wall-clock budget.

Runs in one process, one after the other, with the same warm builder (2 worker processes) and
runner, each into its own in-memory store:

- **stock**: ``tune_tasks(scheduler="gradient", early_stopping=None, trivial_once=False,
  max_trials_per_task=<global budget>)``: MetaSchedule's ``GradientBased`` task scheduler as
  stock ``tune_relax`` runs it (with
  tunecache's builder, runner and search sizing, without which stock MetaSchedule measures
  nothing here);
- **tunecache**: ``tune_tasks()`` defaults: trivial tasks once, tunecache's task picker, early
  stopping with reallocation, the budget checked before every round, for all but
  ``REMEASURE_SHARE`` of the budget; then, in what is left of the same budget, the top
  ``--remeasure-k`` records of every task re-measured, heaviest tasks first, as
  ``tunecache.compile`` does (so both arms get the same wall-clock time);
- **plan** (``--modes stock,tunecache,plan``): what ``tunecache.compile`` does with misses, all
  inside the budget: a reuse plan over the model's own tasks (epilogue variants of one conv
  share a sketch), full searches of the roots with this engine, narrowed searches for the rest
  (a quarter of the per-task trials), escalation, and re-measuring the bests (its own builder,
  started inside the budget).

Reported per mode: wall seconds, trials, trials per minute, the share of wall time spent in
scheduler rounds that measured nothing, the weighted latency sum(weight x best) over time
(also a PNG), per-task allocation (trials, seconds, why it stopped), the XGBoost update time
(count, total, mean: the cost model is wrapped to time it), and the end-to-end latency of the
model compiled with the store's best programs, measured (median of ``--e2e-runs`` runs).

``--xgb-check`` adds a short comparison of the XGBoost update time with the build pool (2
workers) vs an in-process builder, on the same tasks and budget.

Usage::

    python tools/bench_tune.py --model resnet18 --budget-s 300 --out /tmp/bench_tune
    python tools/bench_tune.py --model small_cnn --budget-s 60            # quick
    python tools/bench_tune.py --model resnet18 --budget-s 300 --modes stock,tunecache,plan
    python tools/bench_tune.py --model resnet18 --budget-s 240 --seeds 1,2,3,4,5   # a verdict

One run of the same arm varies by ~20% in end-to-end latency from seed to seed (evolutionary
search), more than the arms differ: ``--seeds`` runs every arm once per seed (alternating their
order), measures the compiled models of a seed together (interleaved rounds), and aggregates
medians and paired per-seed ratios under ``aggregate``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _timed_cost_model(inner: Any) -> Any:
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.cost_model import PyCostModel

    @derived_object
    class TimedCostModel(PyCostModel):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner
            self.update_s: list[float] = []
            self.predict_s: list[float] = []

        def load(self, path: str) -> None:
            self.inner.load(path)

        def save(self, path: str) -> None:
            self.inner.save(path)

        def update(self, context: Any, candidates: Any, results: Any) -> None:
            t = time.perf_counter()
            self.inner.update(context, candidates, results)
            self.update_s.append(time.perf_counter() - t)

        def predict(self, context: Any, candidates: Any) -> Any:
            t = time.perf_counter()
            out = self.inner.predict(context, candidates)
            self.predict_s.append(time.perf_counter() - t)
            return out

    return TimedCostModel()


def _stats(xs: list[float]) -> dict[str, Any]:
    return {
        "count": len(xs),
        "total_s": round(sum(xs), 3),
        "mean_s": round(statistics.fmean(xs), 4) if xs else None,
        "max_s": round(max(xs), 4) if xs else None,
    }


def _curve(events: list[Any], weights: dict[str, float]) -> list[tuple[float, float]]:
    """(elapsed s, sum of weight x best in ms) once every task that is ever measured has a best
    (a task no candidate of which runs, e.g. BERT's gather, never has one)."""
    measurable = {e.task_name for e in events if e.best_latency_s is not None}
    best: dict[str, float] = {}
    out = []
    for e in events:
        if e.best_latency_s is not None:
            best[e.task_name] = e.best_latency_s
        if measurable and len(best) == len(measurable):
            out.append((round(e.elapsed_s, 2), round(sum(weights[n] * best[n] for n in best) * 1e3, 4)))
    return out


def _e2e_ms(frontend: Any, mod: Any, tgt: Any, db: Any, imported: Any, inputs: Any, runs: int) -> float:
    ex = frontend.build(mod, tgt, database=db)
    vm = frontend.make_vm(ex)
    for _ in range(3):
        frontend.run(vm, imported, *inputs)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        frontend.run(vm, imported, *inputs)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def _tune(mode: str, tasks: list[Any], tgt: Any, args: argparse.Namespace, builder: Any, runner: Any,
          work: Path) -> dict[str, Any]:
    from tvm.s_tir import meta_schedule as ms

    from tunecache.pipeline import REMEASURE_SHARE
    from tunecache.search.execute import search_context
    from tunecache.search.full import FullSearchTask, tune_tasks
    from tunecache.search.remeasure import remeasure_bests
    from tunecache.store import Store
    from tunecache.tvm_layer.database import make_database
    from tunecache.tvm_layer.target import hardware_key
    from tunecache.values import TaskOutcome

    store = Store("memory")
    hw = hardware_key(tgt)
    db = make_database(store, hw, tgt)
    cost = _timed_cost_model(ms.cost_model.CostModel.create("xgb", num_tuning_cores=2))
    events: list[Any] = []
    kw: dict[str, Any] = {}
    if mode == "stock":
        # tune_relax's defaults: one task may take the whole global budget (max_trials_per_task
        # defaults to max_trials_global), no early stopping, trivial tasks searched like others.
        kw = dict(scheduler="gradient", early_stopping=None, trivial_once=False,
                  max_trials_per_task=args.trials_per_task * len(tasks))
    share = REMEASURE_SHARE if mode == "tunecache" and args.remeasure_k > 0 else 0.0
    t0 = time.perf_counter()
    results = tune_tasks(
        [FullSearchTask(t.name, t.mod, float(t.weight)) for t in tasks], tgt, db,
        trials_per_task=args.trials_per_task, time_budget_s=args.budget_s * (1 - share), seed=args.seed,
        work_dir=work / mode, progress=events.append, builder=builder, runner=runner,
        cost_model=cost, **kw,
    )  # fmt: skip
    remeasured = None
    if share:
        # What compile does after its searches, inside the same budget: re-measure the bests.
        before = {t.name: store.best_k(t.key, hw, 1) for t in tasks}
        t1 = time.perf_counter()
        done = [(t, TaskOutcome(t.name, t.name, t.key, "tuned", r.trials, latency_s=r.best_latency_s))
                for t, r in zip(tasks, results, strict=False) if r.best_latency_s is not None]
        with search_context(tgt, store, hw, full_trials=args.trials_per_task, reuse_trials=0, builder=builder,
                            runner=runner, work_dir=work / mode) as ctx:
            remeasure_bests(done, ctx, k=args.remeasure_k, deadline=time.time() + (t0 + args.budget_s - t1))
        after = {t.name: store.best_k(t.key, hw, 1) for t in tasks}
        remeasured = {
            "k": args.remeasure_k, "seconds": round(time.perf_counter() - t1, 1),
            "tasks_whose_best_changed": sum(bool(before[n] and after[n] and before[n][0].uid != after[n][0].uid)
                                            for n in before),
        }
    wall = time.perf_counter() - t0
    trials = sum(r.trials for r in results)
    idle = sum(r.idle_seconds for r in results)
    weights = {t.name: float(t.weight) for t in tasks}
    measured = [r for r in results if r.best_latency_s is not None]
    bests = {t.name: store.best_k(t.key, hw, 1) for t in tasks}
    return {
        "store": store, "hw": hw, "db": db, "results": results, "events": events,
        "summary": {
            "remeasure": remeasured,
            "weighted_latency_ms_remeasured": round(
                sum(weights[n] * b[0].latency_s for n, b in bests.items() if b) * 1e3, 3) if remeasured else None,
            "wall_s": round(wall, 1),
            "trials": trials,
            "valid_trials": sum(r.valid_trials for r in results),
            "trials_per_min": round(trials / wall * 60, 1),
            "rounds": sum(r.rounds for r in results),
            "empty_rounds": sum(r.empty_rounds for r in results),
            "idle_s": round(idle, 1),
            "idle_share": round(idle / wall, 3),
            "tasks_measured": len(measured),
            "tasks_unmeasured": [r.name for r in results if r.best_latency_s is None],
            "trivial_tasks": [r.name for r in results if r.trivial],
            "weighted_latency_ms_tuning": round(
                sum(weights[r.name] * r.best_latency_s for r in measured) * 1e3, 3
            ),
            "xgb_update": _stats(cost.update_s),
            "xgb_predict": _stats(cost.predict_s),
            "curve": _curve(events, weights),
            "tasks": [
                {"name": r.name, "weight": weights[r.name], "trials": r.trials,
                 "seconds": round(r.seconds, 1), "idle_s": round(r.idle_seconds, 1),
                 "rounds": r.rounds, "stop": r.stop_reason,
                 "best_ms": None if r.best_latency_s is None else round(r.best_latency_s * 1e3, 4)}
                for r in results
            ],  # fmt: skip
        },
    }


def _plan(tasks: list[Any], tgt: Any, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """``plan`` mode: what ``tunecache.compile`` runs on misses (reuse plan, narrowed searches,
    full searches, escalation, re-measuring the bests), all inside the same time budget."""
    from tunecache.pipeline import search
    from tunecache.reuse.graph import ROOT
    from tunecache.store import Store
    from tunecache.tvm_layer.database import make_database
    from tunecache.tvm_layer.target import hardware_key

    store = Store("memory")
    hw = hardware_key(tgt)
    events: list[Any] = []
    t0 = time.perf_counter()
    result = search(
        tasks, tgt, store, hw,
        trials_per_task=args.trials_per_task, reuse_trials=max(4, args.trials_per_task // 4), bridges=False,
        time_budget_s=args.budget_s, seed=args.seed, work_dir=work / "plan", progress=events.append,
    )  # fmt: skip
    mp, steps = result.plan, result.outcomes
    wall = time.perf_counter() - t0
    weights = {t.name: float(t.weight) for t in tasks}
    outcomes: dict[str, int] = {}
    for o in steps.values():
        kind = "escalated" if o.escalated else o.outcome
        outcomes[kind] = outcomes.get(kind, 0) + 1
    bests = {t.name: store.best_k(t.key, hw, 1) for t in tasks}
    trials = sum(o.trials for o in steps.values())
    return {
        "store": store, "hw": hw, "db": make_database(store, hw, tgt),
        "summary": {
            "wall_s": round(wall, 1),
            "trials": trials,
            "trials_per_min": round(trials / wall * 60, 1),
            "roots": sum(1 for s in mp.plan.steps if s.source == ROOT),
            "outcomes": outcomes,
            "tasks_unmeasured": [n for n, b in bests.items() if not b],
            "weighted_latency_ms_remeasured": round(
                sum(weights[n] * b[0].latency_s for n, b in bests.items() if b) * 1e3, 3),
            "curve": [],  # progress events come from full searches only: no whole-model curve
            "tasks": [
                {"name": o.name, "outcome": o.outcome, "escalated": o.escalated, "trials": o.trials,
                 "seconds": round(o.seconds, 1), "source": o.source, "note": o.note,
                 "best_ms": None if not bests.get(o.name) else round(bests[o.name][0].latency_s * 1e3, 4)}
                for o in steps.values()
            ],  # fmt: skip
        },
    }


def _xgb_check(tasks: list[Any], tgt: Any, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """XGBoost update time with the build pool vs an in-process builder (same tasks, budget)."""
    from tunecache.tvm_layer.measure import make_builder, make_runner

    out = {}
    runner = make_runner()
    for label, workers in (("pool_2_workers", 2), ("in_process", 0)):
        builder = make_builder(max_workers=workers, artifact_dir=work / f"xgb-{label}")
        sub = argparse.Namespace(**{**vars(args), "budget_s": args.xgb_budget_s})
        res = _tune("tunecache", tasks, tgt, sub, builder, runner, work / f"xgb-{label}")["summary"]
        builder.close()
        out[label] = {k: res[k] for k in ("wall_s", "trials", "trials_per_min", "xgb_update", "xgb_predict")}
    runner.pool.shutdown(wait=True)
    return out


def _vm_of(frontend: Any, mod: Any, tgt: Any, db: Any) -> Any:
    return frontend.make_vm(frontend.build(mod, tgt, database=db))


def _interleaved_e2e_ms(frontend: Any, vms: dict[str, Any], imported: Any, inputs: Any, runs: int,
                        rounds: int = 5) -> dict[str, float]:
    """Median end-to-end latency of each compiled model, measured in ``rounds`` alternating
    rounds (``runs // rounds`` runs each), so that machine drift hits every arm alike."""
    times: dict[str, list[float]] = {k: [] for k in vms}
    for vm in vms.values():
        for _ in range(3):
            frontend.run(vm, imported, *inputs)
    per_round = max(1, runs // rounds)
    for r in range(rounds):
        names = list(vms) if r % 2 == 0 else list(vms)[::-1]
        for name in names:
            for _ in range(per_round):
                t = time.perf_counter()
                frontend.run(vms[name], imported, *inputs)
                times[name].append(time.perf_counter() - t)
    return {k: round(statistics.median(v) * 1e3, 3) for k, v in times.items()}


def _run_seed(args: argparse.Namespace, modes: list[str], tasks: list[Any], tgt: Any, mod: Any, imported: Any,
              inputs: Any, builder: Any, runner: Any, work: Path) -> dict[str, Any]:
    """Every arm once with ``args.seed``; the compiled models are measured together at the end."""
    from tunecache.tvm_layer import frontend

    summaries: dict[str, Any] = {}
    vms: dict[str, Any] = {}
    for mode in modes:
        print(f"[bench_tune] seed {args.seed}, {mode}: tuning {len(tasks)} tasks for {args.budget_s} s",
              file=sys.stderr)
        wdir = work / f"seed{args.seed}"
        run = _plan(tasks, tgt, args, wdir) if mode == "plan" else _tune(mode, tasks, tgt, args, builder, runner, wdir)
        summary = run["summary"]
        vms[mode] = _vm_of(frontend, mod, tgt, run["db"])
        summaries[mode] = summary
        brief = {k: v for k, v in summary.items() if k not in ("curve", "tasks")}
        print(f"[bench_tune] seed {args.seed}, {mode}: {json.dumps(brief)}", file=sys.stderr)
    e2e = _interleaved_e2e_ms(frontend, vms, imported, inputs, args.e2e_runs)
    for mode, summary in summaries.items():
        summary["e2e_ms"] = e2e[mode]
    print(f"[bench_tune] seed {args.seed}: end-to-end ms {json.dumps(e2e)}", file=sys.stderr)
    return {"seed": args.seed, "order": modes, "e2e_ms": e2e, "modes": summaries}


def _aggregate(runs: list[dict[str, Any]], modes: list[str]) -> dict[str, Any]:
    """Medians over seeds per arm, and per-seed wins of tunecache over stock (paired by seed)."""
    def med(xs: list[float]) -> float | None:
        return round(statistics.median(xs), 3) if xs else None

    out: dict[str, Any] = {"seeds": len(runs), "e2e_ms": {}, "median": {}}
    labels = sorted({k for r in runs for k in r["e2e_ms"]})
    for label in labels:
        xs = [r["e2e_ms"][label] for r in runs if label in r["e2e_ms"]]
        out["e2e_ms"][label] = {"per_seed": xs, "median": med(xs), "min": min(xs), "max": max(xs)}
    for mode in modes:
        ms = [r["modes"][mode] for r in runs]
        out["median"][mode] = {
            k: med([m[k] for m in ms if m.get(k) is not None])
            for k in ("trials", "trials_per_min", "idle_share", "weighted_latency_ms_tuning",
                      "weighted_latency_ms_remeasured", "wall_s")
            if any(m.get(k) is not None for m in ms)
        }  # fmt: skip
    if "stock" in modes and "tunecache" in modes:
        pairs = [(r["e2e_ms"]["tunecache"], r["e2e_ms"]["stock"]) for r in runs]
        out["tunecache_vs_stock"] = {
            "ratio_per_seed": [round(a / b, 3) for a, b in pairs],
            "median_ratio": med([a / b for a, b in pairs]),
            "seeds_tunecache_lower": sum(a < b for a, b in pairs),
            "seeds": len(pairs),
        }
    return out


def _plot_seeds(runs: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    for mode, run in runs[0]["modes"].items():
        curve = run["curve"]
        if curve:
            ax.step([c[0] for c in curve], [c[1] for c in curve], where="post", marker=".", label=mode)
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("sum of weight x best latency (ms)")
    ax.set_yscale("log")
    ax.set_title(f"{title}, seed {runs[0]['seed']}")
    ax.legend()
    labels = sorted({k for r in runs for k in r["e2e_ms"]})
    for j, label in enumerate(labels):
        ys = [r["e2e_ms"][label] for r in runs if label in r["e2e_ms"]]
        bx.scatter([j] * len(ys), ys, label=label)
        bx.hlines(statistics.median(ys), j - 0.3, j + 0.3, colors="k")
    bx.set_xticks(range(len(labels)), labels, rotation=15)
    bx.set_ylabel("end-to-end latency (ms), one dot per seed")
    bx.set_title("measured together after each seed; bar = median")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--budget-s", type=float, default=300.0)
    p.add_argument("--trials-per-task", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--seeds", default=None,
                   help="comma-separated seeds: every arm once per seed, aggregated (medians, paired wins)")
    p.add_argument("--remeasure-k", type=int, default=3)
    p.add_argument("--e2e-runs", type=int, default=30)
    p.add_argument("--xgb-check", action="store_true")
    p.add_argument("--xgb-budget-s", type=float, default=60.0)
    p.add_argument("--modes", default="stock,tunecache")
    p.add_argument("--out", default=None, help="directory for bench_tune.json and bench_tune.png")
    args = p.parse_args(argv)

    from tunecache.tvm_layer import frontend, load_tvm
    from tunecache.tvm_layer.measure import make_builder, make_runner
    from tunecache.tvm_layer.target import resolve_target

    load_tvm("llvm")
    out_dir = Path(args.out or tempfile.mkdtemp(prefix="bench_tune-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench_tune-work-"))
    from tunecache.cli.compile import load_model_spec

    model, example_inputs, model_name = load_model_spec(args.model)  # e.g. bert_base:num_layers=2
    tgt = resolve_target(None)
    imported = frontend.import_model(model, example_inputs)
    mod = frontend.prepare_for_tuning(imported, tgt)
    tasks = frontend.extract_tasks(mod, tgt)
    inputs = [x.numpy() for x in example_inputs]

    builder = make_builder(max_workers=2, artifact_dir=work / "artifacts")
    runner = make_runner()
    report: dict[str, Any] = {
        "model": model_name, "target": str(tgt), "tasks": len(tasks),
        "task_weights": sum(t.weight for t in tasks), "budget_s": args.budget_s,
        "trials_per_task": args.trials_per_task, "seed": args.seed, "modes": {},
    }  # fmt: skip
    report["untuned_e2e_ms"] = round(_e2e_ms(frontend, mod, tgt, None, imported, inputs, 5), 3)
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else [args.seed]
    modes = args.modes.split(",")
    report["seeds"] = seeds
    report["runs"] = []
    for i, seed in enumerate(seeds):
        # Alternate the order of the arms from seed to seed: whatever drifts during a run
        # (machine load, thermals) does not always favour the same arm.
        order = modes if i % 2 == 0 else modes[::-1]
        run_args = argparse.Namespace(**{**vars(args), "seed": seed})
        report["runs"].append(_run_seed(run_args, order, tasks, tgt, mod, imported, inputs, builder, runner, work))
    report["modes"] = report["runs"][0]["modes"]  # the first seed's full detail (curves, tasks)
    report["aggregate"] = _aggregate(report["runs"], modes)
    print(f"[bench_tune] aggregate: {json.dumps(report['aggregate'])}", file=sys.stderr)
    builder.close()
    runner.pool.shutdown(wait=True)
    if args.xgb_check:
        report["xgb_check"] = _xgb_check(tasks, tgt, args, work)
    (out_dir / "bench_tune.json").write_text(json.dumps(report, indent=1))
    _plot_seeds(report["runs"], out_dir / "bench_tune.png", f"{model_name}, {args.budget_s:.0f} s each")
    print(json.dumps(report, indent=1))
    print(f"[bench_tune] wrote {out_dir}/bench_tune.json and bench_tune.png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
