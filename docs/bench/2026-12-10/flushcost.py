import time, warnings
warnings.simplefilter("ignore")
import tvm
from tvm import te
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.s_tir.meta_schedule.runner import RunnerInput
from tunecache.tvm_layer.measure import make_builder, make_runner
from tunecache.tvm_layer.target import resolve_target
from tvm import topi
target = resolve_target(None)
for (n, ci, h, co) in ((1, 512, 7, 512), (1, 64, 56, 64)):
    x = te.placeholder((n, ci, h, h), name="x"); w = te.placeholder((co, ci, 3, 3), name="w")
    y = topi.nn.conv2d_nchw(x, w, 1, 1, 1)
    mod = tvm.IRModule({"main": te.create_prim_func([x, w, y])})
    [b] = make_builder(max_workers=0).build([BuilderInput(mod, target)])
    args = ArgInfo.from_prim_func(mod["main"])
    for cold in (True, False, True, False):
        r = make_runner(cold=cold)
        t = time.time()
        secs = []
        for _ in range(20):
            [f] = r.run([RunnerInput(b.artifact_path, "cpu", args)])
            secs.append(sorted(float(s) for s in f.result().run_secs)[len(f.result().run_secs)//2])
        print((ci, h), "cold" if cold else "warm", "wall/cand %.1f ms" % ((time.time() - t) / 20 * 1e3), "median run %.2f ms" % (sorted(secs)[10] * 1e3))
        r.pool.shutdown(wait=True)
