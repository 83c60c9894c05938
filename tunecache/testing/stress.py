"""A store writer process for concurrency and crash tests (tests/ and tools/stress_store.py).

Run as ``python -m tunecache.testing.stress URL --seed S --commits N --keys K [--batch B]``.
It prints one JSON line per committed record *after* the commit returned, so a parent that
kills it knows exactly what must be in the store. ``--commits 0`` commits until killed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

from tunecache.store import HardwareKey, HostFingerprint, Provenance, Record, Store, WorkloadKey

TRACE = [
    [["GetSBlock", [], ["C", "main"], ["b0"]], ["SampleCategorical", [], [[0, 16, 64], [0.3, 0.3, 0.4]], ["v1"]]],
    [[1, 2]],
]
HARDWARE = HardwareKey(
    '{"kind":"llvm","mcpu":"znver3","num-cores":2}', HostFingerprint("stress CPU", ("avx2",), 2), "0.27.0"
)


def workload_keys(n: int) -> list[WorkloadKey]:
    """Return the shared pool of workload keys every writer picks from (they overlap on purpose).

    Parameters
    ----------
    n
        How many keys.

    Returns
    -------
    list of WorkloadKey
    """
    return [WorkloadKey(f"stress{i}") for i in range(n)]


def main(argv: list[str] | None = None) -> None:
    """Commit random records to a store, printing one JSON line per record once committed.

    Parameters
    ----------
    argv
        Command-line arguments (default: ``sys.argv[1:]``).
    """
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--commits", type=int, default=500, help="0: until killed")
    ap.add_argument("--keys", type=int, default=20)
    ap.add_argument("--batch", type=int, default=1, help="max records per transaction (random 1..B)")
    a = ap.parse_args(argv)
    rng = random.Random(a.seed)
    keys = workload_keys(a.keys)
    store = Store(a.url)
    out = sys.stdout
    done = 0
    while a.commits == 0 or done < a.commits:
        n = rng.randint(1, a.batch)
        if a.commits:
            n = min(n, a.commits - done)
        recs = [
            Record(
                rng.choice(keys),
                HARDWARE,
                TRACE,
                (lat := rng.uniform(1e-4, 1e-2),),
                lat,
                None,
                Provenance(trials=done + i, user=f"w{a.seed}"),
            )
            for i in range(n)
        ]
        t0 = time.perf_counter()
        store.commit_records(recs)
        dt = time.perf_counter() - t0
        for r in recs:
            out.write(json.dumps({"uid": r.uid, "key": r.workload.shash, "lat": r.latency_s, "commit_s": dt}) + "\n")
        out.flush()
        done += n


if __name__ == "__main__":
    main()
