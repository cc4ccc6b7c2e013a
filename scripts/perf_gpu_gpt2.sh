#!/usr/bin/env bash
# perf_gpu_gpt2.sh BIN OUT — issue 24's GPU benchmark, one run on one card
# (what `scripts/gpu-setup.sh step perf` runs on a lent GPU, under 570 s):
#   1. zrt: train_gpt2, GPT-2 124M (--model gpt2, vocab 50257), bf16, one
#      GPU, ZeRO stage 0, on llm.c token shards of random tokens written
#      here (the GPU image has no text corpus); metrics in OUT/zrt_gpt2.jsonl,
#      its output (the measured bf16 cuBLAS peak, the banner) in zrt_gpt2.log;
#      then 5 steps of the same run with --profile_ops (the model kernels
#      timed by kind with events: OUT/zrt_ops.json, zrt_ops.log), apart so
#      that the timing events and their per-step wait leave the measured
#      run alone;
#   2. PyTorch on the same card, same shape, batch and sequence:
#      scripts/perf_torch_gpt2.py eager, then --compile, bf16 autocast
#      (OUT/torch_gpt2.jsonl, one line each; a failed one is logged and
#      reported missing);
#   3. `zrt-perf pinned --backend cuda`: zrt's pinned host<->device copies
#      against a plain pinned copy, and the share hidden behind GEMMs
#      (OUT/pinned.json);
#   4. scripts/perf_gpu_report.py: OUT/perf_gpu.json, the three side by side
#      (tokens/s; MFU of all three with zrt's FLOPs per token over zrt's
#      measured bf16 GEMM peak, and each one's own figure), the issue's
#      goals met or not, and zrt's kernels by class (GEMM, attention, the
#      rest) against their floors (perf/gpt2_cuda_budget.py). Exit status: the report's (0 when the zrt run and
#      the report are there; a missing PyTorch peer is reported, not fatal).
# ZRT_PERF_SMOKE=1 runs the same pipeline on the CPU in seconds (tiny model,
# cpu backend, fp32, small copies): cli.test_perf_gpu_report checks the
# plumbing with it where there is no GPU. ZRT_PERF_BATCH / ZRT_PERF_STEPS
# override the batch (default 8) and the steps (default 12).
set -uo pipefail
BIN=${1:?usage: perf_gpu_gpt2.sh BIN OUT}
OUT=${2:?usage: perf_gpu_gpt2.sh BIN OUT}
SRC=$(cd "$(dirname "$0")/.." && pwd)
PY=${ZRT_PYTHON:-python3}
mkdir -p "$OUT"
rm -f "$OUT/zrt_gpt2.jsonl" "$OUT/torch_gpt2.jsonl" "$OUT/pinned.json" "$OUT/perf_gpu.json" \
  "$OUT/zrt_ops.json"
if [ "${ZRT_PERF_SMOKE:-0}" = 1 ]; then
  MODEL=(--model tiny --vocab_size 512) TORCH=(--model tiny --vocab 512 --device cpu)
  B=${ZRT_PERF_BATCH:-2} STEPS=${ZRT_PERF_STEPS:-4} T=64 BACKEND=cpu DTYPE=(--set bf16.enabled=false)
  PIN=(--backend cpu --mib 8 --tile_mib 2 --gemm_n 64 --reps 2) LIM=(60 60 60 30 30) NTOK=200000
else
  MODEL=(--model gpt2 --vocab_size 50257) TORCH=(--model gpt2 --vocab 50257 --device cuda --dtype bf16)
  B=${ZRT_PERF_BATCH:-8} STEPS=${ZRT_PERF_STEPS:-12} T=1024 BACKEND=cuda
  DTYPE=(--set bf16.enabled=true) PIN=(--backend cuda) LIM=(150 100 170 60 60) NTOK=1000000
fi

# 1. zrt: llm.c shards of uniform random tokens (train + validation)
"$PY" - "$OUT/tok" "$NTOK" "${MODEL[3]}" <<'EOF' || { echo "perf_gpu_gpt2: cannot write token shards" >&2; exit 1; }
import os, random, struct, sys
d, n, V = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(d, exist_ok=True)
rng = random.Random(1337)
for name, cnt in (("train.bin", n), ("val.bin", max(n // 10, 4096))):
    hdr = [20240520, 1, cnt] + [0] * 253
    with open(os.path.join(d, name), "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        f.write(struct.pack("<%dH" % cnt, *(rng.randrange(V) for _ in range(cnt))))
EOF
echo "== zrt train_gpt2 (${MODEL[*]}, backend $BACKEND, batch $B, seq $T, $STEPS steps)"
timeout "${LIM[0]}" "$BIN/train_gpt2" "${MODEL[@]}" --seq_len "$T" --batch_size "$B" \
  --steps "$STEPS" --data "$OUT/tok/train.bin" --val_data "$OUT/tok/val.bin" \
  --metrics "$OUT/zrt_gpt2.jsonl" --set zrt.backend="$BACKEND" "${DTYPE[@]}" \
  --set zero_optimization.stage=0 >"$OUT/zrt_gpt2.log" 2>&1
echo "train_gpt2 exit $?" >>"$OUT/zrt_gpt2.log"
tail -n 3 "$OUT/zrt_gpt2.log"
echo "== zrt train_gpt2 --profile_ops (5 steps)"
timeout "${LIM[4]}" "$BIN/train_gpt2" "${MODEL[@]}" --seq_len "$T" --batch_size "$B" \
  --steps 5 --data "$OUT/tok/train.bin" --val_data "$OUT/tok/val.bin" \
  --profile_ops "$OUT/zrt_ops.json" --set zrt.backend="$BACKEND" "${DTYPE[@]}" \
  --set zero_optimization.stage=0 >"$OUT/zrt_ops.log" 2>&1 ||
  echo "perf_gpu_gpt2: the profiled run failed (exit $?; $OUT/zrt_ops.log)"
grep -A 16 "^model ops per step" "$OUT/zrt_ops.log"

# 2. PyTorch eager and torch.compile, same shape and batch
for c in "" --compile; do
  echo "== PyTorch ${c:-eager}"
  # shellcheck disable=SC2086
  timeout "${LIM[$([ -z "$c" ] && echo 1 || echo 2)]}" "$PY" "$SRC/scripts/perf_torch_gpt2.py" \
    "${TORCH[@]}" --seq_len "$T" --batch_size "$B" --steps 6 --rounds 1 $c \
    >>"$OUT/torch_gpt2.jsonl" 2>"$OUT/torch${c:+_compile}.log" ||
    echo "perf_gpu_gpt2: PyTorch ${c:-eager} failed (exit $?; $OUT/torch${c:+_compile}.log)"
done

# 3. pinned copies
echo "== zrt-perf pinned ${PIN[*]}"
timeout "${LIM[3]}" "$BIN/zrt-perf" pinned "${PIN[@]}" --json >"$OUT/pinned.json" 2>"$OUT/pinned.log" ||
  echo "perf_gpu_gpt2: zrt-perf pinned failed (exit $?; $OUT/pinned.log)"

# 4. the report
"$PY" "$SRC/scripts/perf_gpu_report.py" "$OUT" >"$OUT/perf_gpu.json"
rc=$?
cat "$OUT/perf_gpu.json"
exit $rc
