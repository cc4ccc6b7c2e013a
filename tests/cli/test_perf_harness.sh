#!/usr/bin/env bash
# test_perf_harness.sh — what zrt-perf refuses or records whatever the
# machine's speed: a one-size collectives run (every series one point) gets
# no line chart (stderr says so, no PNG) while its JSON keeps the figures;
# every result records the load average before and after the benchmark and
# whether the machine was busy; --repeat K reports medians with their
# spread and the load of each job; --alternate K adds K rounds of memcpy,
# mpi, shm on the comm's buffers and shm on private buffers per job, every job's rounds pooled, each ratio over its own
# round's memcpy. (Flags on impossible figures depend on
# timings, so no test forces one.)
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
