import sys, json
from tunecache.models import load_model_spec
from tunecache.tvm_layer import frontend
from tunecache.tvm_layer.target import resolve_target, hardware_key
from tunecache.store import open_store
from tunecache.search.narrow.replay import source_on
from tunecache.search.narrow.align import open_picks
from tunecache.search.narrow.moves import fitted_decisions
spec = sys.argv[1]
model, inputs, _ = load_model_spec(spec)
tgt = resolve_target(None); hw = hardware_key(tgt)
mod = frontend.prepare_for_tuning(frontend.import_model(model, tuple(inputs)), tgt)
tasks = {t.name: t for t in frontend.extract_tasks(mod, tgt)}
t = tasks['fused_matmul_add1']
st = open_store('sqlite:////tmp/s20/bert_warm128.db')

src = [w for w in st.workloads() if w.desc.name == 'fused_matmul_add1'][0]
print('source', src.desc.extents if hasattr(src.desc,'extents') else src.desc)
def tiles(decs, sk):
    out=[]
    for i,ins in enumerate(sk.instructions if hasattr(sk,'instructions') else []):
        pass
    return decs
for rank, rec in enumerate(st.best_k(src.key, hw, 3)):
    on = source_on(rec, t.mod, tgt, 0)
    mat, sk = on
    pick = open_picks(mat, sk, dict(sk.decisions), 1)[0]
    cand = mat.materialize(sk, pick)
    asked = {k: v for k, v in sk.decisions.items() if isinstance(v, list)}
    got = {k: v for k, v in cand.decisions.items() if isinstance(v, list)}
    fit = fitted_decisions(sk, cand.decisions)
    print('#%d src %.3f ms' % (rank+1, rec.latency_s*1e3))
    print('   source tiles', asked)
    print('   replayed    ', got)
    print('   fitted      ', None if fit is None else {k: v for k, v in fit.items() if isinstance(v, list)})
    cats = {k: v for k, v in cand.decisions.items() if not isinstance(v, list)}
    print('   other', cats)
