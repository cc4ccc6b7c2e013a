#!/bin/sh
# alternate new (best ISA: avx2) and the old path (ZRT_CPU_ISA=scalar) 3 times
cd /work/wt-avx2
out=perf/results/issue25
for i in 1 2 3; do
  build/bin/zrt-perf kernels --rounds 9 --json > $out/kernels-avx2-$i.json 2> $out/kernels-avx2-$i.txt
  ZRT_CPU_ISA=scalar build/bin/zrt-perf kernels --rounds 9 --json > $out/kernels-scalar-$i.json 2> $out/kernels-scalar-$i.txt
done
echo finished
