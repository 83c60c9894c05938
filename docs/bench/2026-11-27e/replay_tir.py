import sys
exec(open(__import__('pathlib').Path(__file__).with_name('replay_tiles.py')).read().split("for rank, rec")[0])
from tunecache.search.narrow.replay import replay_on
from tunecache.tvm_layer.convert import stored_module
rec = st.best_k(src.key, hw, 3)[int(sys.argv[2])]
sch = replay_on(rec, t.mod, tgt)
own = replay_on(rec, stored_module(st, src.key), tgt)
import re
for name, s in (("on 256 (replayed)", sch), ("on source", own)):
    txt = s.mod.script()
    lines = [l for l in txt.splitlines() if re.search(r"for |parallel|vectorized|unroll|T.alloc_buffer|pragma", l)]
    print("==", name); print("\n".join(lines[:40]))
