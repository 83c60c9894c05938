"""Per-call time distribution of one stored kernel (TVM) vs the same conv in ORT, in one process."""
import sys, time, os, warnings
warnings.simplefilter("ignore")
import numpy as np, tvm
from tunecache.search.narrow.replay import replay_on
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _stored import stored  # noqa: E402
db, name = sys.argv[1], sys.argv[2]
mod, target, (tr,), _ = stored(db, name)
sch = replay_on(tr, mod, target)
from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
lib = tvm.tirx.build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(sch.mod), target)
f = lib["main"]
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
args = [tvm.runtime.tensor(np.random.rand(*[int(s) for s in a.shape]).astype(a.dtype)) for a in ArgInfo.from_entry_func(sch.mod, remove_preproc=True)]
print([tuple(a.shape) for a in args])
def dist(fn, n=400):
    for _ in range(20): fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter(); fn(); ts.append((time.perf_counter() - t) * 1e3)
    ts.sort(); return ts[0], ts[len(ts)//2], ts[int(len(ts)*.9)]
import onnxruntime as ort
from onnx import helper, TensorProto
x = args[0]; shp = [int(s) for s in x.shape]  # NHWC
H, W, C = shp[1], shp[2], shp[3]
KH = KW = int(sys.argv[3]); CI = C; CO = int(args[-1].shape[-1])
node = helper.make_node("Conv", ["x", "w", "b"], ["y0"], pads=[KH//2]*4, kernel_shape=[KH, KW])
relu = helper.make_node("Relu", ["y0"], ["y"])
g = helper.make_graph([node, relu], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, W])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                      [helper.make_tensor("w", TensorProto.FLOAT, [CO, CI, KH, KW], np.random.rand(CO*CI*KH*KW).astype(np.float32)),
                       helper.make_tensor("b", TensorProto.FLOAT, [CO], np.zeros(CO, np.float32))])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
o = ort.SessionOptions(); o.intra_op_num_threads = int(os.environ.get("TVM_NUM_THREADS", "2"))
o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
s = ort.InferenceSession(m.SerializeToString(), o, providers=["CPUExecutionProvider"])
xin = np.random.rand(1, C, H, W).astype(np.float32)
for r in range(3):
    print("tvm min/p50/p90", ["%.3f" % v for v in dist(lambda: f(*args))], " ort", ["%.3f" % v for v in dist(lambda: s.run(None, {"x": xin}))])
def raw(fn, n=400):
    for _ in range(20): fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter(); fn(); ts.append((time.perf_counter() - t) * 1e3)
    return ts
a = raw(lambda: f(*args)); b = raw(lambda: s.run(None, {"x": xin}))
import collections
for nm, ts in (("tvm", a), ("ort", b)):
    lo = min(ts); h = collections.Counter(int((t - lo) / lo * 20) for t in ts)
    print(nm, "bins of 5% above min:", [h.get(i, 0) for i in range(12)])
    print(nm, "first 40:", " ".join("%.2f" % t for t in ts[:40]))
ta, tb = [], []
for _ in range(600):
    t = time.perf_counter(); f(*args); ta.append(time.perf_counter() - t)
    t = time.perf_counter(); s.run(None, {"x": xin}); tb.append(time.perf_counter() - t)
ta.sort(); tb.sort()
print("interleaved p10/p50: tvm %.3f %.3f ort %.3f %.3f ratio p50 %.3f" % (ta[60]*1e3, ta[300]*1e3, tb[60]*1e3, tb[300]*1e3, ta[300]/tb[300]))
