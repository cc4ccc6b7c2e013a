#!/usr/bin/env bash
# test_gpt2_actckpt.sh — activation checkpointing (zrt_actckpt_*, issue 29):
# train_gpt2 with every block checkpointed and recomputed in the backward
# trains to the same losses, to the bit, as without (the recompute is
# deterministic), on 2 ranks at stages 0-3 (bf16; stage 3 with DeepSpeed's
# prefetch and reuse), with the checkpoints on the device and in pinned host
# memory (cpu_checkpointing, also in one buffer: contiguous_memory_optimization),
# with number_checkpoints 2 of 3 blocks, and switched on by a config's
# activation_checkpointing section alone. Also: the activations' device peak
# falls with checkpointing, and each checkpointed run says what it keeps.
# A wrong recompute (a block's backward reading the shared slot as another
# block left it) changes the losses at step 2 and fails this test.
# Registered twice: cli.test_gpt2_actckpt on the cpu backend, and
# twin.test_gpt2_actckpt with ZRT_BACKEND=twin and ZRT_TWIN_JITTER set
# (tests/CMakeLists.txt), where every run must say it used the twin and the
# checkpoints' copies run on the copy stream against the compute stream.
set -euo pipefail
. "$(dirname "$0")/gpt2_lib.sh" actckpt
BACKEND=${ZRT_BACKEND:-cpu}

run() { # name stage extra-args...
  local name=$1 stage=$2
  shift 2
  ZRT_LOG_LEVEL=info OMP_NUM_THREADS=1 "${MPI[@]}" -n 2 "$EXE" --model tiny --n_layer 3 --batch_size 2 --seq_len 32 \
    --data "$D/corpus.txt" --val_every 0 --sample 0 --steps 4 \
    --set zero_optimization.stage="$stage" --set bf16.enabled=true \
    --set zrt.pin_memory_fallback=true --set zrt.backend="$BACKEND" --metrics "$D/$name.jsonl" \
    "$@" >"$D/$name.out" 2>&1 || { cat "$D/$name.out"; fail "case $name: train_gpt2 failed"; }
  grep -q "backend $BACKEND" "$D/$name.out" || fail "case $name: the run did not use backend $BACKEND"
}

# losses (as written, every digit) and the activations' peak of a run
summary() {
  python3 - "$D/$1.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if "loss" in r]
if len(rows) != 4:
    sys.exit(f"expected 4 steps, got {len(rows)}")
print(" ".join(repr(r["loss"]) for r in rows), max(r["activations"] for r in rows))
PY
}

printf '{"activation_checkpointing": {"cpu_checkpointing": true, "profile": false}}\n' \
  >"$D/ac.json"

for stage in 0 1 2 3; do
  run "s$stage-plain" "$stage"
  read -r -a base <<<"$(summary "s$stage-plain")"
  for v in device cpu cpu-contig partial section; do
    case $v in
    device) args=(--activation_checkpointing) ;;
    cpu) args=(--activation_checkpointing --set activation_checkpointing.cpu_checkpointing=true) ;;
    cpu-contig) args=(--activation_checkpointing
      --set activation_checkpointing.cpu_checkpointing=true
      --set activation_checkpointing.contiguous_memory_optimization=true) ;;
    partial) args=(--activation_checkpointing
      --set activation_checkpointing.number_checkpoints=2) ;;
    section) args=(--config "$D/ac.json") ;;
    esac
    # the two quickest variants at every stage, the rest at stages 0 and 3
    if [ "$stage" = 1 ] || [ "$stage" = 2 ]; then
      case $v in device | cpu) ;; *) continue ;; esac
    fi
    name="s$stage-$v"
    run "$name" "$stage" "${args[@]}"
    read -r -a got <<<"$(summary "$name")"
    want="${base[*]:0:4}"
    have="${got[*]:0:4}"
    [ "$have" = "$want" ] ||
      fail "case $name: losses $have differ from the run without checkpointing: $want"
    [ "${got[4]}" -lt "${base[4]}" ] ||
      fail "case $name: activations peak ${got[4]} not below ${base[4]} without checkpointing"
    n=3
    [ "$v" = partial ] && n=2
    grep -q "activation checkpoints: $n of 3 blocks" "$D/$name.out" ||
      fail "case $name: no 'activation checkpoints: $n of 3 blocks' line in its log"
    echo "case $name: losses equal to the bit ($have), activations peak ${got[4]} < ${base[4]}"
  done
done
echo "PASS (backend $BACKEND${ZRT_TWIN_JITTER:+, jitter seed $ZRT_TWIN_JITTER})"
