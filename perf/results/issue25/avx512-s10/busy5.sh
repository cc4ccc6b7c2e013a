# busy4.sh with runs long enough for this machine (a tiny-GPT step takes
# 2-5 ms here: 150 steps were over before the adaptive team settled):
# zrt 2000 steps, PyTorch 400; median tok/s of the steps after the 5th.
cd "$(dirname "$0")/../../../../build"
zrt() { env -u OMP_WAIT_POLICY "$@" ZRT_LOG_LEVEL=warn bin/train_gpt2 --model tiny --steps 2000 2>&1 | awk '/tok\/s/ {for(i=1;i<=NF;i++) if($i=="tok/s") print $(i+1)}' | tail -n +5 | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
tor() { /usr/bin/python3 ../scripts/perf_torch_gpt2.py --model tiny --batch_size 4 --steps 400 --threads $1 --rounds 1 2>/dev/null | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["tokens_per_s"]))'; }
for i in 1 2 3; do
  for busy in 0 1; do
    if [ $busy = 1 ]; then taskset -c 1 sh -c 'while :; do :; done' & bp=$!; fi
    echo "round $i busy $busy load $(cut -d' ' -f1 /proc/loadavg) zrt_adaptive $(zrt OMP_NUM_THREADS=2) zrt_1thread $(zrt OMP_NUM_THREADS=1 ZRT_ADAPTIVE_THREADS=false) zrt_fixed2 $(zrt OMP_NUM_THREADS=2 ZRT_ADAPTIVE_THREADS=false) torch0 $(tor 0) torch1 $(tor 1) torch2 $(tor 2)"
    if [ $busy = 1 ]; then kill $bp; wait $bp 2>/dev/null; fi
  done
done
