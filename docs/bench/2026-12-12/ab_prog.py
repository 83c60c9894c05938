"""One task's best program from two stores, side by side with the cold runner (many rounds)."""
import os, sys, statistics, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _stored import stored  # noqa: E402
from tunecache.search.narrow.replay import replay_on
from tunecache.tvm_layer.measure import make_builder, make_runner, measure_mods
name, dbs = sys.argv[1], sys.argv[2:]
mods = []
for db in dbs:
    mod, target, (tr,), _ = stored(db, name)
    mods.append(replay_on(tr, mod, target).mod)
b, r = make_builder(), make_runner()
for rep in range(3):
    ms = measure_mods(mods, target, builder=b, runner=r, rounds=15)
    print(" | ".join(f"{db}: p50 {statistics.median(m.run_secs)*1e6:.0f} min {min(m.run_secs)*1e6:.0f}" for db, m in zip(dbs, ms)))
