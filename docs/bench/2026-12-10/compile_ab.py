"""Fresh-process compile times: an untuned build and compile(tune="never") on a copy of WARM, with
the code of two trees (OLD, NEW), alternating ROUNDS times (tools/bench_newmodel.FRESH_CHILD)."""
import json, os, shutil, statistics, subprocess, sys, tempfile
sys.path.insert(0, sys.argv[2] + "/tools")
from bench_newmodel import FRESH_CHILD
spec, old, new, warm, rounds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
times = {"untuned": [], "replay_old": [], "replay_new": []}
for r in range(rounds):
    order = list(times)
    order = order[r % 3:] + order[:r % 3]
    for mode in order:
        root = new if mode == "replay_new" else old
        cmd = [sys.executable, "-c", FRESH_CHILD, root, spec, "untuned" if mode == "untuned" else "replay"]
        if mode != "untuned":
            cmd.append(shutil.copy(warm, os.path.join(tempfile.mkdtemp(), "compile_ab.db")))
        out = subprocess.run(cmd, capture_output=True, text=True)
        times[mode].append(float(out.stdout.strip().splitlines()[-1]))
    print(r, {k: round(v[-1], 2) for k, v in times.items()}, flush=True)
med = {k: statistics.median(v) for k, v in times.items()}
print(json.dumps({"spec": spec, "median_s": med, "old_ratio": med["replay_old"] / med["untuned"],
                  "new_ratio": med["replay_new"] / med["untuned"], "times": times}))
