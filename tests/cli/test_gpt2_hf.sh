#!/usr/bin/env bash
# test_gpt2_hf.sh — the GPT example with Hugging Face directories and llm.c
# token files at GPT-2's vocabulary (50257), against a reference that is not
# zrt: scripts/gpt2_hf_ref.py (numpy + safetensors) writes the HF directory
# (GPT2LMHeadModel.save_pretrained's layout: config.json, "transformer."
# names, one file or shards + model.safetensors.index.json) and the token
# files, and computes the eval loss in float64. Tiny shapes (2 layers,
# n_embd 16, 32 positions, seq 16) keep vocab 50257 fast on the CPU.
#   * --init DIR --eval_only on a token file: zrt (fp32) vs numpy within
#     1e-5; the sharded directory with lm_head == wte and a glob of 20
#     token shards (windows cross shard boundaries): identical loss;
#   * refused with a message naming the culprit: lm_head != wte, a shape
#     flag contradicting config.json, a NaN weight, a config.json with
#     fewer layers than the weights (the unused tensors named), a bad magic, a
#     truncated shard, a token outside the vocabulary;
#   * train 3 steps from the HF directory on 2 ranks (token shards,
#     --val_data), `zrt consolidate CKPT OUTDIR --max_shard_size 1MB`:
#     shards + index; --init OUTDIR vs --resume CKPT: diff 0; numpy on
#     OUTDIR vs zrt within 1e-5; OUTDIR loads in transformers where it is
#     installed (skip otherwise); consolidating into it again is refused,
#     --overwrite replaces it; OUT.safetensors beside an existing
#     config.json is refused and writes nothing.
set -uo pipefail
. "$(dirname "$0")/gpt2_lib.sh" gpt2hf
if ! python3 -c "import safetensors, numpy" 2>/dev/null; then
  echo "SKIP: the reference (scripts/gpt2_hf_ref.py) needs the python packages safetensors and numpy"
  exit 77
fi
REF="python3 $SRC/scripts/gpt2_hf_ref.py"
export OMP_NUM_THREADS=1 ZRT_LOG_LEVEL=warn
unset ZRT_CONFIG_FILE
EV=(--seq_len 16 --batch_size 4 --eval_only --eval_batches 2)

$REF write "$D/hf" >/dev/null || fail "reference write"
$REF write "$D/hfs" --shards 3 --lm_head same >/dev/null || fail "reference write sharded"
$REF tokens "$D/tok.bin" --n 3000 >/dev/null || fail "reference tokens"
$REF tokens "$D/tk" --n 3000 --split 20 >/dev/null || fail "reference token shards"

zeval() { # NAME ARGS... -> $D/NAME.json (eval_loss_exact)
  local name=$1
  shift
  "$EXE" "$@" "${EV[@]}" >"$D/$name.log" 2>&1 || { cat "$D/$name.log"; fail "eval $name"; }
  grep '^{"eval_loss"' "$D/$name.log" | python3 -c 'import json,sys; print(json.load(sys.stdin)["eval_loss_exact"])' >"$D/$name.v"
}
near() { # A B TOL WHAT
  python3 - "$@" <<'PY' || fail "$4"
import sys
a, b, tol, what = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
print(f"{what}: {a!r} vs {b!r}: |diff| {abs(a - b):.3g} (tolerance {tol:g})")
sys.exit(0 if abs(a - b) <= tol else 1)
PY
}

zeval single --init "$D/hf" --data "$D/tok.bin"
grep -q "vocab 50257" "$D/single.log" || { cat "$D/single.log"; fail "banner does not show vocab 50257"; }
ref=$($REF eval "$D/hf" "$D/tok.bin" | python3 -c 'import json,sys; print(json.load(sys.stdin)["eval_loss"])')
near "$(cat "$D/single.v")" "$ref" 1e-5 "HF dir (one file) + token file, zrt fp32 vs numpy float64"
zeval sharded --init "$D/hfs" --data "$D/tk_*.bin"
near "$(cat "$D/sharded.v")" "$(cat "$D/single.v")" 0 "sharded dir + lm_head + 20 token shards vs one file"
zeval index --init "$D/hfs/model.safetensors.index.json" --n_layer 2 --n_head 2 --n_embd 16 \
  --n_positions 32 --vocab_size 50257 --data "$D/tk_*.bin"
near "$(cat "$D/index.v")" "$(cat "$D/single.v")" 0 "index file with shape flags"

expect_err() { # NAME PATTERN ARGS...
  local name=$1 pat=$2
  shift 2
  if "$EXE" "$@" >"$D/$name.err" 2>&1; then cat "$D/$name.err"; fail "$name: accepted"; fi
  grep -qF -- "$pat" "$D/$name.err" || { cat "$D/$name.err"; fail "$name: message should contain: $pat"; }
  echo "$name: $(grep -m1 -F -- "$pat" "$D/$name.err")"
}
$REF write "$D/hfo" --lm_head other >/dev/null
expect_err lm_head "lm_head.weight differs from wte.weight" --init "$D/hfo" --data "$D/tok.bin" "${EV[@]}"
expect_err shape "--n_embd 32 contradicts n_embd 16 in $D/hf/config.json" --init "$D/hf" --n_embd 32 \
  --data "$D/tok.bin" "${EV[@]}"
$REF write "$D/hfn" --nan h.1.mlp.c_fc.weight >/dev/null
expect_err nan "tensor 'transformer.h.1.mlp.c_fc.weight'" --init "$D/hfn" --data "$D/tok.bin" "${EV[@]}"
grep -q "holds NaN at element" "$D/nan.err" || fail "NaN message"
# config.json with fewer layers than the weights: the unused h.1.* are named
cp -r "$D/hf" "$D/hf1"
python3 - "$D/hf1/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["n_layer"] = 1; json.dump(c, open(sys.argv[1], "w"))
PY
expect_err fewer "12 tensors the model does not use: 'transformer.h.1." --init "$D/hf1" \
  --data "$D/tok.bin" "${EV[@]}"
grep -q "' and 8 more (fewer layers in config.json than in the weights" "$D/fewer.err" ||
  { cat "$D/fewer.err"; fail "fewer layers: no count of the rest"; }
printf 'not tokens at all' >"$D/bad.bin"
expect_err magic "$D/bad.bin is not an llm.c token file: magic" --init "$D/hf" --data "$D/bad.bin" "${EV[@]}"
head -c 2000 "$D/tok.bin" >"$D/trunc.bin"
expect_err trunc "$D/trunc.bin: the header declares 3000 tokens" --init "$D/hf" --data "$D/trunc.bin" "${EV[@]}"
grep -q "truncated" "$D/trunc.err" || fail "truncation not named"
expect_err vocab "is outside the vocabulary of 1000" --model tiny --vocab_size 1000 --data "$D/tok.bin" \
  --init "$D/hf/model.safetensors" "${EV[@]}"
expect_err noglob "$D/zz_*.bin matches no file" --init "$D/hf" --data "$D/zz_*.bin" "${EV[@]}"

# Train from the HF directory on 2 ranks, consolidate to a sharded HF dir.
"${MPI[@]}" -n 2 "$EXE" --init "$D/hf" --data "$D/tk_00000[0-7].bin" --val_data "$D/tk_00001*.bin" \
  --seq_len 16 --batch_size 2 --steps 3 --lr 1e-3 --val_every 3 --val_batches 1 --save "$D/ck" \
  >"$D/train.log" 2>&1 || { cat "$D/train.log"; fail "training from the HF directory"; }
grep -q "step 3 val loss" "$D/train.log" || { cat "$D/train.log"; fail "no validation line"; }
"$Z" consolidate "$D/ck" "$D/out" --max_shard_size 1MB >"$D/cons.log" 2>&1 ||
  { cat "$D/cons.log"; fail "consolidate OUTDIR"; }
cat "$D/cons.log"
[ -f "$D/out/model.safetensors.index.json" ] && [ -f "$D/out/config.json" ] ||
  fail "consolidate OUTDIR: no index or config.json: $(ls "$D/out")"
nsh=$(ls "$D/out"/model-*-of-*.safetensors | wc -l)
[ "$nsh" -ge 2 ] || fail "expected shards past --max_shard_size 1MB, got $nsh"
python3 - "$D/out" <<'PY' || fail "index"
import json, os, sys
d = sys.argv[1]
idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
files = sorted(set(idx["weight_map"].values()))
size = sum(os.path.getsize(os.path.join(d, f)) for f in files)
assert all(os.path.exists(os.path.join(d, f)) for f in files), files
assert idx["metadata"]["total_size"] <= size, (idx["metadata"], size)
print(f"index: {len(idx['weight_map'])} tensors in {len(files)} shards, total_size {idx['metadata']['total_size']}")
PY
zeval resumed --resume "$D/ck" --init "$D/hf" --data "$D/tok.bin"
zeval outdir --init "$D/out" --data "$D/tok.bin"
near "$(cat "$D/outdir.v")" "$(cat "$D/resumed.v")" 0 "--init OUTDIR vs --resume CKPT"
ref2=$($REF eval "$D/out" "$D/tok.bin" | python3 -c 'import json,sys; print(json.load(sys.stdin)["eval_loss"])')
near "$(cat "$D/outdir.v")" "$ref2" 1e-5 "consolidated dir: zrt vs numpy float64"
if python3 -c "import torch, transformers" 2>/dev/null; then
  python3 - "$D/out" "$D/tok.bin" "$(cat "$D/outdir.v")" <<'PY' || fail "transformers"
import sys, numpy as np, torch
from transformers import GPT2LMHeadModel
d, tokf, want = sys.argv[1], sys.argv[2], float(sys.argv[3])
m = GPT2LMHeadModel.from_pretrained(d).double().eval()
raw = open(tokf, "rb").read()
data = np.frombuffer(raw[1024:], dtype=np.uint16).astype(np.int64)
T, rows, tot = 16, 8, 0.0
for r in range(rows):
    x = torch.tensor(data[r * (T + 1):r * (T + 1) + T + 1])[None]
    with torch.no_grad():
        lp = m(x[:, :T]).logits.double().log_softmax(-1)[0]
    tot += -lp[torch.arange(T), x[0, 1:]].mean().item()
got = tot / rows
print(f"transformers from_pretrained({d}): eval loss {got!r}, zrt {want!r}, |diff| {abs(got - want):.3g} (tolerance 1e-5)")
assert abs(got - want) <= 1e-5
PY
else
  echo "SKIP (part): torch/transformers not installed: from_pretrained of the consolidated directory not checked"
fi
if "$Z" consolidate "$D/ck" "$D/out" >"$D/again.log" 2>&1; then fail "consolidate over an existing directory"; fi
grep -q "exists; refusing to replace it (pass --overwrite" "$D/again.log" || { cat "$D/again.log"; fail "refusal message"; }
echo "again: $(cat "$D/again.log")"
"$Z" consolidate "$D/ck" "$D/out" --overwrite >"$D/over.log" 2>&1 || { cat "$D/over.log"; fail "--overwrite"; }
[ -f "$D/out/model.safetensors" ] && [ ! -e "$D/out/model.safetensors.index.json" ] &&
  [ -z "$(ls "$D/out" | grep -- '-of-')" ] || fail "--overwrite left a stale layout: $(ls "$D/out")"
zeval over --init "$D/out" --data "$D/tok.bin"
near "$(cat "$D/over.v")" "$(cat "$D/resumed.v")" 0 "after --overwrite (one file)"
# FILE mode: an existing config.json beside OUT.safetensors is refused
# before anything is written.
mkdir -p "$D/f"
echo '{"mine": true}' >"$D/f/config.json"
if "$Z" consolidate "$D/ck" "$D/f/model.safetensors" >"$D/cfg.log" 2>&1; then fail "config.json replaced silently"; fi
grep -q "'$D/f/config.json' exists; refusing to replace it" "$D/cfg.log" || { cat "$D/cfg.log"; fail "config.json refusal"; }
[ ! -e "$D/f/model.safetensors" ] && grep -q mine "$D/f/config.json" || fail "refused consolidate wrote something"
echo "config.json: $(cat "$D/cfg.log")"
echo "PASS"
