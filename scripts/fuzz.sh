#!/usr/bin/env bash
# fuzz.sh — builds every libFuzzer target tests/fuzz/fuzz_*.c with
# clang -fsanitize=fuzzer,address,undefined against the library sources it
# needs, and runs each for N seconds (default 30) from its seed corpus
# (tests/fuzz/corpus/<target>/, never modified: new inputs go to a scratch
# directory). Exit status is non-zero when any target crashes; the crashing
# input is left in $OUT_DIR (default build-fuzz/) — add it to the corpus
# once fixed.  Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-30}
shift || true
out=${OUT_DIR:-$here/build-fuzz}
cc=${CC_FUZZ:-clang}
mkdir -p "$out"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$here"/tests/fuzz/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
fi
# The config loaders need only these library files; a target that needs more
# lists them in "// fuzz-sources:" lines.
base=("$here"/config/config*.c "$here"/base/error.c "$here"/base/log.c "$here"/base/env.c)
# the library's layers (CMakeLists.txt ZRT_LAYERS), as the build sees them
incs=(-I"$here/include")
for l in base amp config optim backend comm offload sharding engine checkpoint; do
  incs+=(-I"$here/$l")
done
incs+=(-I"$here")
status=0
for t in "${targets[@]}"; do
  src="$here/tests/fuzz/$t.c"
  extra=$(sed -n 's|^// fuzz-sources: ||p' "$src" | tr ' ' '\n' | sed -e '/^$/d' -e "s|^|$here/|")
  echo "== $t: building"
  # shellcheck disable=SC2086
  "$cc" -g -O1 -std=gnu11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    "${incs[@]}" "$src" "${base[@]}" $extra \
    $(pkg-config --cflags --libs yaml-0.1 libcjson) -lm -o "$out/$t"
  scratch="$out/$t.corpus"
  mkdir -p "$scratch"
  echo "== $t: fuzzing for ${secs}s"
  if ! ZRT_LOG_LEVEL=error "$out/$t" -max_total_time="$secs" -max_len=65536 -timeout=10 \
      -rss_limit_mb=2048 -artifact_prefix="$out/$t-" -print_final_stats=1 \
      "$scratch" "$here/tests/fuzz/corpus/$t" 2>"$out/$t.log"; then
    echo "!! $t failed; see $out/$t.log and $out/$t-*"
    tail -40 "$out/$t.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$out/$t.log" || true
  fi
done
exit $status
