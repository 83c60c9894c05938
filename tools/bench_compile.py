"""Compile benchmark for zoo models: cold compile (tuning), warm compile (all hits) vs an untuned
`tvm.compile`, and compiled latency vs PyTorch eager, side by side in one run. Prints JSON.

    python tools/bench_compile.py [--models resnet18 bert_base] [--trials-per-task 8] [--repeats 50]

Warm compile is measured twice: with the library cache (the library the cold compile built is
loaded) and without it (code generated from the stored records, as after a teammate's tuning).

Goals (issue 3): warm compile <= 1.2x untuned tvm.compile; compiled latency <= 1.0x PyTorch
eager after tuning (8 trials per task is far from it; 32 reached it on resnet18 and bert_base
once convolutions ran in NHWC, docs/NOTES.md; the ratio is reported as is).

Engines (issue 21; docs/engines.md), what a user would pick instead of tunecache:

    python tools/bench_compile.py --engines [--models resnet18 bert_base] [--budgets 32 128]
        [--store-dir DIR] [--threads 2] [--rounds 5] [--calls 5] [--out out.json] [--plot out.png]
    python tools/bench_compile.py --gemm [--gemm-budgets 64 256] [--store-dir DIR] [--out gemm.json]

``--engines`` times PyTorch eager, ``torch.compile`` (default and max-autotune), ONNX Runtime,
an untuned ``tvm.compile`` and ``tunecache.compile`` at each budget (stores ``DIR/warm_B.db``
kept between runs: tuning is paid once), all on ``--threads`` threads, in alternating rounds,
outputs checked against eager, plus per-operator profiles of ONNX Runtime and tunecache.
``--gemm`` times a 512^3 float32 matmul tuned by tunecache (``DIR/gemm_B.db``) against numpy's
``a @ b`` (OpenBLAS) and ``torch.matmul``. The arms and their protocol: tools/_engines.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
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


def _alternating_times(a, b, repeats: int, rounds: int) -> tuple[list[float], list[float]]:
    a(), b()  # warm-up
    xs: dict[int, list[float]] = {0: [], 1: []}
    per_round = max(1, repeats // rounds)
    for r in range(rounds):
        for which in ((0, 1) if r % 2 == 0 else (1, 0)):
            fn = (a, b)[which]
            for _ in range(per_round):
                t0 = time.perf_counter()
                fn()
                xs[which].append(time.perf_counter() - t0)
    return xs[0], xs[1]


def bench_model(name: str, trials: int, repeats: int, params: dict, rounds: int = 3) -> dict:
    import torch

    import tunecache
    from tunecache import zoo
    from tunecache.tvm_layer import frontend

    zm = zoo.get(name, **params)
    with tempfile.TemporaryDirectory() as tmp:
        db, libs = str(Path(tmp) / "bench.db"), Path(tmp) / "libs"
        t0 = time.time()
        cold = tunecache.compile(zm.module, example_inputs=zm.example_inputs, store=db, trials_per_task=trials,
                                 seed=0, progress=False, library_cache=libs)
        cold_s = time.time() - t0
        # Warm compiles (library cache on: loads the library the cold compile built; off: code
        # generation from the stored records, e.g. records a teammate tuned) and an untuned
        # tvm.compile of the same model, alternated (order effects and machine noise hit all
        # alike); medians.
        warm_times, codegen_times, untuned_times = [], [], []
        for _ in range(rounds):
            t0 = time.time()
            warm = tunecache.compile(zm.module, example_inputs=zm.example_inputs, store=db, progress=False,
                                     library_cache=libs)
            warm_times.append(time.time() - t0)
            t0 = time.time()
            codegen = tunecache.compile(zm.module, example_inputs=zm.example_inputs, store=db, progress=False,
                                        library_cache=False)
            codegen_times.append(time.time() - t0)
            t0 = time.time()
            imported = frontend.import_model(zm.module, zm.example_inputs)
            ex = frontend.build(frontend.prepare_for_tuning(imported, None), None)
            untuned_times.append(time.time() - t0)
        # warm.report.build says whether the library was loaded or (weights too large to load
        # faster than code generation) rebuilt; it is in the JSON below.
        x = zm.example_inputs
        import numpy as np
        np.testing.assert_allclose(warm(*x).numpy(), codegen(*x).numpy(), rtol=1e-5, atol=1e-5)
    warm_s, untuned_s = statistics.median(warm_times), statistics.median(untuned_times)
    codegen_s = statistics.median(codegen_times)
    vm = frontend.make_vm(ex)
    with torch.no_grad():
        # PyTorch eager and the tuned model alternate in rounds (this machine's speed drifts by
        # 10-20% over minutes): medians of all runs of each.
        eager_runs, tuned_runs = _alternating_times(
            lambda: zm.module(*zm.example_inputs), lambda: warm(*zm.example_inputs), repeats, rounds=5
        )
        eager, tuned = statistics.median(eager_runs), statistics.median(tuned_runs)
        untuned = _median_time(lambda: frontend.run(vm, imported, *zm.example_inputs), max(3, repeats // 5))
    return {
        "model": name, "params": params, "tasks": len(cold.report.tasks), "trials_per_task": trials,
        "cold": {"seconds": cold_s, "trials": cold.report.trials, "summary": cold.report.summary()},
        "warm": {"seconds": warm_s, "trials": warm.report.trials, "summary": warm.report.summary(),
                 "build": warm.report.build},
        "warm_codegen": {"seconds": codegen_s, "build": codegen.report.build},
        "untuned_tvm_compile_s": untuned_s,
        "warm_compile_samples_s": warm_times, "warm_codegen_samples_s": codegen_times,
        "untuned_compile_samples_s": untuned_times,
        "warm_vs_untuned_compile": warm_s / untuned_s,
        "warm_codegen_vs_untuned_compile": codegen_s / untuned_s,
        "latency_ms": {"tunecache": tuned * 1e3, "untuned_tvm": untuned * 1e3, "pytorch_eager": eager * 1e3},
        "latency_runs_ms": {"tunecache": [round(x * 1e3, 3) for x in tuned_runs],
                            "pytorch_eager": [round(x * 1e3, 3) for x in eager_runs]},
        "latency_vs_pytorch": tuned / eager,
        "goals": {"warm_vs_untuned_compile<=1.2": warm_s / untuned_s <= 1.2,
                  "latency_vs_pytorch<=1.0": tuned / eager <= 1.0},
    }


def main() -> None:
    from tunecache.cli.common import seconds  # the CLI's --time-budget type

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["resnet18", "bert_base"],
                    help="zoo names; with --engines also zoo specs (bert_base:num_layers=2) or hf:NAME")
    ap.add_argument("--trials-per-task", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--bert-layers", type=int, default=12)
    eng = ap.add_argument_group("engines and GEMM (issue 21)")
    eng.add_argument("--engines", action="store_true", help="time the engines a user would pick instead")
    eng.add_argument("--gemm", action="store_true", help="a tuned GEMM against numpy/OpenBLAS")
    eng.add_argument("--budgets", nargs="+", type=int, default=[32], help="tunecache trials a task (--engines)")
    eng.add_argument("--time-budget", type=seconds, default=None, metavar="S",
                     help="tunecache's time budget a model (compile(time_budget_s=S): what the plan leaves "
                          "tops the searched tasks up to B trials; stores warm_B_tS.db)")
    eng.add_argument("--gemm-budgets", nargs="+", type=int, default=[64, 256])
    eng.add_argument("--gemm-size", type=int, default=512)
    eng.add_argument("--store-dir", default=str(Path.home() / ".cache" / "tunecache" / "engines"),
                     help="kept stores, one a budget (warm_B.db, gemm_B.db) and a library cache")
    eng.add_argument("--threads", type=int, default=0, help="threads of every engine (default: physical cores)")
    eng.add_argument("--rounds", type=int, default=5)
    eng.add_argument("--calls", type=int, default=5, help="timed calls per arm per round (GEMM: 4x)")
    eng.add_argument("--gap", type=float, default=0.2, help="sleep before each arm's turn in a round (s)")
    eng.add_argument("--untuned-rounds", type=int, default=1,
                     help="rounds in which the untuned TVM arm gets one timed call (0: skip the arm)")
    eng.add_argument("--quiet-wait", type=float, default=60.0,
                     help="wait up to this long for a quiet machine before timing (s)")
    eng.add_argument("--turn-quiet", type=float, default=0.0,
                     help="before each arm's turn in a round, wait up to this long for a quiet poll (s)")
    eng.add_argument("--no-ort", action="store_true")
    eng.add_argument("--no-torch-compile", action="store_true")
    eng.add_argument("--no-max-autotune", action="store_true")
    eng.add_argument("--no-profile", dest="profile", action="store_false")
    eng.add_argument("--out", default="", help="also write the JSON here")
    eng.add_argument("--plot", default="", help="bar chart PNG (one a model: out_<model>.png)")
    eng.add_argument("--table", nargs="+", default=[], metavar="JSON",
                     help="print the markdown table of these --engines JSON files (nothing is run)")
    a = ap.parse_args()
    if a.table:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import _engines

        docs = [json.loads(Path(p).read_text()) for p in a.table]
        for key in ("ms", "ms_quiet", "min_ms"):
            print(f"{key}:\n{_engines.markdown_table(docs, key)}\n")
        return
    if a.engines or a.gemm:
        engines_main(a)
        return
    out = []
    for m in a.models:
        params = {"num_layers": a.bert_layers} if m == "bert_base" else {}
        out.append(bench_model(m, a.trials_per_task, a.repeats, params))
        print(json.dumps(out[-1]), file=sys.stderr, flush=True)
    import torch

    print(json.dumps({"benchmark": "compile", "torch_threads": torch.get_num_threads(), "results": out}, indent=2))


def engines_main(a: argparse.Namespace) -> None:
    """``--engines`` / ``--gemm``: tools/_engines.py's arms, one JSON document."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from tunecache.tvm_layer.target import physical_cores

    a.threads = a.threads or physical_cores()
    import _engines  # noqa: E402 - after the path; imports neither numpy nor torch

    _engines.set_threads(a.threads)  # before numpy, torch and TVM start their pools
    import torch

    torch.set_num_threads(a.threads)
    warnings.filterwarnings("ignore")
    doc: dict = {"benchmark": "engines", "command": " ".join(["tools/bench_compile.py", *sys.argv[1:]]),
                 "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": _engines.machine(a.threads),
                 "rounds": a.rounds, "calls_per_round": a.calls, "gap_s": a.gap, "models": []}

    def write() -> None:
        text = json.dumps(doc, indent=2)
        if a.out:
            Path(a.out).write_text(text + "\n")

    if a.engines:
        # tvm's and tunecache's one-time initialisation before anything is timed
        from bench_never import compile_arm

        compile_arm(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval(), (torch.randn(2, 4),), True)
        for spec in a.models:
            t0 = time.time()
            try:
                row = _engines.bench_model(spec, a)
            except Exception as err:  # noqa: BLE001 - one model failing is recorded, the run goes on
                row = {"model": spec, "error": f"{type(err).__name__}: {str(err)[:500]}"}
            row["wall_s"] = round(time.time() - t0, 1)
            doc["models"].append(row)
            brief = {k: row.get(k) for k in ("model", "ms", "vs_best_competitor", "rel_err", "error", "wall_s")}
            print(json.dumps(brief), file=sys.stderr, flush=True)
            write()
    if a.gemm:
        doc["gemm"] = _engines.bench_gemm(a)
        print(json.dumps({k: doc["gemm"].get(k) for k in ("ms", "gflops", "vs_numpy_throughput")}), file=sys.stderr,
              flush=True)
    doc["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    write()
    print(json.dumps(doc, indent=2))
    if a.plot:
        rows = [r for r in doc["models"] if "ms" in r] + ([doc["gemm"]] if "gemm" in doc else [])
        names = [r.get("model", f"gemm{a.gemm_size}") for r in rows]
        for row, path in zip(rows, _engines.plot_paths(a.plot, names), strict=True):
            _engines.plot_model(row, doc, path)


if __name__ == "__main__":
    main()
