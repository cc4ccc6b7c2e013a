#!/bin/bash
# 1-rank tiny GPT, quiet vs cpu 1 kept busy by a shell loop, alternated:
# zrt as a user gets it (2 threads, libgomp's default wait policy, the
# adaptive team on), zrt with passive (the previous launch default), and
# PyTorch eager (torch's own threads); median tok/s of steps 5..60
cd "$(dirname "$0")/../../../build"
zrt() { env -u OMP_WAIT_POLICY OMP_NUM_THREADS=2 "$@" ZRT_LOG_LEVEL=warn bin/train_gpt2 --model tiny --steps 60 2>&1 | awk '/tok\/s/ {for(i=1;i<=NF;i++) if($i=="tok/s") print $(i+1)}' | tail -n +5 | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
tor() { /usr/bin/python3 ../scripts/perf_torch_gpt2.py --model tiny --batch_size 4 --steps 30 --threads 0 --rounds 1 2>/dev/null | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["tokens_per_s"]))'; }
for i in 1 2 3; do
  for busy in 0 1; do
    if [ $busy = 1 ]; then taskset -c 1 sh -c 'while :; do :; done' & bp=$!; fi
    echo "round $i busy $busy load $(cut -d' ' -f1 /proc/loadavg) zrt_adaptive $(zrt) zrt_passive $(zrt OMP_WAIT_POLICY=passive ZRT_ADAPTIVE_THREADS=false) zrt_fixed $(zrt ZRT_ADAPTIVE_THREADS=false) torch $(tor)"
    if [ $busy = 1 ]; then kill $bp; wait $bp 2>/dev/null; fi
  done
done
