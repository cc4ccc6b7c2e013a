#!/usr/bin/env bash
# test_gpt2_torch.sh — the GPT-2 example's forward matches an independent
# PyTorch float64 implementation (scripts/gpt2_torch_ref.py): same random
# weights through a safetensors file (--init), same eval windows, eval loss
# equal within 1e-4 absolute (fp32 kernels vs float64). Skips (77) when
# no Python here imports torch.
set -euo pipefail
BIN=${ZRT_BIN:-build/bin}
SRC=${ZRT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$(dirname "$0")/torch_py.sh" torch # PY: the interpreter with torch
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bash "$SRC/examples/gpt2/make_corpus.sh" "$tmp/corpus.txt" >/dev/null
want=$("$PY" "$SRC/scripts/gpt2_torch_ref.py" --data "$tmp/corpus.txt" --out "$tmp/w.safetensors" \
  --batch_size 2 --eval_batches 3)
got=$(ZRT_LOG_LEVEL=warn "$BIN/train_gpt2" --model tiny --batch_size 2 --eval_only --eval_batches 3 \
  --init "$tmp/w.safetensors" --data "$tmp/corpus.txt" | grep eval_loss)
python3 - "$want" "$got" <<'PY'
import json, sys
w = json.loads(sys.argv[1])["eval_loss"]; g = json.loads(sys.argv[2])["eval_loss"]
print(f"eval_loss torch {w:.6f} train_gpt2 {g:.6f}: diff {abs(w - g):.3g} (tolerance 1e-4)")
sys.exit(0 if abs(w - g) <= 1e-4 else "FAIL: eval loss differs")
PY
