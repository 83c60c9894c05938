import sys, warnings; warnings.simplefilter("ignore")
sys.path.insert(0, "/work/main/tools")
import _engines
_engines.set_threads(2)
from pathlib import Path
import tunecache
spec = sys.argv[1]
module, inputs, name = _engines.load(spec)
rows = {}
for s in sys.argv[2:]:
    cm = tunecache.compile(module, example_inputs=inputs, store=s, progress=False, library_cache=Path(s).parent / "libs")
    for t in cm.report.tasks:
        rows.setdefault(t.name, []).append((t.latency_s or 0) * 1e6)
for n, v in rows.items():
    print(f"{n[:50]:50s}", " ".join(f"{x:9.1f}" for x in v), f"{v[1]/v[0] if v[0] else 0:6.2f}")
