"""Session 28: BERT's 64-token FFN up-projection as replayed from a store's 128-token best, against
other row splits: side by side (measure_mods, 4 rounds; the weight re-layout runs in the timed
function), then each variant's machine code: FMAs on registers, or on memory (an accumulator
loaded and stored around every FMA: LLVM did not promote it).

    python ffn64_replay.py STORE.db     # a store `tunecache warm` filled (issue 19's setup)
"""
import sys, statistics, copy, json
from tunecache.models import load_model_spec
from tunecache.replay import replay_misses
from tunecache.store import open_store
from tunecache.store.records import decode_trace
from tunecache.tvm_layer import frontend, load_tvm
from tunecache.tvm_layer.target import hardware_key, resolve_target
from tunecache.tvm_layer.measure import make_builder, make_runner, measure_mods
tvm = load_tvm()
from tvm.s_tir.schedule import Schedule, Trace
target = resolve_target(None); hw = hardware_key(target)
st = open_store(sys.argv[1])
model, inputs, _ = load_model_spec("bert_base:seq_len=64")
mod = frontend.prepare_for_tuning(frontend.import_model(model, tuple(inputs)), target)
t = [t for t in frontend.extract_tasks(mod, target) if t.name == "fused_matmul2_add2"][0]
rec = replay_misses([t], target, hw, st)[t.key].record
base = decode_trace(rec.trace)
def variant(rows=None, cols=None, k=None):
    tr = copy.deepcopy(base)
    for d in tr[1]:
        if d[0] == 5 and rows: d[1] = rows
        if d[0] == 7 and cols: d[1] = cols
        if d[0] == 9 and k: d[1] = k
    return tr
vs = {"replayed": variant(), "rows 2,2,1,16": variant(rows=[2, 2, 1, 16]), "rows 1,2,2,16": variant(rows=[1, 2, 2, 16]),
      "rows 1,4,1,16 cols 8,24": variant(cols=[8, 24, 1, 16]), "rows 1,1,4,16": variant(rows=[1, 1, 4, 16])}
mods = []
for name, tr in vs.items():
    sch = Schedule(t.mod); Trace.apply_json_to_schedule(tr, sch); mods.append(sch.mod)
b, r = make_builder(), make_runner()
import re, collections
res = measure_mods(mods, target, builder=b, runner=r, rounds=4)
for name, x in zip(vs, res): print(name, round(statistics.median(x.run_secs) * 1e6, 1) if x.ok else x.error[:100])
for name, tr in vs.items():
    sch = Schedule(t.mod); Trace.apply_json_to_schedule(tr, sch)
    asm = tvm.tirx.build(sch.mod, target=target).inspect_source("asm")
    mem_fma = len(re.findall(r"vfmadd\w+\s+-?\d*\(%\w+,%\w+,\d\),", asm))
    reg_fma = len(re.findall(r"vfmadd\w+\s+[^\n]*\{1to16\}", asm))
    print(name, "FMAs reading the accumulator from memory:", mem_fma, "with a broadcast operand on registers:", reg_fma)
