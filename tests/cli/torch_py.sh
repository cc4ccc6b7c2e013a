# torch_py.sh — the Python interpreter for the tests that compare with
# PyTorch (test_gpt2_torch.sh, test_attention_torch_emu.sh): the first of
# $ZRT_PYTHON, python3 on PATH and Debian's /usr/bin/python3 (python3 on
# PATH may be another Python) that imports the modules given.
#
# Usage: . "$(dirname "$0")/torch_py.sh" "torch, numpy"
# Sets PY, or skips (exit 77) saying what no Python here imports.
PY=""
for c in "${ZRT_PYTHON:-}" python3 /usr/bin/python3; do
  if [ -n "$c" ] && "$c" -c "import $1" 2>/dev/null; then PY=$c; break; fi
done
if [ -z "$PY" ]; then
  echo "SKIP: no Python that imports $1 (apt-get install python3-torch, or set ZRT_PYTHON)"
  exit 77
fi
