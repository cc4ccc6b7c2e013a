import json,glob,statistics as st,sys
d=sys.argv[1]
def load(f):
    s=open(f).read(); return json.JSONDecoder().raw_decode(s[s.index('{'):])[0]
rows={}
for build in ("old","new"):
    for n in (2,4):
        runs=[load(f) for f in sorted(glob.glob(f"{d}/coll-{build}-np{n}-*.json"))]
        loads=[round(r["machine"]["loadavg_1min"],1) for r in runs]
        for r in runs:
            for s in r["alternated"]["series"]:
                if s["comm"]!="shm": continue
                k=(n,s["op"],s["dtype"])
                rows.setdefault(k,{}).setdefault(build,{"q":[],"gb":[]})
                rows[k][build]["q"]+=s["busbw_over_memcpy"]
                rows[k][build]["gb"]+=s["busbw_bytes_per_s"]
        base=[x/1e9 for r in runs for x in r["alternated"]["memcpy_bytes_per_s"]]
        print(build,n,"jobs",len(runs),"load",loads,"baseline copy GB/s median %.2f"%st.median(base) if base else "")
print("| ranks | op | dtype | old busbw GB/s | new busbw GB/s | new/old | old / its copy | new / its copy (p10-p90) |")
def p(v,q): v=sorted(v); return v[min(len(v)-1,int(q*len(v)))]
for k in sorted(rows):
    o=rows[k].get("old"); nw=rows[k].get("new")
    if not o or not nw: continue
    go,gn=st.median(o["gb"])/1e9,st.median(nw["gb"])/1e9
    print(f"| {k[0]} | {k[1]} | {k[2]} | {go:.2f} | {gn:.2f} | {gn/go:.1f} | {st.median(o['q']):.2f} | **{st.median(nw['q']):.2f}** ({p(nw['q'],.1):.2f}-{p(nw['q'],.9):.2f}) |")
