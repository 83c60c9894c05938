import time
from tunecache.store import open_store
from tunecache.search.gradient.training import read_store
st = open_store("sqlite:////tmp/s35/zoo.db")
hw = st.hardware_keys()[0]
read_store(st, hw, limit=1000, workloads=128, per_workload=32)
for i in range(3):
    t0 = time.time(); n = sum(1 for _ in st.iter_records(hardware=hw, valid_only=True, newest_first=True)); t1 = time.time()
    for pw in (32, 16, 8):
        t2 = time.time(); s = read_store(st, hw, limit=1000, workloads=128, per_workload=pw); t3 = time.time()
        print(f"decode all {n}: {t1-t0:.2f}s; read_store pw={pw}: {t3-t2:.2f}s rows {len(s.rows[0])} tilings {len(s.tilings)}")
