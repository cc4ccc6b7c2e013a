#!/usr/bin/env bash
# test_memest_exact.sh — `zrt estimate-memory --model tiny` predicts the
# device peak train_gpt2 measures at stage 3, to the byte: the stage-3
# gathered copies replayed over the example's fetch order (prefetch, reuse,
# persistence, accumulation) plus the 16-bit gradient buffers, which peak at
# other moments than the copies. Each case runs train_gpt2 on 2 ranks for 3
# steps and compares the metrics' device_peak_bytes (the pools' peak of the
# sum) and every category's peak with the estimate's JSON:
#   a. optimizer + params offloaded, prefetch 0, reuse fitted under a limit;
#   b. nothing offloaded, prefetch of a block ahead, reuse 0;
#   c. optimizer offloaded, prefetch and reuse, 2 micro-batches per step;
#   d. a tighter limit that lowers the reuse distance to what keeps only the
#      last block across the head;
#   e. b with every block checkpointed on the device (--activation_checkpointing);
#   f. a with the checkpoints in pinned host memory (cpu_checkpointing: two
#      device staging slots).
set -euo pipefail
. "$(dirname "$0")/gpt2_lib.sh" memest
tmp=$D

# case: name limit(bytes or 0) offload(none|optimizer|optimizer+param) prefetch reuse persist accum
#       [checkpoints: none|device|cpu]
check() {
  local name=$1 limit=$2 off=$3 pf=$4 reuse=$5 persist=$6 accum=$7 ack=${8:-none}
  local sets=(--set zero_optimization.stage=3 --set bf16.enabled=true
    --set zero_optimization.reduce_bucket_size=4096
    --set zero_optimization.stage3_prefetch_bucket_size="$pf"
    --set zero_optimization.stage3_max_reuse_distance="$reuse"
    --set zero_optimization.stage3_param_persistence_threshold="$persist"
    --set gradient_accumulation_steps="$accum" --set zrt.pin_memory_fallback=true)
  local est=(--model tiny --batch_size 1 --seq_len 16 --world_sizes 2 --dtype bf16
    --reduce_bucket_size 4096 --prefetch "$pf" --max_reuse "$reuse" --persistence "$persist"
    --grad_accum "$accum" --json)
  if [ "$limit" != 0 ]; then
    sets+=(--set zrt.device_memory_limit="$limit")
    est+=(--device_memory "$limit")
  fi
  case $ack in
  device) sets+=(--activation_checkpointing)
    est+=(--activation_checkpointing all) ;;
  cpu) sets+=(--activation_checkpointing --set activation_checkpointing.cpu_checkpointing=true)
    est+=(--activation_checkpointing all --cpu_checkpointing true) ;;
  esac
  case $off in
  optimizer) sets+=(--set zero_optimization.offload_optimizer.device=cpu) ;;
  optimizer+param) sets+=(--set zero_optimization.offload_optimizer.device=cpu
    --set zero_optimization.offload_param.device=cpu) ;;
  esac
  OMP_NUM_THREADS=1 "${MPI[@]}" -n 2 "$EXE" --model tiny --batch_size 1 --seq_len 16 \
    --data "$tmp/corpus.txt" --val_every 0 --sample 0 --steps 3 "${sets[@]}" \
    --metrics "$tmp/$name.jsonl" >"$tmp/$name.out" 2>&1 ||
    { echo "FAIL: case $name: train_gpt2 failed:"; cat "$tmp/$name.out"; exit 1; }
  "$Z" estimate-memory "${est[@]}" >"$tmp/$name.est" ||
    { echo "FAIL: case $name: estimate-memory failed"; exit 1; }
  python3 - "$name" "$off" "$tmp/$name.jsonl" "$tmp/$name.est" <<'PY'
import json, sys
name, off, mpath, epath = sys.argv[1:]
rows = [json.loads(l) for l in open(mpath) if l.strip()]
rows = [r for r in rows if "loss" in r]
est = json.load(open(epath))
row = [c for c in est["configs"] if c["stage"] == 3 and c["offload"] == off][0]
peak = max(r["device_peak_bytes"] for r in rows)
cats = ["params16", "grads", "master32", "optim_state", "activations", "comm"]
got = {c: max(r[c] for r in rows) for c in cats}
print(f"case {name}: measured device peak {peak}, estimate {row['device_bytes']} "
      f"(reuse {row.get('reuse_elems')})")
bad = [f"{c} measured {got[c]} predicted {row['device'][c]}" for c in cats
       if got[c] != row["device"][c]]
if len(rows) != 3 or rows[0]["zero_stage"] != 3:
    sys.exit(f"FAIL: case {name}: expected 3 steps at stage 3")
if bad:
    sys.exit(f"FAIL: case {name}: " + "; ".join(bad))
if peak != row["device_bytes"]:
    sys.exit(f"FAIL: case {name}: the device peak differs from the estimate by "
             f"{peak - row['device_bytes']} bytes")
PY
}

check a 1800000 optimizer+param 0 1000000000 0 1
check b 0 none 60000 0 0 1
check c 0 optimizer 20000 60000 100 2
check d 1300000 optimizer+param 0 1000000000 0 1
check e 0 none 60000 0 0 1 device
check f 1800000 optimizer+param 0 1000000000 0 1 cpu
echo "PASS"
