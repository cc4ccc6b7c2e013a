#!/usr/bin/env bash
# test_gpu_harness.sh — keeps the gpu-label engine test (tests/gpu/
# test_engine_cuda.sh) runnable and able to fail on machines without a GPU:
#  1. its whole case matrix with the CPU backend on both sides
#     (ZRT_GPU_SELFTEST=1), so flags, config keys, the fp16 overflow check,
#     --init / --resume set-up and the comparison stay correct until a GPU
#     runs it for real;
#  2. the comparison catches a wrong gradient factor: the accumulation case
#     again with ZRT_TEST_GRAD_FACTOR=2 (a test hook: the gradients' unscale
#     doubled) on the "GPU" side only must fail on grad_norm, while its loss
#     stays within the loss tolerance (the loss-only comparison this harness
#     had before issue 23 passed such a run);
#  3. the hook refuses to act without its switch (ZRT_TEST_HOOKS=1);
#  4. the CUDA kernels' numbers on the host (train_gpt2 --emulate_cuda), the
#     reference a GPU run is compared with: on the "GPU" side only
#     (ZRT_GPU_SIDE_ARGS) two bf16 cases differ from the plain CPU run
#     (the flag reached that side) and stay within the tolerances; on both
#     sides (ZRT_GPU_CPU_ARGS, what a GPU run's CPU side gets) they agree
#     to the bit; the twin refuses the flag with its reason.
set -euo pipefail
SRC=${ZRT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN=${ZRT_BIN:-build/bin}
[ -x "$BIN/train_gpt2" ] || { echo "SKIP: $BIN/train_gpt2 not built"; exit 77; }
command -v mpiexec >/dev/null || { echo "SKIP: no mpiexec"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
ZRT_GPU_SELFTEST=1 bash "$SRC/tests/gpu/test_engine_cuda.sh"

out=$(ZRT_GPU_SELFTEST=1 ZRT_GPU_HARNESS_ONLY=s2_bf16_accum ZRT_GPU_SIDE_ENV=ZRT_TEST_GRAD_FACTOR=2 \
  bash "$SRC/tests/gpu/test_engine_cuda.sh" 2>&1) && { echo "$out"; fail "a doubled gradient factor passed"; }
echo "$out" | tail -6
echo "$out" | grep -q "FAIL: s2_bf16_accum: the cpu backend differs" || { echo "$out"; fail "not the comparison's failure"; }
echo "$out" | grep -Eq "^step [0-9]+ grad_norm .* \(rel 1\.00e\+00 > 0\.01\)" ||
  { echo "$out"; fail "grad_norm did not show the factor"; }
python3 - "$out" <<'PY' || fail "the loss alone should have missed the factor (that is the point)"
import re, sys
m = re.search(r"worst relative differences: loss ([0-9.e+-]+) \(tol ([0-9.e+-]+)\)", sys.argv[1])
assert m and float(m.group(1)) <= float(m.group(2)), m and m.groups()
print(f"loss difference {m.group(1)} within its tolerance {m.group(2)}: only grad_norm caught it")
PY

D=$(mktemp -d "${TMPDIR:-/tmp}/zrt_harness.XXXXXX")
trap 'rm -rf "$D"' EXIT
bash "$SRC/examples/gpt2/make_corpus.sh" "$D/corpus.txt" >/dev/null
if err=$(env -u ZRT_TEST_HOOKS ZRT_TEST_GRAD_FACTOR=2 OMP_NUM_THREADS=1 "$BIN/train_gpt2" \
  --model tiny --data "$D/corpus.txt" --steps 1 2>&1); then
  fail "ZRT_TEST_GRAD_FACTOR without ZRT_TEST_HOOKS=1 ran"
fi
echo "$err" | grep -q "ZRT_TEST_GRAD_FACTOR is a test hook: set ZRT_TEST_HOOKS=1 with it, or unset it" ||
  { echo "$err"; fail "no message naming the switch"; }

# 4. --emulate_cuda on the GPU side only, then on both sides
worst() { # CASE OUTPUT: the case's four worst differences
  echo "$2" | sed -n "s/^$1: .*worst relative differences: loss \([^ ]*\) .*grad_norm \([^ ]*\) .*master_sqsum \([^ ]*\) .*master_sum \([^ ]*\) .*/\1 \2 \3 \4/p"
}
EMU=(ZRT_GPU_SELFTEST=1 ZRT_GPU_HARNESS_ONLY=s1_bf16,init_offload ZRT_GPU_SIDE_ARGS=--emulate_cuda)
out=$(env "${EMU[@]}" bash "$SRC/tests/gpu/test_engine_cuda.sh" 2>&1) ||
  { echo "$out"; fail "the emulated CUDA numbers are outside the tolerances"; }
for c in s1_bf16 init_offload; do
  w=$(worst "$c" "$out")
  echo "$c, GPU side emulated: $w"
  python3 -c "import sys; v = list(map(float, sys.argv[1:])); assert len(v) == 4 and max(v) > 0, v" $w ||
    { echo "$out"; fail "$c: --emulate_cuda did not reach the GPU side (no difference)"; }
done
out=$(env "${EMU[@]}" ZRT_GPU_CPU_ARGS=--emulate_cuda bash "$SRC/tests/gpu/test_engine_cuda.sh" 2>&1) ||
  { echo "$out"; fail "both sides emulated differ"; }
for c in s1_bf16 init_offload; do
  w=$(worst "$c" "$out")
  [ "$w" = "0.00e+00 0.00e+00 0.00e+00 0.00e+00" ] ||
    { echo "$out"; fail "$c: both sides --emulate_cuda, yet they differ ($w)"; }
done
echo "both sides --emulate_cuda: identical"
if err=$(OMP_NUM_THREADS=1 "$BIN/train_gpt2" --model tiny --data "$D/corpus.txt" --steps 1 \
  --set bf16.enabled=true --set zrt.backend=twin --emulate_cuda 2>&1); then
  fail "--emulate_cuda ran on the twin"
fi
echo "$err" | grep -q "on the cpu backend only, and this run is on twin: drop the flag, or set zrt.backend=cpu" ||
  { echo "$err"; fail "--emulate_cuda on the twin: not the refusal"; }
echo "PASS: the harness agrees cpu with cpu, catches a doubled gradient factor, the hook needs its switch, and --emulate_cuda reaches either side"
