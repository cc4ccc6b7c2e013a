#!/usr/bin/env bash
# twin_equal.sh COMMAND... — runs an engine test command (mpiexec ... program)
# on the cpu backend and again on the twin (ZRT_BACKEND=twin, ZRT_TWIN_JITTER
# from the environment, default 1). Each run must pass, and the lines starting
# "bits " (the program's hashes of its final fp32 masters, on its stdout or, for
# the programs using tests/common/zt_bits.c, in files under ZRT_TEST_BITS_DIR)
# must be the same:
# the twin's results are bitwise equal to the cpu's. Both runs use the comm the
# program asks for; where it leaves zrt.comm at auto, both runs get ZRT_COMM
# (default mpi: what auto picks on the twin; the cpu's auto picks shm on one
# machine, whose reduction order differs at 4 ranks, so its bits would too).
set -uo pipefail
export ZRT_COMM=${ZRT_COMM:-mpi}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
seed=${ZRT_TWIN_JITTER:-1}
for backend in cpu twin; do
  # the bits lines go to files (tests/common/zt_bits.c), not through
  # mpiexec's stdout forwarding, which dropped lines under load
  mkdir "$work/$backend.d"
  export ZRT_TEST_BITS_DIR="$work/$backend.d"
  if [ $backend = twin ]; then
    env ZRT_BACKEND=twin ZRT_TWIN_JITTER="$seed" ZRT_LOG_LEVEL=info "$@" >"$work/$backend.out" 2>&1
  else
    env -u ZRT_TWIN_JITTER ZRT_BACKEND=cpu "$@" >"$work/$backend.out" 2>&1
  fi
  rc=$?
  if [ $rc -ne 0 ]; then
    tail -30 "$work/$backend.out"
    echo "FAIL: the $backend run of '$*' exited $rc"
    exit 1
  fi
  { grep -h '^bits ' "$work/$backend.out" "$work/$backend.d"/* 2>/dev/null || true; } |
    sort >"$work/$backend.bits"
done
grep -q "backend twin" "$work/twin.out" || {
  echo "FAIL: the twin run did not use the twin backend (no 'backend twin' line)"
  exit 1
}
n=$(wc -l <"$work/cpu.bits")
if [ "$n" -eq 0 ]; then
  echo "FAIL: the program printed no 'bits' lines to compare"
  exit 1
fi
if ! diff "$work/cpu.bits" "$work/twin.bits"; then
  echo "FAIL: twin results differ from cpu (lines above: < cpu, > twin)"
  exit 1
fi
echo "PASS: $n master hashes bitwise equal on cpu and twin (jitter seed $seed)"
