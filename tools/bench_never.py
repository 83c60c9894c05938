"""End to end before any tuning: ``tune="never"`` on an empty store against PyTorch eager.

    python tools/bench_never.py [--models resnet18 bert_base:num_layers=2] [--rounds 5] [--json out.json]

For each zoo model (random weights, no downloads) three arms, compiled in this process:

* ``eager``: the PyTorch module itself;
* ``untuned``: ``tunecache.compile(tune="never")`` on an empty in-memory store with the predicted
  rung switched off, so every task gets TVM's default schedule (what an untuned ``tvm.compile``
  serves, and what tunecache served before issue 24);
* ``predicted``: the same compile with the rung on (``tunecache.search.predict``).

Latency is timed in interleaved rounds (one call of each arm per round, after a warm-up call),
the figure being the median of the rounds; compile time is one compile each. Prints JSON with
the CPU, the load average before and after, and per model the medians (ms), the ratios to eager
and the predicted/untuned compile-time ratio. Nothing is tuned or measured by tunecache.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def cpu_model() -> str:
    """The host CPU's model name, as the store's host fingerprint reads it."""
    from tunecache.tvm_layer.target import host_fingerprint

    return host_fingerprint().cpu_model or "unknown"


def compile_arm(module: Any, inputs: Any, predicted: bool) -> tuple[Any, float]:
    """One ``tune="never"`` compile into an empty store; the predicted rung on or off."""
    import tunecache
    from tunecache.search import predict

    real = predict.predict_task
    if not predicted:
        predict.predict_task = lambda *a, **k: "switched off for the untuned arm"  # type: ignore[assignment]
    try:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cm = tunecache.compile(module, example_inputs=inputs, store="memory", tune="never", progress=False,
                                   library_cache=False)
        return cm, time.perf_counter() - t0
    finally:
        predict.predict_task = real  # type: ignore[assignment]


def bench_model(spec: str, rounds: int) -> dict[str, Any]:
    import torch

    from tunecache.models import load_model_spec

    module, inputs, name = load_model_spec(spec)
    out: dict[str, Any] = {"model": spec}
    arms: dict[str, Any] = {}
    with torch.no_grad():
        arms["eager"] = lambda: module(*inputs)
        for arm, on in (("untuned", False), ("predicted", True)):
            cm, secs = compile_arm(module, inputs, on)
            out[f"{arm}_compile_s"] = round(secs, 2)
            out[f"{arm}_outcomes"] = {o: cm.report.count(o) for o in ("predicted", "fallback", "replayed")}
            arms[arm] = (lambda c: lambda: c(*inputs))(cm)
        ref = module(*inputs)
        ref0 = ref[0] if isinstance(ref, (tuple, list)) else ref
        for arm in ("untuned", "predicted"):
            got = arms[arm]()
            got0 = got[0] if isinstance(got, (tuple, list)) else got
            out[f"{arm}_max_abs_err"] = float((torch.as_tensor(got0) - ref0).abs().max())
        times: dict[str, list[float]] = {a: [] for a in arms}
        for fn in arms.values():
            fn()  # warm-up
        for _ in range(rounds):
            for a, fn in arms.items():
                t0 = time.perf_counter()
                fn()
                times[a].append(time.perf_counter() - t0)
    med = {a: statistics.median(v) * 1e3 for a, v in times.items()}
    out["ms"] = {a: round(v, 3) for a, v in med.items()}
    out["vs_eager"] = {a: round(med[a] / med["eager"], 2) for a in ("untuned", "predicted")}
    out["predicted_vs_untuned_compile"] = round(out["predicted_compile_s"] / out["untuned_compile_s"], 2)
    out["name"] = name
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["small_cnn", "resnet18", "mobilenet_v2",
                                                    "bert_base:num_layers=2"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    import torch

    doc: dict[str, Any] = {"cpu": cpu_model(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                           "load_before": os.getloadavg(), "rounds": a.rounds, "models": []}
    for spec in a.models:
        print(f"[bench_never] {spec}", file=sys.stderr, flush=True)
        try:
            doc["models"].append(bench_model(spec, a.rounds))
        except Exception as err:  # noqa: BLE001 - one model failing is recorded, the run goes on
            doc["models"].append({"model": spec, "error": f"{type(err).__name__}: {err}"})
        print(json.dumps(doc["models"][-1]), file=sys.stderr, flush=True)
    doc["load_after"] = os.getloadavg()
    text = json.dumps(doc, indent=2)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
