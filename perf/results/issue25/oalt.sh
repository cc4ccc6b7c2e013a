#!/bin/sh
out=/work/wt-avx2/perf/results/issue25
export OMP_NUM_THREADS=2
cp /work/wt-avx2/build/bin/zrt-perf /tmp/x/zrt-perf-new2
for i in 1 2 3; do
  /tmp/zrt-old/build/bin/zrt-perf optimizer --elements 16M --grad_dtype fp32 --json > $out/optim-old-$i.json 2> $out/optim-old-$i.txt
  /tmp/x/zrt-perf-new2 optimizer --elements 16M --grad_dtype fp32 --json > $out/optim-new-$i.json 2> $out/optim-new-$i.txt
  /tmp/x/dsvenv/bin/python /tmp/x/ds_adam.py 16777216 5 2 > $out/optim-deepspeed-$i.json 2> $out/optim-deepspeed-$i.txt
done
echo finished
