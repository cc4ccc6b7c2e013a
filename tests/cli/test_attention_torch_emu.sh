#!/usr/bin/env bash
# test_attention_torch_emu.sh — the fused attention of the GPT example's
# CUDA path against PyTorch's scaled_dot_product_attention (causal, float64),
# forward and backward, where no GPU is: unit.test_gpt2_flash_emu and
# unit.test_gpt2_flash_tc_emu run both kernels' own block functions (the
# fp32 cores' and the tensor cores') through their C emulations and dump
# their B = 2, T = 100 (a ragged last tile), 3 heads of 64 case
# (ZRT_ATTN_DUMP); scripts/check_attention_torch.py compares, within the
# tolerances test_gpt2_cuda uses (out 1e-4, dqkv 1e-3 absolute for the fp32
# cores; 4e-3 and 1e-2 for the tensor cores, on bf16 inputs; dqkv ADDED onto
# a non-zero dqkv0). The same script checks the GPU's kernels on a lent GPU
# (scripts/gpu-setup.sh step attn). A dump naming a dtype the script does
# not know is refused with a message (exit 2). Skips (77) when no Python
# here imports torch (set ZRT_PYTHON to one that does).
set -euo pipefail
BIN=${ZRT_BIN:-build/bin}
TESTS=${ZRT_TESTS:-$BIN/../tests}
SRC=${ZRT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
D=$(mktemp -d "${TMPDIR:-/tmp}/zrt_attn_emu.XXXXXX")
trap 'rm -rf "$D"' EXIT
. "$(dirname "$0")/torch_py.sh" "torch, numpy" # PY: the interpreter with both
for emu in test_gpt2_flash_emu test_gpt2_flash_tc_emu; do
  EMU=$TESTS/$emu
  [ -x "$EMU" ] || { echo "SKIP: $EMU not built"; exit 77; }
  mkdir -p "$D/$emu"
  ZRT_ATTN_DUMP=$D/$emu "$EMU" >"$D/$emu.log" 2>&1 || { cat "$D/$emu.log"; echo "FAIL: $emu's own checks failed"; exit 1; }
  [ -s "$D/$emu/shape.json" ] || { echo "FAIL: $emu wrote no dump"; exit 1; }
  echo "$emu: $(cat "$D/$emu/shape.json")"
  "$PY" "$SRC/scripts/check_attention_torch.py" "$D/$emu"
done
# a dump whose dtype the checker does not know: refused with a message (exit 2), never a guess
sed -i 's/"dtype": "[a-z0-9]*"/"dtype": "xx"/' "$D/test_gpt2_flash_tc_emu/shape.json"
rc=0
"$PY" "$SRC/scripts/check_attention_torch.py" "$D/test_gpt2_flash_tc_emu" >"$D/bad.txt" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "names dtype 'xx'; expected one of \['bf16', 'f32', 'fp32'\]" "$D/bad.txt" ||
  { cat "$D/bad.txt"; echo "FAIL: an unknown dtype gave exit $rc, not 2 with its message"; exit 1; }
