import sys, shutil, statistics, time, warnings, json
warnings.simplefilter("ignore")
import torch; torch.set_num_threads(2)
import tunecache
from tunecache.models import load_model_spec
spec, d = sys.argv[1], sys.argv[2]
slug = spec.replace(":", "_")
model, inputs, _ = load_model_spec(spec); inputs = tuple(inputs)
cms = {}
for arm in sys.argv[3:]:
    db = shutil.copy(f"{d}/{slug}-{arm}.db", f"/tmp/exp/ab_{arm}.db")
    cms[arm] = tunecache.compile(model, example_inputs=inputs, store=db, tune="never", progress=False, library_cache=False)
    print(arm, cms[arm].report.summary())
names = list(cms); ts = {n: [] for n in names}
for r in range(12):
    k = r % len(names)
    for n in names[k:] + names[:k]:
        cms[n](*inputs); t = time.perf_counter(); cms[n](*inputs); cms[n](*inputs); ts[n].append((time.perf_counter() - t) / 2)
print(json.dumps({n: round(statistics.median(v) * 1e3, 2) for n, v in ts.items()}))
for n in names: print(n, [round(x*1e3,1) for x in ts[n]])
