"""On a store (modified in place: use a copy), for each conv task of MODEL whose best program runs
its epilogue as a second pass over a full-size intermediate, mark stale the second-pass records
ranked above its best fused one, if that one is within SLACK of the best: the model then compiles
(tune="never") with fused epilogues. A test of session 32's note, not a product change."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fusedcheck import second_pass  # noqa: E402 - the sibling script's test

from tunecache.store import open_store
from tunecache.tvm_layer.target import hardware_key, resolve_target
from tunecache.warming import collect_model_tasks

spec, db, slack = sys.argv[1], sys.argv[2], float(sys.argv[3])
tgt = resolve_target(None); hw = hardware_key(tgt); st = open_store(db)

for t in collect_model_tasks([spec], tgt):
    if "conv2d" not in t.name: continue
    recs = st.best_k(t.key, hw, 60)
    if not recs or not second_pass(t, recs[0], tgt): continue
    above = [recs[0]]
    for r in recs[1:]:
        if r.latency_s > (1 + slack) * recs[0].latency_s: break
        if not second_pass(t, r, tgt):
            st.mark_stale([x.uid for x in above])
            print(f"{t.name[:55]:55s} x{t.weight}: {recs[0].latency_s*1e3:.3f} -> fused {r.latency_s*1e3:.3f} ms ({len(above)} stale)")
            break
        above.append(r)
    else:
        print(f"{t.name[:55]:55s} x{t.weight}: no fused program within {slack:.0%}")
