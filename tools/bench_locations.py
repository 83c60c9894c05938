"""Where should a reused 3x3 conv compute its padding? Every accepted location, measured.

A 1x1 convolution's program has no decision for a padded 3x3 convolution's ``pad_temp``
compute location (docs/reuse.md). This tunes one of resnet50's 1x1 convs (``--trials``), moves
its best program onto three of resnet50's padded 3x3 convs, and measures every compute location
TVM accepts for the padding, interleaved (``--repeats`` rounds, median). It reports, per conv,
the latency of each location, which location TVM's replay picks when left alone, and how far the
best of ``narrow.open_picks``' three (root, deepest, middle) is from the best of all. Prints
JSON (and writes ``--out``).

Usage::

    python tools/bench_locations.py --out locations.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "tools"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

SOURCE = "fused_conv2d9_"  # 1x1, 512 -> 128 channels at 28x28
TARGETS = ("fused_conv2d10_", "fused_conv2d3_", "fused_conv2d16_")  # 3x3: 128@28, 64@56, 256@14


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=32, help="full-search trials of the 1x1 source")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    from reuse_sets import set_tasks

    from tunecache.pipeline import search
    from tunecache.search import narrow
    from tunecache.store import open_store
    from tunecache.store.records import decode_trace
    from tunecache.tvm_layer.measure import make_builder, make_runner
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    target = resolve_target(None)
    hw = hardware_key(target)
    tasks = set_tasks("resnet50", target)

    def find(prefix: str) -> Any:
        return next(t for t in tasks if t.name.startswith(prefix))

    work = tempfile.mkdtemp(prefix="bench-locations-")
    src = find(SOURCE)
    store = open_store(f"sqlite:///{work}/source.sqlite")
    search([src], target, store, hw, trials_per_task=args.trials, reuse=False, transfer=False, seed=args.seed,
           work_dir=work)
    best = store.best_k(src.key, hw, 1)[0]
    report: dict[str, Any] = {"target": str(target), "source": src.name, "source_latency_ms": best.latency_s * 1e3,
                              "trials": args.trials, "repeats": args.repeats, "convs": []}
    builder, runner = make_builder(), make_runner()
    try:
        for prefix in TARGETS:
            dst = find(prefix)
            mod = narrow.as_ir_module(dst.mod)
            search = narrow.NarrowedSearch(mod, target, builder, runner, None, args.seed, None, 1000, "locations")
            sk = search.mat.adapt(narrow.Skeleton(0, decode_trace(best.trace)))
            (site,) = sk.open_sites
            cands = {}
            for loc in narrow.open_locations(search.mat, sk, dict(sk.decisions), site):
                cand = search.materialize_new(sk, {**sk.decisions, site: loc})
                if cand is not None:
                    cands[loc] = cand
            for _ in range(args.repeats):
                search.measure(list(cands.values()))
            ms = {loc: statistics.median(c.samples) * 1e3 for loc, c in cands.items()}
            picks = [p[site] for p in narrow.open_picks(search.mat, sk, dict(sk.decisions), narrow.OPEN_TRIES)]
            left_alone = search.mat.replay(sk, dict(sk.decisions))
            tvm_pick = None if left_alone is None else left_alone[1].get(site)
            row = {"name": dst.name, "latency_ms_by_location": {str(k): round(v, 4) for k, v in sorted(ms.items())},
                   "best_location": min(ms, key=ms.get), "tvm_pick": tvm_pick, "open_picks": picks,
                   "tvm_pick_vs_best": (ms[tvm_pick] / min(ms.values())) if tvm_pick in ms else None,
                   "open_picks_best_vs_best": min(ms[p] for p in picks if p in ms) / min(ms.values())}
            report["convs"].append(row)
            print(f"[locations] {json.dumps(row)}", file=sys.stderr, flush=True)
    finally:
        builder.close()
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
