#!/usr/bin/env bash
# test_comm_watchdog.sh — the hang watchdog end to end through `zrt launch`:
# test_comm_watchdog in hang mode (ZRT_TEST_WATCHDOG_HANG=1) has rank 1 skip a
# collective; rank 0's wait (timeout 1 s) must fail naming collective #3
# all_reduce, write rank0.status, and the launcher must report it (rank 0's
# last completed collective #2) and exit non-zero instead of hanging.
# Skips (77) when the zrt command or the test program is not built.
set -u
ZRT="${ZRT_BIN:-}/zrt"
PROG="${ZRT_BUILD_DIR:-}/tests/test_comm_watchdog"
if [ ! -x "$ZRT" ] || [ ! -x "$PROG" ]; then
  echo "SKIP: need $ZRT and $PROG"
  exit 77
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
ZRT_TEST_WATCHDOG_HANG=1 timeout 300 "$ZRT" launch --num_processes 2 --cpu "$PROG" >"$out" 2>&1
rc=$?
fail=0
check() {
  if ! grep -qF -- "$1" "$out"; then
    echo "FAIL: launcher output does not contain \"$1\""
    fail=1
  fi
}
if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then
  echo "FAIL: zrt launch exited $rc (want a failure, not success or a hang)"
  fail=1
fi
check "collective #3 all_reduce (4096 bytes) did not complete within 1s"
check "last completed: #2 all_reduce (4 bytes)"
check "rank 0 watchdog: last completed collective #2"
if ! grep -qE "rank 1 .*behind" "$out"; then
  echo "FAIL: launcher output does not name rank 1 as the one behind"
  fail=1
fi
# The launcher keeps a failed run's directory for inspection; ours is done.
kept=$(sed -n 's/.*run directory kept for inspection: //p' "$out" | head -1)
case "$kept" in /tmp/zrt-run-* | "${TMPDIR:-/tmp}"/zrt-run-*) rm -rf -- "$kept" ;; esac
if [ $fail -ne 0 ]; then
  echo "--- zrt launch output (exit $rc) ---"
  cat "$out"
  exit 1
fi
echo "zrt launch exited $rc and reported the watchdog status; all checks passed"
