#!/bin/bash
# single (0) vs speculative pool without (3/0) and with (3/1) helper placement, quiet then one hog on cpu 1
cd "$(dirname "$0")" && gcc -O2 -fopenmp -o /tmp/zrt-spec spec.c -lpthread && cd /tmp
for busy in 0 1; do
  if [ $busy = 1 ]; then taskset -c 1 sh -c 'while :; do :; done' & bp=$!; sleep 0.5; fi
  for r in 1 2 3; do
    echo "busy $busy round $r: single $(./zrt-spec 0 8 2000 20000 | awk '{print $3}') spec $(./zrt-spec 3 8 2000 20000 200000 0 | awk '{print $3, "stolen", $6, "master-cpu", $10}') spec_placed $(./zrt-spec 3 8 2000 20000 200000 1 | awk '{print $3, "stolen", $6, "master-cpu", $10}') omp $(OMP_NUM_THREADS=2 ./zrt-spec 1 8 2000 20000 | awk '{print $3}') claim $(./zrt-spec 2 8 2000 20000 | awk '{print $3}')"
  done
  if [ $busy = 1 ]; then kill $bp; wait $bp 2>/dev/null; fi
done
pgrep -f "while :" && echo "LEFTOVER HOG" || true
