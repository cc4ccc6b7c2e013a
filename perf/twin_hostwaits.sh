#!/usr/bin/env bash
# twin_hostwaits.sh — host waits, device allocations and scalar reads per
# optimizer step on the twin (perf/RESULTS.md, "Issue 22: host waits on the
# twin"): the MLP example and GPT-2 tiny, 2 ranks, overlap_comm, jitter seed
# 1, ZeRO stages 0-3, without and with offload_optimizer cpu and nvme (swap
# files under the temporary directory; pin_memory as PIN says, default
# true: pageable host memory makes every copy to or from it block the
# host, on CUDA as on the twin); prints, per
# run, the metrics' host_waits / step_allocs / d2h_reads of step 1 and the
# largest of steps 2..N (the steady state), and, with the op trace on, the
# share of the reduce-scatters' time during which the compute stream was
# busy (perf/twin_overlap.py).
#
# Usage: perf/twin_hostwaits.sh [BUILD_DIR] (default build); STEPS=N (default 6);
# PIN=false for pageable offload memory.
set -euo pipefail
B=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
STEPS=${STEPS:-6}
T=$(mktemp -d "${TMPDIR:-/tmp}/zrt_hostwaits.XXXXXX")
trap 'rm -rf "$T"' EXIT
MPI=(mpiexec --oversubscribe --allow-run-as-root --bind-to none --mca btl self,vader -n 2)
bash "$HERE/../examples/gpt2/make_corpus.sh" "$T/corpus.txt" >/dev/null
printf '%-5s %-5s %-8s %-22s %-22s %-18s %s\n' model stage offload "host_waits step1/2..N" \
  "step_allocs step1/2..N" "d2h_reads 2..N" "rs overlapped"
for model in mlp gpt; do
  for off in none cpu nvme; do
    for stage in 0 1 2 3; do
      [ "$off" != none ] && [ "$stage" = 0 ] && continue # offload needs stage >= 1
      r=$T/$model.$off.$stage
      mkdir -p "$r/trace"
      set -- --set zrt.backend=twin --set zrt.comm=mpi --set zero_optimization.stage=$stage \
        --set zero_optimization.overlap_comm=true
      [ "$off" = none ] || set -- "$@" --set zero_optimization.offload_optimizer.device=$off \
        --set zero_optimization.offload_optimizer.pin_memory="${PIN:-true}"
      [ "$off" = nvme ] && mkdir -p "$r/nvme" &&
        set -- "$@" --set zero_optimization.offload_optimizer.nvme_path="$r/nvme"
      if [ $model = mlp ]; then
        cmd=("$B/bin/train_mlp" --steps "$STEPS" --metrics "$r/m.jsonl" "$@")
      else
        cmd=("$B/bin/train_gpt2" --model tiny --batch_size 4 --steps "$STEPS" --data "$T/corpus.txt"
          --metrics "$r/m.jsonl" --set bf16.enabled=false "$@")
      fi
      ZRT_TWIN_JITTER=1 ZRT_TWIN_TRACE=$r/trace OMP_NUM_THREADS=1 "${MPI[@]}" "${cmd[@]}" \
        >"$r/out" 2>&1 || { tail -5 "$r/out"; echo "$model stage $stage offload $off failed"; continue; }
      ov=$(python3 "$HERE/twin_overlap.py" "$r/trace" --json 2>/dev/null | python3 -c '
import json, sys
t = o = 0.0
for r in json.load(sys.stdin):
    v = r["by_op"].get("reduce_scatter")
    if v: t += v["time_s"]; o += v["overlapped_s"]
print(f"{100 * o / t:.0f}% of {1e3 * t:.0f} ms" if t else "-")' 2>/dev/null) || ov="- (no op trace)"
      python3 - "$r/m.jsonl" "$model" "$stage" "$off" "$ov" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
f = lambda k: f"{rows[0][k]}/{max(r[k] for r in rows[1:])}"
print(f"{sys.argv[2]:5s} {sys.argv[3]:5s} {sys.argv[4]:8s} {f('host_waits'):22s} "
      f"{f('step_allocs'):22s} {max(r['d2h_reads'] for r in rows[1:])!s:18s} {sys.argv[5]}")
EOF
    done
  done
done
