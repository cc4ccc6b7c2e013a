#!/bin/bash
# test_threads_bits.sh — the OpenMP team size changes no bits, which the
# adaptive team (zrt.adaptive_threads, engine/engine_team.c) relies on when
# it drops or adds a thread mid-run: the tiny GPT's per-step loss and
# grad_norm (the metrics file, full precision) are bitwise equal with 1 and
# 2 threads, fp32 and bf16, and with 2 threads while another process keeps
# a core busy, so the team changes size during the run (its log line is
# required when the machine has 2 or more cores).
. "$(dirname "$0")/gpt2_lib.sh" threads_bits
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) # nproc reads OMP_NUM_THREADS
ARGS=()
run() { # name env... (train_gpt2's extra flags in ARGS)
  local name=$1
  shift
  # both runs on cpus 0 and 1 (the busy loop takes cpu 1): on a larger
  # machine the scheduler would otherwise move the team off the busy core
  taskset -c 0,1 env "$@" ZRT_LOG_LEVEL=info "$EXE" --model tiny --data "$D/corpus.txt" --steps 40 "${ARGS[@]}" \
    --metrics "$D/$name.jsonl" >"$D/$name.out" 2>&1 || { cat "$D/$name.out"; fail "run $name"; }
  python3 - "$D/$name.jsonl" >"$D/$name.bits" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    if "loss" in d:
        print(d["step"], repr(d["loss"]), repr(d.get("grad_norm")))
PY
  [ "$(wc -l <"$D/$name.bits")" -eq 40 ] || fail "run $name: $(wc -l <"$D/$name.bits") metric rows, expected 40"
}
same() {
  cmp -s "$D/$1.bits" "$D/$2.bits" || { diff "$D/$1.bits" "$D/$2.bits" | head; fail "$1 and $2 differ"; }
}
[ "$cores" -ge 2 ] || { echo "SKIP: one core: no team to change"; exit 77; }
for prec in fp32 bf16; do
  ARGS=()
  [ $prec = bf16 ] && ARGS=(--set bf16.enabled=true)
  run fixed_$prec OMP_NUM_THREADS=2 ZRT_ADAPTIVE_THREADS=false
  taskset -c 1 sh -c 'while :; do :; done' &
  busy=$!
  trap 'kill $busy 2>/dev/null; rm -rf "$D"' EXIT
  run adapt_$prec OMP_NUM_THREADS=2
  kill $busy
  wait $busy 2>/dev/null
  grep -q "OpenMP team 2 -> 1 thread" "$D/adapt_$prec.out" ||
    { cat "$D/adapt_$prec.out"; fail "$prec: no team change with cpu 1 busy"; }
  same fixed_$prec adapt_$prec
  echo "ok: $prec: the adaptive team went to 1 thread with a core busy, bits unchanged"
done
echo PASS
