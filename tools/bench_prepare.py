"""What a model rewrite of ``frontend.prepare`` buys: each model compiled with every rewrite and
with one rewrite switched off, side by side in one process.

    python tools/bench_prepare.py --models resnet18 gpt2_small:num_layers=2 \\
        --without pad_matmul_columns fast_gelu [--budget 32] [--rounds 7] [--json out.json]

Models are zoo specs (``tunecache.models.load_model_spec``). For each model the arms are ``all``
(the preparation as it ships) and ``no_<rewrite>`` for each ``--without`` rewrite that changes the
model's tasks (one that leaves them as they are is skipped and said so): each is compiled with
``tune="never"`` on an empty in-memory store (the zero-measurement rung: ``never``), and with
``--budget B`` > 0 also tuned at B trials per task on an empty SQLite store of its own (``tuned``;
its tuning wall time and trials are reported). Latency: alternating rounds after one settle call,
median (``bench_newmodel.measure_latency``); outputs are checked against PyTorch's. Switching a
rewrite off is done here by replacing it for the duration of the arm's compile (a benchmark
switch, not a user setting). Prints JSON (CPU, load, per model and arm: latency, ratio to
``all``, tasks, trials, tuning and compile seconds, output error).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_newmodel import machine, measure_latency, output_error  # noqa: E402

#: The rewrites this benchmark can switch off, and how: the function replaced by the identity,
#: or the target-kind set emptied.
SWITCHES = {
    "pad_matmul_columns": ("PAD_COLUMNS", frozenset()),
    "layout_agnostic_activations": ("_layout_agnostic_activations", lambda mod: mod),
    "fast_gelu": ("_fast_gelu", lambda mod: mod),
}


@contextlib.contextmanager
def without(rewrite: str | None) -> Iterator[None]:
    """Prepare models with ``rewrite`` switched off (``None``: as shipped) inside the block."""
    from tunecache.tvm_layer.frontend import prepare

    if rewrite is None:
        yield
        return
    attr, off = SWITCHES[rewrite]
    saved = getattr(prepare, attr)
    setattr(prepare, attr, off)
    try:
        yield
    finally:
        setattr(prepare, attr, saved)


def task_keys(model: Any, inputs: tuple[Any, ...]) -> set[str]:
    """The workload keys of the model's tasks as prepared now."""
    from tunecache.tvm_layer import frontend as fe

    prepared = fe.prepare_for_tuning(fe.import_model(model, inputs), None)
    return {f"{t.key.shash}:{t.key.mod_eq}" for t in fe.extract_tasks(prepared, None)}


def compile_arm(model: Any, inputs: tuple[Any, ...], *, tune: str, budget: int, store: Any,
                seed: int) -> tuple[Any, dict[str, Any]]:
    import tunecache

    t0 = time.perf_counter()
    cm = tunecache.compile(model, example_inputs=inputs, store=store, tune=tune, trials_per_task=max(1, budget),
                           seed=seed, progress=False, library_cache=False)
    rep = cm.report
    counts: dict[str, int] = {}
    for t in rep.tasks:
        counts[t.outcome] = counts.get(t.outcome, 0) + 1
    return cm, {"compile_s": time.perf_counter() - t0, "tuning_s": rep.seconds_tuning, "tasks": len(rep.tasks),
                "outcomes": counts, "trials": sum(t.trials for t in rep.tasks),
                "kernels": sorted({t.name for t in rep.tasks})}


def run_model(spec: str, rewrites: list[str], budget: int, rounds: int, seed: int, work: Path) -> dict[str, Any]:
    import torch

    from tunecache.models import load_model_spec

    model, inputs, _ = load_model_spec(spec)
    inputs = tuple(inputs or ())
    with torch.no_grad():
        ref = model(*inputs)
    res: dict[str, Any] = {"model": spec, "arms": {}, "skipped": {}}
    keys = {None: task_keys(model, inputs)}
    variants: list[str | None] = [None]
    for rw in rewrites:
        with without(rw):
            keys[rw] = task_keys(model, inputs)
        if keys[rw] == keys[None]:
            res["skipped"][rw] = "switching it off leaves the model's tasks as they are"
        else:
            variants.append(rw)
    compiled: dict[str, Any] = {}
    for rw in variants:
        name = "all" if rw is None else f"no_{rw}"
        modes = [("never", 0)] + ([("tuned", budget)] if budget > 0 else [])
        for mode, b in modes:
            arm = f"{name}/{mode}"
            store = "memory" if mode == "never" else str(work / f"{spec.replace(':', '_')}-{name}.db")
            print(f"[prepare] {spec}: {arm}", file=sys.stderr, flush=True)
            with without(rw):
                cm, info = compile_arm(model, inputs, tune="never" if mode == "never" else "auto", budget=b,
                                       store=store, seed=seed)
            with torch.no_grad():
                info["output_error"] = output_error(cm(*inputs), ref)
            compiled[arm] = cm
            res["arms"][arm] = info
    lat = measure_latency(compiled, inputs, rounds)
    for arm, m in lat.items():
        res["arms"][arm]["latency_ms"] = None if m.get("latency_s") is None else m["latency_s"] * 1e3
    for arm, info in res["arms"].items():
        mode = arm.split("/")[1]
        base = res["arms"].get(f"all/{mode}", {}).get("latency_ms")
        if base and info.get("latency_ms"):
            info["latency_vs_all"] = info["latency_ms"] / base
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["resnet18"], help="zoo specs, e.g. gpt2_small:num_layers=2")
    ap.add_argument("--without", nargs="+", default=list(SWITCHES), choices=sorted(SWITCHES),
                    help="rewrites to switch off one at a time (default: all of them)")
    ap.add_argument("--budget", type=int, default=0, help="also tune each arm at B trials per task (0: never only)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", type=Path, default=None, help="where the tuned arms' stores go (default: a temp dir)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_prepare-"))
    work.mkdir(parents=True, exist_ok=True)
    for p in work.glob("*.db*"):
        p.unlink()
    out: dict[str, Any] = {"machine": machine(), "budget": args.budget, "rounds": args.rounds, "models": []}
    for spec in args.models:
        try:
            out["models"].append(run_model(spec, args.without, args.budget, args.rounds, args.seed, work))
        except Exception as err:  # noqa: BLE001 - a model that fails is recorded; the others still run
            print(f"[prepare] {spec}: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
            out["models"].append({"model": spec, "error": f"{type(err).__name__}: {err}"})
        out["loadavg_after"] = list(os.getloadavg())
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
