#!/bin/sh
# Session 10, second quiet window: AdamW against DeepSpeed CPUAdam (its
# cpu_adam op needs Debian's libtorch-dev headers, missing in run.sh's
# window), three more collective jobs, the busy core with longer runs.
set -u
B=build/bin
out=perf/results/issue25/avx512-s10
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
log() { echo "$(date +%T) load $(cut -d' ' -f1 /proc/loadavg) $*"; }
log "deepspeed build"
/tmp/dsvenv/bin/python perf/results/issue25/ds_adam.py 1048576 1 2 >$out/ds-build.txt 2>&1
for i in 1 2 3; do
  log "optimizer $i"
  OMP_NUM_THREADS=2 $B/zrt-perf optimizer --elements 16M --grad_dtype fp32 --json >$out/optim-zrt-$i.json 2>$out/optim-zrt-$i.txt
  /tmp/dsvenv/bin/python perf/results/issue25/ds_adam.py 16777216 5 2 >$out/optim-deepspeed-$i.json 2>$out/optim-deepspeed-$i.txt
done
for i in 4 5 6; do
  for n in 2 4; do
    log "collectives np$n $i"
    $B/zrt-perf collectives --ranks $n --min 16MiB --max 16MiB --time 0.1 --alternate 5 --json >$out/coll-np$n-$i.json 2>$out/coll-np$n-$i.txt
  done
done
log "busy core"
sh $out/busy5.sh >$out/busy5.txt 2>&1
log finished
