"""For each conv task of a model: does its best program run the epilogue (batch norm, residual
add, ReLU) as a second pass over a full-size intermediate, or inside the convolution's loops?

    python fusedcheck.py MODEL STORE

The test (:func:`second_pass`): in the scheduled TIR, the root-level loop enclosing the last
block (the epilogue) starts after the convolution's block.
"""
import re
import sys

import tvm
from tvm.s_tir import meta_schedule as ms

from tunecache.tvm_layer.convert import record_to_tvm


def second_pass(task, rec, tgt) -> bool:
    """Whether ``rec``'s program of ``task`` runs its epilogue as a separate root-level pass."""
    sch = tvm.s_tir.Schedule(task.mod)
    record_to_tvm(rec, ms.database.Workload(task.mod), tgt).trace.apply_to_schedule(sch, remove_postproc=False)
    lines = sch.mod.script().splitlines()
    idx = [i for i, l in enumerate(lines) if 'with T.sblock("' in l]
    conv_i = max(i for i in idx if 'sblock("conv2d_nhwc' in lines[i])
    root_i = max(i for i in range(idx[-1]) if re.match(r"^        for ", lines[i]))
    return root_i > conv_i


if __name__ == "__main__":
    from tunecache.store import open_store
    from tunecache.tvm_layer.target import hardware_key, resolve_target
    from tunecache.warming import collect_model_tasks

    spec, db = sys.argv[1], sys.argv[2]
    tgt = resolve_target(None); hw = hardware_key(tgt); st = open_store(db)
    tot = {True: 0.0, False: 0.0}
    for t in collect_model_tasks([spec], tgt):
        recs = st.best_k(t.key, hw, 1) if "conv2d" in t.name else []
        if not recs:
            continue
        second = second_pass(t, recs[0], tgt)
        tot[second] += recs[0].latency_s * t.weight * 1e3
        print(f"{t.name[:55]:55s} x{t.weight} {recs[0].latency_s*1e3:7.3f} ms  {'SECOND PASS' if second else ''}")
    print("ms in tasks with a second pass", round(tot[True], 2), "without", round(tot[False], 2))
