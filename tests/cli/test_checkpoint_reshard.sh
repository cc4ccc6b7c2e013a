#!/usr/bin/env bash
# test_checkpoint_reshard.sh — native resharding across world sizes: a
# checkpoint saved by 2 ranks at ZeRO stage 1 loads into 4 ranks at stage 3
# (and one saved by 4 ranks at stage 2 into 2 ranks at stage 0); every new
# rank's fp32 master must equal, bitwise, the raw shard dumps the saving run
# wrote next to the checkpoint (the test binary's save/load modes).
set -euo pipefail
B=${ZRT_BUILD_DIR:?}/tests/test_checkpoint_resume
[ -x "$B" ] || { echo "SKIP: $B not built"; exit 77; }
MPI=(mpiexec --oversubscribe --allow-run-as-root --bind-to none --mca btl self,vader)
D=$(mktemp -d /tmp/zrt_reshard.XXXXXX)
trap 'rm -rf "$D"' EXIT
"${MPI[@]}" -n 2 "$B" save "$D/a" 1
"${MPI[@]}" -n 4 "$B" load "$D/a" 3 2 | tee "$D/a.log"
grep -q "reshard world 2 -> 4 stage 3 rank 3 module 2 master: max diff 0 " "$D/a.log"
"${MPI[@]}" -n 4 "$B" save "$D/b" 2
"${MPI[@]}" -n 2 "$B" load "$D/b" 0 4 | tee "$D/b.log"
grep -q "reshard world 4 -> 2 stage 0 rank 1 module 0 master: max diff 0 " "$D/b.log"
echo "reshard 2/stage1 -> 4/stage3 and 4/stage2 -> 2/stage0: masters bitwise equal"
