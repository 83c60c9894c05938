"""Does a cost model pre-trained on the store help full search? Cold vs transfer, side by side.

Source records: ``--source-db`` (a store with records of this machine), or, by default, a full
search of ``--source-model``'s tasks of the chosen families into a temporary store
(``--source-trials`` per task). Target tasks: ``--model``'s tasks of the same families that are
not in the source. Each target task is searched twice per seed with the same budget, same seed
and no early stopping: with MetaSchedule's default (cold) XGBoost model, and with
:func:`tunecache.search.transfer.pretrained_cost_model`. The best program of each run is
re-measured head to head (interleaved); the JSON reports, per task, the best latency found after
each round of each arm, and the geometric mean of cold / transfer at the end (> 1: transfer finds
faster programs) and at half the budget. A PNG shows the mean normalized best-so-far curves.

    python tools/bench_transfer.py --model resnet18 --source-model resnet50 --families conv2d \\
        --trials 32 --seeds 0 1
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "tools"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))


def model_tasks(name: str, families: list[str], target: Any) -> list[Any]:
    from tunecache import zoo
    from tunecache.tvm_layer import frontend

    params = {"num_layers": 1} if name == "bert_base" else {}
    zm = zoo.get(name, **params)
    mod = frontend.prepare_for_tuning(frontend.import_model(zm.module, zm.example_inputs), target)
    return [t for t in frontend.extract_tasks(mod, target) if t.desc.family in families]


def search(task: Any, target: Any, trials: int, seed: int, cost_model: Any, builder: Any, runner: Any,
           work: str) -> tuple[Any, list[tuple[int, float | None]], float]:
    """One full search of ``task``; return its best schedule, best-so-far per round, seconds."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule, Trace

    from tunecache.search.full import FullSearchTask, tune_tasks
    from tunecache.store.records import decode_trace

    db = ms.database.MemoryDatabase()
    curve: list[tuple[int, float | None]] = []
    t0 = time.perf_counter()
    tune_tasks([FullSearchTask(task.name, task.mod)], target, db, trials_per_task=trials, seed=seed,
               early_stopping=None, work_dir=work, builder=builder, runner=runner, cost_model=cost_model,
               progress=lambda e: curve.append((e.task_trials, e.best_latency_s)))
    secs = time.perf_counter() - t0
    top = db.get_top_k(db.commit_workload(task.mod), 1)
    sch = None
    if top:
        sch = Schedule(task.mod)
        Trace.apply_json_to_schedule(decode_trace(top[0].trace.as_json()), sch)
    return sch, curve, secs


def _best_at(curve: list[tuple[int, float | None]], n: int) -> float | None:
    vals = [b for t, b in curve if t <= n and b is not None]
    return min(vals) if vals else None


def _gmean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--source-model", default="resnet50")
    ap.add_argument("--source-db", default=None, help="store URL with source records (skips source tuning)")
    ap.add_argument("--source-trials", type=int, default=32)
    ap.add_argument("--families", nargs="+", default=["conv2d"])
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--max-tasks", type=int, default=6, help="target tasks (heaviest first)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default="bench_transfer.json")
    ap.add_argument("--plot", default="bench_transfer.png")
    args = ap.parse_args(argv)

    from bench_reuse import head_to_head

    from tunecache.pipeline import search as search_tasks
    from tunecache.search.transfer import pretrained_cost_model
    from tunecache.store import open_store
    from tunecache.tvm_layer.measure import make_builder, make_runner
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    target = resolve_target(None)
    hw = hardware_key(target)
    work = tempfile.mkdtemp(prefix="bench-transfer-")
    start = time.perf_counter()
    if args.source_db:
        source = open_store(args.source_db, read_only=True)
        source_s = 0.0
    else:
        source = open_store(f"sqlite:///{work}/source.sqlite")
        t0 = time.perf_counter()
        search_tasks(model_tasks(args.source_model, args.families, target), target, source, hw,
                     trials_per_task=args.source_trials, reuse=False, transfer=False, seed=0,
                     work_dir=f"{work}/source")
        source_s = time.perf_counter() - t0
    known = {r.workload.shash for r in source.records(hardware=hw)}
    tasks = [t for t in model_tasks(args.model, args.families, target) if t.key.shash not in known]
    tasks = tasks[: args.max_tasks]
    print(f"{len(tasks)} target tasks: {[t.name for t in tasks]}", file=sys.stderr, flush=True)

    builder, runner = make_builder(), make_runner()
    rows, pretrain_s = [], []
    try:
        for t in tasks:
            for seed in args.seeds:
                picks, row = {}, {"task": t.name, "seed": seed}
                sch, curve, secs = search(t, target, args.trials, seed, None, builder, runner, f"{work}/cold")
                picks["cold"], row["cold"] = sch, {"curve": curve, "seconds": secs}
                t0 = time.perf_counter()
                model, info = pretrained_cost_model(source, hw, target, exclude=[t.key])
                pretrain_s.append(time.perf_counter() - t0)
                sch, curve, secs = search(t, target, args.trials, seed, model, builder, runner, f"{work}/transfer")
                picks["transfer"], row["transfer"] = sch, {"curve": curve, "seconds": secs,
                                                           "pretrained_on": info.__dict__}
                h2h = head_to_head(picks, t.mod, target, args.repeats)
                for arm in ("cold", "transfer"):
                    row[arm]["latency_s"] = h2h[arm]["latency_s"]
                    row[arm]["correct"] = h2h[arm]["correct"]
                c, x = row["cold"]["latency_s"], row["transfer"]["latency_s"]
                row["cold_over_transfer"] = c / x if c and x else None
                half = args.trials // 2
                hc, hx = _best_at(row["cold"]["curve"], half), _best_at(row["transfer"]["curve"], half)
                row["cold_over_transfer_at_half"] = hc / hx if hc and hx else None
                rows.append(row)
                print(f"{t.name} seed {seed}: cold/transfer {row['cold_over_transfer']}, at half "
                      f"{row['cold_over_transfer_at_half']}", file=sys.stderr, flush=True)
    finally:
        builder.close()
    doc = {
        "target": str(target), "model": args.model, "families": args.families, "trials": args.trials,
        "seeds": args.seeds, "source": args.source_db or f"{args.source_model} x {args.source_trials} trials",
        "source_seconds": source_s, "pretrain_seconds_median": statistics.median(pretrain_s) if pretrain_s else None,
        "gmean_cold_over_transfer": _gmean([r["cold_over_transfer"] for r in rows]),
        "gmean_cold_over_transfer_at_half": _gmean([r["cold_over_transfer_at_half"] for r in rows]),
        "transfer_wins": sum(1 for r in rows if (r["cold_over_transfer"] or 0) > 1.0),
        "runs": len(rows), "seconds": time.perf_counter() - start, "rows": rows,
    }
    Path(args.out).write_text(json.dumps(doc, indent=1))
    _plot(rows, args.trials, args.plot)
    print(json.dumps({k: v for k, v in doc.items() if k != "rows"}, indent=1))
    return 0


def _plot(rows: list[dict[str, Any]], trials: int, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = list(range(1, trials + 1))
    for arm, colour in (("cold", "tab:blue"), ("transfer", "tab:orange")):
        ys = []
        for n in xs:
            vals = []
            for r in rows:
                final = min(x for x in (r["cold"]["latency_s"], r["transfer"]["latency_s"]) if x) \
                    if (r["cold"]["latency_s"] or r["transfer"]["latency_s"]) else None
                b = _best_at(r[arm]["curve"], n)
                if b and final:
                    vals.append(final / b)
            ys.append(statistics.mean(vals) if vals else float("nan"))
        ax.plot(xs, ys, label=arm, color=colour)
    ax.set_xlabel("trials")
    ax.set_ylabel("best-so-far throughput (1 = best of both, re-measured)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
