#!/bin/sh
# the same AdamW comparison with OMP_WAIT_POLICY=passive for both (what zrt launch now sets)
out=/work/wt-avx2/perf/results/issue25
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive
for i in 1 2; do
  /tmp/x/zrt-perf-new2 optimizer --elements 16M --grad_dtype fp32 --json > $out/optim-passive-new-$i.json 2> $out/optim-passive-new-$i.txt
  /tmp/x/dsvenv/bin/python /tmp/x/ds_adam.py 16777216 5 2 > $out/optim-passive-deepspeed-$i.json 2> $out/optim-passive-deepspeed-$i.txt
done
echo finished
