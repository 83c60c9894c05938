"""Which statistic of a few measurement rounds picks the truly fastest record? (session 42)

    python ranking_eval.py RUN_A.json RUN_B.json [K ...]

Both files come from ``ranking_samples.py`` on the same workloads, minutes apart. For every
workload and each K (rounds a statistic may use; a round is 3 cold samples, the search's unit),
random K-round subsets of one run pick a record by each statistic; the pick is scored by the
*other* run's full-length median (all rounds interleaved, so every record saw the same phases):
its latency over that run's fastest record. Cross-validated both ways; the mean loss over
workloads and subsets is printed as JSON.
"""
import json
import random
import statistics
import sys

import numpy as np

STATS = {
    "median": lambda x: float(np.median(x)),
    "mean": lambda x: float(np.mean(x)),
    "min": lambda x: float(np.min(x)),
    "p25": lambda x: float(np.percentile(x, 25)),
    "min_of_round_medians": lambda x: float(np.min(np.median(x, axis=1))),
}


def load(path):
    out = {}
    for w in json.load(open(path)):
        recs = [r for r in w["records"] if r["samples"]]
        out[w["wid"]] = (w["name"], [r["id"] for r in recs],
                         np.array([np.reshape(r["samples"], (-1, 3)) for r in recs]))  # (records, rounds, 3)
    return out


def truth(x):
    t = np.median(x.reshape(x.shape[0], -1), axis=1)
    return t / t.min()


def evaluate(a, b, ks, trials=400, seed=0):
    rng = random.Random(seed)
    res = {k: {s: [] for s in STATS} for k in ks}
    per_w = {}
    for wid in a:
        if wid not in b:
            continue
        for src, ref in ((a, b), (b, a)):
            name, ids, x = src[wid]
            _, ids2, y = ref[wid]
            common = [i for i in ids if i in ids2]
            x = x[[ids.index(i) for i in common]]
            t = truth(y[[ids2.index(i) for i in common]])
            rounds = x.shape[1]
            for k in ks:
                for _ in range(trials):
                    sub = rng.sample(range(rounds), k)
                    xs = x[:, sub, :]
                    for s, f in STATS.items():
                        pick = int(np.argmin([f(xs[i]) for i in range(len(common))]))
                        res[k][s].append(float(t[pick]))
                        per_w.setdefault((wid, k, s), []).append(float(t[pick]))
    summary = {k: {s: round(statistics.fmean(v), 4) for s, v in d.items()} for k, d in res.items()}
    by_w = {f"{wid} k={k} {s}": round(statistics.fmean(v), 4) for (wid, k, s), v in per_w.items()}
    return summary, by_w


def agreement(a, b):
    """Per workload: each run's truth ranking of the records, and the Spearman between runs."""
    out = {}
    for wid in a:
        if wid not in b:
            continue
        name, ids, x = a[wid]
        _, ids2, y = b[wid]
        common = [i for i in ids if i in ids2]
        ta = truth(x[[ids.index(i) for i in common]])
        tb = truth(y[[ids2.index(i) for i in common]])
        ra, rb = np.argsort(np.argsort(ta)), np.argsort(np.argsort(tb))
        n = len(common)
        rho = 1 - 6 * float(np.sum((ra - rb) ** 2)) / (n * (n * n - 1))
        out[wid] = {"name": name, "records": n, "spearman": round(rho, 3),
                    "a_best_in_b": round(float(tb[int(np.argmin(ta))]), 4),
                    "b_best_in_a": round(float(ta[int(np.argmin(tb))]), 4),
                    "stored_best_in_a": round(float(ta[0]), 4), "stored_best_in_b": round(float(tb[0]), 4),
                    "spread_a": round(float(ta.max()), 3)}
    return out


if __name__ == "__main__":
    a, b = load(sys.argv[1]), load(sys.argv[2])
    ks = [int(k) for k in sys.argv[3:]] or [1, 3, 6]
    summary, by_w = evaluate(a, b, ks)
    print(json.dumps({"loss_by_k_and_statistic": summary, "agreement": agreement(a, b), "by_workload": by_w},
                     indent=1))
