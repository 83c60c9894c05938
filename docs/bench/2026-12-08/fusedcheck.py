"""For each conv task of a model: does its best program run the epilogue as a second pass over a
full-size intermediate (two root-level parallel loops) or inside the conv's tiles?"""
import sys, re
from tunecache.warming import collect_model_tasks
from tunecache.tvm_layer.target import resolve_target, hardware_key
from tunecache.store import open_store
from tunecache.tvm_layer.convert import record_to_tvm
from tvm.s_tir import meta_schedule as ms
import tvm
spec, db = sys.argv[1], sys.argv[2]
tgt = resolve_target(None); hw = hardware_key(tgt); st = open_store(db)
tot = {True: 0.0, False: 0.0}
for t in collect_model_tasks([spec], tgt):
    if "conv2d" not in t.name: continue
    recs = st.best_k(t.key, hw, 1)
    if not recs: continue
    sch = tvm.s_tir.Schedule(t.mod)
    record_to_tvm(recs[0], ms.database.Workload(t.mod), tgt).trace.apply_to_schedule(sch, remove_postproc=False)
    text = sch.mod.script()
    lines = text.splitlines()
    blocks = [(len(l) - len(l.lstrip()), re.search(r'sblock\("([^"]+)"', l).group(1)) for l in lines if 'with T.sblock("' in l]
    conv_depth = max(d for d, n in blocks if n.startswith("conv2d_nhwc"))
    last = blocks[-1]
    roots = last[0]
    idx = [i for i, l in enumerate(lines) if 'with T.sblock("' in l]
    last_i = idx[-1]
    conv_i = max(i for i in idx if 'sblock("conv2d_nhwc' in lines[i])
    root_i = max(i for i in range(last_i) if re.match(r"^        for ", lines[i]))
    second = root_i > conv_i
    tot[second] += recs[0].latency_s * t.weight * 1e3
    print(f"{t.name[:55]:55s} x{t.weight} {recs[0].latency_s*1e3:7.3f} ms  epilogue {blocks[-1][1]} depth {roots} (conv {conv_depth})  {'SECOND PASS' if second else ''}")
print("ms in tasks with a second pass", round(tot[True], 2), "without", round(tot[False], 2))
