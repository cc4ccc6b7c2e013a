#!/bin/sh
# Issue 25, the AVX-512 half (session 10, 2-core AMD EPYC with AVX-512):
# every kernel path (ZRT_CPU_ISA forced), shm collectives at 16 MiB (2 and 4
# ranks), AdamW against DeepSpeed CPUAdam -O3, the perf table (GPT against
# PyTorch eager), the busy core (busy4.sh). Run from the repository root on a
# quiet machine; each JSON records the load.
set -u
B=build/bin
out=perf/results/issue25/avx512-s10
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
log() { echo "$(date +%T) load $(cut -d' ' -f1 /proc/loadavg) $*"; }
# DeepSpeed's JIT build of cpu_adam first, outside the timed runs
/tmp/dsvenv/bin/python perf/results/issue25/ds_adam.py 1048576 1 2 >/dev/null 2>&1
for i in 1 2 3; do
  for isa in avx512 avx2 scalar; do
    log "kernels $isa $i"
    ZRT_CPU_ISA=$isa $B/zrt-perf kernels --rounds 9 --json >$out/kernels-$isa-$i.json 2>$out/kernels-$isa-$i.txt
  done
done
for i in 1 2 3; do
  for n in 2 4; do
    log "collectives np$n $i"
    $B/zrt-perf collectives --ranks $n --min 16MiB --max 16MiB --time 0.1 --alternate 5 --json >$out/coll-np$n-$i.json 2>$out/coll-np$n-$i.txt
  done
done
for i in 1 2 3; do
  log "optimizer $i"
  OMP_NUM_THREADS=2 $B/zrt-perf optimizer --elements 16M --grad_dtype fp32 --json >$out/optim-zrt-$i.json 2>$out/optim-zrt-$i.txt
  /tmp/dsvenv/bin/python perf/results/issue25/ds_adam.py 16777216 5 2 >$out/optim-deepspeed-$i.json 2>$out/optim-deepspeed-$i.txt
done
log "perf table"
ZRT_TABLE_OPT_ELEMENTS=16777216 OUT_DIR=$out/table ZRT_PYTHON=/usr/bin/python3 scripts/perf-table.sh >$out/perf-table.log 2>&1
log "busy core"
sh perf/results/issue25/busy4.sh >$out/busy4.txt 2>&1
log finished
