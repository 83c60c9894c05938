"""Session 43 (#21): one stored kernel against variants of its program and ONNX Runtime's
Conv+ReLU of the same shape, one thread, round robin.

    PER=80 python kernel_variants.py STORE WORKLOAD_ID '[VARIANT, ...]'

A VARIANT is ``"predicted"`` (today's predict_program) or a dict:
``{"dec": {site: decision}}`` replaces decisions of the stored best record;
``{"split": {split_index: [factors]}}`` gives a Split literal factors (``null`` for one level:
TVM takes the ceiling and predicates the last tile, a non-perfect tile);
``"part": ["xx_2"]`` then applies ``Schedule.loop_partition`` to the first loop of the conv's
update and init blocks whose name starts so, as [extent - 1, rest].
Each variant is replayed by the narrowed search's Materializer (postprocessors run again, so the
weight layout follows the new tiles) and built as MetaSchedule's builder builds (no layout
rewrite block). Prints each program's FMA count in the assembly, then per program the median,
the median of the fast rounds, and paired medians over the stored best and over ORT.
(MISMATCH lines compare outputs of programs whose weight layouts differ: ignore them.)
"""
import copy, json, os, sys, time, warnings, tempfile
os.environ.setdefault("TVM_NUM_THREADS", "1")
warnings.simplefilter("ignore")
import numpy as np
from tunecache.tvm_layer import load_tvm
tvm = load_tvm("llvm")
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
from tunecache.search.narrow.align import Materializer, Skeleton
from tunecache.search.remeasure import _scheduled
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3] / "tools"))
from _stored_kernel import stored_kernel

db, wid, variants = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
target, mod, best = stored_kernel(db, wid)
mat = Materializer(mod, target, 0)
sk = Skeleton(0, best)
if os.environ.get("SHOW"):
    for i, ins in enumerate(sk.insts):
        print(i, json.dumps(ins)[:160])
    print(sk.decisions); sys.exit()

def partition(sch, level_prefixes):
    for blk in [b for b in ("conv2d_nhwc_update", "conv2d_nhwc_init", "conv2d_nchw_update", "conv2d_nchw_init")]:
        try:
            b = sch.get_sblock(blk)
        except Exception:
            continue
        loops = sch.get_loops(b)
        names = [sch.get(l).loop_var.name for l in loops]
        for pre in level_prefixes:
            idx = [i for i, n in enumerate(names) if n.startswith(pre)]
            if not idx: continue
            l = loops[idx[0]]
            ext = int(sch.get(l).extent)
            if ext > 1:
                sch.loop_partition(l, [ext - 1, None])
            break

programs, names = [_scheduled(mod, best)], ["stored best"]
for v in variants:
    if v == "predicted":
        from tunecache.search.predict import predict_program
        pr = predict_program(mod, target)
        print("predicted:", pr.how, pr.decisions)
        programs.append(pr.sch.mod); names.append("predicted"); continue
    insts = copy.deepcopy(sk.insts)
    for at, factors in v.get("split", {}).items():
        kind, inputs, attrs, outputs = insts[int(at)]
        assert kind == "Split"
        insts[int(at)] = [kind, [inputs[0], *factors], attrs, outputs]
    decs = {**sk.decisions, **{int(k): x for k, x in v.get("dec", {}).items()}}
    s2 = Skeleton(0, [insts, [[i, decs[i]] for i in sorted(decs)]])
    cand = mat.materialize(s2, {**s2.decisions})
    if cand is None:
        print("no replay", v); continue
    sch = cand.sch
    if v.get("part"):
        partition(sch, v["part"])
    programs.append(sch.mod); names.append(json.dumps(v))

dev = tvm.cpu()
calls, outs, inputs = [], [], None
for name, prog in zip(names, programs):
    prog = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(prog)
    lib = tvm.tirx.build(prog, target)
    asm = lib.inspect_source("asm").splitlines()
    print(name, "fma", sum("vfmadd" in l for l in asm), "mem-fma", sum(("vfmadd" in l and "(" in l) for l in asm),
          "insert", sum("vinsert" in l for l in asm), flush=True)
    infos = ArgInfo.from_prim_func(prog["main"])
    rng = np.random.default_rng(0)
    inputs = [rng.random([int(s) for s in a.shape]).astype(a.dtype) for a in infos]
    args = [tvm.runtime.tensor(x.copy(), dev) for x in inputs]
    f = lib["main"]; f(*args); outs.append(args[-1].numpy())
    calls.append(lambda f=f, a=args: f(*a))
for o, n in zip(outs, names):
    if o.shape != outs[0].shape: continue
    err = float(np.abs(o - outs[0]).max() / (np.abs(outs[0]).max() + 1e-9))
    if err > 1e-4: print("MISMATCH", n, err)
if os.environ.get("ORT", "1") == "1":
    import onnxruntime as ort, torch
    shapes = [[int(s) for s in a.shape] for a in ArgInfo.from_prim_func(mod["main"])]
    (_, h, w, ci), co = shapes[0], shapes[-1][3]
    kh = shapes[1][0]
    stride = int(os.environ.get("STRIDE", "1"))
    conv = torch.nn.Sequential(torch.nn.Conv2d(ci, co, kh, padding=kh // 2, stride=stride), torch.nn.ReLU()).eval()
    x = torch.rand(1, ci, h, w)
    path = os.path.join(tempfile.mkdtemp(), "conv.onnx")
    torch.onnx.export(conv, (x,), path, dynamo=False)
    opts = ort.SessionOptions(); opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: x.numpy()}
    calls.append(lambda: sess.run(None, feed)); names.append("ORT Conv+ReLU")
for c in calls:
    for _ in range(3): c()
per = int(os.environ.get("PER", "100"))
times = np.zeros((len(calls), per))
for r in range(per):
    for i, c in enumerate(calls):
        t0 = time.perf_counter(); c(); times[i, r] = (time.perf_counter() - t0) * 1e6
ref = times[0]
thr = (np.percentile(ref, 10) + np.percentile(ref, 90)) / 2
fast = ref < thr
for i, n in enumerate(names):
    print(json.dumps({"program": n, "median_us": round(float(np.median(times[i]))),
                      "fast_us": round(float(np.median(times[i][fast]))),
                      "paired_over_best": round(float(np.median(times[i] / times[0])), 3),
                      "paired_over_ort": round(float(np.median(times[i] / times[-1])), 3)}))
