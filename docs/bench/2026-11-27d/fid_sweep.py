import os, sys
from tunecache.models import load_model_spec
from tunecache.store import open_store
from tunecache.search.narrow.replay import replay_on
from tunecache.store.records import decode_trace
from tunecache.tvm_layer import frontend, load_tvm
from tunecache.tvm_layer.target import hardware_key, resolve_target
tvm = load_tvm()
from tvm.s_tir.schedule import Schedule, Trace
target = resolve_target(None); hw = hardware_key(target)
store = open_store(os.environ['DB'])
bad = tot = 0
for spec in sys.argv[1:]:
    model, inputs, _ = load_model_spec(spec)
    for t in frontend.extract_tasks(frontend.prepare_for_tuning(frontend.import_model(model, inputs), target), target):
        for i, rec in enumerate(store.best_k(t.key, hw, 3)):
            sch = Schedule(t.mod); Trace.apply_json_to_schedule(decode_trace(rec.trace), sch)
            rep = replay_on(rec, t.mod, target)
            same = rep is not None and sch.mod.script() == rep.mod.script()
            tot += 1; bad += not same
            if not same: print('DIFF', spec, t.name, i)
print('mismatches', bad, 'of', tot)
