#!/usr/bin/env bash
# test_gpt2_twin_actckpt.sh — activation checkpoints (engine_actckpt.c) on the
# twin, jitter on: the save/copy-out/prefetch/fetch/release events between
# the engine stream and the checkpoint copy stream are real there, so a
# missing wait or record lets a copy read a staging slot before its fill or
# overwrite it before its last read, and the recompute reads poison (NaN) or
# another block's input. Tiny model, 3 blocks (2 staging slots: block 0's
# slot is overwritten by block 2's save, so its fetch comes back from the
# host), fp32 (bf16 at 2 ranks differs on the twin, docs/engine.md), 4 steps:
#  - losses bitwise equal (as written, every digit) to the cpu backend's run
#    without checkpointing: 1 rank stage 0 with cpu_checkpointing, 2 ranks
#    stage 3 with cpu_checkpointing in one buffer, 2 ranks stage 2 with the
#    checkpoints on the device;
#  - synchronize_checkpoint_boundary adds exactly 3 host waits per
#    checkpointed block per step (at the save, the fetch and the release:
#    DeepSpeed's boundary synchronize), and profile at least 3 (its timers
#    read a synchronized device), counted in the metrics' host_waits of
#    steps 2-4 (step 1's count also holds the set-up's).
set -euo pipefail
. "$(dirname "$0")/gpt2_lib.sh" twin_actckpt
NL=3
run() { # name backend np stage extra-args...
  local name=$1 be=$2 np=$3 stage=$4
  shift 4
  ZRT_LOG_LEVEL=info ZRT_COMM=mpi ZRT_TWIN_JITTER=21 OMP_NUM_THREADS=1 "${MPI[@]}" -n "$np" "$EXE" --model tiny \
    --n_layer $NL --batch_size 2 --seq_len 32 --data "$D/corpus.txt" --val_every 0 --sample 0 \
    --steps 4 --set zrt.backend="$be" --set zero_optimization.stage="$stage" \
    --set bf16.enabled=false --set zrt.pin_memory_fallback=true --metrics "$D/$name.jsonl" "$@" \
    >"$D/$name.out" 2>&1 || { cat "$D/$name.out"; fail "case $name: train_gpt2 failed"; }
  grep -q "backend $be" "$D/$name.out" || fail "case $name: the run did not use backend $be"
}
col() { # name key -> that key of every step, space separated
  python3 - "$D/$1.jsonl" "$2" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if "loss" in r]
if len(rows) != 4:
    sys.exit(f"expected 4 steps, got {len(rows)}")
print(" ".join(repr(r[sys.argv[2]]) for r in rows))
PY
}
AC=(--activation_checkpointing)
CPU=(--set activation_checkpointing.cpu_checkpointing=true)
for cfg in "1 0 cpu" "2 3 contig" "2 2 device"; do
  set -- $cfg
  case $3 in
  cpu) args=("${AC[@]}" "${CPU[@]}") ;;
  contig) args=("${AC[@]}" "${CPU[@]}" --set activation_checkpointing.contiguous_memory_optimization=true) ;;
  device) args=("${AC[@]}") ;;
  esac
  run "cpu_$1_$2" cpu "$1" "$2"
  run "twin_$1_$2_$3" twin "$1" "$2" "${args[@]}"
  want=$(col "cpu_$1_$2" loss)
  have=$(col "twin_$1_$2_$3" loss)
  [ "$have" = "$want" ] ||
    fail "np $1 stage $2 ($3 checkpoints) on the twin: losses $have differ from cpu without checkpointing: $want"
  grep -q "activation checkpoints: $NL of $NL blocks" "$D/twin_$1_$2_$3.out" ||
    fail "np $1 stage $2: no 'activation checkpoints: $NL of $NL blocks' line"
  echo "np $1 stage $2, $3 checkpoints on the twin: losses equal to cpu's without ($have)"
done

# host waits the boundary synchronize and the profile timers add (1 rank)
run base twin 1 0 "${AC[@]}" "${CPU[@]}"
run sync twin 1 0 "${AC[@]}" "${CPU[@]}" --set activation_checkpointing.synchronize_checkpoint_boundary=true
run prof twin 1 0 "${AC[@]}" "${CPU[@]}" --set activation_checkpointing.profile=true
read -r -a hb <<<"$(col base host_waits)"
read -r -a hs <<<"$(col sync host_waits)"
read -r -a hp <<<"$(col prof host_waits)"
# steps 2-4 (the first step's count also holds the set-up's waits, which vary)
for i in 1 2 3; do
  [ $((hs[i] - hb[i])) = $((3 * NL)) ] ||
    fail "step $((i + 1)): synchronize_checkpoint_boundary added $((hs[i] - hb[i])) host waits, want $((3 * NL)) (3 per block: save, fetch, release)"
  [ $((hp[i] - hb[i])) -ge $((3 * NL)) ] ||
    fail "step $((i + 1)): profile added $((hp[i] - hb[i])) host waits, want >= $((3 * NL)) (its timers synchronize)"
done
echo "host waits per step: ${hb[*]} plain, ${hs[*]} with the boundary synchronize, ${hp[*]} with profile"
echo "PASS"
