#!/usr/bin/env bash
# test_gpt2_keep_last.sh — --keep_last never loses a checkpoint (issue 21,
# docs/gpt2.md "--keep_last", docs/security.md "Removal"):
#   * resume from an earlier step (step_4 of a run that went to step_10)
#     into the same --save DIR with --keep_last 2: the fresh step_6 and
#     step_8 stay, latest names step_8 and loads, step_2/step_4 (this run's
#     past) go, step_10 (the longer run's) stays whole;
#   * a fresh run into a directory left by a longer run, --keep_last 1:
#     its own step_4 stays (latest), its step_2 goes, step_6..step_10 stay;
#   * a user's notes.txt in a step directory: the step's zrt files go, the
#     note and its directory stay, and a warning names the note;
#   * the step `latest` names is never removed (zrt_ckpt_remove refuses it:
#     unit.test_ckpt_remove).
set -uo pipefail
. "$(dirname "$0")/gpt2_lib.sh" gpt2keep
export OMP_NUM_THREADS=1 ZRT_LOG_LEVEL=warn
unset ZRT_CONFIG_FILE
RUN=(--model tiny --n_layer 1 --n_embd 32 --seq_len 32 --batch_size 2 --val_every 0
  --data "$D/corpus.txt" --save_interval 2)
steps() { (cd "$1" && ls -d step_* 2>/dev/null | sort -t_ -k2 -n | tr '\n' ' '); }
whole() { # every step directory named holds a meta.json and a rank file
  for s in "${@:2}"; do
    [ -f "$1/$s/meta.json" ] && [ -f "$1/$s/rank0.bin" ] || fail "$1/$s is not whole: $(ls "$1/$s" 2>&1)"
  done
}

# A run to step 10 keeping everything, copied for the second case.
"$EXE" "${RUN[@]}" --steps 10 --save "$D/k" >"$D/long.log" 2>&1 || { cat "$D/long.log"; fail "long run"; }
[ "$(steps "$D/k")" = "step_2 step_4 step_6 step_8 step_10 " ] || fail "long run saved: $(steps "$D/k")"
cp -a "$D/k" "$D/f"

# 1. resumed from step_4 into the same DIR
"$EXE" "${RUN[@]}" --steps 8 --save "$D/k" --resume "$D/k/step_4" --keep_last 2 >"$D/res.log" 2>&1 ||
  { cat "$D/res.log"; fail "resumed run"; }
got=$(steps "$D/k")
echo "resume from step_4, --keep_last 2: $got(latest $(cat "$D/k/latest"))"
[ "$(cat "$D/k/latest")" = step_8 ] || fail "latest is $(cat "$D/k/latest")"
[ "$got" = "step_6 step_8 step_10 " ] || { cat "$D/res.log"; fail "kept $got, expected step_6 step_8 step_10"; }
whole "$D/k" step_6 step_8 step_10
grep -q "removed checkpoint $D/k/step_6" "$D/res.log" && fail "the run removed its own step_6"
"$EXE" "${RUN[@]}" --steps 8 --resume "$D/k" --eval_only --eval_batches 1 >"$D/ev.log" 2>&1 ||
  { cat "$D/ev.log"; fail "latest does not load"; }

# 2. a fresh run into the directory of a longer run
"$EXE" "${RUN[@]}" --steps 4 --save "$D/f" --keep_last 1 >"$D/fresh.log" 2>&1 ||
  { cat "$D/fresh.log"; fail "fresh run"; }
got=$(steps "$D/f")
echo "fresh run to step 4 into a step-10 directory, --keep_last 1: $got(latest $(cat "$D/f/latest"))"
[ "$(cat "$D/f/latest")" = step_4 ] || fail "latest is $(cat "$D/f/latest")"
[ "$got" = "step_4 step_6 step_8 step_10 " ] || { cat "$D/fresh.log"; fail "kept $got"; }
whole "$D/f" step_4 step_6 step_8 step_10

# 3. a user's file in a step directory
mkdir -p "$D/u/step_2" && echo "keep me" >"$D/u/step_2/notes.txt"
"$EXE" "${RUN[@]}" --steps 6 --save "$D/u" --keep_last 2 >"$D/user.log" 2>&1 ||
  { cat "$D/user.log"; fail "run with a user file"; }
echo "user file: $(steps "$D/u")| step_2 holds: $(ls "$D/u/step_2" | tr '\n' ' ')"
[ "$(cat "$D/u/step_2/notes.txt" 2>/dev/null)" = "keep me" ] || fail "notes.txt was removed"
[ "$(ls "$D/u/step_2")" = notes.txt ] || fail "zrt's files of step_2 stayed: $(ls "$D/u/step_2")"
grep -q "step_2: removed zrt's files; the directory stays, it holds 1 entry zrt did not write ('notes.txt')" \
  "$D/user.log" || { cat "$D/user.log"; fail "no warning naming notes.txt"; }
whole "$D/u" step_4 step_6
echo "PASS"
