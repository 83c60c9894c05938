"""Session 29: what the replay's code check costs: replay_misses with and without it, one process,
3 alternating rounds, and the CPU seconds spent building kernels for it.

    python check_cost.py WARM.db bert_base:seq_len=64 bert_base:seq_len=256 vgg16
"""
import sys, time, statistics, json
from tunecache import replay
from tunecache.models import load_model_spec
from tunecache.store import open_store
from tunecache.tvm_layer import frontend, scheduled
from tunecache.tvm_layer import codecheck
from tunecache.tvm_layer.target import hardware_key, resolve_target
target = resolve_target(None); hw = hardware_key(target)
st = open_store(sys.argv[1])
spent = []
orig = codecheck.accumulators_in_memory
def timed(mod, tgt):
    t0 = time.perf_counter(); r = orig(mod, tgt); spent.append(time.perf_counter() - t0); return r
codecheck.accumulators_in_memory = timed
out = {}
for spec in sys.argv[2:]:
    model, inputs, _ = load_model_spec(spec)
    mod = frontend.prepare_for_tuning(frontend.import_model(model, tuple(inputs)), target)
    tasks = frontend.extract_tasks(mod, target)
    walls = {"on": [], "off": []}
    for r in range(3):
        for arm in ("on", "off") if r % 2 == 0 else ("off", "on"):
            replay.CODE_CHECKED = frozenset({"matmul", "batch_matmul"}) if arm == "on" else frozenset()
            scheduled.clear(); spent.clear()
            t0 = time.perf_counter(); replay.replay_misses(tasks, target, hw, st); walls[arm].append(time.perf_counter() - t0)
            if arm == "on": n, s = len(spent), sum(spent)
    out[spec] = {"checks": n, "check_cpu_s": round(s, 3), "replay_misses_s_on": [round(x, 2) for x in walls["on"]], "off": [round(x, 2) for x in walls["off"]]}
    print(spec, out[spec], flush=True)
