"""Zero-measurement programs per task kind: TVM's default schedule, the predicted program
(``tunecache.search.predict``), random design-space samples, and PyTorch's op.

    python tools/bench_zero_trial.py [--kinds dense3072,dense768,bmm,conv,depthwise,softmax] [--rounds 5]
                                     [--random 16] [--tuned B] [--json out.json]

For every kind (a TE-built task of BERT's or ResNet's shapes) it builds: (a) the task with no
schedule (``tvm.compile`` of the plain TIR: what tunecache serves when it falls back),
(b) :func:`~tunecache.search.predict.predict_program`'s program, (c) ``--random`` programs
sampled from MetaSchedule's design space (its own random decisions, postprocessed, never
searched), (d) PyTorch's equivalent op and, with ``--tuned B``, (e) the best program of a
MetaSchedule full search of B trials on the task (tunecache's ``tune_tasks``: evolutionary
search, XGBoost cost model, no early stopping; its builder and runner), with how many trials
that search took to first measure a program as fast as the predicted one (the predicted
program measured by the same runner: "trials saved"). Each is timed with ``time_evaluator`` (PyTorch with
``perf_counter``), every variant once per round, rounds interleaved; the figure is the median of
the rounds. Nothing is tuned without ``--tuned``. Prints one JSON document (CPU, load average before and after, per
kind the medians in ms and the ratios).
"""

from __future__ import annotations

import argparse
import inspect
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

    def depthwise(c: int, hw: int, stride: int) -> Any:  # MobileNetV2's NCHW depthwise 3x3, pad 1
        x = te.placeholder((1, c, hw, hw), name="x")
        w = te.placeholder((c, 1, 3, 3), name="w")
        y = topi.nn.depthwise_conv2d_nchw(x, w, stride, 1, 1)
        return tvm.IRModule({"main": te.create_prim_func([x, w, y])})

    def conv1x1_nchw(c: int, hw: int, k: int) -> Any:  # MobileNetV2's NCHW pointwise conv
        x = te.placeholder((1, c, hw, hw), name="x")
        w = te.placeholder((k, c, 1, 1), name="w")
        y = topi.nn.conv2d_nchw(x, w, 1, 0, 1)
        return tvm.IRModule({"main": te.create_prim_func([x, w, y])})

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

    def t_depthwise(stride: int) -> Any:
        def make(x: Any, w: Any) -> Any:
            xt, wt = torch.from_numpy(x), torch.from_numpy(w)
            return lambda: F.conv2d(xt, wt, stride=stride, padding=1, groups=xt.shape[1])
        return make

    def t_conv_nchw(x: Any, w: Any) -> Any:
        xt, wt = torch.from_numpy(x), torch.from_numpy(w)
        return lambda: F.conv2d(xt, wt)

    return {
        "dense_128x768x3072": (matmul(128, 3072, 768), t_mm),
        "dense_128x768x768": (matmul(128, 768, 768), t_mm),
        "batch_matmul_12x128x64x128": (bmm(12, 128, 64, 128), t_mm),
        "conv2d_nhwc_1x56x56x64_3x3_64": (conv(), t_conv),
        "softmax_12x128x128": (softmax(), t_softmax),
        "depthwise_nchw_1x144x56x56_3x3": (depthwise(144, 56, 1), t_depthwise(1)),
        "depthwise_nchw_1x96x112x112_3x3_s2": (depthwise(96, 112, 2), t_depthwise(2)),
        "conv2d_nchw_1x24x56x56_1x1_144": (conv1x1_nchw(24, 56, 144), t_conv_nchw),
    }


#: Short names accepted by ``--kinds``.
ALIASES = {
    "dense3072": "dense_128x768x3072", "dense768": "dense_128x768x768", "bmm": "batch_matmul_12x128x64x128",
    "conv": "conv2d_nhwc_1x56x56x64_3x3_64", "softmax": "softmax_12x128x128",
    "depthwise": "depthwise_nchw_1x144x56x56_3x3", "depthwise_s2": "depthwise_nchw_1x96x112x112_3x3_s2",
    "conv1x1_nchw": "conv2d_nchw_1x24x56x56_1x1_144",
}


def random_samples(mod: Any, target: Any, count: int) -> list[Any]:
    """``count`` postprocessed programs with MetaSchedule's own random decisions (no search)."""
    from tunecache.search.narrow.align import Materializer, Skeleton
    from tunecache.store.records import decode_trace
    from tunecache.tvm_layer import ms

    meta = ms()
    mat = Materializer(mod, target, 0)
    out: list[Any] = []
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


def full_search(mod: Any, target: Any, trials: int, work_dir: str, builder: Any, runner: Any,
                seed: int = 0) -> dict[str, Any]:
    """A MetaSchedule full search of ``trials`` trials on ``mod`` (tunecache's ``tune_tasks``:
    evolutionary search, XGBoost cost model, no early stopping, not seeded with the predicted
    program) into a memory database.

    Returns the best program (``best_mod``), every record's median run time in commit order
    (``order_s``, ``inf`` for a failure), and the search's own figures.
    """
    from tunecache.search.full import FullSearchTask, tune_tasks
    from tunecache.tvm_layer import ms

    meta = ms()
    db = meta.database.MemoryDatabase()
    t0 = time.perf_counter()
    kwargs: dict[str, Any] = {}
    if "seed_predicted" in inspect.signature(tune_tasks).parameters:
        kwargs["seed_predicted"] = False  # a search from scratch: not seeded with the predicted program
    res = tune_tasks([FullSearchTask("task", mod)], target, db, trials_per_task=trials,
                     max_trials_global=trials, early_stopping=None, seed=seed, work_dir=work_dir,
                     builder=builder, runner=runner, **kwargs)[0]
    seconds = time.perf_counter() - t0
    order = []
    for rec in db.get_all_tuning_records():
        secs = [float(x) for x in (rec.run_secs or [])]
        order.append(statistics.median(secs) if secs and max(secs) < 1e9 else float("inf"))
    top = db.get_top_k(db.commit_workload(mod), 1)
    if not top:
        raise RuntimeError(f"the full search found no valid program ({res.trials} trials)")
    from tvm.s_tir import Schedule

    sch = Schedule(mod, seed=1)
    top[0].trace.apply_to_schedule(sch, remove_postproc=False)
    return {"best_mod": sch.mod, "order_s": order, "seconds": seconds, "trials": res.trials,
            "valid_trials": res.valid_trials, "best_latency_s": res.best_latency_s}


def trials_to_reach(order_s: list[float], latency_s: float) -> int | None:
    """Trials (1-based) after which the search had first measured a program at most
    ``latency_s``; ``None`` if it never did."""
    for i, v in enumerate(order_s):
        if v <= latency_s:
            return i + 1
    return None


def runner_latency(mod: Any, target: Any, builder: Any, runner: Any, times: int = 3) -> float | None:
    """Median latency of ``mod`` measured ``times`` times by the search's own builder and runner."""
    from tunecache.tvm_layer.measure import measure_mods

    got = [statistics.median(m.run_secs) for m in measure_mods([mod] * times, target, builder=builder,
                                                                runner=runner) if m.ok]
    return statistics.median(got) if got else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="", help="comma-separated subset of the kinds (default: all)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--random", type=int, default=16)
    ap.add_argument("--json", default="")
    ap.add_argument("--tuned", type=int, default=0, metavar="B",
                    help="also run a full search of B trials per kind and time its best program")
    ap.add_argument("--seed", type=int, default=0, help="seed of the full search")
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
        "rounds": args.rounds, "random_samples": args.random, "tuned_trials": args.tuned,
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]), "load_before": load_before, "kinds": {},
    }
    all_tasks = tasks(tvm)
    chosen = [ALIASES.get(k, k) for k in (args.kinds.split(",") if args.kinds else all_tasks)]
    builder = runner = None
    if args.tuned:
        from tunecache.tvm_layer.measure import make_builder, make_runner

        builder, runner = make_builder(), make_runner()
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
        if args.tuned:
            import tempfile

            entry["load_before_search"] = os.getloadavg()
            with tempfile.TemporaryDirectory(prefix="tc_zero_trial_") as work:
                full = full_search(mod, target, args.tuned, work, builder, runner, seed=args.seed)
            variants["tuned"] = tvm.compile(full["best_mod"], target=target)
            pred_runner = (runner_latency(pred.sch.mod, target, builder, runner)
                           if not isinstance(pred, str) else None)
            tuned_runner = runner_latency(full["best_mod"], target, builder, runner)
            finite = [v for v in full["order_s"] if v != float("inf")]
            entry["search"] = {
                "trials": full["trials"], "valid_trials": full["valid_trials"],
                "seconds": round(full["seconds"], 1), "load_after_search": os.getloadavg(),
                "search_best_ms": round(min(finite) * 1e3, 4) if finite else None,
                "runner_ms": {"predicted": None if pred_runner is None else round(pred_runner * 1e3, 4),
                              "tuned": None if tuned_runner is None else round(tuned_runner * 1e3, 4)},
                # the figure "trials saved": how many trials the search needed to first measure a
                # program as fast as the predicted one (same builder and runner)
                "trials_to_reach_predicted": (trials_to_reach(full["order_s"], pred_runner)
                                              if pred_runner is not None else None),
                "best_so_far_ms": [round(min(full["order_s"][:n]) * 1e3, 4) for n in (8, 16, 32, 64, 128, 256)
                                   if n <= len(full["order_s"]) and min(full["order_s"][:n]) != float("inf")],
            }

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
            "tuned": round(med["tuned"], 3) if "tuned" in med else None,
        }
        if "predicted" in med:
            p = med["predicted"]
            entry["predicted_vs"] = {
                "default": round(med["default"] / p, 1),
                "random_median": round(statistics.median(rand) / p, 2) if rand else None,
                "random_best": round(rand[0] / p, 2) if rand else None,
                "pytorch_ratio": round(p / med["pytorch"], 2),
                "rank_among_random": sum(r < p for r in rand),
                "tuned_ratio": round(p / med["tuned"], 2) if "tuned" in med else None,
            }
        doc["kinds"][kind] = entry
        print(f"{kind}: {entry['ms']}", file=sys.stderr, flush=True)
    if builder is not None:
        builder.close()
    doc["load_after"] = os.getloadavg()
    text = json.dumps(doc, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
