"""Store stress test: N writer processes x M commits with overlapping keys, SQLite and PostgreSQL.

Prints JSON: processes, commits, lost, duplicated, best-k errors, p50/p99 commit latency and
throughput per backend. The same writer (tunecache.testing.stress) runs in tests/.

    python tools/stress_store.py [--procs 8] [--commits 500] [--backends sqlite postgresql]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pgserver import pg_server  # noqa: E402

from tunecache.store import Store, check_store  # noqa: E402
from tunecache.testing.stress import HARDWARE, workload_keys  # noqa: E402


def percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def run(url: str, procs: int, commits: int, keys: int) -> dict:
    Store(url).close()
    t0 = time.time()
    ps = [subprocess.Popen([sys.executable, "-m", "tunecache.testing.stress", url, "--seed", str(i),
                            "--commits", str(commits), "--keys", str(keys)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
          for i in range(procs)]
    acked, errors = [], []
    for p in ps:
        out, err = p.communicate()
        if p.returncode != 0:
            errors.append(err[-500:])
        acked += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    wall = time.time() - t0
    store = Store(url)
    uids = [r.uid for r in store.records(hardware=HARDWARE)]
    have = set(uids)
    by_key = defaultdict(list)
    for a in acked:
        by_key[a["key"]].append((a["lat"], a["uid"]))
    bestk_errors = sum(1 for k in workload_keys(keys)
                       if [r.uid for r in store.best_k(k, HARDWARE, 3)] != [u for _l, u in sorted(by_key[k.shash])[:3]])
    lat = [a["commit_s"] for a in acked]
    return {
        "backend": store.backend, "processes": procs, "commits": procs * commits, "acknowledged": len(acked),
        "stored": len(uids), "lost": sum(1 for a in acked if a["uid"] not in have),
        "duplicated": len(uids) - len(have), "best_k_errors": bestk_errors, "writer_errors": errors,
        "integrity_ok": check_store(store).ok, "wall_s": wall, "commits_per_s": len(acked) / wall,
        "commit_p50_ms": percentile(lat, 50) * 1e3, "commit_p99_ms": percentile(lat, 99) * 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--commits", type=int, default=500)
    ap.add_argument("--keys", type=int, default=20)
    ap.add_argument("--backends", nargs="+", default=["sqlite", "postgresql"])
    a = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        if "sqlite" in a.backends:
            results.append(run(str(Path(tmp) / "stress.db"), a.procs, a.commits, a.keys))
        if "postgresql" in a.backends:
            import psycopg

            with pg_server() as admin:
                with psycopg.connect(admin, autocommit=True) as c:
                    c.execute("DROP DATABASE IF EXISTS tc_stress")
                    c.execute("CREATE DATABASE tc_stress")
                results.append(run(admin.rsplit("/", 1)[0] + "/tc_stress", a.procs, a.commits, a.keys))
    print(json.dumps({"benchmark": "stress_store", "results": results}, indent=2))


if __name__ == "__main__":
    main()
