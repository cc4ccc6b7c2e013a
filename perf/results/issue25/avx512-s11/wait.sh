#!/bin/bash
# mode 3 (speculative, placed) against mode 4 (the same, but a master that took
# a chunk back waits for the helper to leave it) and one thread; cpu 1 busy.
cd "$(dirname "$0")" && gcc -O2 -fopenmp -o /tmp/zrt-spec spec.c -lpthread && cd /tmp
taskset -c 1 sh -c 'while :; do :; done' &
bp=$!
sleep 1
for r in 1 2 3; do
  echo "round $r: single $(./zrt-spec 0 8 2000 20000 | awk '{print $3}') spec_placed $(./zrt-spec 3 8 2000 20000 200000 1 | awk '{print $3, "taken-back", $6}') spec_wait $(./zrt-spec 4 8 2000 20000 200000 1 | awk '{print $3, "taken-back", $6}')"
done
kill $bp
wait $bp 2>/dev/null
