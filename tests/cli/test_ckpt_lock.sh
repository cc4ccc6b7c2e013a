#!/usr/bin/env bash
# test_ckpt_lock.sh — two jobs saving into one checkpoint directory
# (docs/security.md): the second stops at start, before step 1, naming the
# first's pid and host, and the first saves on unharmed (stopped with
# SIGUSR1 it saves, exits 75 and its latest resumes). A job after the first ended takes the
# directory over (the lock is a flock: it goes with the process).
set -uo pipefail
. "$(dirname "$0")/gpt2_lib.sh" ckptlock
export OMP_NUM_THREADS=1 ZRT_LOG_LEVEL=warn
unset ZRT_CONFIG_FILE
RUN=(--model tiny --n_layer 1 --n_embd 32 --seq_len 32 --batch_size 2 --val_every 0
  --data "$D/corpus.txt" --save "$D/ck")
"$EXE" "${RUN[@]}" --steps 1000000 --save_interval 50 >"$D/a.log" 2>&1 &
a=$!
trap 'kill $a 2>/dev/null; rm -rf "$D"' EXIT # a failing check never leaves it running
for _ in $(seq 500); do grep -q "^step 1/" "$D/a.log" && break; sleep 0.02; done
grep -q "^step 1/" "$D/a.log" || { cat "$D/a.log"; fail "the first job did not start"; }
if "$EXE" "${RUN[@]}" --steps 4 >"$D/b.log" 2>&1; then cat "$D/b.log"; fail "the second job ran"; fi
cat "$D/b.log"
grep -qF "checkpoint directory '$D/ck' is in use by another job: process $a on host $(hostname)" "$D/b.log" ||
  { cat "$D/b.log"; fail "the message does not name the first job"; }
grep -q "^step 1/" "$D/b.log" && fail "the second job trained before it was stopped"
kill -USR1 $a # stops after the current step, saved (exit 75)
wait $a
rc=$?
[ $rc = 75 ] || { cat "$D/a.log"; fail "the first job exited $rc, expected 75 (saved and stopped)"; }
k=$(sed -n 's/^interrupted (.*) after step \([0-9]*\) of.*/\1/p' "$D/a.log")
[ "$(cat "$D/ck/latest")" = "step_$k" ] || fail "latest is $(cat "$D/ck/latest"), the first job stopped at $k"
"$EXE" "${RUN[@]}" --steps $((k + 2)) --resume "$D/ck" --save_interval 2 >"$D/c.log" 2>&1 ||
  { cat "$D/c.log"; fail "a later job cannot take the directory over"; }
[ "$(cat "$D/ck/latest")" = "step_$((k + 2))" ] || fail "latest is $(cat "$D/ck/latest") after the later job"
echo PASS
