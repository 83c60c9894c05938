"""Replay compile (tune="never") against an untuned build, each in a fresh process, alternating
rounds (session 37): the store's cost model fitted by this compile (a store without a kept model,
as before this session) and kept in the store (as `tunecache warm` now leaves it).

    python docs/bench/2026-12-13/replay_compile.py SPEC WARM.db WORKDIR ROUNDS

WARM.db is a store `tunecache warm` filled before session 37 (no kept model); the script makes a
copy and keeps the model in it, as a warm now does at its end. Prints JSON.
"""

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT))

import bench_newmodel as bn  # noqa: E402

spec, warm_db, work, rounds = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
work.mkdir(parents=True, exist_ok=True)
kept_db = bn.sqlite_copy(warm_db, work / "kept.db")
from tunecache.replay import opinion_model  # noqa: E402
from tunecache.store import open_store  # noqa: E402
from tunecache.tvm_layer.target import hardware_key, resolve_target  # noqa: E402

t0 = time.time()
km = opinion_model(open_store(kept_db), hardware_key(resolve_target(None)), refit=True)
fit_s = time.time() - t0
arms = {"untuned": None, "replay_fitting": warm_db, "replay_kept": kept_db}
times: dict[str, list[float]] = {a: [] for a in arms}
for r in range(rounds):
    order = list(arms) if r % 2 == 0 else list(reversed(arms))
    for arm in order:
        cmd = [sys.executable, "-c", bn.FRESH_CHILD, str(ROOT), spec, "untuned" if arm == "untuned" else "replay"]
        if arms[arm] is not None:
            cmd.append(str(bn.sqlite_copy(arms[arm], work / f"{arm}.db")))
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise SystemExit(f"{arm}: {done.stderr[-800:]}")
        times[arm].append(float(done.stdout.strip().splitlines()[-1]))
        print(arm, round(times[arm][-1], 2), file=sys.stderr)
med = {a: statistics.median(v) for a, v in times.items()}
print(json.dumps({"spec": spec, "machine": bn.machine(),
                  "rounds": rounds, "fit_and_keep_s": fit_s, "kept_rows": km.rows, "times": times, "median": med,
                  "ratio_fitting": med["replay_fitting"] / med["untuned"],
                  "ratio_kept": med["replay_kept"] / med["untuned"]}, indent=1))
