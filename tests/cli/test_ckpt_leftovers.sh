#!/usr/bin/env bash
# test_ckpt_leftovers.sh — a save sweeps the temporaries a killed save left
# in the checkpoint root (docs/security.md "When something dies"):
# `latest.tmp.<pid>.<hex>` of a dead pid, unmodified for two minutes, is
# removed and named in a warning; kept: one a second old, one of a live
# pid, a symlink of that form (its target untouched), a user's
# `latest.tmp.notes`. (The NVMe swap files' sweep: unit.test_stale_sweep.)
set -uo pipefail
. "$(dirname "$0")/gpt2_lib.sh" ckptleft
export OMP_NUM_THREADS=1 ZRT_LOG_LEVEL=warn
unset ZRT_CONFIG_FILE
RUN=(--model tiny --n_layer 1 --n_embd 32 --seq_len 32 --batch_size 2 --val_every 0
  --data "$D/corpus.txt")
sh -c 'exit 0' &
dead=$!
wait $dead
K=$D/ck
mkdir -p "$K"
old=$(date -d '-2 min' '+%Y%m%d%H%M.%S')
echo x >"$K/latest.tmp.$dead.0badf00d" && touch -t "$old" "$K/latest.tmp.$dead.0badf00d"
echo x >"$K/latest.tmp.$dead.00000001"
echo x >"$K/latest.tmp.$$.0badf00d" && touch -t "$old" "$K/latest.tmp.$$.0badf00d"
echo precious >"$D/target" && ln -s "$D/target" "$K/latest.tmp.$dead.0000beef" &&
  touch -h -t "$old" "$K/latest.tmp.$dead.0000beef"
echo note >"$K/latest.tmp.notes" && touch -t "$old" "$K/latest.tmp.notes"
"$EXE" "${RUN[@]}" --steps 2 --save "$K" >"$D/run.log" 2>&1 || { cat "$D/run.log"; fail "run"; }
grep "removed" "$D/run.log"
[ -e "$K/latest.tmp.$dead.0badf00d" ] && fail "the dead save's latest.tmp stayed"
grep -q "checkpoint: removed $K/latest.tmp.$dead.0badf00d (2 bytes): a temporary of a save by process $dead" \
  "$D/run.log" || { cat "$D/run.log"; fail "no warning naming it"; }
for f in "latest.tmp.$dead.00000001" "latest.tmp.$$.0badf00d" "latest.tmp.$dead.0000beef" latest.tmp.notes; do
  [ -e "$K/$f" ] || [ -L "$K/$f" ] || fail "$f was removed"
done
[ "$(cat "$D/target")" = precious ] || fail "the link's target changed"
echo "kept: young, live pid $$, symlink, user's latest.tmp.notes"
echo PASS
