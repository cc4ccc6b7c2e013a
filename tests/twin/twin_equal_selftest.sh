#!/usr/bin/env bash
# twin_equal_selftest.sh — twin_equal.sh must fail when the twin's results
# differ from the cpu's, and pass when they are equal. The "program" is this
# script in child mode: it prints the line twin_equal.sh looks for and one
# bits line whose value depends on the backend when asked to differ.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = child ]; then
  echo "[zrt] info: backend $ZRT_BACKEND (test stand-in)"
  if [ "$2" = differ ] && [ "$ZRT_BACKEND" = twin ]; then echo "bits m0 deadbeef"; else echo "bits m0 0123abcd"; fi
  exit 0
fi
out=$(bash "$here/twin_equal.sh" bash "$here/twin_equal_selftest.sh" child same 2>&1)
rc=$?
if [ $rc -ne 0 ] || ! grep -q "^PASS: 1 master hashes bitwise equal" <<<"$out"; then
  echo "$out"
  echo "FAIL: twin_equal.sh rejected equal results (exit $rc)"
  exit 1
fi
out=$(bash "$here/twin_equal.sh" bash "$here/twin_equal_selftest.sh" child differ 2>&1)
rc=$?
if [ $rc -eq 0 ] || ! grep -q "FAIL: twin results differ from cpu" <<<"$out"; then
  echo "$out"
  echo "FAIL: twin_equal.sh accepted different results (exit $rc)"
  exit 1
fi
echo "PASS: twin_equal.sh passes equal results and fails different ones"
