"""The Relax VM's own cost: a compiled zoo model through the VM against the same calls replayed
from Python with their recorded arguments (and ``cm(*inputs)``), alternating rounds.

    python vm_overhead.py MODEL STORE
"""
import os
import statistics
import sys
import time

import tvm
from tvm import relax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recorded import recorded_calls  # noqa: E402 - the sibling script's recorder

cm, _module, inputs, x, calls, _vm = recorded_calls(sys.argv[1], sys.argv[2])
for _ in range(5):
    cm(*inputs)
vm2 = relax.VirtualMachine(cm.executable, tvm.cpu())
print("n calls", len(calls), sorted({s for _, s, _ in calls if not s.startswith("fused") and "conv" not in s})[:20])
def seq():
    for f, s, a in calls: f(*a)
def e2e(): vm2["main"](x)
def cmcall(): cm(*inputs)
for f in (seq, e2e, cmcall): f(); f()
res = {k: [] for k in ("seq", "e2e", "cm")}
for r in range(30):
    for k, f in (("seq", seq), ("e2e", e2e), ("cm", cmcall)):
        t = time.perf_counter(); f(); res[k].append(time.perf_counter() - t)
for k, v in res.items(): print(k, "median ms", round(statistics.median(v)*1e3, 3), "min", round(min(v)*1e3, 3))
# empty python loop overhead
def py():
    for f, s, a in calls: pass
t=time.perf_counter(); py(); print("py loop us", (time.perf_counter()-t)*1e6)
