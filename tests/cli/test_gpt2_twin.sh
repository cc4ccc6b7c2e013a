#!/usr/bin/env bash
# test_gpt2_twin.sh — the GPT-2 example on the twin (zrt.backend twin, jitter
# on): its compute launched on the engine's compute stream, its loss back by
# a copy, the per-step losses in the metrics file bitwise equal (as printed,
# %.9g of a float) to the cpu backend's: tiny model, fp32 at ZeRO stages 0-3
# on 2 ranks and 1 rank at stage 0, 3 steps each, both backends on the mpi
# comm (the twin's auto pick). bf16 at 2 ranks is left out: it differs from
# cpu in the last bits from step 2 on (open, see docs/engine.md).
set -euo pipefail
. "$(dirname "$0")/gpt2_lib.sh" gpt2_twin
run() { # backend np stage -> losses on stdout
  ZRT_COMM=mpi ZRT_TWIN_JITTER=5 OMP_NUM_THREADS=1 "${MPI[@]}" -n "$2" "$EXE" --model tiny \
    --batch_size 4 --steps 3 --data "$D/corpus.txt" --metrics "$D/m_$1_$2_$3.jsonl" \
    --set zrt.backend="$1" --set zero_optimization.stage="$3" --set bf16.enabled=false \
    >"$D/out_$1_$2_$3" 2>&1 || { cat "$D/out_$1_$2_$3"; fail "$1 run at $2 rank(s) stage $3"; }
  grep -q "backend $1" "$D/out_$1_$2_$3" || fail "the run did not use backend $1"
  python3 -c 'import json,sys; print(" ".join(str(json.loads(l)["loss"]) for l in open(sys.argv[1])))' \
    "$D/m_$1_$2_$3.jsonl"
}
for cfg in "1 0" "2 0" "2 1" "2 2" "2 3"; do
  set -- $cfg
  c=$(run cpu "$1" "$2")
  t=$(run twin "$1" "$2")
  echo "np $1 stage $2: cpu [$c] twin [$t]"
  [ -n "$c" ] && [ "$c" = "$t" ] || fail "np $1 stage $2: twin losses differ from cpu"
done
echo "GPT-2 on the twin: losses bitwise equal to cpu at 1 and 2 ranks, stages 0-3"
