#!/usr/bin/env bash
# test_perf_gpu_report.sh — the plumbing of issue 24's GPU benchmark
# (scripts/perf_gpu_gpt2.sh, `gpu-setup.sh step perf`) where there is no
# GPU: the smoke mode (ZRT_PERF_SMOKE=1: tiny model on the cpu backend,
# PyTorch on the CPU, `zrt-perf pinned --backend cpu`) must produce a report
# whose zrt figures agree with the run's own metrics and banner (tokens/s:
# the median of the steps after the first two; MFU: FLOPs per token x
# tokens/s over the measured peak, recomputed here to 1e-9 relative), with
# the pinned-copy fractions and the hidden share in range, every goal
# present, the kernels by class (the --profile_ops run's GEMM, attention and
# other kinds summed as the report's classes, each with a positive floor
# from perf/gpt2_cuda_budget.py for the run's shape, and the step outside
# the model's kernels against its parameter passes' floor), and an MFU above 1 (the CPU's peak measured low on a busy
# machine) flagged, never silently reported: a log whose peak line is made
# 1000x lower must be flagged. The report must refuse inputs it cannot use:
# an empty directory (exit 1, zrt missing) and a log without the measured
# peak (MFU null and named in "missing", never a guess).
set -euo pipefail
. "$(dirname "$0")/gpt2_lib.sh" perf_gpu_report
[ -x "$BIN/zrt-perf" ] || { echo "SKIP: $BIN/zrt-perf not built"; exit 77; }
OMP_NUM_THREADS=1 ZRT_PERF_SMOKE=1 bash "$SRC/scripts/perf_gpu_gpt2.sh" "$BIN" "$D/out" \
  >"$D/run.log" 2>&1 || { cat "$D/run.log"; fail "perf_gpu_gpt2.sh (smoke) failed"; }
python3 - "$D/out" <<'EOF' || { cat "$D/run.log"; fail "the smoke report is wrong"; }
import json, re, statistics, sys
d = sys.argv[1]
r = json.load(open(d + "/perf_gpu.json"))
z = r["zrt"]
assert z, "no zrt section"
steps = [json.loads(l) for l in open(d + "/zrt_gpt2.jsonl") if l.startswith("{")]
want = statistics.median(s["tokens_per_s"] for s in steps[2:])
assert z["tokens_per_s"] == want, (z["tokens_per_s"], want)
log = open(d + "/zrt_gpt2.log").read()
peak = float(re.search(r"GEMM peak ([0-9.]+) GFLOP/s", log).group(1)) * 1e9
gf = float(re.search(r"([0-9.eE+]+) GFLOP per rank per step", log).group(1)) * 1e9
fpt = gf / (2 * 1 * 64)  # smoke: micro-batch 2, accum 1, seq 64
mfu = fpt * want / peak
assert abs(z["mfu"] - mfu) <= 1e-9 * mfu, (z["mfu"], mfu)
assert z["mfu"] > 0, z["mfu"]  # the CPU's timings on a shared machine: no upper bound, but
assert (z["mfu"] > 1) == any(f.startswith("zrt: MFU") for f in r["flags"]), (z["mfu"], r["flags"])
p = r["pinned"]
assert p and p["backend"] == "cpu", p
for k in ("zrt_h2d_fraction_of_plain", "zrt_d2h_fraction_of_plain"):
    assert p[k] > 0, (k, p[k])
assert 0 <= r["hidden_fraction"] <= 1, r["hidden_fraction"]
assert set(r["goals"]) == {"mfu_at_least_0.45", "at_least_1.2x_torch_eager",
                           "pinned_at_least_0.9_of_plain"}, r["goals"]
assert r["goals"]["mfu_at_least_0.45"] is not None
kr = r["kernels"]
assert kr, ("no kernels section", r["missing"])
ops = json.load(open(d + "/zrt_ops.json"))["kinds"]
att = ops["attention_fwd"]["ms_per_step"] + ops["attention_bwd"]["ms_per_step"]
rest = sum(v["ms_per_step"] for k, v in ops.items() if k not in ("gemm", "attention_fwd", "attention_bwd"))
for c, want_ms in (("gemm", ops["gemm"]["ms_per_step"]), ("attention", att), ("elementwise", rest)):
    got = kr["classes"][c]
    assert abs(got["ms_per_step"] - want_ms) <= 1e-9 * want_ms, (c, got, want_ms)
    assert got["floor_ms"] > 0 and got["floor_over_measured"] > 0, (c, got)
assert kr["attention_kernels"] == "CUDA cores", kr["attention_kernels"]  # smoke: an fp32 run
# the step outside the model's kernels against the parameter passes' floor
ops_all = json.load(open(d + "/zrt_ops.json"))
om = kr["classes"]["outside_model"]
want_out = ops_all["step_ms"] - ops_all["model_ops_ms"]
assert abs(om["ms_per_step"] - want_out) <= 1e-9 * abs(want_out), (om, want_out)
assert om["floor_ms"] is None and "fp32" in om["why_no_floor"], om  # smoke: an fp32 run
for name in ("torch_eager", "torch_compile"):
    if r[name] is None:
        assert any(m.startswith(name) for m in r["missing"]), (name, r["missing"])
    else:
        assert r[name]["tokens_per_s"] > 0
        assert abs(r[name]["zrt_speedup"] - want / r[name]["tokens_per_s"]) < 1e-9 * want
print("smoke report: zrt %.0f tok/s, mfu %.4f; pinned h2d %.2f of plain; hidden %.2f; "
      "torch eager %s, compile %s; missing %s" % (
          want, z["mfu"], p["zrt_h2d_fraction_of_plain"], r["hidden_fraction"],
          "ok" if r["torch_eager"] else "missing", "ok" if r["torch_compile"] else "missing",
          r["missing"]))
EOF
# an empty directory: no zrt run, exit 1
mkdir "$D/empty"
rc=0
python3 "$SRC/scripts/perf_gpu_report.py" "$D/empty" >"$D/empty.json" || rc=$?
[ "$rc" = 1 ] || fail "report on an empty directory: exit $rc, expected 1"
grep -q '"zrt": null' "$D/empty.json" || fail "report on an empty directory claims a zrt run"
# the measured peak removed: MFU null, named missing
mkdir "$D/nopeak"
cp "$D/out/zrt_gpt2.jsonl" "$D/nopeak/"
grep -v "GEMM peak" "$D/out/zrt_gpt2.log" >"$D/nopeak/zrt_gpt2.log"
python3 "$SRC/scripts/perf_gpu_report.py" "$D/nopeak" >"$D/nopeak.json" ||
  fail "report without the peak line failed"
python3 - "$D/nopeak.json" <<'EOF' || fail "report without the peak line guessed an MFU"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["zrt"]["mfu"] is None and r["goals"]["mfu_at_least_0.45"] is None, r["zrt"]
assert any("GEMM peak" in m for m in r["missing"]), r["missing"]
EOF
# a peak 1000x too low: an MFU above 1, flagged
mkdir "$D/lowpeak"
cp "$D/out/zrt_gpt2.jsonl" "$D/lowpeak/"
python3 -c 'import re, sys; print(re.sub(r"GEMM peak ([0-9.]+) GFLOP", lambda m: "GEMM peak %.6f GFLOP" % (float(m.group(1)) / 1000), open(sys.argv[1]).read()), end="")' \
  "$D/out/zrt_gpt2.log" >"$D/lowpeak/zrt_gpt2.log"
python3 "$SRC/scripts/perf_gpu_report.py" "$D/lowpeak" >"$D/lowpeak.json" || fail "report on a low peak failed"
python3 - "$D/lowpeak.json" <<'EOF' || fail "an MFU above 1 was not flagged"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["zrt"]["mfu"] > 1 and any(f.startswith("zrt: MFU") for f in r["flags"]), (r["zrt"], r["flags"])
EOF
echo "perf_gpu report: smoke run consistent with its metrics; missing inputs reported, not guessed"
