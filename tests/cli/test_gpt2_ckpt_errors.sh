#!/usr/bin/env bash
# test_gpt2_ckpt_errors.sh — bad checkpoints through the GPT-2 example:
# `train_gpt2 --resume DIR --save DIR` (2 ranks, stage 2, bf16) of
#   * a missing directory,
#   * a checkpoint whose `latest` names a step that is gone,
#   * a truncated rank file,
#   * a rank file with one corrupted data byte,
#   * a checkpoint of a model with the same parameter shapes but another
#     n_head (only the user JSON's model record can tell),
#   * an AdamW checkpoint resumed under SGD (refused naming both, and how
#     to start SGD from the weights alone),
# must exit non-zero with a message naming the file/field, and leave the
# checkpoint directory exactly as it was (sha256 of every file before and
# after; a missing directory is not created).
set -uo pipefail
. "$(dirname "$0")/gpt2_lib.sh" gpt2ckerr
cat >"$D/ds.json" <<'JSON'
{
  "train_micro_batch_size_per_gpu": 4,
  "bf16": {"enabled": true},
  "zero_optimization": {"stage": 2},
  "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}
}
JSON
export ZRT_CONFIG_FILE=$D/ds.json OMP_NUM_THREADS=1 ZRT_LOG_LEVEL=warn
COMMON=(--model tiny --data "$D/corpus.txt" --batch_size 4)
"${MPI[@]}" -n 2 "$EXE" "${COMMON[@]}" --steps 4 --save "$D/ck" --save_interval 2 >"$D/train.log" 2>&1 ||
  { cat "$D/train.log"; fail "training run"; }
[ "$(cat "$D/ck/latest")" = step_4 ] || fail "no step_4 checkpoint"

digest() { (cd "$1" && find . -type f | sort | xargs sha256sum); }

# expect_fail NAME DIR PATTERN [extra flags]: resume+save of DIR fails with
# PATTERN (grep -F) in the output and DIR's files unchanged.
expect_fail() {
  local name=$1 dir=$2 pat=$3
  shift 3
  local before=""
  [ -d "$dir" ] && before=$(digest "$dir")
  if "${MPI[@]}" -n 2 "$EXE" "${COMMON[@]}" --steps 8 --resume "$dir" --save "$dir" \
    --save_interval 1 "$@" >"$D/$name.log" 2>&1; then
    cat "$D/$name.log"
    fail "$name: train_gpt2 succeeded"
  fi
  grep -qF -- "$pat" "$D/$name.log" || { cat "$D/$name.log"; fail "$name: message should contain: $pat"; }
  if [ -n "$before" ]; then
    [ "$before" = "$(digest "$dir")" ] || fail "$name: the checkpoint directory changed"
  else
    [ ! -e "$dir" ] || fail "$name: $dir was created"
  fi
  echo "ok $name: $(grep -m1 -F -- "$pat" "$D/$name.log" | cut -c1-260)"
}

expect_fail missing "$D/nope" "--resume $D/nope: no checkpoint at '$D/nope': the directory does not exist"

cp -a "$D/ck" "$D/gone"
rm -rf "$D/gone/step_4"
expect_fail gone "$D/gone" "'$D/gone/latest' names 'step_4' but '$D/gone/step_4/meta.json' does not exist"

cp -a "$D/ck" "$D/trunc"
f=$D/trunc/step_4/rank1.bin
size=$(stat -c %s "$f")
truncate -s $((size - 1000)) "$f"
expect_fail truncated "$D/trunc" "checkpoint file '$f' is truncated: $((size - 1000)) bytes, the metadata says $size"
grep -q "nothing was loaded and the checkpoint is unchanged on disk" "$D/truncated.log" ||
  fail "truncated: the message should say nothing was changed"

cp -a "$D/ck" "$D/bad"
f=$D/bad/step_4/rank0.bin
size=$(stat -c %s "$f")
# one byte near the end (the data section, past header and table), inverted
off=$((size - 100))
b=$(od -An -tu1 -j $off -N1 "$f" | tr -d ' ')
printf "$(printf '\\%03o' $((255 - b)))" | dd of="$f" bs=1 seek=$off conv=notrunc 2>/dev/null
cmp -s "$f" "$D/ck/step_4/rank0.bin" && fail "corruption did not change the file"
expect_fail corrupted "$D/bad" "checkpoint file '$f' is corrupted: section '"
grep -qE "fails its CRC32C check \(stored 0x[0-9a-f]{8}, computed 0x[0-9a-f]{8}\)" "$D/corrupted.log" ||
  fail "corruption message lacks the CRCs"

cp -a "$D/ck" "$D/heads"
expect_fail heads "$D/heads" "holds a different model: n_head 2 in the checkpoint, 4 in this run" --n_head 4

cp -a "$D/ck" "$D/sgd"
expect_fail sgd "$D/sgd" "checkpoint '$D/sgd/step_4' was saved with optimizer 'adamw' but this engine's optimizer is 'sgd'" \
  --set optimizer.type=SGD
grep -qF "'zrt consolidate $D/sgd/step_4 OUT'" "$D/sgd.log" || fail "sgd: no way to the weights alone"

# The intact checkpoint still resumes (the failures above were the files').
"${MPI[@]}" -n 2 "$EXE" "${COMMON[@]}" --steps 5 --resume "$D/ck" >"$D/ok.log" 2>&1 ||
  { cat "$D/ok.log"; fail "intact checkpoint does not resume"; }
grep -q "resumed from $D/ck at step 4" "$D/ok.log" || fail "no resume line"
echo "PASS"
