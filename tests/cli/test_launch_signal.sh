#!/bin/bash
# test_launch_signal.sh — SIGINT or SIGTERM to the launcher ends every rank
# (passed once to each rank's wrapper, which passes it to the program;
# SIGTERM/SIGKILL only after ZRT_LAUNCH_STOP_GRACE_S); the probe ranks die
# of it, so the launcher exits with their common status, 128+signal, and
# leaves no process behind. (Ranks that save and exit 75:
# test_launch_preempt.sh.)
. "$(dirname "$0")/lib.sh"
need_mpiexec
cd "$T"

for sig in INT TERM; do
  "$ZRT" launch --num_processes 2 "$PROBE" --sleep 120 --tag "$TAG" >out.$sig 2>&1 &
  lp=$!
  wait_lines ' ready$' out.$sig 2 30
  kill -$sig $lp
  # bounded wait: the launcher must end on its own
  for i in $(seq 1 300); do kill -0 $lp 2>/dev/null || break; sleep 0.1; done
  kill -0 $lp 2>/dev/null && { kill -9 $lp; fail "launcher still running after SIG$sig"; }
  wait $lp
  rc=$?
  want=$((128 + $(kill -l $sig)))
  expect_status $want $rc "launcher after SIG$sig"
  expect_grep "^zrt launch: got SIG$sig; passing it to the ranks" out.$sig
  expect_grep "^zrt launch: every rank was killed by signal $(kill -l $sig) \(SIG$sig\); exiting with $want$" out.$sig
  expect_grep "^zrt launch: interrupted by SIG$sig; all ranks ended" out.$sig
  expect_no_grep 'exited with status' out.$sig "interrupt report"
  no_leftovers "SIG$sig to the launcher"
  pass "SIG$sig ends all ranks"
done
