#!/usr/bin/env bash
# perf-table.sh — refreshes the table at the top of perf/RESULTS.md (between
# the "perf-table" markers) in one command: each hot path, its physical limit
# on this machine, the peer measured in the same run, zrt, and the ratios.
#   optimizer   zrt-perf optimizer (fused AdamW, all cores) vs torch.optim.AdamW
#               (scripts/perf_torch_adamw.py); limit: STREAM triad of the run
#   collectives zrt-perf collectives, 2 ranks, 16 MiB, the shm comm (buffers
#               from the comm's allocator: zero-copy) vs Open MPI (--repeat
#               medians); limit: the copy of the run (the faster of memcpy and a
#               streaming copy, docs/perf.md)
#   training    zrt-perf step (GPT tiny, 2 ranks, stage 2) vs PyTorch eager
#               (scripts/perf_torch_gpt2.py); limit: the engine GEMM peak
#   main job    zrt-perf mainjob: the README's job under the thread plan vs
#               wide OpenMP teams (the old default), and with the shm comm vs
#               Open MPI; p10 / median of steps
# Every figure comes from this run; the load average of the machine is
# recorded beside the table. Needs a build in build/ (BUILD_DIR) and, for the
# PyTorch peers, a Python with torch (ZRT_PYTHON, else python3, else
# /usr/bin/python3). Raw JSON goes to perf/results/table/ (OUT_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build}/bin
OUT=${OUT_DIR:-perf/results/table}
mkdir -p "$OUT"
[ -x "$B/zrt-perf" ] || { echo "perf-table: $B/zrt-perf not built (run scripts/setup.sh)" >&2; exit 2; }
PY=""
for c in "${ZRT_PYTHON:-}" python3 /usr/bin/python3; do
  if [ -n "$c" ] && "$c" -c "import torch" 2>/dev/null; then PY=$c; break; fi
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cores=$(nproc)
elems=${ZRT_TABLE_OPT_ELEMENTS:-67108864}
load0=$(cut -d' ' -f1 /proc/loadavg)

echo "perf-table: optimizer ($elems elements, $cores threads)" >&2
OMP_NUM_THREADS=$cores "$B/zrt-perf" optimizer --elements "$elems" --json >"$OUT/optimizer.json"
if [ -n "$PY" ]; then
  "$PY" scripts/perf_torch_adamw.py --elements "$elems" --threads "$cores" >"$OUT/torch_adamw.json"
else
  echo '{"skipped": "no Python with torch"}' >"$OUT/torch_adamw.json"
fi
echo "perf-table: collectives (2 ranks, 16 MiB)" >&2
"$B/zrt-perf" collectives --min 16MiB --max 16MiB --ranks 2 --time 0.3 --repeat 5 --json \
  >"$OUT/collectives.json" || true
echo "perf-table: training step (GPT tiny, 2 ranks)" >&2
ZRT_PYTHON=${PY:-python3} "$B/zrt-perf" step --model tiny --ranks 2 --steps 20 --json \
  >"$OUT/step.json" || true
echo "perf-table: main job" >&2
"$B/zrt-perf" mainjob --steps 40 --rounds 3 --json >"$OUT/mainjob.json" || true
load1=$(cut -d' ' -f1 /proc/loadavg)

python3 - "$OUT" perf/RESULTS.md "$load0" "$load1" "$cores" <<'PYEOF'
import json, os, sys, time
out, results, load0, load1, cores = sys.argv[1:6]
def j(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except Exception as e:  # a bench that failed leaves its row empty
        return {"error": str(e)}
g = lambda x: f"{x/1e9:.2f}"
rows = []
opt, tad = j("optimizer.json"), j("torch_adamw.json")
if "elements_per_s" in opt:
    lim = opt["stream_bytes_per_s"] / 28  # elements/s at the triad bandwidth, 28 B/element
    z = opt["elements_per_s"]
    peer = tad.get("elements_per_s")
    rows.append(["CPU AdamW step (bf16 grads, %d M elements, %s threads)" % (opt["elements"] / 2**20, cores),
                 "%.2f G el/s (STREAM triad %.1f GB/s / 28 B)" % (lim / 1e9, opt["stream_bytes_per_s"] / 1e9),
                 "torch AdamW %s: %.3f G el/s (%s thr)" % (tad.get("torch", "?"), peer / 1e9, tad.get("threads")) if peer else "torch: not measured",
                 "%.2f G el/s" % (z / 1e9), "%.2f" % (z / peer) if peer else "-", "%.2f" % (z / lim)])
co = j("collectives.json")
comms = co.get("comms", {})
def pts(c):
    return {(p["op"], p["dtype"]): p for p in comms.get(c, {}).get("points", [])}
ps, pm = pts("shm"), pts("mpi")
mem = comms.get("shm", {}).get("memcpy_bytes_per_s")
for op in ("reduce_scatter", "all_gather", "all_reduce"):
    for dt in ("fp32", "bf16"):
        s, m = ps.get((op, dt)), pm.get((op, dt))
        if not s or not mem:
            continue
        sp = s.get("busbw_over_memcpy_runs", {})
        rows.append(["%s %s 16 MiB, 2 ranks (busbw, median of %s jobs)" % (op, dt, co.get("repeat", 1)),
                     "copy %s GB/s" % g(mem),
                     "Open MPI %s GB/s" % g(m["busbw_bytes_per_s"]) if m else "-",
                     "shm%s %s GB/s" % (" (comm buffers: zero-copy)" if comms.get("shm", {}).get("buffers") == "comm" else "",
                                        g(s["busbw_bytes_per_s"])),
                     "%.1f" % (s["busbw_bytes_per_s"] / m["busbw_bytes_per_s"]) if m else "-",
                     "%.2f (p10-p90 %.2f-%.2f)" % (s["busbw_over_memcpy"], sp.get("p10", 0), sp.get("p90", 0))])
st = j("step.json")
run = st.get("run", {})
tt = st.get("torch", {}).get("tokens_per_s")
cp = st.get("compute", {})
if run.get("wall_tokens_per_s") or run.get("tokens_per_s"):
    z = run.get("wall_tokens_per_s") or run.get("tokens_per_s")
    rows.append(["GPT tiny training step, 2 ranks stage 2 (tokens/s)",
                 "GEMM peak %.1f GFLOP/s" % cp["gemm_peak_gflops"] if "gemm_peak_gflops" in cp else "-",
                 "PyTorch eager %s: %.0f" % (st.get("torch", {}).get("run", {}).get("torch", "?"), tt) if tt else "torch: not measured",
                 "%.0f" % z, "%.2f" % (z / tt) if tt else "-",
                 "%.2f of peak (fwd+bwd)" % cp["run_fraction"] if "run_fraction" in cp else "-"])
mj = j("mainjob.json")
if "tok_s_plan" in mj:
    p, w = mj["tok_s_plan"], mj["tok_s_wide"]
    rows.append(["main job (README: 2 ranks, ZeRO-3 + offload), tokens/s per step",
                 "-",
                 "wide OpenMP teams (old default): median %.0f, p10/median %.2f" % (w["median"], mj["stability_wide"]),
                 "thread plan: median %.0f, p10/median %.2f" % (p["median"], mj["stability_plan"]),
                 "%.1f" % (p["median"] / w["median"]) if w["median"] else "-", "-"])
if "tok_s_plan_mpi" in mj:
    p, m = mj["tok_s_plan"], mj["tok_s_plan_mpi"]
    rows.append(["main job, shm comm vs Open MPI comm (both with the thread plan), tokens/s per step",
                 "-",
                 "Open MPI (ZRT_COMM=mpi): median %.0f, p10/median %.2f" % (m["median"], mj["stability_plan_mpi"]),
                 "shm: median %.0f, p10/median %.2f" % (p["median"], mj["stability_plan"]),
                 "%.2f" % (p["median"] / m["median"]) if m["median"] else "-", "-"])
when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
cpu, isa = "?", "no AVX2"
for line in open("/proc/cpuinfo"):
    if line.startswith("model name") and cpu == "?":
        cpu = line.split(":", 1)[1].strip()
    if line.startswith("flags"):
        fl = line.split()
        isa = "AVX-512" if "avx512f" in fl else ("AVX2, no AVX-512" if "avx2" in fl else "no AVX2")
lines = ["<!-- perf-table:begin (scripts/perf-table.sh rewrites this block) -->",
         "Refreshed by `scripts/perf-table.sh` at %s on this machine (%s, %s cores, %s); 1-minute load "
         "average %s before, %s after%s. Raw JSON: %s/." % (
             when, cpu, cores, isa, load0, load1,
             " — **measured under load**: other work shared the cores, compare only within a row" if float(load0) > 0.5 * int(cores) else "", out),
         "",
         "| hot path | physical limit (same run) | peer (same run) | zrt | zrt / peer | zrt / limit |",
         "| --- | --- | --- | --- | ---: | ---: |"]
lines += ["| " + " | ".join(r) + " |" for r in rows]
flags = [f for d in (opt, co, st, mj) for f in d.get("flags", [])]
if flags:
    lines += ["", "Flagged as impossible by zrt-perf (not trusted): " + "; ".join(flags)]
lines.append("<!-- perf-table:end -->")
text = open(results).read()
b, e = text.find("<!-- perf-table:begin"), text.find("<!-- perf-table:end -->")
block = "\n".join(lines)
if b >= 0 and e > b:
    text = text[:b] + block + text[e + len("<!-- perf-table:end -->"):]
else:  # first run: after the title line
    nl = text.find("\n") + 1
    text = text[:nl] + "\n" + block + "\n" + text[nl:]
open(results, "w").write(text)
print(block)
PYEOF
