#!/usr/bin/env bash
# test_gpt2_profile_ops.sh — train_gpt2 --profile_ops PATH (gpt2_prof.h):
# the tiny model, 5 steps, on cpu and on the twin: the JSON has every
# kernel kind with the calls one optimizer step makes (the passes' op
# sequence: 12 L + 3 GEMMs, L attention forwards and backwards, 2 L + 1
# LayerNorms each way, 4 L bias adds and bias backwards, L GELUs each way,
# 2 L + 1 residual adds, one cross-entropy, one encoder each way), over the
# 3 steps after the first two; on cpu the model ops' time is positive and
# within the step's wall time; profiling leaves the losses bitwise as they
# are; --profile_ops with --eval_only, into a missing directory, and onto a
# symlink are refused with a message and no file written through the link.
set -euo pipefail
. "$(dirname "$0")/gpt2_lib.sh" profile_ops
L=2 # the tiny preset's layers
args=(--model tiny --steps 5 --batch_size 2 --data "$D/corpus.txt")
losses() { sed -n 's/^step [0-9]*\/[0-9]* loss \([0-9.]*\).*/\1/p' "$1" | tr '\n' ' '; }
"$EXE" "${args[@]}" >"$D/plain.txt" 2>&1 || { cat "$D/plain.txt"; fail "the plain run failed"; }
for backend in cpu twin; do
  out=$D/prof_$backend.txt json=$D/ops_$backend.json
  "$EXE" "${args[@]}" --set zrt.backend=$backend --profile_ops "$json" >"$out" 2>&1 ||
    { cat "$out"; fail "$backend: the profiled run failed"; }
  grep -q "model ops per step (median of 3 steps)" "$out" || { cat "$out"; fail "$backend: no profile table"; }
  [ "$(losses "$out")" = "$(losses "$D/plain.txt")" ] ||
    fail "$backend: profiling changed the losses: $(losses "$out") vs $(losses "$D/plain.txt")"
  python3 - "$json" "$L" "$backend" <<'PY' || fail "$backend: see above"
import json, sys
r = json.load(open(sys.argv[1])); L = int(sys.argv[2]); backend = sys.argv[3]
want = {"gemm": 12 * L + 3, "attention_fwd": L, "attention_bwd": L, "layernorm_fwd": 2 * L + 1,
        "layernorm_bwd": 2 * L + 1, "bias_bwd": 3 * L, "gelu_fwd": L,
        "gelu_bwd": L, "residual": 2 * L + 1, "crossentropy": 1, "encoder_fwd": 1, "encoder_bwd": 1}
assert r["steps"] == 3 and r["skipped_steps"] == 2, (r["steps"], r["skipped_steps"])
for k, n in want.items():
    got = r["kinds"][k]["calls_per_step"]
    assert got == n, f"{k}: {got} calls per step, the passes make {n}"
    assert r["kinds"][k]["ms_per_step"] > 0, f"{k}: no time"
assert "zero" in r["kinds"]
ops, step = r["model_ops_ms"], r["step_ms"]
assert ops > 0 and step > 0, (ops, step)
if backend == "cpu":  # synchronous kernels: inside the step's wall time
    assert ops <= step, (ops, step)
print(f"{backend}: model ops {ops:.3f} ms of a {step:.3f} ms step; calls per kind as the passes make")
PY
done
# sampling after a profiled run uses the kernels unwrapped (it crashed)
"$EXE" "${args[@]}" --steps 3 --profile_ops "$D/s.json" --sample 8 >"$D/sample.txt" 2>&1 ||
  { cat "$D/sample.txt"; fail "--profile_ops with --sample failed"; }
grep -q "model ops per step" "$D/sample.txt" || { cat "$D/sample.txt"; fail "no profile table before the sample"; }
# refused: with --eval_only, into a missing directory, onto a symlink
if "$EXE" --eval_only --init "$D/none" --profile_ops "$D/x.json" >"$D/e1.txt" 2>&1; then
  fail "--profile_ops with --eval_only was accepted"
fi
grep -q "\-\-profile_ops times training steps; drop it with --eval_only" "$D/e1.txt" || { cat "$D/e1.txt"; fail "no --eval_only message"; }
if "$EXE" "${args[@]}" --steps 1 --profile_ops "$D/missing/ops.json" >"$D/e2.txt" 2>&1; then
  fail "--profile_ops into a missing directory was accepted"
fi
grep -q "cannot write the op profile --profile_ops $D/missing/ops.json: No such file or directory" "$D/e2.txt" ||
  { cat "$D/e2.txt"; fail "no message for a missing directory"; }
echo keep >"$D/target.txt"
ln -s "$D/target.txt" "$D/link.json"
if "$EXE" "${args[@]}" --steps 1 --profile_ops "$D/link.json" >"$D/e3.txt" 2>&1; then
  fail "--profile_ops onto a symlink was accepted"
fi
grep -q "cannot write the op profile --profile_ops $D/link.json" "$D/e3.txt" || { cat "$D/e3.txt"; fail "no message for a symlink"; }
[ "$(cat "$D/target.txt")" = keep ] || fail "the symlink's target was written"
echo "ok: --profile_ops counts every kernel kind as the passes issue them (cpu, twin), keeps the losses, refuses bad paths"
