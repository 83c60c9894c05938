"""Measure random programs of many workloads and train the gradient search's cost model on them.

    python tools/train_gradient_model.py --samples 120 --rows rows.json --out model.json [--exclude SPEC ...]

For each workload of a fixed training set (matmuls, batch matmuls and NHWC convolutions of shapes
the benchmark's tasks are not), ``--samples`` random points of its multi-level tiling sketches
(random tiles, unroll bound and sketch) are replayed, built and measured once; each valid one is a
row ``(features, log(seconds / work))``. Rows are appended to ``--rows`` (JSON, so a second run
adds to the first), then a :class:`~tunecache.search.gradient.CostModel` is fitted on all of them
and written to ``--out`` (JSON). The package's shipped model
(``tunecache/search/gradient/models/``) is made with this tool; its figures are in
``docs/gradient.md``. ``--holdout SPEC`` keeps a workload out of the fit and prints the rank
correlation of the model's predictions on it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bench_gradient import workload  # noqa: E402

#: Shapes for training: none is a task of bench_gradient's goal set (matmul 512^3 and 1024^3,
#: 128x768x3072, ResNet-18's 3x3 convolutions).
TRAINING = [
    "matmul:64,64,64", "matmul:128,128,128", "matmul:256,256,256", "matmul:128,768,768", "matmul:196,768,768",
    "matmul:384,384,384", "matmul:1,1000,512", "matmul:256,1024,512", "matmul:2048,64,128",
    "matmul:96,256,1024", "matmul:768,768,64",
    "bmm:12,128,128,64", "bmm:12,64,64,128", "bmm:8,256,64,256",
    "conv2d:1,56,56,64,256,1,1,1,0", "conv2d:1,28,28,256,64,1,1,1,0", "conv2d:1,28,28,128,128,3,3,2,1",
    "conv2d:1,112,112,3,32,3,3,2,1", "conv2d:1,14,14,96,384,1,1,1,0", "conv2d:1,7,7,160,960,1,1,1,0",
    "conv2d:1,28,28,64,64,3,3,1,1", "conv2d:1,32,32,32,64,3,3,1,1",
]


def sample_rows(spec: str, mod: Any, target: Any, count: int, seed: int, builder: Any,
                runner: Any) -> list[dict[str, Any]]:
    """``count`` random programs of ``mod`` measured once: ``{spec, features, target}`` rows."""
    import random

    import numpy as np

    from tunecache.search.gradient import tiled_spaces
    from tunecache.search.narrow.align import Materializer
    from tunecache.tvm_layer.measure import measure_mods

    spaces = tiled_spaces(mod, target)
    if not spaces:
        return []
    mat = Materializer(mod, target, seed)
    rng = np.random.default_rng(seed)
    pyrng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    tries = 0
    while len(rows) < count and tries < 3 * count:
        batch = []
        while len(batch) < 16 and tries < 3 * count:
            tries += 1
            space = pyrng.choice(spaces)
            d = dict(space.skeleton.decisions)
            d.update(space.round(space.random_point(rng, scale=pyrng.choice([0.5, 1.5, 3.0]))))
            for idx, site in space.skeleton.sites.items():
                if site.kind == "categorical":
                    d[idx] = pyrng.randrange(site.n)
            cand = mat.materialize(space.skeleton, d)
            if cand is not None:
                batch.append((space, d, cand))
        res = measure_mods([c.sch.mod for _, _, c in batch], target, builder=builder, runner=runner)
        for (space, d, _), m in zip(batch, res, strict=False):
            if m.ok:
                lat = statistics.median(m.run_secs)
                rows.append({"spec": spec, "features": [round(float(x), 6) for x in space.feature_values(d)],
                             "target": math.log(lat) - space.work})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=120, help="random programs measured per workload")
    ap.add_argument("--workload", action="append", default=[], help="KIND:DIMS (default: the training set)")
    ap.add_argument("--rows", required=True, help="JSON file of measured rows (read and extended)")
    ap.add_argument("--out", default="", help="write the fitted model here (JSON)")
    ap.add_argument("--holdout", action="append", default=[], help="a workload kept out of the fit")
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import numpy as np

    from tunecache.search.gradient import CostModel
    from tunecache.tvm_layer import load_tvm
    from tunecache.tvm_layer.target import host_fingerprint, resolve_target

    load_tvm("llvm")
    target = resolve_target(None)
    rows: list[dict[str, Any]] = []
    if os.path.exists(args.rows):
        with open(args.rows, encoding="utf-8") as f:
            rows = json.load(f)["rows"]
    specs = args.workload or TRAINING
    if args.samples > 0:
        from tunecache.tvm_layer.measure import make_builder, make_runner

        builder, runner = make_builder(), make_runner()
        try:
            for spec in specs:
                t0 = time.time()
                new = sample_rows(spec, workload(spec), target, args.samples, args.seed, builder, runner)
                rows += new
                print(f"{spec}: {len(new)} rows in {time.time() - t0:.0f} s", file=sys.stderr)
                with open(args.rows, "w", encoding="utf-8") as f:  # after every workload: Ctrl-C keeps them
                    json.dump({"cpu": host_fingerprint().cpu_model, "rows": rows}, f)
        finally:
            builder.close()
            runner.pool.shutdown(wait=True)
    train = [r for r in rows if r["spec"] not in args.holdout]
    if not train:
        ap.error("no rows to train on")
    model = CostModel(args.seed, hardware=host_fingerprint().cpu_model or "")
    mse = model.fit(np.array([r["features"] for r in train]), np.array([r["target"] for r in train]),
                    epochs=args.epochs, seed=args.seed)
    report: dict[str, Any] = {"rows": len(rows), "trained_on": len(train), "train_mse": round(mse, 4), "holdout": {}}
    for spec in args.holdout:
        held = [r for r in rows if r["spec"] == spec]
        if len(held) > 2:
            pred = model.predict(np.array([r["features"] for r in held]))
            truth = np.array([r["target"] for r in held])
            rank = np.argsort(np.argsort(pred)), np.argsort(np.argsort(truth))
            report["holdout"][spec] = {"rows": len(held), "spearman": round(float(np.corrcoef(*rank)[0, 1]), 3)}
    print(json.dumps(report, indent=1))
    if args.out:
        model.save(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
