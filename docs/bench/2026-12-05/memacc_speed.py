"""Session 29: are the programs the replay's code check flags slow? BERT's 64-token FFN up-projection
with sketch-space decisions (sketch, rows, columns, unroll choice), side by side (measure_mods,
4 rounds), each with its count of FMAs whose accumulator stays in memory.

    python memacc_speed.py > memacc_speed.log
"""
import copy
import statistics

from tunecache.models import load_model_spec
from tunecache.search.narrow.replay import replay_on
from tunecache.store.records import decode_trace
from tunecache.tvm_layer import frontend, load_tvm
from tunecache.tvm_layer.codecheck import accumulators_in_memory
from tunecache.tvm_layer.measure import make_builder, make_runner, measure_mods
from tunecache.tvm_layer.sketch import design_space_json
from tunecache.tvm_layer.target import resolve_target

tvm = load_tvm()
target = resolve_target(None)
model, inputs, _ = load_model_spec("bert_base:seq_len=64")
mod = frontend.prepare_for_tuning(frontend.import_model(model, tuple(inputs)), target)
task = [t for t in frontend.extract_tasks(mod, target) if t.name == "fused_matmul2_add2"][0]
sketches = [decode_trace(s) for s in design_space_json(task.mod, target)]
VARIANTS = [(2, [1, 4, 1, 16], [4, 48, 1, 16], 0), (2, [2, 2, 1, 16], [4, 48, 1, 16], 0),
            (2, [1, 8, 1, 8], [4, 48, 1, 16], 0), (2, [2, 4, 1, 8], [4, 48, 1, 16], 0),
            (0, [2, 2, 1, 16], [4, 24, 2, 16], 0), (0, [2, 2, 1, 16], [4, 48, 1, 16], 0),
            (0, [1, 8, 1, 8], [4, 48, 1, 16], 0), (0, [1, 1, 4, 16], [4, 24, 2, 16], 3),
            # second run (its own measure_mods call in the log):
            (0, [1, 4, 1, 16], [4, 24, 2, 16], 0), (0, [1, 4, 1, 16], [4, 24, 2, 16], 1),
            (0, [1, 4, 1, 16], [4, 24, 2, 16], 2), (0, [1, 2, 2, 16], [4, 24, 2, 16], 3),
            (0, [1, 4, 1, 16], [4, 48, 1, 16], 1)]
names, mods = [], []
for si, rows, cols, unroll in VARIANTS:
    tr = copy.deepcopy(sketches[si])
    tiles = [i for i, d in enumerate(tr[1]) if isinstance(d[1], list) and len(d[1]) == 4]
    tr[1][tiles[0]][1], tr[1][tiles[1]][1] = rows, cols
    for d in tr[1]:
        if isinstance(d[1], list) and len(d[1]) == 2:
            d[1] = [256, 3]
        elif isinstance(d[1], int):
            d[1] = unroll
    sch = replay_on(tr, task.mod, target)
    count = accumulators_in_memory(sch.mod, target)
    names.append(f"sketch {si} rows {rows} cols {cols} unroll {unroll}: {count.in_memory}/{count.fmas} in memory")
    mods.append(sch.mod)
res = measure_mods(mods, target, builder=make_builder(), runner=make_runner(), rounds=4)
for name, r in zip(names, res, strict=True):
    print(f"{name}: {statistics.median(r.run_secs) * 1e3:.3f} ms" if r.ok else f"{name}: {r.error[:100]}")
