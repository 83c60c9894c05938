import json, sys
d=json.load(open(sys.argv[1]))
for m in d["models"]:
  if "arms" not in m: continue
  print("==", m["model"])
  arms=[a for a in ("topk","replay","tunecache","full") if a in m["arms"]]
  rows={}
  for a in arms:
    for t in m["arms"][a]["per_task"]:
      rows.setdefault(t["name"],{"w":t["weight"]})[a]=(t["latency_s"], t["outcome"])
  tot={a:0.0 for a in arms}
  for n,r in rows.items():
    vals=[r.get(a,(None,""))[0] for a in arms]
    if all(v is not None for v in vals):
      for a,v in zip(arms,vals): tot[a]+=v*r["w"]
    print(f"{n[:32]:32s} w{r['w']:<3}", "  ".join(f"{a[:4]} {('%8.1f'%(v*1e6)) if v else '       -'} {r.get(a,(0,''))[1][:5]:5s}" for a,v in zip(arms,vals)))
  print("weighted sum where all arms have a latency (us):", {a: round(v*1e6) for a,v in tot.items()})
