import json,glob,statistics as st,sys
d=sys.argv[1]
def load(f):
    s=open(f).read(); return json.JSONDecoder().raw_decode(s[s.index('{'):])[0]
for isa in sys.argv[2:]:
    runs=[load(f) for f in sorted(glob.glob(f"{d}/kernels-{isa}-*.json"))]
    print(isa, [r["isa"] for r in runs], "load", [round(r["machine"]["loadavg_1min"],1) for r in runs])
    for k in runs[0]["kernels"]:
        gb=[r["kernels"][k]["traffic_bytes_per_s"]["median"]/1e9 for r in runs]
        q=[r["kernels"][k]["over_copy_stream"]["median"] for r in runs]
        print(f"  {k:22s} GB/s {' '.join('%.1f'%x for x in gb)} (med {st.median(gb):.1f})  /copy {' '.join('%.2f'%x for x in q)}  med {st.median(q):.2f}")
