#!/usr/bin/env python3
"""twin_overlap.py — how much of the collectives' time the compute stream
was busy, from the twin's op trace (ZRT_TWIN_TRACE=DIR; backend_twin.c
writes DIR/twin_trace.<pid>.txt, one line per op: "<stream> <start_s>
<end_s> <label>").

Per trace file (one rank): the comm stream is the stream that ran the
collectives (ops labelled reduce_scatter, all_gather, all_reduce,
broadcast, barrier: the stream-ordered comm's host functions); the compute
stream is the stream that ran the most "host function" ops (the program's
forward and backward, launched on the engine's stream). Compute-busy time
is the union of the compute stream's ops except its waits ("stream wait",
"stream wait event": the stream idles there). For each collective kind the
script prints its total time and the share of it during which the compute
stream was busy (the overlapped share), and the same for the whole run.

Usage: perf/twin_overlap.py DIR [--json]
"""
import collections
import glob
import json
import os
import sys

COLLECTIVES = {"reduce_scatter", "all_gather", "all_reduce", "broadcast", "barrier"}
WAITS = {"stream wait", "stream wait event"}


def union(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def covered(a, b, busy):
    """Length of [a, b) inside the sorted, disjoint intervals busy."""
    t = 0.0
    for x, y in busy:
        if y <= a:
            continue
        if x >= b:
            break
        t += min(b, y) - max(a, x)
    return t


def one(path):
    ops = collections.defaultdict(list)
    for line in open(path):
        parts = line.rstrip("\n").split(" ", 3)
        if len(parts) != 4:
            continue
        ops[int(parts[0])].append((float(parts[1]), float(parts[2]), parts[3]))
    comm = [s for s, o in ops.items() if any(l in COLLECTIVES for _, _, l in o)]
    if not comm:
        return None
    host = {s: sum(1 for _, _, l in o if l == "host function") for s, o in ops.items()}
    compute = max(host, key=host.get)
    busy = union([(a, b) for a, b, l in ops[compute] if l not in WAITS])
    per = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for s in comm:
        for a, b, l in ops[s]:
            if l in COLLECTIVES:
                per[l][0] += b - a
                per[l][1] += covered(a, b, busy)
                per[l][2] += 1
    return {"file": os.path.basename(path), "compute_stream": compute, "comm_streams": comm,
            "by_op": {k: {"count": v[2], "time_s": v[0], "overlapped_s": v[1],
                          "share": v[1] / v[0] if v[0] > 0 else 0.0} for k, v in per.items()}}


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    files = sorted(glob.glob(os.path.join(sys.argv[1], "twin_trace.*.txt")))
    if not files:
        print(f"twin_overlap.py: no twin_trace.*.txt in {sys.argv[1]} (run with ZRT_TWIN_TRACE)",
              file=sys.stderr)
        return 1
    res = [r for r in (one(f) for f in files) if r]
    if "--json" in sys.argv:
        print(json.dumps(res, indent=1))
        return 0
    for r in res:
        for op, v in sorted(r["by_op"].items()):
            print(f"{r['file']}: {op:15s} {v['count']:4d} ops {1e3 * v['time_s']:9.2f} ms, "
                  f"compute stream busy during {100 * v['share']:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
