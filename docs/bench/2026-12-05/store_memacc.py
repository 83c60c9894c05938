"""Every stored workload's best 3 programs: FMAs with the accumulator in memory (codecheck), by family."""
import sys, time, collections
from tunecache.store import open_store
from tunecache.store.records import decode_trace
from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.convert import workload_from_json
from tunecache.tvm_layer.codecheck import accumulators_in_memory
from tunecache.tvm_layer.target import hardware_key, resolve_target
tvm = load_tvm()
from tvm.s_tir.schedule import Schedule, Trace
from tunecache.search.narrow.replay import replay_on
target = resolve_target(None); hw = hardware_key(target)
st = open_store(sys.argv[1])
stats = collections.Counter()
for w in st.workloads():
    if not w.mod_json or not w.desc or w.desc.family == "other": continue
    fam = w.desc.family
    mod = workload_from_json(w.key, w.mod_json).mod
    for rank, r in enumerate(st.best_k(w.key, hw, 3)):
        sch = replay_on(r, mod, target)
        if sch is None: stats[fam, "noreplay"] += 1; continue
        c = accumulators_in_memory(sch.mod, target)
        if c is None: stats[fam, "nobuild"] += 1; continue
        stats[fam, "flagged" if c.share >= 0.5 else "ok"] += 1
        if c.in_memory: print(fam, w.desc.name[:50], rank, f"{c.in_memory}/{c.fmas}", f"{r.latency_s*1e6:.1f}us", flush=True)
print(dict(stats))
