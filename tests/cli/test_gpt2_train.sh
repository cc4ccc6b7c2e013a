#!/usr/bin/env bash
# test_gpt2_train.sh — the GPT-2 example trains: tiny model, 2 ranks under
# mpiexec, ZeRO stage 2, bf16 working precision, 20 steps on the Debian
# corpus; the loss in the metrics file must fall (last step's loss below
# 85% of the first's — measured: ~5.5 -> ~3.3). Also the flag errors name
# what is wrong.
set -euo pipefail
BIN=${ZRT_BIN:-build/bin}
SRC=${ZRT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
EXE=$BIN/train_gpt2
[ -x "$EXE" ] || { echo "FAIL: $EXE not built"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

bash "$SRC/examples/gpt2/make_corpus.sh" "$tmp/corpus.txt" >/dev/null

# Bad input: messages name the flag and what to do.
if "$EXE" --data "$tmp/corpus.txt" --n_head 3 >"$tmp/err" 2>&1; then
  echo "FAIL: --n_head 3 with n_embd 64 was accepted"; exit 1
fi
grep -q "not divisible by --n_head 3" "$tmp/err" || { echo "FAIL: message:"; cat "$tmp/err"; exit 1; }
if "$EXE" --data "$tmp/nope.txt" >"$tmp/err" 2>&1; then echo "FAIL: missing data accepted"; exit 1; fi
grep -q -- "--data: data file '$tmp/nope.txt' cannot be opened: it does not exist" "$tmp/err" || { echo "FAIL: message:"; cat "$tmp/err"; exit 1; }
if "$EXE" --eval_only --data "$tmp/corpus.txt" >"$tmp/err" 2>&1; then echo "FAIL: eval without weights"; exit 1; fi
grep -q "needs weights" "$tmp/err" || { echo "FAIL: message:"; cat "$tmp/err"; exit 1; }

# --eval_only + --init: all-zero weights (LN gains too) give uniform logits,
# so the eval loss is exactly ln 256 = 5.545177.
python3 - "$tmp/zero.safetensors" <<'PY'
import array, json, struct, sys
C, T, V = 64, 64, 256
shapes = {"wte.weight": [V, C], "wpe.weight": [T, C], "ln_f.weight": [C], "ln_f.bias": [C]}
for i in range(2):
    for n, s in [("ln_1.weight", [C]), ("ln_1.bias", [C]), ("attn.c_attn.weight", [C, 3 * C]),
                 ("attn.c_attn.bias", [3 * C]), ("attn.c_proj.weight", [C, C]), ("attn.c_proj.bias", [C]),
                 ("ln_2.weight", [C]), ("ln_2.bias", [C]), ("mlp.c_fc.weight", [C, 4 * C]),
                 ("mlp.c_fc.bias", [4 * C]), ("mlp.c_proj.weight", [4 * C, C]), ("mlp.c_proj.bias", [C])]:
        shapes[f"h.{i}.{n}"] = s
hdr, blobs, off = {}, [], 0
for n, s in shapes.items():
    b = array.array("f", [0.0] * (s[0] * (s[1] if len(s) > 1 else 1))).tobytes()
    hdr[n] = {"dtype": "F32", "shape": s, "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
hj = json.dumps(hdr).encode()
hj += b" " * (-len(hj) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))
PY
"$EXE" --eval_only --init "$tmp/zero.safetensors" --data "$tmp/corpus.txt" --batch_size 2 \
  --eval_batches 3 >"$tmp/eval" 2>&1 || { echo "FAIL: eval_only run:"; cat "$tmp/eval"; exit 1; }
grep -q '{"eval_loss": 5.545177,' "$tmp/eval" || { echo "FAIL: eval loss of zero weights != ln 256:"; cat "$tmp/eval"; exit 1; }
echo "eval_only with zero weights: $(grep eval_loss "$tmp/eval") (want 5.545177 = ln 256)"

cat >"$tmp/ds.json" <<'JSON'
{
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 1,
  "gradient_clipping": 1.0,
  "bf16": {"enabled": true},
  "zero_optimization": {"stage": 2},
  "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}}
}
JSON
MPIEXEC=${MPIEXEC:-mpiexec}
ZRT_CONFIG_FILE="$tmp/ds.json" OMP_NUM_THREADS=1 \
  "$MPIEXEC" --oversubscribe --allow-run-as-root --bind-to none --mca btl self,vader -n 2 \
  "$EXE" --model tiny --batch_size 4 --steps 20 --data "$tmp/corpus.txt" \
  --metrics "$tmp/metrics.jsonl" --val_every 10 --val_batches 2 --sample 32 >"$tmp/out" 2>&1 ||
  { echo "FAIL: training run failed:"; cat "$tmp/out"; exit 1; }
cat "$tmp/out"
grep -q "ZeRO stage 2, 2 rank(s)" "$tmp/out" || { echo "FAIL: not stage 2 on 2 ranks"; exit 1; }
grep -q "dtype bf16" "$tmp/out" || { echo "FAIL: not bf16"; exit 1; }
grep -q "step 20 val loss" "$tmp/out" || { echo "FAIL: no validation line"; exit 1; }
grep -q -- "---- end of sample ----" "$tmp/out" || { echo "FAIL: no sample"; exit 1; }
python3 - "$tmp/metrics.jsonl" <<'PY'
import json, sys
rows = []
for line in open(sys.argv[1]):
    line = line.strip()
    if not line:
        continue
    r = json.loads(line)
    if "loss" in r:
        rows.append(r)
if len(rows) < 20:
    sys.exit(f"FAIL: {len(rows)} metrics rows with a loss, expected 20")
first, last = rows[0]["loss"], rows[-1]["loss"]
print(f"loss first {first:.4f} last {last:.4f} (must be < 0.85 * first = {0.85 * first:.4f})")
if not (last < 0.85 * first):
    sys.exit("FAIL: loss did not fall")
PY
echo "PASS"
