#!/usr/bin/env python3
"""perf_gpu_report.py DIR — the JSON report of scripts/perf_gpu_gpt2.sh.

Reads what that script left in DIR:
  zrt_gpt2.log    train_gpt2's output: the banner ("... N GFLOP per rank per
                  step ... micro-batch B, accum K ...", "seq T") and the
                  MFU denominator it measured at start ("measured <backend>
                  <dtype> GEMM peak X GFLOP/s per rank");
  zrt_gpt2.jsonl  its metrics, one line per optimizer step (tokens_per_s);
  torch_gpt2.jsonl  perf_torch_gpt2.py's lines (eager, then "compile": true);
  pinned.json     `zrt-perf pinned --json`;
  zrt_ops.json    train_gpt2 --profile_ops: zrt's model kernels timed by
                  kind (medians per optimizer step).
Prints one JSON object: zrt's tokens/s (median over the steps after the
first two, which pay for start-up), its MFU (zrt's FLOPs per token x
tokens/s over its measured peak), each PyTorch run's tokens/s and MFU on the
same convention (zrt's FLOPs per token and zrt's peak; the line's own "mfu",
6 x params over torch's own matmul peak, is kept beside it), the ratios,
the pinned-copy figures, zrt's kernels by class ("kernels": GEMM, attention,
the rest, each its measured ms per step against its floor from
perf/gpt2_cuda_budget.py at zrt's measured GEMM peak and the budget's
default fp32 and HBM peaks, H100 SXM's: floor / measured is how close each
class runs to its physical limit; "outside_model": the step's time outside
the model's kernels against the floor of its parameter-sized passes,
gradient staging, the engine's reduce, statistics and AdamW), and the
issue's goals (MFU >= 0.45, >= 1.2x
PyTorch eager, pinned copies >= 0.9 of plain) each as true / false, or null
with the reason in "missing" when its inputs are absent. Nothing is
estimated or filled in. Figures that cannot be right (an MFU above 1: the
peak was measured low, e.g. on a busy machine; the pinned bench's own
flags) are listed in "flags". Exit status 1 when the zrt run is missing.
"""
import importlib.util
import json
import os
import re
import statistics
import sys

# the kinds of train_gpt2 --profile_ops in the budget's classes
ATTENTION_KINDS = ("attention_fwd", "attention_bwd")


def load_budget():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "perf",
                        "gpt2_cuda_budget.py")
    spec = importlib.util.spec_from_file_location("gpt2_cuda_budget", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def kernels_vs_floor(ops, zrt, shape, dtype):
    """zrt's measured model kernels per class against the budget's floors."""
    b = load_budget()
    L, NH, C = shape
    accum = zrt["accum"]
    tensor = zrt["gemm_peak_flops"] or 989e12
    # a bf16 / fp16 run's kernels: tensor-core attention, the cross-entropy's
    # 16-bit gradient copy, operand reuse and the GEMM-only activations in 16
    # bits (gpt2_act16.h); fp32: the CUDA cores' attention
    tc = dtype in ("bf16", "fp16")
    # the budget's zrt_cuda_now shape in a 16-bit run (every fusion and
    # 16-bit slot on), its fp32_core_attention shape in an fp32 one
    k = b.step_budget(zrt["micro_batch"], zrt["seq_len"], C, L, NH, zrt["vocab"], 4, tc,
                      7 if tc else 9, ce_copy16=tc, reuse=tc, act16=tc, bias_fwd_fused=tc,
                      bias_grad_fused=tc, attn_writes=tc, gelu_copy16=tc, fch16=tc,
                      dqkv16=tc, ln_fused=tc, logits16=tc, d4c16=tc, dc16=tc, dw16=tc)
    s = b.seconds(k, tensor, 67e12, 3.35e12)
    # the step's parameter-sized passes (gradient staging, the engine's
    # reduce, statistics and AdamW) against the step's time outside the
    # model's kernels (the engine, the host, the launch gaps); the budget
    # models a 16-bit run's passes only (the benchmark's bf16)
    engine_floor = (b.param_passes(zrt["seq_len"], C, L, zrt["vocab"], "zrt", accum) / 3.35e12
                    if tc else None)
    kinds = ops["kinds"]
    ms = lambda names: sum(kinds[n]["ms_per_step"] for n in names if n in kinds)
    rest = [n for n in kinds if n != "gemm" and n not in ATTENTION_KINDS]
    floors = {"gemm": s["gemm_tensor_s"] + s["gemm_bytes_s"],
              "attention": s["attention_compute_s"] + s["attention_bytes_s"],
              "elementwise": s["elementwise_s"]}
    got = {"gemm": ms(["gemm"]), "attention": ms(ATTENTION_KINDS), "elementwise": ms(rest)}
    out = {"peaks": {"tensor_flops": tensor, "fp32_flops": 67e12, "hbm_bytes_per_s": 3.35e12},
           "attention_kernels": "tensor cores" if tc else "CUDA cores",
           "model_ops_ms": ops["model_ops_ms"], "step_ms": ops["step_ms"], "classes": {}}
    for c in ("gemm", "attention", "elementwise"):
        f = 1e3 * floors[c] * accum
        out["classes"][c] = {"ms_per_step": got[c], "floor_ms": f,
                             "floor_over_measured": f / got[c] if got[c] > 0 else None}
    outside = ops["step_ms"] - ops["model_ops_ms"]
    f = 1e3 * engine_floor if engine_floor is not None else None
    out["classes"]["outside_model"] = {
        "ms_per_step": outside, "floor_ms": f,
        "floor_over_measured": f / outside if f is not None and outside > 0 else None}
    if f is None:
        out["classes"]["outside_model"]["why_no_floor"] = (
            "perf/gpt2_cuda_budget.py's param_passes models a bf16/fp16 run; this one is " + dtype)
    return out


def read_lines(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return out


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: perf_gpu_report.py DIR\n")
        return 2
    d = sys.argv[1]
    missing = []
    rep = {"dir": os.path.abspath(d)}

    zrt = None
    log = ""
    if os.path.exists(os.path.join(d, "zrt_gpt2.log")):
        with open(os.path.join(d, "zrt_gpt2.log")) as f:
            log = f.read()
    m_peak = re.search(r"measured (\S+) (\S+) GEMM peak ([0-9.]+) GFLOP/s per rank", log)
    m_flop = re.search(r"([0-9.eE+]+) GFLOP per rank per step", log)
    m_bat = re.search(r"micro-batch (\d+), accum (\d+)", log)
    m_seq = re.search(r"seq (\d+), vocab (\d+)", log)
    m_shape = re.search(r"\((\d+) layers, (\d+) heads, (\d+) embd", log)
    m_dtype = re.search(r", dtype (\S+), ZeRO stage", log)
    steps = [r for r in read_lines(os.path.join(d, "zrt_gpt2.jsonl")) if "tokens_per_s" in r]
    if not (m_flop and m_bat and m_seq):
        missing.append("zrt: no train_gpt2 banner in zrt_gpt2.log (did it start?)")
    elif len(steps) < 3:
        missing.append("zrt: %d metrics lines in zrt_gpt2.jsonl, need 3 or more (the first two "
                       "are start-up)" % len(steps))
    else:
        tokens_per_step = int(m_bat.group(1)) * int(m_bat.group(2)) * int(m_seq.group(1))
        fpt = float(m_flop.group(1)) * 1e9 / tokens_per_step
        tps = statistics.median(r["tokens_per_s"] for r in steps[2:])
        zrt = {"tokens_per_s": tps, "steps_used": len(steps) - 2,
               "flops_per_token": fpt, "seq_len": int(m_seq.group(1)),
               "vocab": int(m_seq.group(2)), "micro_batch": int(m_bat.group(1)),
               "accum": int(m_bat.group(2)),
               "peak_backend": None, "peak_dtype": None, "gemm_peak_flops": None, "mfu": None}
        if m_peak:
            peak = float(m_peak.group(3)) * 1e9
            zrt.update(peak_backend=m_peak.group(1), peak_dtype=m_peak.group(2),
                       gemm_peak_flops=peak, mfu=fpt * tps / peak)
        else:
            missing.append("zrt: no 'measured ... GEMM peak' line in zrt_gpt2.log")
    rep["zrt"] = zrt

    ops = None
    if os.path.exists(os.path.join(d, "zrt_ops.json")):
        with open(os.path.join(d, "zrt_ops.json")) as f:
            ops = json.load(f)
    if ops is None:
        missing.append("kernels: no zrt_ops.json (see zrt_ops.log)")
        rep["kernels"] = None
    elif not (zrt and m_shape and m_dtype):
        missing.append("kernels: zrt_ops.json without the zrt run's banner to size the floors")
        rep["kernels"] = None
    else:
        shape = (int(m_shape.group(1)), int(m_shape.group(2)), int(m_shape.group(3)))
        rep["kernels"] = kernels_vs_floor(ops, zrt, shape, m_dtype.group(1))
        rep["kernels"]["kinds"] = ops["kinds"]

    runs = read_lines(os.path.join(d, "torch_gpt2.jsonl"))
    for name, want in (("torch_eager", False), ("torch_compile", True)):
        r = next((x for x in runs if bool(x.get("compile", False)) == want
                  and "tokens_per_s" in x), None)
        if r is None:
            missing.append("%s: no line in torch_gpt2.jsonl (see torch%s.log)"
                           % (name, "_compile" if want else ""))
        else:
            r = dict(r)
            if zrt and zrt["gemm_peak_flops"]:
                r["mfu_zrt_convention"] = zrt["flops_per_token"] * r["tokens_per_s"] / \
                    zrt["gemm_peak_flops"]
            if zrt:
                r["zrt_speedup"] = zrt["tokens_per_s"] / r["tokens_per_s"]
        rep[name] = r

    pin = read_lines(os.path.join(d, "pinned.json"))
    pin = pin[0] if pin else None
    if pin is None:
        missing.append("pinned: no pinned.json (see pinned.log)")
    rep["pinned"] = pin

    eager = rep.get("torch_eager")
    goals = {
        "mfu_at_least_0.45": None if not zrt or zrt["mfu"] is None else zrt["mfu"] >= 0.45,
        "at_least_1.2x_torch_eager": None if not (zrt and eager) else
        zrt["tokens_per_s"] >= 1.2 * eager["tokens_per_s"],
        "pinned_at_least_0.9_of_plain": None if not pin else
        min(pin["zrt_h2d_fraction_of_plain"], pin["zrt_d2h_fraction_of_plain"]) >= 0.9,
    }
    rep["goals"] = goals
    flags = []
    for name, mfu in (("zrt", zrt and zrt["mfu"]),
                      ("torch_eager", eager and eager.get("mfu_zrt_convention")),
                      ("torch_compile", rep.get("torch_compile") and
                       rep["torch_compile"].get("mfu_zrt_convention"))):
        if mfu is not None and mfu > 1:
            flags.append("%s: MFU %.3g above 1: the GEMM peak was measured low (a busy machine "
                         "during train_gpt2's start?); compare tokens/s only" % (name, mfu))
    if pin:
        flags += ["pinned: " + f for f in pin.get("flags", [])]
    rep["flags"] = flags
    rep["hidden_fraction"] = pin["hidden_fraction"] if pin else None
    rep["missing"] = missing
    print(json.dumps(rep, indent=1, sort_keys=True))
    return 0 if zrt else 1


if __name__ == "__main__":
    sys.exit(main())
