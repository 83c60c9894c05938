"""Zero-measurement programs per task kind: TVM's default schedule, the predicted program
(``tunecache.search.predict``), random design-space samples, and PyTorch's op.

    python tools/bench_zero_trial.py [--kinds dense3072,dense768,bmm,conv,softmax] [--rounds 5]
                                     [--random 16] [--json out.json]

For every kind (a TE-built task of BERT's or ResNet's shapes) it builds: (a) the task with no
schedule (``tvm.compile`` of the plain TIR: what tunecache serves when it falls back),
(b) :func:`~tunecache.search.predict.predict_program`'s program, (c) ``--random`` programs
sampled from MetaSchedule's design space (its own random decisions, postprocessed, never
searched), and (d) PyTorch's equivalent op. Each is timed with ``time_evaluator`` (PyTorch with
``perf_counter``), every variant once per round, rounds interleaved; the figure is the median of
the rounds. Nothing is tuned. Prints one JSON document (CPU, load average before and after, per
kind the medians in ms and the ratios).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def cpu_model() -> str:
    """The host CPU's model name, as the store's host fingerprint reads it."""
    from tunecache.tvm_layer.target import host_fingerprint

    return host_fingerprint().cpu_model or "unknown"


def tasks(tvm: Any) -> dict[str, tuple[Any, Any]]:
    """Kind -> (TIR module, PyTorch callable factory taking the numpy inputs)."""
    from tvm import te, topi

    def matmul(m: int, n: int, k: int) -> Any:
        a, b = te.placeholder((m, k), name="a"), te.placeholder((k, n), name="b")
        r = te.reduce_axis((0, k), name="r")
        c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")
        return tvm.IRModule({"main": te.create_prim_func([a, b, c])})

    def bmm(bs: int, m: int, k: int, n: int) -> Any:
        a, b = te.placeholder((bs, m, k), name="a"), te.placeholder((bs, k, n), name="b")
        r = te.reduce_axis((0, k), name="r")
        c = te.compute((bs, m, n), lambda z, i, j: te.sum(a[z, i, r] * b[z, r, j], axis=r), name="c")
        return tvm.IRModule({"main": te.create_prim_func([a, b, c])})

    def conv() -> Any:
        x = te.placeholder((1, 56, 56, 64), name="x")
        w = te.placeholder((3, 3, 64, 64), name="w")
        y = topi.nn.conv2d_nhwc(x, w, 1, 1, 1)
        return tvm.IRModule({"main": te.create_prim_func([x, w, y])})

    def softmax() -> Any:
        x = te.placeholder((12, 128, 128), name="x")
        return tvm.IRModule({"main": te.create_prim_func([x, topi.nn.softmax(x)])})

    import torch
    import torch.nn.functional as F

    def t_conv(x: Any, w: Any) -> Any:
        xt = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        wt = torch.from_numpy(w).permute(3, 2, 0, 1).contiguous()
        return lambda: F.conv2d(xt, wt, padding=1)

    def t_mm(a: Any, b: Any) -> Any:
        at, bt = torch.from_numpy(a), torch.from_numpy(b)
        return lambda: torch.matmul(at, bt)

    def t_softmax(x: Any) -> Any:
        xt = torch.from_numpy(x)
        return lambda: torch.softmax(xt, dim=-1)

    return {
        "dense_128x768x3072": (matmul(128, 3072, 768), t_mm),
        "dense_128x768x768": (matmul(128, 768, 768), t_mm),
        "batch_matmul_12x128x64x128": (bmm(12, 128, 64, 128), t_mm),
        "conv2d_nhwc_1x56x56x64_3x3_64": (conv(), t_conv),
        "softmax_12x128x128": (softmax(), t_softmax),
    }


def random_samples(mod: Any, target: Any, count: int) -> list[Any]:
    """``count`` postprocessed programs with MetaSchedule's own random decisions (no search)."""
    from tunecache.search.narrow.align import Materializer, Skeleton
    from tunecache.store.records import decode_trace
    from tunecache.tvm_layer import ms

    meta = ms()
    mat = Materializer(mod, target, 0)
    out = []
    seed = 1
    while len(out) < count and seed < 8 * count:
        ctx = meta.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                               task_name="random", rand_state=seed)
        spaces = list(ctx.generate_design_space())
        sk = Skeleton(0, decode_trace(spaces[seed % len(spaces)].trace.as_json()))
        cand = mat.materialize(sk, sk.decisions)
        if cand is not None:
            out.append(cand.sch.mod)
        seed += 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="", help="comma-separated subset of the kinds (default: all)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--random", type=int, default=16)
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    from tunecache.tvm_layer import load_tvm

    tvm = load_tvm()
    import torch

    from tunecache.search.predict import cache_sizes, predict_program
    from tunecache.tvm_layer.target import host_cpu_target, physical_cores

    torch.set_num_threads(physical_cores())
    target = host_cpu_target()
    dev = tvm.cpu()
    load_before = os.getloadavg()
    doc: dict[str, Any] = {
        "cpu": cpu_model(), "target": str(target), "physical_cores": physical_cores(),
        "tvm_num_threads": os.environ.get("TVM_NUM_THREADS"), "torch_threads": torch.get_num_threads(),
        "caches": vars(cache_sizes()) if hasattr(cache_sizes(), "__dict__") else str(cache_sizes()),
        "rounds": args.rounds, "random_samples": args.random, "load_before": load_before, "kinds": {},
    }
    all_tasks = tasks(tvm)
    chosen = [k for k in (args.kinds.split(",") if args.kinds else all_tasks)]
    rng = np.random.default_rng(0)
    for kind in chosen:
        mod, torch_fn = all_tasks[kind]
        params = mod["main"].params
        shapes = [[int(x) for x in mod["main"].buffer_map[p].shape] if hasattr(mod["main"], "buffer_map")
                  else [int(x) for x in p.shape] for p in params]
        inputs = [rng.standard_normal(s).astype("float32") for s in shapes[:-1]]
        out_shape = shapes[-1]

        t0 = time.perf_counter()
        pred = predict_program(mod, target)
        predict_s = time.perf_counter() - t0
        entry: dict[str, Any] = {"predict_seconds": round(predict_s, 3)}
        variants: dict[str, Any] = {"default": tvm.compile(mod, target=target)}
        if isinstance(pred, str):
            entry["predicted"] = pred
        else:
            entry["how"] = pred.how
            variants["predicted"] = tvm.compile(pred.sch.mod, target=target)
        t0 = time.perf_counter()
        rand_mods = random_samples(mod, target, args.random)
        for i, m in enumerate(rand_mods):
            variants[f"random{i}"] = tvm.compile(m, target=target)
        entry["random_build_seconds"] = round(time.perf_counter() - t0, 1)

        args_nd = [tvm.runtime.tensor(x, device=dev) for x in inputs]
        out_nd = tvm.runtime.tensor(np.zeros(out_shape, "float32"), device=dev)
        ref = torch_fn(*inputs)().numpy()
        errors = {}
        for name, ex in variants.items():
            ex["main"](*args_nd, out_nd)
            if ref.shape != tuple(out_shape):
                r = ref.transpose(0, 2, 3, 1)  # NCHW torch conv -> NHWC
            else:
                r = ref
            errors[name] = float(np.max(np.abs(out_nd.numpy() - r)))
        entry["max_abs_error"] = {k: v for k, v in errors.items() if not k.startswith("random")}
        entry["random_max_abs_error"] = max((v for k, v in errors.items() if k.startswith("random")), default=None)

        samples: dict[str, list[float]] = {name: [] for name in variants}
        samples["pytorch"] = []
        fn = torch_fn(*inputs)
        for _ in range(3):
            fn()
        evals = {}
        for name, ex in variants.items():
            ex["main"](*args_nd, out_nd)
            t0 = time.perf_counter()
            ex["main"](*args_nd, out_nd)
            once = time.perf_counter() - t0
            number = max(1, min(50, int(0.05 / max(once, 1e-6))))
            evals[name] = ex.mod.time_evaluator("main", dev, number=number, repeat=1)
        for _ in range(args.rounds):  # interleaved: every variant once a round
            for name, ev in evals.items():
                samples[name].append(float(ev(*args_nd, out_nd).mean))
            t0 = time.perf_counter()
            n = 0
            while time.perf_counter() - t0 < 0.05 or n < 3:
                fn()
                n += 1
            samples["pytorch"].append((time.perf_counter() - t0) / n)
        med = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
        rand = sorted(v for k, v in med.items() if k.startswith("random"))
        entry["ms"] = {
            "default": round(med["default"], 3),
            "predicted": round(med["predicted"], 3) if "predicted" in med else None,
            "random_median": round(statistics.median(rand), 3) if rand else None,
            "random_best": round(rand[0], 3) if rand else None,
            "random_valid": len(rand),
            "pytorch": round(med["pytorch"], 3),
        }
        if "predicted" in med:
            p = med["predicted"]
            entry["predicted_vs"] = {
                "default": round(med["default"] / p, 1),
                "random_median": round(statistics.median(rand) / p, 2) if rand else None,
                "random_best": round(rand[0] / p, 2) if rand else None,
                "pytorch_ratio": round(p / med["pytorch"], 2),
                "rank_among_random": sum(r < p for r in rand),
            }
        doc["kinds"][kind] = entry
        print(f"{kind}: {entry['ms']}", file=sys.stderr, flush=True)
    doc["load_after"] = os.getloadavg()
    text = json.dumps(doc, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
