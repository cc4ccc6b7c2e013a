#!/usr/bin/env bash
# test_gpt2_consolidate.sh — `zrt consolidate` of a GPT-2 example checkpoint
# gives a Hugging Face GPT-2: tensor names and shapes (Conv1D weights
# [in, out]), config.json (GPT2Config, from the checkpoint's user JSON with
# no flags), fp32 and bf16.
#
# Model: 3 layers, 4 heads, n_embd 32, seq_len 48 (n_positions stays the
# preset's 64), trained 4 steps on 2 ranks, ZeRO stage 2, bf16. Checks:
#   * names/shapes exactly HF GPT-2's, config.json fields;
#   * round trip: `--eval_only --init OUT.safetensors` vs `--eval_only
#     --resume DIR` in an fp32 engine (fp32 file) and a bf16 engine (bf16
#     file): within 1e-5 (measured 0);
#   * with the Python `safetensors` + numpy packages: the file loads through
#     safetensors, the bf16 file is the fp32 one rounded to nearest even
#     (bitwise), and an independent float64 numpy GPT-2 forward written
#     with HF's conventions (Conv1D y = x W + b, gelu_new, eps and n_head
#     from config.json) reproduces zrt's eval loss within 1e-4. Without
#     them the file is checked by scripts/check_safetensors.py (stdlib);
#   * a missing checkpoint: clear error, nothing written.
set -uo pipefail
. "$(dirname "$0")/gpt2_lib.sh" gpt2cons
[ -x "$Z" ] || { echo "SKIP: $Z not built"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
cat >"$D/ds.json" <<'JSON'
{
  "gradient_accumulation_steps": 1,
  "gradient_clipping": 1.0,
  "bf16": {"enabled": true},
  "zero_optimization": {"stage": 2},
  "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}}
}
JSON
export ZRT_CONFIG_FILE=$D/ds.json OMP_NUM_THREADS=1 ZRT_LOG_LEVEL=warn
SHAPE=(--model tiny --n_layer 3 --n_head 4 --n_embd 32 --seq_len 48 --data "$D/corpus.txt")
"${MPI[@]}" -n 2 "$EXE" "${SHAPE[@]}" --batch_size 4 --steps 4 --save "$D/ck" >"$D/train.log" 2>&1 ||
  { cat "$D/train.log"; fail "training run"; }

mkdir -p "$D/f32" "$D/b16"
"$Z" consolidate "$D/ck" "$D/f32/model.safetensors" >"$D/c32.log" 2>&1 ||
  { cat "$D/c32.log"; fail "consolidate fp32"; }
"$Z" consolidate "$D/ck" "$D/b16/model.safetensors" --dtype bf16 >"$D/c16.log" 2>&1 ||
  { cat "$D/c16.log"; fail "consolidate bf16"; }
cat "$D/c32.log" "$D/c16.log"
grep -q "n_layer 3, n_head 4, n_embd 32, vocab 256" "$D/c32.log" || fail "config summary"

# Names, shapes, dtypes, config.json: standard library only.
python3 - "$D/f32" "$D/b16" <<'PY' || fail "HF GPT-2 layout"
import json, struct, sys
L, H, C, NPOS, V = 3, 4, 32, 64, 256
want = {"wte.weight": [V, C], "wpe.weight": [NPOS, C], "ln_f.weight": [C], "ln_f.bias": [C]}
for i in range(L):
    p = f"h.{i}."
    want.update({p + "ln_1.weight": [C], p + "ln_1.bias": [C],
                 p + "attn.c_attn.weight": [C, 3 * C], p + "attn.c_attn.bias": [3 * C],
                 p + "attn.c_proj.weight": [C, C], p + "attn.c_proj.bias": [C],
                 p + "ln_2.weight": [C], p + "ln_2.bias": [C],
                 p + "mlp.c_fc.weight": [C, 4 * C], p + "mlp.c_fc.bias": [4 * C],
                 p + "mlp.c_proj.weight": [4 * C, C], p + "mlp.c_proj.bias": [C]})
for d, dt, tdt in ((sys.argv[1], "F32", "float32"), (sys.argv[2], "BF16", "bfloat16")):
    raw = open(d + "/model.safetensors", "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    meta = hdr.pop("__metadata__", {})
    assert meta.get("format") == "pt", meta
    got = {k: v["shape"] for k, v in hdr.items()}
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    assert not missing and not extra, f"{d}: missing {missing}, unexpected {extra}"
    for k in want:
        assert got[k] == want[k], f"{d}: {k} shape {got[k]}, HF GPT-2 has {want[k]}"
        assert hdr[k]["dtype"] == dt, f"{d}: {k} dtype {hdr[k]['dtype']}"
    c = json.load(open(d + "/config.json"))
    exp = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": L, "n_head": H,
           "n_embd": C, "n_positions": NPOS, "vocab_size": V, "activation_function": "gelu_new",
           "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "torch_dtype": tdt}
    for k, v in exp.items():
        assert c.get(k) == v, f"{d}/config.json: {k} = {c.get(k)!r}, want {v!r}"
    print(f"{d}: {len(got)} tensors with HF GPT-2 names/shapes ({dt}); config.json ok")
PY

# Round trip through zrt: the consolidated file loads back to the same
# model (fp32 engine for the fp32 file, bf16 engine for the bf16 file).
evals() { # NAME DTYPE_FLAG WEIGHTS_FLAG PATH
  "$EXE" "${SHAPE[@]}" --batch_size 4 --eval_only --eval_batches 2 --set "bf16.enabled=$2" \
    "$3" "$4" >"$D/$1.log" 2>&1 || { cat "$D/$1.log"; fail "eval $1"; }
  grep '^{"eval_loss"' "$D/$1.log" >"$D/$1.json" || fail "no eval line in $1"
}
evals r32 false --resume "$D/ck"
evals i32 false --init "$D/f32/model.safetensors"
evals r16 true --resume "$D/ck"
evals i16 true --init "$D/b16/model.safetensors"
python3 - "$D" <<'PY' || fail "round trip"
import json, sys
e = {k: json.load(open(f"{sys.argv[1]}/{k}.json"))["eval_loss_exact"] for k in ("r32", "i32", "r16", "i16")}
for a, b, what in (("r32", "i32", "fp32 engine, fp32 file"), ("r16", "i16", "bf16 engine, bf16 file")):
    d = abs(e[a] - e[b])
    print(f"{what}: --resume {e[a]!r} vs --init {e[b]!r}: |diff| {d:.3g} (tolerance 1e-5)")
    if not d <= 1e-5:
        sys.exit("round trip changed the model")
PY

if python3 -c "import safetensors, numpy" 2>/dev/null; then
  python3 - "$D" "$D/corpus.txt" "$(cat "$D/r32.json")" <<'PY' || fail "safetensors/numpy check"
import json, sys
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file
d, corpus, ev = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
w = load_file(f"{d}/f32/model.safetensors")
# numpy has no bfloat16: the package opens the file and lists its tensors,
# the bits are read from the data section by hand
with safe_open(f"{d}/b16/model.safetensors", framework="np") as f:
    w16 = set(f.keys())
import struct
raw = open(f"{d}/b16/model.safetensors", "rb").read()
(n,) = struct.unpack("<Q", raw[:8]); hdr = json.loads(raw[8:8 + n]); body = raw[8 + n:]
worst = 0
for k, t in hdr.items():
    if k == "__metadata__":
        continue
    assert k in w16, k
    b0, b1 = t["data_offsets"]
    bits = np.frombuffer(body[b0:b1], dtype=np.uint16).astype(np.uint32)
    f = w[k].astype(np.float32).reshape(-1).view(np.uint32)
    rne = ((f + 0x7FFF + ((f >> 16) & 1)) >> 16) & 0xFFFF
    worst = max(worst, int(np.count_nonzero(rne != bits)))
    back = (bits << 16).view(np.float32)
    assert np.max(np.abs(back - w[k].reshape(-1))) <= np.max(np.abs(w[k])) * 2 ** -8 + 1e-30, k
print(f"safetensors package: loaded {len(w)} fp32 and {len(w16)} bf16 tensors; bf16 == RNE(fp32) "
      f"for every element (mismatches: {worst})")
assert worst == 0

# Independent HF-convention GPT-2 forward (float64) from the file + config.json.
cfg = json.load(open(f"{d}/f32/config.json"))
L, H, C, eps = cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["layer_norm_epsilon"]
T, B, NB = 48, 4, 2
W = {k: v.astype(np.float64) for k, v in w.items()}
data = np.frombuffer(open(corpus, "rb").read(), dtype=np.uint8)
def ln(x, p):
    m = x.mean(-1, keepdims=True); v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * W[p + ".weight"] + W[p + ".bias"]
def gelu_new(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
mask = np.triu(np.full((T, T), -np.inf), 1)
losses = []
for r in range(NB * B):
    s = r * (T + 1)
    tok, tgt = data[s:s + T].astype(np.int64), data[s + 1:s + T + 1].astype(np.int64)
    x = W["wte.weight"][tok] + W["wpe.weight"][:T]
    for i in range(L):
        p = f"h.{i}."
        qkv = ln(x, p + "ln_1") @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = (qkv[:, j * C:(j + 1) * C].reshape(T, H, C // H).transpose(1, 0, 2) for j in range(3))
        a = q @ k.transpose(0, 2, 1) / np.sqrt(C // H) + mask
        a = np.exp(a - a.max(-1, keepdims=True)); a /= a.sum(-1, keepdims=True)
        y = (a @ v).transpose(1, 0, 2).reshape(T, C)
        x = x + y @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        h = gelu_new(ln(x, p + "ln_2") @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"])
        x = x + h @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    logits = ln(x, "ln_f") @ W["wte.weight"].T
    m = logits.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[:, 0]
    losses.append(np.mean(lse - logits[np.arange(T), tgt]))
ref = float(np.mean(losses))
diff = abs(ref - ev["eval_loss_exact"])
print(f"numpy float64 HF-convention forward of the consolidated file: eval loss {ref:.9f}; "
      f"zrt --eval_only --resume (fp32): {ev['eval_loss_exact']!r}; |diff| {diff:.3g} (tolerance 1e-4)")
assert diff <= 1e-4
PY
else
  echo "note: python packages 'safetensors'/'numpy' not importable: checking with scripts/check_safetensors.py (stdlib) instead"
  python3 "$SRC/scripts/check_safetensors.py" "$D/f32/model.safetensors" >"$D/chk.log" 2>&1 ||
    { cat "$D/chk.log"; fail "check_safetensors.py fp32"; }
  python3 "$SRC/scripts/check_safetensors.py" "$D/b16/model.safetensors" >>"$D/chk.log" 2>&1 ||
    { cat "$D/chk.log"; fail "check_safetensors.py bf16"; }
  cat "$D/chk.log"
fi

# A missing checkpoint: says what it looked for, writes nothing.
mkdir -p "$D/empty" "$D/none"
if "$Z" consolidate "$D/empty" "$D/none/model.safetensors" >"$D/err.log" 2>&1; then
  fail "consolidate of an empty directory succeeded"
fi
grep -q "no checkpoint in '$D/empty': looked for '$D/empty/latest'" "$D/err.log" ||
  { cat "$D/err.log"; fail "missing-checkpoint message"; }
[ -z "$(ls -A "$D/none")" ] || fail "consolidate of a missing checkpoint wrote $(ls "$D/none")"
echo "missing checkpoint: $(cat "$D/err.log")"
echo "PASS"
