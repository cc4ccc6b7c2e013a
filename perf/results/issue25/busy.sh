#!/bin/bash
# 1-rank GPT tiny fp32: quiet vs one core kept busy (a shell loop pinned to cpu 1), threads 2 / 1 /
# 2 with OMP_WAIT_POLICY=passive, alternated; median tok/s of steps 5..30
cd /work/wt-avx2/build
run() { env "$@" ZRT_LOG_LEVEL=warn bin/train_gpt2 --model tiny --steps 30 2>&1 | awk '/tok\/s/ {for(i=1;i<=NF;i++) if($i=="tok/s") print $(i+1)}' | tail -n +5 | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
for i in 1 2; do
  for busy in 0 1; do
    if [ $busy = 1 ]; then taskset -c 1 sh -c 'while :; do :; done' & bp=$!; fi
    for cfg in "OMP_NUM_THREADS=2" "OMP_NUM_THREADS=1" "OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive"; do
      echo "round $i busy $busy $cfg load $(cut -d' ' -f1 /proc/loadavg) tok/s $(run $cfg)"
    done
    if [ $busy = 1 ]; then kill $bp; wait $bp 2>/dev/null; fi
  done
done
