#!/usr/bin/env bash
# test_consolidate.sh — `zrt consolidate` of a 2-rank stage-3 checkpoint:
# the safetensors file is validated and every tensor compared with the raw
# fp32 master shards the saving run dumped (bitwise for fp32, round-to-
# nearest-even for bf16) by scripts/check_safetensors.py; the `safetensors`
# Python package, when installed, must load it too. Also: consolidate of a
# corrupted checkpoint fails naming the file, and writes nothing.
set -euo pipefail
B=${ZRT_BUILD_DIR:?}/tests/test_checkpoint_resume
Z=${ZRT_BIN:?}/zrt
S=${ZRT_SOURCE_DIR:?}/scripts/check_safetensors.py
[ -x "$B" ] && [ -x "$Z" ] || { echo "SKIP: binaries not built"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
MPI=(mpiexec --oversubscribe --allow-run-as-root --bind-to none --mca btl self,vader)
D=$(mktemp -d /tmp/zrt_consolidate.XXXXXX)
trap 'rm -rf "$D"' EXIT
"${MPI[@]}" -n 2 "$B" save "$D/ck" 3 >/dev/null
"$Z" consolidate "$D/ck" "$D/out.safetensors"
python3 "$S" "$D/out.safetensors" --meta "$D/ck/step_3/meta.json" --ref "$D/ck/ref"
"$Z" consolidate "$D/ck/step_3" "$D/out16.safetensors" --dtype bf16
python3 "$S" "$D/out16.safetensors" --meta "$D/ck/step_3/meta.json" --ref "$D/ck/ref"
[ ! -e "$D/config.json" ] || { echo "FAIL: config.json written for a non-GPT-2 model"; exit 1; }
# corrupted rank file: clear error, no output
printf Z | dd of="$D/ck/step_3/rank1.bin" bs=1 seek=200 conv=notrunc 2>/dev/null
if "$Z" consolidate "$D/ck" "$D/bad.safetensors" 2>"$D/err"; then echo "FAIL: accepted corruption"; exit 1; fi
grep -q "rank1.bin' is corrupted" "$D/err" || { echo "FAIL: message:"; cat "$D/err"; exit 1; }
[ ! -e "$D/bad.safetensors" ] || { echo "FAIL: output written"; exit 1; }
if python3 -c "import safetensors" 2>/dev/null; then
  python3 "$S" "$D/out.safetensors" --with-safetensors
else
  echo "note: python package 'safetensors' not installed: skipped loading through it"
fi
echo "consolidate: ok"
