#!/bin/sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cp /work/wt-avx2/build/bin/zrt-perf /tmp/x/zrt-perf-new
out=/work/wt-avx2/perf/results/issue25
for i in 1 2 3; do
  for n in 2 4; do
    /tmp/zrt-old/build/bin/zrt-perf collectives --ranks $n --min 16MiB --max 16MiB --time 0.1 --alternate 5 --json > $out/coll-old-np$n-$i.json 2> $out/coll-old-np$n-$i.txt
    /tmp/x/zrt-perf-new collectives --ranks $n --min 16MiB --max 16MiB --time 0.1 --alternate 5 --json > $out/coll-new-np$n-$i.json 2> $out/coll-new-np$n-$i.txt
  done
done
echo finished
