"""Compile benchmark for zoo models: cold compile (tuning), warm compile (all hits) vs an untuned
`tvm.compile`, and compiled latency vs PyTorch eager, side by side in one run. Prints JSON.

    python tools/bench_compile.py [--models resnet18 bert_base] [--trials-per-task 8] [--repeats 20]

Goals (issue 3): warm compile <= 1.2x untuned tvm.compile; compiled latency <= 1.0x PyTorch
eager after tuning (needs far more trials than a quick run gives; the ratio is reported as is).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    xs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t0)
    return statistics.median(xs)


def bench_model(name: str, trials: int, repeats: int, params: dict, rounds: int = 3) -> dict:
    import torch

    import tunecache
    from tunecache import frontend, zoo

    zm = zoo.get(name, **params)
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "bench.db")
        t0 = time.time()
        cold = tunecache.compile(zm.module, example_inputs=zm.example_inputs, store=db, trials_per_task=trials,
                                 seed=0, progress=False)
        cold_s = time.time() - t0
        # Warm compile and untuned tvm.compile of the same model, alternated (order effects and
        # machine noise hit both alike); medians.
        warm_times, untuned_times = [], []
        for _ in range(rounds):
            t0 = time.time()
            warm = tunecache.compile(zm.module, example_inputs=zm.example_inputs, store=db, progress=False)
            warm_times.append(time.time() - t0)
            t0 = time.time()
            imported = frontend.import_model(zm.module, zm.example_inputs)
            ex = frontend.build(frontend.prepare_for_tuning(imported, None), None)
            untuned_times.append(time.time() - t0)
    warm_s, untuned_s = statistics.median(warm_times), statistics.median(untuned_times)
    vm = frontend.make_vm(ex)
    with torch.no_grad():
        eager = _median_time(lambda: zm.module(*zm.example_inputs), repeats)
        tuned = _median_time(lambda: warm(*zm.example_inputs), repeats)
        untuned = _median_time(lambda: frontend.run(vm, imported, *zm.example_inputs), max(3, repeats // 5))
        eager2 = _median_time(lambda: zm.module(*zm.example_inputs), repeats)  # interleaved re-check
    eager = min(eager, eager2)
    return {
        "model": name, "params": params, "tasks": len(cold.report.tasks), "trials_per_task": trials,
        "cold": {"seconds": cold_s, "trials": cold.report.trials, "summary": cold.report.summary()},
        "warm": {"seconds": warm_s, "trials": warm.report.trials, "summary": warm.report.summary()},
        "untuned_tvm_compile_s": untuned_s,
        "warm_compile_samples_s": warm_times, "untuned_compile_samples_s": untuned_times,
        "warm_vs_untuned_compile": warm_s / untuned_s,
        "latency_ms": {"tunecache": tuned * 1e3, "untuned_tvm": untuned * 1e3, "pytorch_eager": eager * 1e3},
        "latency_vs_pytorch": tuned / eager,
        "goals": {"warm_vs_untuned_compile<=1.2": warm_s / untuned_s <= 1.2, "latency_vs_pytorch<=1.0": tuned / eager <= 1.0},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models", nargs="+", default=["resnet18", "bert_base"])
    ap.add_argument("--trials-per-task", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--bert-layers", type=int, default=12)
    a = ap.parse_args()
    out = []
    for m in a.models:
        params = {"num_layers": a.bert_layers} if m == "bert_base" else {}
        out.append(bench_model(m, a.trials_per_task, a.repeats, params))
        print(json.dumps(out[-1]), file=sys.stderr, flush=True)
    import torch

    print(json.dumps({"benchmark": "compile", "torch_threads": torch.get_num_threads(), "results": out}, indent=2))


if __name__ == "__main__":
    main()
