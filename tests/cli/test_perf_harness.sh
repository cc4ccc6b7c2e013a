#!/usr/bin/env bash
# test_perf_harness.sh — what zrt-perf refuses or records whatever the
# machine's speed: a one-size collectives run (every series one point) gets
# no line chart (stderr says so, no PNG) while its JSON keeps the figures;
# every result records the load average before and after the benchmark and
# whether the machine was busy; --repeat K reports medians with their
# spread and the load of each job; --alternate K adds K rounds of memcpy,
# mpi, shm on the comm's buffers and shm on private buffers per job, every job's rounds pooled, each ratio over its own
# round's memcpy. (Flags on impossible figures depend on
# timings, so no test forces one.) zrt-perf kernels: its JSON shape, medians of
# its rounds, and a malformed --bytes refused.
set -euo pipefail
BIN=${ZRT_BIN:-build/bin}
PERF=$BIN/zrt-perf
[ -x "$PERF" ] || { echo "FAIL: $PERF not built"; exit 1; }
command -v mpiexec >/dev/null || { echo "SKIP: no mpiexec"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
"$PERF" collectives --min 64KiB --max 64KiB --time 0.01 --repeat 2 --alternate 3 --out "$tmp/out" --json \
  >"$tmp/c.json" 2>"$tmp/err" || rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 3 ]; then
  echo "FAIL: zrt-perf collectives failed (exit $rc):"
  tail -20 "$tmp/err"
  exit 1
fi
grep -q "plot collectives_busbw_mpi not drawn: every series has fewer than 2 points" "$tmp/err" ||
  { echo "FAIL: no 'not drawn' note for a one-point chart"; cat "$tmp/err"; exit 1; }
[ ! -e "$tmp/out/collectives_busbw_mpi.png" ] || { echo "FAIL: a one-point chart was drawn"; exit 1; }
python3 - "$tmp/c.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
def need(cond, what):
    if not cond:
        print("FAIL:", what); print(json.dumps(r, indent=1)[:3000]); sys.exit(1)
m = r.get("machine", {})
need(isinstance(m.get("loadavg_1min"), (int, float)) and isinstance(m.get("loadavg_1min_after"), (int, float)),
     "load average before and after recorded")
need(isinstance(m.get("busy"), bool), "busy recorded")
need(r.get("repeat") == 2 and len(r.get("loadavg_1min_runs", [])) == 2, "2 jobs, a load per job")
for comm in ("mpi", "shm"):
    pts = r["comms"][comm]["points"]
    need(len(pts) == 6, f"{comm}: 3 ops x 2 dtypes at one size")
    for p in pts:
        s = p["busbw_runs"]
        need(s["n"] == 2 and s["min"] <= s["median"] <= s["max"] and p["busbw_bytes_per_s"] == s["median"],
             f"{comm} {p['op']} {p['dtype']}: busbw is the median of the 2 jobs")
a = r.get("alternated")
need(a is not None and len(a["memcpy_bytes_per_s"]) == 6, "alternated: 3 rounds x 2 jobs of memcpy")
need(len(a["series"]) == 18, "alternated: 3 comms x 3 ops x 2 dtypes")
need(sorted({s["comm"] for s in a["series"]}) == ["mpi", "shm", "shm private buffers"],
     "alternated: mpi, shm (comm buffers), shm private buffers")
for comm in ("mpi", "shm"):
    need(r["comms"][comm].get("buffers") == "comm", f"{comm}: the sweep on the comm's buffers")
for s in a["series"]:
    b, q = s["busbw_bytes_per_s"], s["busbw_over_memcpy"]
    need(len(b) == 6 and len(q) == 6, f"alternated {s['comm']} {s['op']} {s['dtype']}: 6 rounds")
    for i in range(6):
        need(abs(q[i] - b[i] / a["memcpy_bytes_per_s"][i]) <= 1e-9 * q[i],
             f"alternated {s['comm']} {s['op']} {s['dtype']} round {i}: ratio over its own round's memcpy")
    need(s["busbw_over_memcpy_stats"]["n"] == 6, "alternated: spread over the pooled rounds")
need("Alternated round by round" in r["summary"], "alternated rounds in the summary")
print("ok: one-point charts refused, load %.2f -> %.2f (busy %s), medians of %d jobs" %
      (m["loadavg_1min"], m["loadavg_1min_after"], m["busy"], r["repeat"]))
PY

# zrt-perf kernels: every kernel (the path its dispatch picks) reports its traffic and its
# ratio to the streaming copy of the same round, medians of the rounds
rc=0
"$PERF" kernels --bytes 1MiB --rounds 3 --json >"$tmp/k.json" 2>"$tmp/kerr" || rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 3 ]; then
  echo "FAIL: zrt-perf kernels failed (exit $rc):"; tail -20 "$tmp/kerr"; exit 1
fi
"$PERF" kernels --bytes 12parsecs >/dev/null 2>"$tmp/kbad" && { echo "FAIL: a malformed --bytes was accepted"; exit 1; }
grep -q "expected a size such as 16MiB" "$tmp/kbad" || { echo "FAIL: --bytes message"; cat "$tmp/kbad"; exit 1; }
python3 - "$tmp/k.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
k = r["kernels"]
def need(cond, what):
    if not cond:
        print("FAIL:", what); print(json.dumps(r, indent=1)[:3000]); sys.exit(1)
need(r["bytes_per_buffer"] == 1 << 20 and r["rounds"] == 3 and r["buffer_sets"] >= 4, "sizes and sets")
need(set(k) == {"copy_stream", "memcpy", "shm_sum_fp32_2in", "shm_sum_bf16_2in", "narrow_fp32_bf16",
                "widen_bf16_fp32", "half_reduce_bf16_sum"}, "every kernel listed")
need(k["copy_stream"]["over_copy_stream"]["median"] == 1, "the copy is its own baseline")
for name, e in k.items():
    need(isinstance(e, dict), f"{name}: every kernel runs on every CPU (its dispatch's path)")
    t, q = e["traffic_bytes_per_s"], e["over_copy_stream"]
    need(t["n"] == 3 and q["n"] == 3 and t["median"] > 0 and t["min"] <= t["median"] <= t["max"],
         f"{name}: median of 3 rounds")
print("ok: kernels bench, %d kernels" % len(k))
PY
