import sys, time, shutil, functools
from tunecache.models import load_model_spec
from tunecache.tvm_layer import frontend
import tunecache, tunecache.replay as rp, tunecache.search.gradient.training as tr, tunecache.pipeline as pl
T = {}
def wrap(mod, name):
    f = getattr(mod, name)
    @functools.wraps(f)
    def g(*a, **k):
        t0 = time.time()
        try: return f(*a, **k)
        finally: T[name] = T.get(name, 0) + time.time() - t0
    setattr(mod, name, g)
for m, n in [(rp, "replay_misses"), (rp, "second_opinion"), (tr, "read_store"), (tr, "start_model"), (frontend, "build"), (frontend, "prepare_for_tuning"), (frontend, "import_model")]:
    wrap(m, n)
import tunecache.search.predict as pr; wrap(pr, "predict_task")
spec, db = sys.argv[1], sys.argv[2]
model, inputs, _ = load_model_spec(spec)
inputs = tuple(inputs) if inputs is not None else ()
frontend.import_model(model, inputs); T.clear()
shutil.copy(db, "/tmp/s35/st_copy.db")
t0 = time.time()
if sys.argv[3] == "untuned":
    frontend.build(frontend.prepare_for_tuning(frontend.import_model(model, inputs), None), None)
else:
    tunecache.compile(model, example_inputs=inputs, store="sqlite:////tmp/s35/st_copy.db", tune="never", progress=False, library_cache=False)
print(sys.argv[3], "wall %.2f" % (time.time() - t0), {k: round(v, 2) for k, v in T.items()})
