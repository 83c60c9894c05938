"""One stored kernel, variants of its decisions, ONNX Runtime's Conv of the same shape and a few
probes of the core's shared resources, called round robin on one thread (session 41, #21).

    python kernel_phases.py STORE WORKLOAD_ID '[{"36": 4}, {"20": [1, 7, 8, 1], "22": [1, 1, 1, 64]}]'

Each variant replaces decisions of the stored best record (site index -> value) and is replayed
and postprocessed by the narrowed search's Materializer, so a compute location can move too.
Kernels are built as MetaSchedule's builder builds a candidate: without the weight layout
rewrite block, whose copy of the weights the compiled model does once at load.

Rounds are split into fast and slow by the stored best's own time (midway between its 10th and
90th percentile, or ``THR`` us): the VM switches between two speeds every few tens of
milliseconds, and a round (one call of each) mostly falls in one.

Environment: ``PER`` rounds (200), ``ORT=0`` leaves ONNX Runtime out, ``PROBES=1`` adds
the probes (OpenBLAS sgemm 192^3, L2-sized copies, L3-sized copies, a 64 MB copy, a Python loop),
``ASM=N`` prints variant N's innermost FMA loop instead of timing, ``OUT`` an .npy of every call.
"""
import copy
import json
import os
import re
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
warnings.simplefilter("ignore")
import numpy as np  # noqa: E402

from tunecache.tvm_layer import load_tvm  # noqa: E402

tvm = load_tvm("llvm")
from tvm.s_tir.meta_schedule.arg_info import ArgInfo  # noqa: E402
from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock  # noqa: E402

from tunecache.search.narrow.align import Materializer, Skeleton  # noqa: E402
from tunecache.search.remeasure import _scheduled  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
from _stored_kernel import stored_kernel  # noqa: E402

db, wid, variants = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
target, mod, best = stored_kernel(db, wid)

mat = Materializer(mod, target, 0)
skeleton = Skeleton(0, best)
programs, names = [_scheduled(mod, best)], ["stored best"]
for v in variants:
    decisions = {**copy.deepcopy(skeleton.decisions), **{int(k): x for k, x in v.items()}}
    cand = mat.materialize(skeleton, decisions)
    if cand is None:
        print("does not replay:", v)
        continue
    programs.append(cand.sch.mod)
    names.append(json.dumps(v))

dev = tvm.cpu()
if os.environ.get("ASM"):
    shown = programs[int(os.environ["ASM"])]
    lib = tvm.tirx.build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(shown), target)
    asm = lib.inspect_source("asm").splitlines()
    fma = [i for i, line in enumerate(asm) if "vfmadd" in line]
    start = max(i for i in range(fma[0]) if re.match(r"^\.LBB", asm[i]))
    end = next(i for i in range(fma[0], len(asm)) if re.match(r"^\s*j\w+\s+\.LBB", asm[i]))
    body = [line for line in asm[start:end + 1] if line.strip() and not line.strip().startswith((".", "#"))]
    print("\n".join(body))
    print(f"{len(body) - 1} instructions, {sum('vfmadd' in line for line in body)} FMAs")
    sys.exit()

calls = []
for prog in programs:
    prog = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(prog)
    f = tvm.tirx.build(prog, target)["main"]
    args = [tvm.runtime.tensor(np.random.rand(*[int(s) for s in a.shape]).astype(a.dtype), dev)
            for a in ArgInfo.from_prim_func(prog["main"])]
    calls.append(lambda f=f, a=args: f(*a))

if os.environ.get("PROBES"):
    a, b = np.random.rand(192, 192).astype(np.float32), np.random.rand(192, 192).astype(np.float32)
    c = np.empty_like(a)
    l2s, l2d = np.random.rand(16 * 1024), np.empty(16 * 1024)  # 128 KB each
    l3s, l3d = np.random.rand(512 * 1024), np.empty(512 * 1024)  # 4 MB each
    ds, dd = np.random.rand(8 * 1024 * 1024), np.empty(8 * 1024 * 1024)  # 64 MB each

    def sgemm() -> None:
        for _ in range(100):
            np.dot(a, b, out=c)

    def copies(dst: np.ndarray, src: np.ndarray, n: int) -> None:
        for _ in range(n):
            np.copyto(dst, src)

    def pyloop() -> None:
        x = 0
        for i in range(60000):
            x += i

    probes = {"sgemm 192 x100": sgemm,
              "copy 128 KB x300": lambda: copies(l2d, l2s, 300),
              "copy 4 MB x6": lambda: copies(l3d, l3s, 6),
              "copy 64 MB": lambda: copies(dd, ds, 1),
              "python loop": pyloop}
    calls += list(probes.values())
    names += list(probes)

if os.environ.get("ORT", "1") == "1":
    import onnxruntime as ort
    import torch

    shapes = [[int(s) for s in a.shape] for a in ArgInfo.from_prim_func(mod["main"])]
    (_, h, w, ci), co = shapes[0], shapes[-1][3]
    kh = shapes[1][0]
    conv = torch.nn.Sequential(torch.nn.Conv2d(ci, co, kh, padding=kh // 2), torch.nn.ReLU()).eval()
    x = torch.rand(1, ci, h, w)
    path = os.path.join(tempfile.mkdtemp(), "conv.onnx")
    torch.onnx.export(conv, (x,), path, dynamo=False)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: x.numpy()}
    calls.append(lambda: sess.run(None, feed))
    names.append("ONNX Runtime Conv+ReLU")

for call in calls:
    for _ in range(5):
        call()
per = int(os.environ.get("PER", "200"))
times = np.zeros((len(calls), per))
for r in range(per):
    for i, call in enumerate(calls):
        t0 = time.perf_counter()
        call()
        times[i, r] = (time.perf_counter() - t0) * 1e6
if os.environ.get("OUT"):
    np.save(os.environ["OUT"], times)

ref = times[0]
thr = float(os.environ.get("THR", "0")) or (np.percentile(ref, 10) + np.percentile(ref, 90)) / 2
fast, slow = ref < thr, ref >= thr
print(f"workload {wid}: {per} rounds, {int(fast.sum())} fast, {int(slow.sum())} slow (threshold {thr:.0f} us)")
last = names[-1].startswith("ONNX")
rows = []
for i, name in enumerate(names):
    f, s = float(np.median(times[i][fast])), float(np.median(times[i][slow]))
    row = {"program": name, "fast_us": round(f), "slow_us": round(s), "slow_over_fast": round(s / f, 3)}
    if last:
        row["over_ort_fast"] = round(f / float(np.median(times[-1][fast])), 3)
        row["over_ort_slow"] = round(s / float(np.median(times[-1][slow])), 3)
    rows.append(row)
    print(json.dumps(row))
