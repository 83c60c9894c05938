"""The search's pick replayed on measured samples: how many records to re-measure side by side,
and in how many rounds, before the store's best is the truly fastest? (session 42)

    python repick_sim.py RUN_A.json RUN_B.json WID,WID... [TOP:ROUNDS ...]

Both files come from ``ranking_samples.py`` (every record of a workload, R interleaved rounds
of 3 cold samples). One run stands in for the search, the other is the truth (its median over
all rounds; every record saw the same phases there), and then the other way round:

1. the search measures every record once, each at its own time: one random round per record,
   the median of its 3 samples (what a candidate's latency is during search);
2. the TOP fastest by that are re-measured ROUNDS more times side by side (the same random
   rounds for all of them: interleaved), and the pick is the lowest median of all its samples
   (what ``NarrowedSearch.remeasure`` does, with TOP=3, ROUNDS=2 by default).

Prints, per setting, the mean over workloads and 500 draws of the pick's true latency over the
truly fastest record's, the share of draws that picked a record >= 10% slower than the fastest,
and the cost in re-measured rounds (TOP x ROUNDS).
"""
import json
import random
import statistics
import sys

import numpy as np


def load(path, wids):
    out = {}
    for w in json.load(open(path)):
        if w["wid"] in wids:
            recs = [r for r in w["records"] if r["samples"]]
            out[w["wid"]] = ([r["id"] for r in recs], np.array([np.reshape(r["samples"], (-1, 3)) for r in recs]))
    return out


def pick(x, top, rounds, rng):
    n, total, _ = x.shape
    first = [rng.randrange(total) for _ in range(n)]
    lat = [float(np.median(x[i, first[i]])) for i in range(n)]
    if top <= 1 or rounds == 0:
        return int(np.argmin(lat))
    best = sorted(range(n), key=lambda i: lat[i])[:top]
    later = rng.sample(range(total), rounds)
    med = {i: float(np.median(np.concatenate([x[i, first[i]], x[i, later].ravel()]))) for i in best}
    return min(med, key=med.get)


def main():
    wids = {int(w) for w in sys.argv[3].split(",")}
    a, b = load(sys.argv[1], wids), load(sys.argv[2], wids)
    settings = [tuple(int(v) for v in s.split(":")) for s in sys.argv[4:]] or \
        [(1, 0), (3, 2), (3, 5), (6, 2), (6, 5), (12, 2), (12, 5), (12, 15)]
    rng = random.Random(0)
    rows = []
    for top, rounds in settings:
        losses = []
        for src, ref in ((a, b), (b, a)):
            for wid in sorted(src):
                ids, x = src[wid]
                ids2, y = ref[wid]
                common = [i for i in ids if i in ids2]
                x = x[[ids.index(i) for i in common]]
                t = np.median(y[[ids2.index(i) for i in common]].reshape(len(common), -1), axis=1)
                t = t / t.min()
                losses += [float(t[pick(x, top, rounds, rng)]) for _ in range(500)]
        rows.append({"top": top, "rounds": rounds, "cost_rounds": top * rounds,
                     "mean_true_over_best": round(statistics.fmean(losses), 4),
                     "share_10pct_worse": round(sum(v >= 1.1 for v in losses) / len(losses), 3)})
    print(json.dumps({"workloads": sorted(wids), "settings": rows}, indent=1))


if __name__ == "__main__":
    main()
