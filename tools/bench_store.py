"""Store benchmark: commit throughput and exact-lookup latency, SQLite and PostgreSQL side by side.

Prints JSON. Goal (issue 2): p99 exact lookup <= 2 ms on SQLite at 100k records.

    python tools/bench_store.py [--sizes 10000 100000] [--lookups 2000] [--backends sqlite postgresql]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pgserver import pg_server  # noqa: E402

from tunecache.store import HardwareKey, HostFingerprint, Provenance, Record, Store, WorkloadKey  # noqa: E402

TRACE = [
    [["GetSBlock", [], ["C", "main"], ["b0"]], ["GetLoops", ["b0"], [], ["l1", "l2", "l3"]],
     ["SamplePerfectTile", ["l1"], [4, 64], ["v4", "v5", "v6", "v7"]],
     ["SampleCategorical", [], [[0, 16, 64, 512], [0.25, 0.25, 0.25, 0.25]], ["v8"]]],
    [[2, [4, 2, 8, 4]], [3, 1]],
]


def percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def bench(url: str, sizes: list[int], lookups: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    store = Store(url)
    hws = [
        HardwareKey('{"kind":"llvm","mcpu":"znver3","num-cores":2}',
                    HostFingerprint("AMD EPYC", ("avx2", "fma"), 2), "0.27.0"),
        HardwareKey('{"kind":"llvm","mcpu":"skylake","num-cores":4}',
                    HostFingerprint("Intel Xeon", ("avx2", "avx512f"), 4), "0.27.0"),
    ]
    per_wl = 10
    out: dict = {"backend": store.backend, "sizes": []}
    # Single-record commits, as tuning does them.
    n_single = 500
    t = []
    for i in range(n_single):
        wk = WorkloadKey(f"single{i // per_wl}")
        r = Record(wk, hws[0], TRACE, (1e-3,), rng.uniform(1e-4, 1e-2), None, Provenance(trials=i))
        t0 = time.perf_counter()
        store.commit_record(r)
        t.append(time.perf_counter() - t0)
    out["single_commit"] = {
        "commits": n_single,
        "commits_per_s": n_single / sum(t),
        "p50_ms": percentile(t, 50) * 1e3,
        "p99_ms": percentile(t, 99) * 1e3,
    }
    have = n_single
    for size in sizes:
        t0 = time.perf_counter()
        start = have
        batch = []
        while have < size:
            wk = WorkloadKey(f"w{have // per_wl}")
            batch.append(Record(wk, hws[have % 2], TRACE, (1e-3,), rng.uniform(1e-4, 1e-2), None,
                                Provenance(trials=have)))
            have += 1
            if len(batch) == 1000 or have == size:
                store.commit_records(batch)
                batch = []
        fill_s = time.perf_counter() - t0
        n_wl = have // per_wl
        keys = [WorkloadKey(f"w{rng.randrange(50, n_wl)}") for _ in range(lookups)]
        for k in keys[:50]:  # warm the caches, as a long-lived process would have
            store.best_k(k, hws[0], 1)
        lat = []
        hits = 0
        for k in keys:
            t1 = time.perf_counter()
            got = store.best_k(k, hws[0], 1)
            lat.append(time.perf_counter() - t1)
            hits += bool(got)
        out["sizes"].append({
            "records": store.count_records(),
            "bulk_fill_records_per_s": (have - start) / fill_s if fill_s and have > start else None,
            "lookups": lookups,
            "hit_rate": hits / lookups,
            "lookup_p50_ms": percentile(lat, 50) * 1e3,
            "lookup_p99_ms": percentile(lat, 99) * 1e3,
        })
    store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--lookups", type=int, default=2000)
    ap.add_argument("--backends", nargs="+", default=["sqlite", "postgresql"])
    a = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        if "sqlite" in a.backends:
            results.append(bench(os.path.join(tmp, "bench.db"), a.sizes, a.lookups))
        if "postgresql" in a.backends:
            import psycopg

            with pg_server() as admin:
                with psycopg.connect(admin, autocommit=True) as c:
                    c.execute("DROP DATABASE IF EXISTS tc_bench")
                    c.execute("CREATE DATABASE tc_bench")
                results.append(bench(admin.rsplit("/", 1)[0] + "/tc_bench", a.sizes, a.lookups))
    sq = next((r for r in results if r["backend"] == "sqlite"), None)
    goal = None
    if sq:
        big = [s for s in sq["sizes"] if s["records"] >= 100_000]
        if big:
            p99 = big[0]["lookup_p99_ms"]
            goal = {"sqlite_p99_lookup_ms_at_100k": p99, "target_ms": 2.0, "met": p99 <= 2.0}
    print(json.dumps({"benchmark": "store", "results": results, "goal": goal}, indent=2))


if __name__ == "__main__":
    main()
