#!/usr/bin/env python3
"""actckpt.py — activation checkpointing (issue 29) under a fixed device limit: one JSON.

Four figures, each with and without `train_gpt2 --activation_checkpointing`, on the
CPU backend under zrt.device_memory_limit (ZeRO stage 3 with optimizer and parameter
offload: examples/configs/ds_zero3_offload.json, micro batch 1, bf16):

1. seq: the longest sequence a deep, narrow GPT (24 layers x 64 wide, 4 heads) trains
   with. The candidate is the longest multiple of --seq_step that `zrt estimate-memory`
   says fits (within the 9/10 of the device the engine plans in; the engine's build and
   first-boundary plan are the same model, cli.test_memest_exact); it is then trained for
   --verify_steps steps and the measured device peak is recorded, and the next length up is
   tried too (it must be refused, or it is reported as trained). Goal: >= 4x. Also with
   cpu_checkpointing (the checkpoints in pinned host memory, two staging slots).
2. largest: the largest GPT of README's 24 MiB table (perf/largest_gpt.py's shapes,
   sequence 64) that fits, per world size, trained for 3 steps at --measure_worlds.
3. step_time: the step time with / without at the same size (the 24-layer model at the
   longest sequence that fits without), runs alternated --reps times in this one
   invocation, each run's median engine step time (metrics step_time_s, first step
   dropped), the ratio of the medians. Goal: <= 1.4x.
4. hidden: with cpu_checkpointing on the twin backend (zrt.backend twin, no jitter: its
   copies run on a copy stream, asynchronous to the compute stream), the share of the
   checkpoints' host transfers hidden behind compute: 1 - stall / copy, where copy is the
   copy stream's time in the transfers and stall the compute stream's time waiting for
   them (metrics actckpt_copy_s / actckpt_stall_s, from timing events; first step
   dropped), at the step-time size and at the longest sequence cpu_checkpointing trains.
   Goal: >= 80%.

usage: perf/actckpt.py BUILD_BIN [--device 24MiB] [--out FILE] [--reps 3] [--steps 6]
                       [--verify_steps 3] [--seq_step 16] [--measure_worlds 1,2]
                       [--layers 1,2,...,96 (largest's depths; default largest_gpt.py's)]
                       [--skip seq,largest,step_time,hidden]
  e.g. perf/actckpt.py build/bin --out perf/results/actckpt.json
"""
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import largest_gpt  # noqa: E402  (parse_size, LAYERS, SETTINGS)

CONFIG = os.path.join(HERE, "..", "examples", "configs", "ds_zero3_offload.json")
DEEP = {"n_layer": 24, "n_embd": 64, "n_head": 4}


def opt(name, default):
    a = sys.argv
    for i, x in enumerate(a):
        if x == "--" + name and i + 1 < len(a):
            return a[i + 1]
        if x.startswith("--" + name + "="):
            return x.split("=", 1)[1]
    return default


def machine():
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "online_cpus": os.cpu_count(), "kernel": platform.release(),
            "loadavg_1min": os.getloadavg()[0]}


def estimate(binp, shape, seq, worlds, dev, ckpt, cpu_ckpt=False):
    cfg = {"model_type": "gpt2", "n_layer": shape["n_layer"], "n_embd": shape["n_embd"],
           "n_head": shape["n_head"], "vocab_size": 256, "n_positions": max(seq, 64)}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
        path = f.name
    cmd = [os.path.join(binp, "zrt"), "estimate-memory", "--hf_config", path, "--seq_len",
           str(seq), "--world_sizes", worlds, "--dtype", "bf16", "--optimizer", "adamw",
           "--device_memory", dev, "--json"] + largest_gpt.SETTINGS
    if ckpt:
        cmd += ["--activation_checkpointing", "all", "--cpu_checkpointing",
                "true" if cpu_ckpt else "false"]
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(path)
    return json.loads(out)


def offload_row(d, world):
    """estimate-memory's stage 3 + optimizer and param offload row for world."""
    for c in d["configs"]:
        if c["world_size"] == world and c["stage"] == 3 and c["offload"] == "optimizer+param":
            return c
    raise SystemExit(f"estimate-memory gave no stage 3 optimizer+param row for world {world}")


def train(binp, shape, seq, steps, dev_bytes, world=1, ckpt=False, extra=(), env_extra=None):
    """train_gpt2 under mpiexec; returns (ok, metrics rows, command, error tail)."""
    with tempfile.TemporaryDirectory() as t:
        m = os.path.join(t, "m.jsonl")
        cmd = ["mpiexec", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none", "-n",
               str(world), os.path.join(binp, "train_gpt2"), "--n_layer", str(shape["n_layer"]),
               "--n_embd", str(shape["n_embd"]), "--n_head", str(shape["n_head"]),
               "--n_positions", str(max(seq, 64)), "--seq_len", str(seq), "--batch_size", "1",
               "--steps", str(steps), "--val_every", "0", "--sample", "0", "--metrics", m,
               "--config", CONFIG, "--set", f"zrt.device_memory_limit={dev_bytes}",
               "--set", "zrt.pin_memory_fallback=true"]
        if ckpt:
            cmd.append("--activation_checkpointing")
        cmd += list(extra)
        threads = max(1, (os.cpu_count() or 1) // world)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        env.pop("ZRT_TWIN_JITTER", None)
        if env_extra:
            env.update(env_extra)
        shown = f"OMP_NUM_THREADS={threads} " + " ".join(
            f"{k}={v}" for k, v in (env_extra or {}).items()) + (" " if env_extra else "") + \
            " ".join(x if x != m else "m.jsonl" for x in cmd)
        print(f"  train: {shown}", file=sys.stderr, flush=True)
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        rows = []
        if os.path.exists(m):
            rows = [json.loads(x) for x in open(m) if x.strip()]
        err = ""
        if r.returncode != 0 or len(rows) != steps:
            lines = [x for x in (r.stderr + r.stdout).splitlines() if "failed" in x or
                     "error" in x.lower()]
            err = (lines[0] if lines else (r.stderr + r.stdout)[-600:]).strip()
        return r.returncode == 0 and len(rows) == steps, rows, shown, err


def med(rows, key):
    v = [x[key] for x in rows[1:] if key in x] or [x[key] for x in rows if key in x]
    return statistics.median(v) if v else None


def longest_seq(binp, dev, step, ckpt, cpu_ckpt=False):
    """Longest multiple of step whose stage 3 + offload row fits (monotone in seq)."""
    def fits(seq):
        return offload_row(estimate(binp, DEEP, seq, "1", dev, ckpt, cpu_ckpt), 1)["fits"]
    lo, hi = 0, step
    while fits(hi):
        lo, hi = hi, hi * 2
        if hi > 1 << 16:
            break
    while hi - lo > step:  # lo fits (or 0), hi does not
        mid = (lo + hi) // 2 // step * step
        if mid <= lo:
            break
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


CPU_CKPT = ["--set", "activation_checkpointing.cpu_checkpointing=true"]


def bench_seq(binp, dev, dev_bytes, step, vsteps, res):
    out = {}
    for name, ck, cc in (("without", False, False), ("with", True, False),
                         ("with_cpu_checkpointing", True, True)):
        t = longest_seq(binp, dev, step, ck, cc)
        row = offload_row(estimate(binp, DEEP, t, "1", dev, ck, cc), 1)
        extra = CPU_CKPT if cc else []
        ok, rows, cmd, err = train(binp, DEEP, t, vsteps, dev_bytes, ckpt=ck, extra=extra)
        e = {"seq_len": t, "predicted_device_bytes": row["device_bytes"],
             "predicted_activation_bytes": row["device"]["activations"], "trained": ok,
             "command": cmd}
        if ok:
            e["measured_device_peak_bytes"] = max(x["device_peak_bytes"] for x in rows)
            e["measured_activation_peak_bytes"] = max(x["activations"] for x in rows)
        else:
            e["error"] = err
        ok2, _, cmd2, err2 = train(binp, DEEP, t + step, 2, dev_bytes, ckpt=ck, extra=extra)
        e["next"] = {"seq_len": t + step, "trained": ok2, "command": cmd2}
        if not ok2:
            e["next"]["error"] = err2
        out[name] = e
    if out["without"]["seq_len"]:
        out["ratio"] = out["with"]["seq_len"] / out["without"]["seq_len"]
        out["ratio_cpu_checkpointing"] = (out["with_cpu_checkpointing"]["seq_len"] /
                                          out["without"]["seq_len"])
    out["goal"] = ">= 4x"
    res["seq"] = out
    return out


def bench_largest(binp, dev, dev_bytes, worlds, measure_worlds, layers, res):
    seq = 64
    out = {"seq_len": seq, "layers_searched": layers, "worlds": {}}
    wl = [int(w) for w in worlds.split(",")]
    for name, ck in (("without", False), ("with", True)):
        best, cache = {}, {}
        for L in layers:
            # the widest n_embd (multiple of 64) that fits, per world: monotone in width
            for w in wl:
                def row(e):
                    if (L, e) not in cache:  # one call serves every world size
                        cache[(L, e)] = estimate(binp, {"n_layer": L, "n_embd": e,
                                                        "n_head": e // 64}, seq, worlds, dev, ck)
                    d = cache[(L, e)]
                    return d["params"], offload_row(d, w)
                lo, hi = 0, 64
                while hi <= 8192 and row(hi)[1]["fits"]:
                    lo, hi = hi, hi * 2
                hi = min(hi, 8192 + 64)
                while hi - lo > 64:
                    mid = (lo + hi) // 2 // 64 * 64
                    if row(mid)[1]["fits"]:
                        lo = mid
                    else:
                        hi = mid
                if lo == 0:
                    continue
                p, r = row(lo)
                if w not in best or p > best[w]["params"]:
                    best[w] = {"params": p, "n_layer": L, "n_embd": lo, "n_head": lo // 64,
                               "predicted_device_bytes": r["device_bytes"]}
        for w in wl:
            b = best.get(w)
            if b and w in measure_worlds:
                shape = {k: b[k] for k in ("n_layer", "n_embd", "n_head")}
                ok, rows, cmd, err = train(binp, shape, seq, 3, dev_bytes, world=w, ckpt=ck)
                b["trained"] = ok
                b["command"] = cmd
                if ok:
                    b["measured_device_peak_bytes"] = max(x["device_peak_bytes"] for x in rows)
                else:
                    b["error"] = err
            out["worlds"].setdefault(str(w), {})[name] = b
    for w, v in out["worlds"].items():
        if v.get("without") and v.get("with"):
            v["ratio"] = v["with"]["params"] / v["without"]["params"]
    res["largest"] = out
    return out


def bench_step_time(binp, seq, dev_bytes, reps, steps, res):
    runs = {"without": [], "with": []}
    cmds = {}
    for _ in range(reps):
        for name, ck in (("without", False), ("with", True)):
            ok, rows, cmd, err = train(binp, DEEP, seq, steps, dev_bytes, ckpt=ck)
            cmds[name] = cmd
            if not ok:
                res["step_time"] = {"error": f"{name}: {err}", "command": cmd}
                return
            runs[name].append({k: med(rows, k) for k in
                               ("step_time_s", "forward_s", "backward_s", "boundary_s")})
    out = {"seq_len": seq, "reps": reps, "steps_per_run": steps, "commands": cmds}
    for name in runs:
        out[name] = {"runs": runs[name],
                     "median_step_time_s": statistics.median(r["step_time_s"]
                                                             for r in runs[name])}
    out["ratio"] = out["with"]["median_step_time_s"] / out["without"]["median_step_time_s"]
    out["goal"] = "<= 1.4x"
    res["step_time"] = out


def bench_hidden(binp, seqs, dev_bytes, steps, res):
    res["hidden"] = [hidden_at(binp, s, dev_bytes, steps) for s in seqs]


def hidden_at(binp, seq, dev_bytes, steps):
    ok, rows, cmd, err = train(binp, DEEP, seq, steps, dev_bytes, ckpt=True, extra=CPU_CKPT,
                               env_extra={"ZRT_BACKEND": "twin"})
    out = {"seq_len": seq, "backend": "twin", "command": cmd}
    if not ok:
        out["error"] = err
        return out
    use = rows[1:] if len(rows) > 1 else rows
    copy = sum(x.get("actckpt_copy_s", 0) for x in use)
    stall = sum(x.get("actckpt_stall_s", 0) for x in use)
    untimed = sum(x.get("actckpt_untimed", 0) for x in use)
    out.update({"steps_measured": len(use), "copy_s": copy, "stall_s": stall,
                "untimed": untimed, "median_step_time_s": med(rows, "step_time_s"),
                "hidden_share": (1 - stall / copy) if copy > 0 else None, "goal": ">= 0.8"})
    if "actckpt_copy_s" not in rows[-1]:
        out["error"] = "no actckpt_copy_s in the metrics: the backend has no timing events"
    return out


def main():
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit(__doc__)
    binp = sys.argv[1]
    dev = opt("device", "24MiB")
    dev_bytes = largest_gpt.parse_size(dev)
    outp = opt("out", "")
    reps, steps = int(opt("reps", "3")), int(opt("steps", "6"))
    vsteps, step = int(opt("verify_steps", "3")), int(opt("seq_step", "16"))
    skip = set(opt("skip", "").split(","))
    mworlds = [int(w) for w in opt("measure_worlds", "1,2").split(",") if w]
    res = {"bench": "actckpt", "command": " ".join(["perf/actckpt.py"] + sys.argv[1:]),
           "machine": machine(), "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "device_memory_limit": dev, "deep_model": DEEP, "config": "ds_zero3_offload.json",
           "backend": "cpu (hidden: twin)"}
    t0 = time.time()
    if "seq" not in skip:
        s = bench_seq(binp, dev, dev_bytes, step, vsteps, res)
        seq, seq_cpu = s["without"]["seq_len"], s["with_cpu_checkpointing"]["seq_len"]
    else:
        seq, seq_cpu = longest_seq(binp, dev, step, False), longest_seq(binp, dev, step, True, True)
    if "step_time" not in skip:
        bench_step_time(binp, seq, dev_bytes, reps, steps, res)
    if "hidden" not in skip:
        # at the step-time size, and at the longest sequence cpu_checkpointing trains
        bench_hidden(binp, [seq, seq_cpu], dev_bytes, steps, res)
    if "largest" not in skip:
        layers = [int(x) for x in opt("layers", ",".join(map(str, largest_gpt.LAYERS))).split(",")]
        bench_largest(binp, dev, dev_bytes, "1,2,8", mworlds, layers, res)
    res["machine"]["loadavg_1min_after"] = os.getloadavg()[0]
    res["wall_s"] = time.time() - t0
    text = json.dumps(res, indent=1)
    if outp:
        with open(outp, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
