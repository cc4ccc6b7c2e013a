# Session 10: each shm collective's busbw / the copy baseline, per job and the median over jobs
# (zrt-perf collectives --alternate 5: each job's median of its 5 rounds).
import json, glob, statistics as st, sys
d = sys.argv[1] if len(sys.argv) > 1 else "."
def load(f):
    s = open(f).read(); return json.JSONDecoder().raw_decode(s[s.index('{'):])[0]
for n in (2, 4):
    runs = [load(f) for f in sorted(glob.glob(f"{d}/coll-np{n}-*.json"))]
    print(f"np{n}: {len(runs)} jobs, load", [round(r["machine"]["loadavg_1min"], 1) for r in runs],
          "copy GB/s", ["%.1f" % (st.median(r["alternated"]["memcpy_bytes_per_s"]) / 1e9) for r in runs])
    rows = {}
    for r in runs:
        for s in r["alternated"]["series"]:
            if s["comm"] != "shm": continue
            rows.setdefault((s["op"], s["dtype"]), []).append(
                (st.median(s["busbw_over_memcpy"]), st.median(s["busbw_bytes_per_s"]) / 1e9))
    for k, v in sorted(rows.items()):
        print(f"  {k[0]:15s} {k[1]:5s} ratio " + " ".join("%.2f" % x[0] for x in v) +
              f"  median {st.median(x[0] for x in v):.2f}   busbw GB/s median {st.median(x[1] for x in v):.1f}")
