#!/usr/bin/env bash
# test_gpt2_host_waits.sh — the GPT example does not make the host wait per
# micro-batch (issue 24: "no device synchronise per micro-step"): on the
# twin, whose backend counts every host wait (synchronize, blocking copies;
# the metrics' host_waits, per optimizer step), a step of 4 accumulated
# micro-batches costs the host exactly as many waits as a step of one, at
# ZeRO stage 0 and 1 on one rank (self comm; no collective waits per
# micro-batch there). The example used to synchronise the device and copy
# the loss back after every micro-batch: 2 waits each, 6 more per step at
# accumulation 4. The losses of the accumulated run are checked bitwise
# against the cpu backend's (the window's losses are read back once and
# summed in the engine's order).
# Then CUDA's shape at world size 1 (ZRT_TWIN_HOST_FN=cuda: host functions
# for host-side work only, the statistics on the host, the self comm on its
# device stream), which the GPU benchmark runs: at stages 0-3, and with
# offload_optimizer cpu at 2 and 3, every step after the first costs at most
# 2 host waits (the loss read back and the statistics' read), with losses
# bitwise equal to the cpu's. Before the self comm kept its device path in
# that mode it was 3 (the statistics' all-reduce waited on the comm stream).
set -euo pipefail
. "$(dirname "$0")/gpt2_lib.sh" gpt2_host_waits
run() { # backend stage accum [--set ...] -> "host_waits losses" of each step on stdout
  # (HOSTFN: the twin's ZRT_TWIN_HOST_FN mode)
  local tag=$1_$2_$3${HOSTFN:+_$HOSTFN}${4:+_off} b=$1 stage=$2 acc=$3
  shift 3
  env ${HOSTFN:+ZRT_TWIN_HOST_FN=$HOSTFN} ZRT_TWIN_JITTER=3 OMP_NUM_THREADS=1 "${MPI[@]}" -n 1 \
    "$EXE" --model tiny --batch_size 2 \
    --steps 3 --data "$D/corpus.txt" --metrics "$D/m_$tag.jsonl" --set zrt.backend="$b" \
    --set zero_optimization.stage="$stage" --set gradient_accumulation_steps="$acc" \
    --set bf16.enabled=false "$@" >"$D/out_$tag" 2>&1 || { cat "$D/out_$tag"; fail "$tag run failed"; }
  grep -q "backend $b" "$D/out_$tag" || fail "$tag: the run did not use backend $b"
  python3 -c 'import json,sys; print(" ".join("%d:%s" % (json.loads(l)["host_waits"], json.loads(l)["loss"]) for l in open(sys.argv[1])))' \
    "$D/m_$tag.jsonl"
}
waits() { echo "$1" | tr ' ' '\n' | cut -d: -f1 | tail -n +2 | tr '\n' ' '; } # steps 2..
losses() { echo "$1" | tr ' ' '\n' | cut -d: -f2 | tr '\n' ' '; }
for stage in 0 1; do
  one=$(run twin "$stage" 1)
  four=$(run twin "$stage" 4)
  cpu4=$(run cpu "$stage" 4)
  echo "stage $stage: twin accum 1 [$one], accum 4 [$four]; cpu accum 4 [$cpu4]"
  [ -n "$(waits "$one")" ] || fail "stage $stage: no host_waits in the metrics"
  [ "$(waits "$one")" = "$(waits "$four")" ] ||
    fail "stage $stage: host waits per step grow with accumulation (accum 1: $(waits "$one"), accum 4: $(waits "$four")): the example waits per micro-batch"
  [ "$(losses "$four")" = "$(losses "$cpu4")" ] ||
    fail "stage $stage: twin losses at accumulation 4 differ from cpu's"
done
for run in 0: 1: 2: 3: 2:cpu 3:cpu; do
  stage=${run%%:*} off=${run#*:}
  set -- ${off:+--set zero_optimization.offload_optimizer.device=$off}
  cuda=$(HOSTFN=cuda run twin "$stage" 2 "$@")
  cpu=$(run cpu "$stage" 2 "$@")
  echo "cuda shape, stage $stage offload ${off:-none}: twin [$cuda]; cpu [$cpu]"
  for w in $(waits "$cuda"); do
    [ "$w" -le 2 ] || fail "cuda shape, stage $stage offload ${off:-none}: $w host waits in a step after the first (at most 2): [$(waits "$cuda")]"
  done
  [ "$(losses "$cuda")" = "$(losses "$cpu")" ] ||
    fail "cuda shape, stage $stage offload ${off:-none}: twin losses differ from cpu's"
done
echo "GPT-2 on the twin: host waits per step independent of accumulation (stages 0, 1); losses bitwise equal to cpu; CUDA's shape at world size 1 at most 2 host waits per step (stages 0-3, offload cpu at 2 and 3)"
