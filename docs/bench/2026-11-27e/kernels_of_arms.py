import sys, json
sys.path.insert(0, 'tools')
from pathlib import Path
import bench_newmodel as b
from tunecache.models import load_model_spec
spec = sys.argv[1]
model, inputs, name = load_model_spec(spec)
res = b.kernel_compare(model, tuple(inputs), Path('/tmp/s20/nm128'), b.slug(spec), ["full", "replay", "predicted", "tunecache"], {})
json.dump(res, open(sys.argv[2], 'w'), indent=1, default=str)
print(res.get('vs_full'))
