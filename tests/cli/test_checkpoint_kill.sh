#!/usr/bin/env bash
# test_checkpoint_kill.sh — kill -9 at random moments of a run that saves
# after every optimizer step, over and over; after each kill the previous
# checkpoint must load and training resumes. At the end the run that was
# killed N times and an uninterrupted run hold the same final weights:
# their consolidated safetensors files are byte-identical.
# ZRT_CKPT_SLOW_US stretches every checkpoint write so kills land inside saves.
set -uo pipefail
B=${ZRT_BUILD_DIR:?}/tests/test_checkpoint_resume
Z=${ZRT_BIN:?}/zrt
[ -x "$B" ] && [ -x "$Z" ] || { echo "SKIP: test binaries not built"; exit 77; }
MPI=(mpiexec --oversubscribe --allow-run-as-root --bind-to none --mca btl self,vader)
D=$(mktemp -d /tmp/zrt_kill.XXXXXX)
trap 'rm -rf "$D"' EXIT
STEPS=12
export ZRT_LOG_LEVEL=error ZRT_TEST_HOOKS=1 ZRT_CKPT_SLOW_US=15000
"${MPI[@]}" -n 2 "$B" loop "$D/ref" 1 $STEPS >/dev/null || { echo "FAIL: uninterrupted run"; exit 1; }
kills=0
for i in $(seq 1 40); do
  "${MPI[@]}" -n 2 "$B" loop "$D/run" 1 $STEPS >"$D/log" 2>&1 &
  pid=$!
  sleep "0.$(( (RANDOM % 9) + 1 ))$(( RANDOM % 10 ))"
  if kill -0 $pid 2>/dev/null && [ "$(cat "$D/run/latest" 2>/dev/null)" != "step_$STEPS" ]; then
    # SIGKILL the ranks themselves (children of mpiexec), then mpiexec
    pkill -9 -P $pid 2>/dev/null; kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    kills=$((kills + 1))
    latest=$(cat "$D/run/latest" 2>/dev/null || echo none)
    echo "kill $kills: latest=$latest"
  else
    wait $pid; rc=$?
    [ $rc -eq 0 ] || { echo "FAIL: a resumed run failed (rc $rc):"; cat "$D/log"; exit 1; }
    [ "$(cat "$D/run/latest")" = "step_$STEPS" ] && break
  fi
done
[ "$(cat "$D/run/latest" 2>/dev/null)" = "step_$STEPS" ] || "${MPI[@]}" -n 2 "$B" loop "$D/run" 1 $STEPS \
  || { echo "FAIL: final resume"; exit 1; }
echo "killed $kills time(s)"
[ $kills -ge 3 ] || { echo "FAIL: fewer than 3 kills landed; the test proved nothing"; exit 1; }
"$Z" consolidate "$D/ref" "$D/ref.safetensors" >/dev/null
"$Z" consolidate "$D/run" "$D/run.safetensors" >/dev/null
cmp "$D/ref.safetensors" "$D/run.safetensors" || { echo "FAIL: resumed weights differ"; exit 1; }
echo "after $kills kill -9: final weights byte-identical to the uninterrupted run"
