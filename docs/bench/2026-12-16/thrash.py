import numpy as np, os, sys, time
os.sched_setaffinity(0, {1})
n = int(sys.argv[1]) if len(sys.argv) > 1 else 64
a = np.ones(n * 2**20 // 8); b = np.empty_like(a)
end = time.time() + float(sys.argv[2]) if len(sys.argv) > 2 else 1e18
while time.time() < end:
    np.copyto(b, a)
