"""The engines a user would pick instead of tunecache, as arms of one latency benchmark (issue 21).

Used by ``tools/bench_compile.py --engines`` (zoo models) and ``--gemm`` (a 512^3 matmul against
numpy/OpenBLAS). An arm is a zero-argument call plus what it cost to set up:

* ``eager``: the PyTorch module under ``torch.no_grad``;
* ``torch.compile`` and ``torch.compile(max-autotune)``: Inductor (its C++ backend on a CPU); the
  first call (the compile) is timed as the arm's setup, a failure is recorded, not raised;
* ``ort``: ``bench_never.ort_arm`` (TorchScript ONNX export, opset 17, ``CPUExecutionProvider``,
  default session options, i.e. ``ORT_ENABLE_ALL``, and ``threads`` intra-op threads);
* ``tvm_untuned``: a plain ``tvm.compile`` of the imported Relax module with its weights bound,
  TVM's default schedules (no tunecache preparation), run on a Relax VM;
* ``tunecache@B``: ``tunecache.compile(trials_per_task=B)`` on a store kept in ``store_dir``
  (``warm_B.db``, one per budget, every model in it): the first run tunes, later runs hit. A
  sidecar ``warm_B.json`` keeps the tuning time of the run that tuned, so a reused store still
  reports what its programs cost. With ``--time-budget S`` each model's compile has a time
  budget (what its plan leaves tops the searched tasks up to B trials) and the store is
  ``warm_B_tS.db``.

Latency is timed in rounds: each round runs every arm in turn (the order rotated by one a round),
each after a ``gap`` sleep and one untimed settle call (a runtime's worker threads spin after a
call; on 2 cores a call right after another runtime's was 10-300x slower, see bench_never), then
``calls`` timed calls. The untuned arm gets one timed call in the first ``untuned_rounds`` rounds
only (no settle call: it is ~100x slower).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_never import (  # noqa: E402 - the sibling tool's arms and helpers
    _first,
    _procs_running,
    _rel_err,
    cpu_model,
    kernel_profile,
    load,
    ort_arm,
    wait_for_quiet,
)

COMPETITORS = ("ort", "torch.compile", "torch.compile(max-autotune)")
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile")

Call = Callable[[], Any]


# ---------------------------------------------------------------------------------------------
# The machine
# ---------------------------------------------------------------------------------------------


def set_threads(threads: int) -> None:
    """Every runtime's thread count, before numpy, torch or TVM start their pools."""
    for var in ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)


def machine(threads: int) -> dict[str, Any]:
    """The CPU (model name, ISA flags), cores, load and the thread counts each runtime reports."""
    import torch

    flags: set[str] = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    from importlib.metadata import version

    from tunecache.tvm_layer import load_tvm
    from tunecache.tvm_layer.target import physical_cores

    tvm = load_tvm()
    versions = {}
    for pkg in ("torch", "apache-tvm", "onnx", "onnxruntime", "numpy"):
        try:
            versions[pkg] = version(pkg)
        except Exception:  # noqa: BLE001 - a missing package is reported as such
            versions[pkg] = "missing"
    return {"cpu": cpu_model(), "llvm_cpu": str(tvm.target.codegen.llvm_get_system_cpu()),
            "isa": {f: f in flags for f in ISA_FLAGS}, "logical_cpus": os.cpu_count(),
            "physical_cores": physical_cores(), "threads": threads, "torch_threads": torch.get_num_threads(),
            "tvm_num_threads": os.environ.get("TVM_NUM_THREADS"), "openblas": openblas_info(),
            "versions": versions, "loadavg": [round(x, 2) for x in os.getloadavg()]}


def openblas_info() -> dict[str, Any]:
    """numpy's OpenBLAS: its configuration and thread count, read from the loaded library."""
    import ctypes

    import numpy  # noqa: F401 - loads the library

    with open("/proc/self/maps") as f:
        paths = sorted({ln.split()[-1] for ln in f if "openblas" in ln.lower() and ".so" in ln})
    for path in paths:
        lib = ctypes.CDLL(path)
        for prefix, suffix in (("scipy_", "64_"), ("", "64_"), ("", "")):
            threads = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}", None)
            config = getattr(lib, f"{prefix}openblas_get_config{suffix}", None)
            if threads is not None and config is not None:
                config.restype = ctypes.c_char_p
                return {"library": os.path.basename(path), "threads": int(threads()),
                        "config": config().decode(errors="replace")}
    return {"error": "no OpenBLAS library loaded by numpy"}


# ---------------------------------------------------------------------------------------------
# The arms
# ---------------------------------------------------------------------------------------------


def torch_compile_arm(module: Any, inputs: tuple[Any, ...], mode: str | None) -> tuple[Call | None, dict[str, Any]]:
    """``torch.compile(module, mode=mode)``, compiled by its first call (timed)."""
    import torch

    info: dict[str, Any] = {"mode": mode or "default"}
    try:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn = torch.compile(module, mode=mode)
            fn(*inputs)
        info["compile_s"] = round(time.perf_counter() - t0, 2)
    except Exception as err:  # noqa: BLE001 - Inductor fails in many ways; the arm records it
        info["error"] = f"{type(err).__name__}: {str(err).strip()[:600]}"
        return None, info
    return (lambda: fn(*inputs)), info


def untuned_tvm_arm(module: Any, inputs: tuple[Any, ...]) -> tuple[Call | None, dict[str, Any]]:
    """A plain ``tvm.compile`` (default schedules, weights bound) of the imported model, on a Relax VM."""
    from tunecache.tvm_layer import frontend, load_tvm
    from tunecache.tvm_layer.frontend.prepare import _bind
    from tunecache.tvm_layer.target import resolve_target

    tvm = load_tvm()
    info: dict[str, Any] = {}
    try:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            imported = frontend.import_model(module, inputs)
            info["import_s"] = round(time.perf_counter() - t0, 2)
            ex = tvm.compile(_bind(imported.mod, imported.params), target=resolve_target(None))
        info["compile_s"] = round(time.perf_counter() - t0, 2)
        vm = frontend.make_vm(ex)
    except Exception as err:  # noqa: BLE001 - recorded
        info["error"] = f"{type(err).__name__}: {str(err).strip()[:600]}"
        return None, info
    return (lambda: frontend.run(vm, imported, *inputs)), info


def _store_name(prefix: str, budget: int, time_budget_s: float | None = None) -> str:
    return f"{prefix}_{budget}" + ("" if time_budget_s is None else f"_t{time_budget_s:g}")


def tunecache_arm(module: Any, inputs: tuple[Any, ...], key: str, budget: int, store_dir: Path, prefix: str = "warm",
                  seed: int = 0, time_budget_s: float | None = None) -> tuple[Any, dict[str, Any]]:
    """``tunecache.compile`` at ``budget`` trials a task on ``store_dir/<prefix>_<budget>.db``: the
    compiled model (``None`` on failure) and what the compile did (tuned now or reused).

    ``time_budget_s``: the compile's time budget (its leftover after the plan tops the searched
    tasks up to ``budget`` trials each); the store is then ``<prefix>_<budget>_t<S>.db``, so
    stores tuned with and without one stay apart."""
    import tunecache

    name = _store_name(prefix, budget, time_budget_s)
    store, meta_path = store_dir / f"{name}.db", store_dir / f"{name}.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    mkey = f"{key} | {cpu_model()}"
    info: dict[str, Any] = {"store": str(store), "trials_per_task": budget, "time_budget_s": time_budget_s}
    try:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cm = tunecache.compile(module, example_inputs=inputs, store=str(store), trials_per_task=budget,
                                   seed=seed, progress=False, library_cache=store_dir / "libs",
                                   time_budget_s=time_budget_s)
        info["compile_s"] = round(time.perf_counter() - t0, 2)
    except Exception as err:  # noqa: BLE001 - recorded
        info["error"] = f"{type(err).__name__}: {str(err).strip()[:600]}"
        return None, info
    rep = cm.report
    info.update(tasks=len(rep.tasks), trials=rep.trials, summary=rep.summary(), build=rep.build,
                outcomes={o: rep.count(o) for o in ("hit", "tuned", "reused", "replayed", "predicted", "fallback")
                          if rep.count(o)},
                tuning_s_now=round(rep.seconds_tuning, 1), reused_store=rep.trials == 0)
    if rep.trials > 0:  # this run tuned: remember what it cost for the runs that reuse the store
        meta[mkey] = {"tuning_s": round(rep.seconds_tuning, 1), "compile_s": info["compile_s"],
                      "trials": rep.trials, "summary": rep.summary(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    info["tuned_by"] = meta.get(mkey)
    info["task_rows"] = [{"name": t.name, "family": t.family, "weight": t.weight, "outcome": t.outcome,
                          "trials": t.trials,
                          "latency_ms": None if t.latency_s is None else round(t.latency_s * 1e3, 4),
                          "shapes": [list(s) for s in t.shapes]} for t in rep.tasks]
    return cm, info


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


def alternate(calls: dict[str, Call], rounds: int, per_round: int, gap: float,
              limited: dict[str, int] | None = None,
              turn_quiet: float = 0.0) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """Seconds of each timed call of each arm, in rounds with the arm order rotated by one a
    round; ``limited`` arms (slow ones) get one timed call, no settle call, in their first N rounds.
    Also the runnable-thread count at the start of each timed call's turn (after the gap, before
    the settle call: 1 when nothing but this thread runs). ``turn_quiet`` > 0: before each turn,
    wait up to that long for one quiet poll (the machine may be shared)."""
    limited = limited or {}
    names = list(calls)
    times: dict[str, list[float]] = {n: [] for n in names}
    running: dict[str, list[int]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for arm in names[k:] + names[:k]:
            if arm in limited and r >= limited[arm]:
                continue
            fn = calls[arm]
            if turn_quiet > 0:
                wait_for_quiet(turn_quiet, polls=1)
            time.sleep(gap)
            procs = _procs_running()
            if arm not in limited:
                fn()
            for _ in range(1 if arm in limited else per_round):
                t0 = time.perf_counter()
                fn()
                times[arm].append(time.perf_counter() - t0)
                running[arm].append(procs)
    return times, running


def _stats(times: dict[str, list[float]], running: dict[str, list[int]]) -> dict[str, Any]:
    """Medians, minima, maxima (ms) and sample counts; ``ms_quiet``: the median of the calls whose
    turn started with no other runnable thread on the machine (arms with 3 such calls or more)."""
    quiet = {a: [t for t, p in zip(v, running[a], strict=True) if p <= 1] for a, v in times.items()}
    return {"ms": {a: round(statistics.median(v) * 1e3, 3) for a, v in times.items() if v},
            "min_ms": {a: round(min(v) * 1e3, 3) for a, v in times.items() if v},
            "max_ms": {a: round(max(v) * 1e3, 3) for a, v in times.items() if v},
            "samples": {a: len(v) for a, v in times.items()},
            "ms_quiet": {a: round(statistics.median(v) * 1e3, 3) for a, v in quiet.items() if len(v) >= 3},
            "quiet_samples": {a: len(v) for a, v in quiet.items()},
            "procs_running": {a: {"median": statistics.median(v), "max": max(v)} for a, v in running.items() if v}}


# ---------------------------------------------------------------------------------------------
# Profiles
# ---------------------------------------------------------------------------------------------


def ort_profile(onnx_path: str, inputs: tuple[Any, ...], threads: int, calls: int = 3) -> dict[str, Any]:
    """Milliseconds per ONNX operator type (and the heaviest nodes) over one call, averaged over
    ``calls`` calls after a warm-up, from ONNX Runtime's own profiler."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tmp, "ort")
        sess = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])
        feed = dict(zip([i.name for i in sess.get_inputs()], [x.numpy() for x in inputs], strict=False))
        for _ in range(calls + 1):
            sess.run(None, feed)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("cat") == "Session" and e["name"] == "model_run")
    windows = runs[1:]  # the first run is the warm-up
    by_op: dict[str, float] = {}
    by_node: dict[str, float] = {}
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        if not any(lo <= e["ts"] <= hi for lo, hi in windows):
            continue
        op = e.get("args", {}).get("op_name", "?")
        by_op[op] = by_op.get(op, 0.0) + e["dur"] / 1e3 / len(windows)
        node = f"{e['name'].removesuffix('_kernel_time')} ({op})"
        by_node[node] = by_node.get(node, 0.0) + e["dur"] / 1e3 / len(windows)
    total = sum(by_op.values())
    run_ms = statistics.median((hi - lo) / 1e3 for lo, hi in windows) if windows else None
    return {"run_ms": run_ms, "kernels_ms": round(total, 3),
            "by_op": {k: round(v, 3) for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])},
            "top_nodes": {k: round(v, 3) for k, v in sorted(by_node.items(), key=lambda kv: -kv[1])[:20]}}


def tunecache_profile(cm: Any, inputs: tuple[Any, ...], calls: int = 3) -> dict[str, Any]:
    """Milliseconds per kernel over one call (the Relax VM's instrument hook; the median of
    ``calls`` profiled calls) joined with the report's task (family, weight, stored latency), and
    totals per family."""
    runs = [kernel_profile(cm, inputs) for _ in range(calls)]
    per = {sym: statistics.median(r.get(sym, 0.0) for r in runs) for sym in runs[0]}
    by_task = {t.name: t for t in cm.report.tasks}
    total = sum(per.values())
    rows, by_family = [], {}
    for sym, ms in sorted(per.items(), key=lambda kv: -kv[1]):
        t = by_task.get(sym.removesuffix("_prepacked"))
        fam = t.family if t else "vm builtin"
        by_family[fam] = by_family.get(fam, 0.0) + ms
        rows.append({"kernel": sym, "ms": round(ms, 3), "family": fam, "weight": t.weight if t else None,
                     "outcome": t.outcome if t else None,
                     "stored_latency_ms": round(t.latency_s * 1e3, 4) if t and t.latency_s else None})
    return {"kernels_ms": round(total, 3), "calls": calls, "procs_running": _procs_running(),
            "by_family": {k: round(v, 3) for k, v in sorted(by_family.items(), key=lambda kv: -kv[1])},
            "top_kernels": rows[:25]}


# ---------------------------------------------------------------------------------------------
# One model
# ---------------------------------------------------------------------------------------------


def bench_model(spec: str, a: Any) -> dict[str, Any]:
    """Every arm on one zoo (or ``hf:``) model; see the module docstring."""
    import torch

    module, inputs, name = load(spec)
    out: dict[str, Any] = {"model": spec, "name": name,
                           "params_m": round(sum(p.numel() for p in module.parameters()) / 1e6, 2), "arms": {}}
    calls: dict[str, Call] = {}
    cms: dict[str, Any] = {}
    store_dir = Path(a.store_dir)
    store_dir.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), tempfile.TemporaryDirectory() as tmp:
        want = _first(module(*inputs))
        for budget in a.budgets:  # tuning first, with nothing else's threads awake
            arm = f"tunecache@{budget}"
            print(f"[engines] {spec}: {arm}", file=sys.stderr, flush=True)
            cm, out["arms"][arm] = tunecache_arm(module, inputs, spec, budget, store_dir,
                                                 time_budget_s=a.time_budget)
            if cm is not None:
                cms[arm] = cm
                calls[arm] = (lambda c: lambda: c(*inputs))(cm)
        calls["eager"] = lambda: module(*inputs)
        out["arms"]["eager"] = {}
        if not a.no_ort:
            fn, out["arms"]["ort"] = ort_arm(module, inputs, tmp, a.threads)
            if fn is not None:
                import onnxruntime as ort

                out["arms"]["ort"]["graph_optimization_level"] = str(ort.SessionOptions().graph_optimization_level)
                out["arms"]["ort"]["intra_op_num_threads"] = a.threads
                calls["ort"] = fn
        modes = [] if a.no_torch_compile else [None] + ([] if a.no_max_autotune else ["max-autotune"])
        for mode in modes:
            arm = "torch.compile" if mode is None else f"torch.compile({mode})"
            print(f"[engines] {spec}: {arm}", file=sys.stderr, flush=True)
            fn, out["arms"][arm] = torch_compile_arm(module, inputs, mode)
            if fn is not None:
                calls[arm] = fn
        if a.untuned_rounds > 0:
            print(f"[engines] {spec}: tvm_untuned", file=sys.stderr, flush=True)
            fn, out["arms"]["tvm_untuned"] = untuned_tvm_arm(module, inputs)
            if fn is not None:
                calls["tvm_untuned"] = fn
        out["rel_err"] = {}
        for arm, fn in list(calls.items()):
            if arm == "eager":
                continue
            try:
                t0 = time.perf_counter()
                got = _first(fn())
                out["arms"][arm]["first_call_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
                out["rel_err"][arm] = _rel_err(got, want)
            except Exception as err:  # noqa: BLE001 - an arm failing to run is recorded
                out["arms"][arm]["run_error"] = f"{type(err).__name__}: {str(err)[:300]}"
                del calls[arm]
        print(f"[engines] {spec}: timing {list(calls)}", file=sys.stderr, flush=True)
        if a.quiet_wait > 0:
            out["quiet_wait_s"] = wait_for_quiet(a.quiet_wait)
        out["load_before"] = [round(x, 2) for x in os.getloadavg()]
        limited = {"tvm_untuned": a.untuned_rounds} if "tvm_untuned" in calls else {}
        times, running = alternate(calls, a.rounds, a.calls, a.gap, limited, a.turn_quiet)
        out["load_after"] = [round(x, 2) for x in os.getloadavg()]
        out.update(_stats(times, running))
        ms = out["ms"]
        present = [c for c in COMPETITORS if c in ms]
        if present:
            best = min(present, key=lambda c: ms[c])
            out["best_competitor"] = best
            out["vs_best_competitor"] = {arm: round(v / ms[best], 3) for arm, v in ms.items()}
        out["vs_eager"] = {arm: round(v / ms["eager"], 3) for arm, v in ms.items()}
        if a.profile:
            out["profile"] = {}
            if "ort" in calls:
                try:
                    out["profile"]["ort"] = ort_profile(os.path.join(tmp, "model.onnx"), inputs, a.threads)
                except Exception as err:  # noqa: BLE001 - the profile is optional
                    out["profile"]["ort"] = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
            for arm, cm in cms.items():
                try:
                    out["profile"][arm] = tunecache_profile(cm, inputs)
                except Exception as err:  # noqa: BLE001 - as above
                    out["profile"][arm] = {"error": f"{type(err).__name__}: {str(err)[:300]}"}
    return out


# ---------------------------------------------------------------------------------------------
# GEMM 512^3 against numpy/OpenBLAS
# ---------------------------------------------------------------------------------------------


def _matmul_module() -> Any:
    import torch

    class MatMul(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a @ b

    return MatMul().eval()


def bench_gemm(a: Any) -> dict[str, Any]:
    """``n^3`` float32 matmul: tunecache at each GEMM budget (stores ``gemm_B.db`` kept) against
    numpy's ``a @ b`` (OpenBLAS) and ``torch.matmul``, same threads, alternating rounds."""
    import numpy as np
    import torch

    from tunecache.tvm_layer import load_tvm

    tvm = load_tvm()
    n = a.gemm_size
    gen = torch.Generator().manual_seed(0)
    ta, tb = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    na, nb = ta.numpy(), tb.numpy()
    want = na.astype("float64") @ nb.astype("float64")
    flop = 2.0 * n ** 3
    out: dict[str, Any] = {"size": n, "flop": flop, "openblas": openblas_info(), "arms": {}}
    store_dir = Path(a.store_dir)
    store_dir.mkdir(parents=True, exist_ok=True)
    calls: dict[str, Call] = {"numpy": lambda: na @ nb, "torch": lambda: torch.matmul(ta, tb)}
    dev = tvm.cpu(0)
    xa, xb = tvm.runtime.tensor(na, dev), tvm.runtime.tensor(nb, dev)
    with torch.no_grad():
        for budget in a.gemm_budgets:
            arm = f"tunecache@{budget}"
            print(f"[engines] gemm {n}: {arm}", file=sys.stderr, flush=True)
            cm, out["arms"][arm] = tunecache_arm(_matmul_module(), (ta, tb), f"gemm{n}", budget, store_dir,
                                                 prefix="gemm")
            if cm is None:
                continue
            from tunecache.tvm_layer import frontend

            vm = frontend.make_vm(cm.executable)
            calls[arm] = (lambda v: lambda: v["main"](xa, xb))(vm)
        out["rel_err"] = {}
        for arm, fn in calls.items():
            got = fn()
            if isinstance(got, torch.Tensor):
                got = got.numpy()
            elif not isinstance(got, np.ndarray):  # the Relax VM's outputs (an Array of one Tensor)
                got = got[0].numpy()
            out["rel_err"][arm] = float(np.abs(got - want).max() / np.abs(want).max())
        if a.quiet_wait > 0:
            out["quiet_wait_s"] = wait_for_quiet(a.quiet_wait)
        out["load_before"] = [round(x, 2) for x in os.getloadavg()]
        times, running = alternate(calls, a.rounds, a.calls * 4, a.gap, turn_quiet=a.turn_quiet)
        out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    out.update(_stats(times, running))
    out["gflops"] = {arm: round(flop / (ms / 1e3) / 1e9, 1) for arm, ms in out["ms"].items()}
    out["vs_numpy_throughput"] = {arm: round(out["ms"]["numpy"] / ms, 3) for arm, ms in out["ms"].items()}
    out["goal_tuned_ge_0.7x_numpy"] = {arm: v >= 0.7 for arm, v in out["vs_numpy_throughput"].items()
                                       if arm.startswith("tunecache")}
    return out


# ---------------------------------------------------------------------------------------------
# Chart
# ---------------------------------------------------------------------------------------------


def _color(arm: str) -> str:
    if arm.startswith("tunecache"):
        return "tab:blue"
    return {"eager": "tab:gray", "ort": "tab:green", "torch.compile": "tab:orange",
            "torch.compile(max-autotune)": "tab:brown", "tvm_untuned": "tab:red", "numpy": "tab:green",
            "torch": "tab:gray"}.get(arm, "tab:purple")


def plot_model(row: dict[str, Any], doc: dict[str, Any], path: str, unit: str = "ms") -> None:
    """A horizontal bar per arm (median latency, log scale, the figure on each bar)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ms = row["ms"]
    arms = sorted(ms, key=lambda k: ms[k])
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(arms) + 1.6))
    ax.barh(range(len(arms)), [ms[k] for k in arms], color=[_color(k) for k in arms])
    for i, k in enumerate(arms):
        label = f"{ms[k]:.3g} ms"
        if "vs_best_competitor" in row and k in row["vs_best_competitor"]:
            label += f"  ({row['vs_best_competitor'][k]:.2f}x best of ORT/torch.compile)"
        if "gflops" in row:
            label += f"  {row['gflops'][k]:.0f} GFLOP/s"
        ax.text(ms[k], i, " " + label, va="center", fontsize=8)
    ax.set_yticks(range(len(arms)))
    ax.set_yticklabels(arms, fontsize=9)
    ax.set_xscale("log")
    ax.set_xlim(min(ms.values()) * 0.5, max(ms.values()) * 30)
    ax.set_xlabel("median latency, batch 1 (ms, log)")
    m = doc["machine"]
    ax.set_title(f"{row.get('name', row.get('model', 'gemm'))}: {m['cpu']}, {m['threads']} threads, "
                 f"load {row['load_before'][0]:.1f} -> {row['load_after'][0]:.1f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_paths(path: str, names: list[str]) -> list[str]:
    """``out.png`` -> ``out_<name>.png`` per name (the name made file-safe); one name: ``path`` itself."""
    if len(names) == 1:
        return [path]
    p = Path(path)
    safe = ["".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in n) for n in names]
    return [str(p.with_name(f"{p.stem}_{s}{p.suffix}")) for s in safe]


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------

_COLUMNS = (("eager", "PyTorch eager"), ("torch.compile", "torch.compile"),
            ("torch.compile(max-autotune)", "torch.compile max-autotune"), ("ort", "ONNX Runtime"),
            ("tvm_untuned", "untuned TVM"))


def markdown_table(docs: list[dict[str, Any]], key: str = "ms") -> str:
    """One row per model of the given JSON documents: each arm's median (``key``: ``ms`` or
    ``ms_quiet``) and, for each arm, its ratio to the best of ONNX Runtime and torch.compile."""
    rows = [m for d in docs for m in d.get("models", []) if key in m]
    budgets = sorted({a for m in rows for a in m[key] if a.startswith("tunecache@")},
                     key=lambda a: int(a.split("@")[1]))
    cols = [*_COLUMNS, *((b, b.replace("@", " @") + " trials/task") for b in budgets)]
    lines = ["| model, batch 1 | " + " | ".join(c[1] for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for m in rows:
        ms = m[key]
        present = [c for c in COMPETITORS if c in ms]
        best = min(present, key=lambda c: ms[c]) if present else None
        cells = []
        for arm, _ in cols:
            if arm not in ms:
                cells.append("-")
                continue
            cell = f"{ms[arm]:,.0f} ms" if ms[arm] >= 1000 else f"{ms[arm]:.4g} ms"
            if best is not None and arm != best and (arm.startswith("tunecache") or arm == "eager"):
                cell += f" ({ms[arm] / ms[best]:.2f}x)"
            cells.append(f"**{cell}**" if arm == best else cell)
        lines.append(f"| {m.get('name', m['model'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
