#!/usr/bin/env bash
# check-format.sh — fails when a tracked C/CUDA source differs from what
# clang-format (the committed .clang-format) would write. `--fix` rewrites.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh' 2>/dev/null; \
  git ls-files --others --exclude-standard '*.c' '*.h' '*.cu' '*.cuh' 2>/dev/null)
[ ${#files[@]} -gt 0 ] || exit 0
if [ "${1:-}" = --fix ]; then clang-format -i "${files[@]}"; exit 0; fi
bad=0
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "format: $f differs from .clang-format (run scripts/check-format.sh --fix)"
    bad=1
  fi
done
exit $bad
