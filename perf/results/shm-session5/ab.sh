#!/bin/bash
# ab.sh — alternates zrt-perf binaries job by job (old and new shm comm):
#   ab.sh <ranks> <rounds> <out.txt> <zrt-perf binary>...
# one line per comm/op/dtype: binary comm op dtype busbw_GB/s memcpy_GB/s busbw/memcpy load1
# NICE="nice -n -15" runs each job at that priority (the other builds on the machine yield).
ranks=$1; rounds=$2; out=$3; shift 3
for i in $(seq $rounds); do for b in "$@"; do
  l=$(cat /proc/loadavg | cut -d' ' -f1)
  ${NICE:-} $b collectives --ranks $ranks --min 16777216 --max 16777216 --json 2>/dev/null | python3 -c "
import json,sys;r=json.load(sys.stdin)
for c in ('mpi','shm'):
  cj=r['comms'][c]
  for p in cj['points']:
    print('$b'.split('/')[-1], c, p['op'], p['dtype'], round(p['busbw_bytes_per_s']/1e9,3), round(cj['memcpy_bytes_per_s']/1e9,3), round(p['busbw_over_memcpy'],3), '$l')
" >> $out
done; done
