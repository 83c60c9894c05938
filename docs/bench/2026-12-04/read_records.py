"""Session 28: reading records from a store, two checkouts side by side (alternating subprocesses).

    python docs/bench/2026-12-04/read_records.py STORE.db OLD_CHECKOUT NEW_CHECKOUT [ROUNDS]

Each round runs, for each checkout in turn (order alternating), a fresh process that imports
tunecache from that checkout and times on STORE (a real SQLite store, this machine's hardware key):
``iter_records`` of every valid record, newest first (best of 3, the collector running as a
search leaves it), and the gradient model's store sample (``read_store``, limit 1000 rows of 32
workloads: what a replay's second opinion reads). Prints JSON: medians per checkout and the ratios.
"""
import json, statistics, subprocess, sys

CHILD = r'''
import sys, time, json
sys.path.insert(0, sys.argv[1])
from tunecache.store import open_store
from tunecache.tvm_layer.target import hardware_key, resolve_target
from tunecache.search.gradient.training import read_store
st = open_store(sys.argv[2]); hw = hardware_key(resolve_target(None))
it = []
for _ in range(3):
    t0 = time.perf_counter(); n = len(list(st.iter_records(hardware=hw, valid_only=True, newest_first=True)))
    it.append(time.perf_counter() - t0)
t0 = time.perf_counter(); rows = len(read_store(st, hw, limit=1000, workloads=32).rows[0]); rs = time.perf_counter() - t0
print(json.dumps({"records": n, "iter_records_s": min(it), "read_store_s": rs, "rows": rows}))
'''

def main() -> None:
    db, old, new = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    got: dict[str, list[dict]] = {"old": [], "new": []}
    for r in range(rounds):
        for arm in (["old", "new"] if r % 2 == 0 else ["new", "old"]):
            out = subprocess.run([sys.executable, "-c", CHILD, old if arm == "old" else new, db],
                                 capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
            got[arm].append(json.loads(out))
    med = {a: {k: statistics.median(x[k] for x in v) for k in ("iter_records_s", "read_store_s")} for a, v in got.items()}
    print(json.dumps({"store": db, "records": got["new"][0]["records"], "rounds": rounds, "median": med,
                      "new_over_old": {k: round(med["new"][k] / med["old"][k], 3) for k in med["new"]},
                      "runs": got}, indent=1))

if __name__ == "__main__":
    main()
