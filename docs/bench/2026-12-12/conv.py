"""When did each full search find its best? Running min of the measured mean, by trial index."""
import json, sqlite3, statistics, sys
c = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
rows = c.execute("select w.name, w.family, r.trace_json, r.run_secs_json, r.created_at, r.kind from tc_record r "
                 "join tc_workload w on w.id=r.workload_id where r.kind='tuned' order by r.id").fetchall()
by = {}
for name, fam, tr, rs, t, kind in rows:
    by.setdefault(name, []).append((json.loads(rs), "SamplePerfectTile" in tr, t))
out = []
for name, recs in by.items():
    if len(recs) < 24: continue
    lat = [statistics.fmean(r) if r else float("inf") for r, _, _ in recs]
    tiled = any(x for _, x, _ in recs)
    best = min(lat)
    def at(k): return min(lat[:k]) / best
    wall = recs[-1][2] - recs[0][2]
    out.append((wall, name, len(recs), tiled, best * 1e6, at(16), at(32), at(64)))
out.sort(reverse=True)
print(f"{'task':40s} {'n':>4s} tiled {'best_us':>9s} {'@16':>6s} {'@32':>6s} {'@64':>6s} wall_s")
for wall, name, n, tiled, b, a16, a32, a64 in out:
    print(f"{name[:40]:40s} {n:4d} {str(tiled):5s} {b:9.1f} {a16:6.2f} {a32:6.2f} {a64:6.2f} {wall:6.1f}")
