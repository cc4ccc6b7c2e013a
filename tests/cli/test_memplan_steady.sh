#!/usr/bin/env bash
# test_memplan_steady.sh — issue 29's runs: small GPTs under a 20-24 MiB
# device, stage 3 with optimizer and parameter offload and DeepSpeed's
# default stage-3 settings (prefetch 5e7, reuse 1e9, max live 1e9,
# persistence 1e5, buckets 5e8). Before the memory plan they built, trained
# step 1 and ran out of memory at step 2 allocating the 16-bit gradients
# (the gathered copies prefetched by the first step's trace plus the
# activations left no room). Now:
#   a/b/c. 4 layers x 256 at 20 MiB on 1 and 2 ranks, 6 layers x 256 at
#      24 MiB on 1 rank: the engine logs once what the plan lowered, trains
#      4 steps, every step's device peak is under the limit and from the
#      second step on equals the plan (metrics device_plan_bytes) to the byte,
#      and `zrt estimate-memory --hf_config` (same shape and settings) says
#      the same bytes and the same lowered prefetch;
#   d. micro-batch 2 at 20 MiB: the activations alone leave no room for one
#      gathered block and its gradients; the build refuses with the figure
#      and what to change, and nothing trains (no metrics line).
set -euo pipefail
. "$(dirname "$0")/gpt2_lib.sh" memplan
tmp=$D

run() { # name limit ranks layers embd heads batch
  local name=$1 limit=$2 np=$3
  OMP_NUM_THREADS=1 ZRT_LOG_LEVEL=info ZRT_DEVICE_MEMORY_LIMIT=$limit "${MPI[@]}" -n "$np" "$EXE" \
    --n_layer "$4" --n_embd "$5" --n_head "$6" --batch_size "$7" --seq_len 64 --n_positions 64 \
    --data "$tmp/corpus.txt" --val_every 0 --sample 0 --steps 4 --metrics "$tmp/$name.jsonl" \
    --set zero_optimization.stage=3 --set bf16.enabled=true \
    --set zero_optimization.offload_optimizer.device=cpu \
    --set zero_optimization.offload_param.device=cpu --set zrt.pin_memory_fallback=true \
    >"$tmp/$name.out" 2>&1
}

trained() { # name limit ranks layers embd heads batch
  local name=$1 limit=$2
  run "$@" || fail "case $name: train_gpt2 failed:$(echo; cat "$tmp/$name.out")"
  grep -q "stage 3 memory plan: .*stage3_prefetch_bucket_size 50000000 -> " "$tmp/$name.out" ||
    fail "case $name: no plan line:$(echo; cat "$tmp/$name.out")"
  printf '{"n_layer":%d,"n_embd":%d,"n_head":%d,"vocab_size":256,"n_positions":64}\n' \
    "$4" "$5" "$6" >"$tmp/$name.hf.json"
  "$Z" estimate-memory --hf_config "$tmp/$name.hf.json" --batch_size "$7" --seq_len 64 \
    --world_sizes "$3" --dtype bf16 --device_memory "$limit" --json >"$tmp/$name.est" ||
    fail "case $name: estimate-memory failed"
  python3 - "$name" "$tmp/$name.jsonl" "$limit" "$tmp/$name.est" "$tmp/$name.out" <<'PY'
import json, re, sys
name, path, limit, epath, opath = sys.argv[1:]
est = [c for c in json.load(open(epath))["configs"]
       if c["stage"] == 3 and c["offload"] == "optimizer+param"][0]
pf = int(re.search(r"stage3_prefetch_bucket_size 50000000 -> (\d+)", open(opath).read()).group(1))
limit = int(limit[:-3]) << 20
rows = [json.loads(l) for l in open(path) if l.strip()]
if len(rows) != 4:
    sys.exit(f"FAIL: case {name}: {len(rows)} steps, expected 4")
peaks = [r["device_peak_bytes"] for r in rows]
plan = rows[-1]["device_plan_bytes"]
print(f"case {name}: device peaks {peaks}, plan {plan}, limit {limit}")
if max(peaks) > limit:
    sys.exit(f"FAIL: case {name}: a step peaked over the limit")
if any(p != plan for p in peaks[1:]):
    sys.exit(f"FAIL: case {name}: steps 2..4 peak {peaks[1:]} != plan {plan}")
print(f"case {name}: estimate-memory {est['device_bytes']} (prefetch {est['prefetch_elems']}), "
      f"engine's plan {plan} (prefetch {pf})")
if est["device_bytes"] != plan or est["prefetch_elems"] != pf:
    sys.exit(f"FAIL: case {name}: estimate-memory differs from the engine's plan")
PY
}

trained a 20MiB 1 4 256 4 1
trained b 20MiB 2 4 256 4 1
trained c 24MiB 1 6 256 8 1

if run d 20MiB 1 4 256 4 2; then fail "case d: trained with micro-batch 2 under 20 MiB"; fi
grep -q "stage 3 with optimizer and parameter offload needs at least .* per rank on the device" \
  "$tmp/d.out" || fail "case d: no build refusal:$(echo; cat "$tmp/d.out")"
grep -q "train_micro_batch_size_per_gpu" "$tmp/d.out" || fail "case d: no hint"
[ -s "$tmp/d.jsonl" ] && fail "case d: wrote metrics (trained)"
echo "case d: $(grep -o 'needs at least [^(]*' "$tmp/d.out" | head -1)"
echo "PASS"
