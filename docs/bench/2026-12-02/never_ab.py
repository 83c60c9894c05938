"""tune="never" (predicted programs only) with session 26's three prediction changes off and on,
plus ONNX Runtime, alternating in one process."""
import os, sys, time, tempfile, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, "/work/main/tools")
import _engines
_engines.set_threads(2)
import torch, onnxruntime as ort
import tunecache
import tunecache.search.predict as P
import tunecache.search.narrow.align as A
spec = sys.argv[1]
module, inputs, name = _engines.load(spec)
cms = {}
for label, on in (("before", False), ("after", True)):
    P.FILL_ACCUMULATORS = on; A.INLINE_ALONG_VECTOR = on; P.ROWS_FROM_TWO_AXES = on
    cms[label] = tunecache.compile(module, example_inputs=inputs, store=os.path.join(tempfile.mkdtemp(), "s.db"), tune="never", progress=False, library_cache=False)
    print(label, cms[label].report.summary(), file=sys.stderr)
p = os.path.join(tempfile.mkdtemp(), "m.onnx")
torch.onnx.export(module, inputs, p, dynamo=False)
so = ort.SessionOptions(); so.intra_op_num_threads = 2
sess = ort.InferenceSession(p, so, providers=["CPUExecutionProvider"])
feed = {i.name: x.numpy() for i, x in zip(sess.get_inputs(), inputs)}
arms = {"before": lambda: cms["before"](*inputs), "after": lambda: cms["after"](*inputs), "ort": lambda: sess.run(None, feed)}
with torch.no_grad():
    want = module(*inputs)
    for k in ("before", "after"):
        got = cms[k](*inputs); print(k, "max abs err", float((got - want).abs().max()), file=sys.stderr)
    T = {k: [] for k in arms}
    for f in arms.values():
        for _ in range(3): f()
    for r in range(int(os.environ.get("ROUNDS", "12"))):
        ks = list(arms); ks = ks[r % 3:] + ks[:r % 3]
        for k in ks:
            for _ in range(5):
                t0 = time.perf_counter(); arms[k](); T[k].append((time.perf_counter() - t0) * 1e3)
import json
out = {}
for k, v in T.items():
    v = sorted(v); out[k] = {"min": round(v[0], 3), "p50": round(v[len(v)//2], 3)}
print(json.dumps({"model": spec, "cpu": "AMD EPYC Zen 3 (family 25 model 1), 2 threads", **out}))
