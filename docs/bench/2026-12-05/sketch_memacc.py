"""Session 29: which tile splits of BERT's 64-token FFN up-projection (64 x 768 -> 3072) LLVM
compiles with its accumulators in memory, over the task's three design-space sketches (no store
needed; rows x columns x unroll choice), counted by tunecache.tvm_layer.codecheck.

    python sketch_memacc.py fused_matmul2_add2 > sketch_memacc.log
"""
import sys, copy, json, itertools
from tunecache.models import load_model_spec
from tunecache.search.narrow.replay import replay_on
from tunecache.tvm_layer.sketch import design_space_json
from tunecache.store.records import decode_trace
from tunecache.tvm_layer import frontend, load_tvm
from tunecache.tvm_layer.target import resolve_target
tvm = load_tvm()
from tunecache.tvm_layer.codecheck import accumulators_in_memory
target = resolve_target(None)
model, inputs, _ = load_model_spec("bert_base:seq_len=64")
mod = frontend.prepare_for_tuning(frontend.import_model(model, tuple(inputs)), target)
t = [t for t in frontend.extract_tasks(mod, target) if t.name == sys.argv[1]][0]
for si, sk in enumerate(design_space_json(t.mod, target)):
    sk = decode_trace(sk)
    cw = any(i[0] == "CacheWrite" for i in sk[0])
    print("sketch", si, "cachewrite", cw, [d for d in sk[1]][:6])
    tiles = [d for d in sk[1] if isinstance(d[1], list) and len(d[1]) == 4]
    for rows, cols in itertools.product(([1,4,1,16],[2,2,1,16],[1,1,4,16],[4,1,1,16],[1,2,2,16], [2,4,1,8], [1,8,1,8]), ([4,48,1,16],[8,24,1,16],[4,24,2,16])):
        tr = copy.deepcopy(sk)
        for d in tr[1]:
            if d is tiles[0]: pass
        ti = [i for i, d in enumerate(tr[1]) if isinstance(d[1], list) and len(d[1]) == 4]
        tr[1][ti[0]][1] = rows; tr[1][ti[1]][1] = cols
        for d in tr[1]:
            if isinstance(d[1], list) and len(d[1]) == 2: d[1] = [256, 3]
        for unroll in (0, 1, 2, 3):
            for d in tr[1]:
                if isinstance(d[1], int): d[1] = unroll
            sch = replay_on(tr, t.mod, target)
            if sch is None: print("  none", rows, cols); continue
            n = accumulators_in_memory(sch.mod, target)
            print(f"  rows {rows} cols {cols} unroll {unroll}: {n.in_memory} of {n.fmas} FMAs in memory", flush=True)
