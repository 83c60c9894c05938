cd /work/main
for t in 1 2 1 2; do
  python tools/bench_compile.py --engines --models resnet18 mobilenet_v2 --budgets 128 --rounds 9 --calls 5 --quiet-wait 5 --no-max-autotune --no-torch-compile --untuned-rounds 0 --no-profile --threads $t --store-dir DIR --out OUT/run_threads${t}_$(date +%s).json > OUT/thr_$t.log 2>&1
done
