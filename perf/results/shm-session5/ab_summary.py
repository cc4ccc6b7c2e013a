# ab_summary.py <out.txt>: medians, p10/p90 and max per binary, comm, op, dtype
import sys,collections,statistics as st
d=collections.defaultdict(list)
for l in open(sys.argv[1]):
  b,c,op,dt,bus,mc,ratio,load=l.split()
  d[(c,op,dt,b)].append((float(bus),float(mc),float(ratio)))
def q(v,p):
  v=sorted(v);i=p*(len(v)-1);lo=int(i);hi=min(lo+1,len(v)-1);return v[lo]+(v[hi]-v[lo])*(i-lo)
for k in sorted(d):
  r=[x[2] for x in d[k]];bus=[x[0] for x in d[k]];mc=[x[1] for x in d[k]]
  print(*k, 'n=%d busbw %.2f (max %.2f) memcpy %.2f ratio med %.3f p10 %.3f p90 %.3f max %.3f'%(len(r),st.median(bus),max(bus),st.median(mc),st.median(r),q(r,.1),q(r,.9),max(r)))
