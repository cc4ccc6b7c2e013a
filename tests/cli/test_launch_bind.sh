#!/bin/bash
# test_launch_bind.sh — --bind_cores_to_rank (and zrt.bind_cores_to_rank in
# a config) splits the launcher's cores among the local ranks: each rank's
# affinity is its contiguous share, OMP_NUM_THREADS its core count, the
# start-up log line says so, and `zrt env` run as the rank program shows it.
. "$(dirname "$0")/lib.sh"
need_mpiexec
cd "$T"

# the launcher's own cores, expanded ("0-3,8" -> "0 1 2 3 8")
allowed=$(grep Cpus_allowed_list /proc/self/status | awk '{print $2}')
cpus=()
for part in ${allowed//,/ }; do
  if [[ $part == *-* ]]; then cpus+=($(seq ${part%-*} ${part#*-})); else cpus+=($part); fi
done
n=${#cpus[@]}
expected() { # expected cpu list of local rank $1 of $2 (same rule as cli_split_cores)
  local r=$1 w=$2
  if [ $n -lt $w ]; then echo ${cpus[$((r % n))]}; return; fi
  local base=$((n / w)) rem=$((n % w))
  local start=$((r * base + (r < rem ? r : rem))) cnt=$((base + (r < rem ? 1 : 0)))
  echo "${cpus[@]:$start:$cnt}" | tr ' ' ','
}

ZRT_LOG_LEVEL=info "$ZRT" launch --num_processes 2 --bind_cores_to_rank "$PROBE" --affinity \
  --tag "$TAG" >out.txt 2>&1 || { cat out.txt; fail "launch --bind_cores_to_rank"; }
for r in 0 1; do
  e=$(expected $r 2)
  ne=$(echo $e | tr ',' ' ' | wc -w)
  expect_grep "^probe rank=$r cpus=$e ncpus=$ne omp_num_threads=$ne$" out.txt "rank $r binding"
  expect_grep "rank $r/2 \(local $r/2\) on .*: bound to cores .* \($ne\), numa node -?[0-9]+, OMP_NUM_THREADS=$ne" \
    out.txt "rank $r start-up line"
done
pass "bound ranks: $(expected 0 2) | $(expected 1 2)"

# the config key does the same
printf 'num_processes: 2\nzrt:\n  bind_cores_to_rank: true\n' >bind.yaml
"$ZRT" launch --config_file bind.yaml "$PROBE" --affinity --tag "$TAG" >out2.txt 2>&1 ||
  { cat out2.txt; fail "launch with zrt.bind_cores_to_rank"; }
expect_grep "^probe rank=1 cpus=$(expected 1 2) " out2.txt "binding from the config key"

# without binding a rank keeps every core
"$ZRT" launch --num_processes 2 "$PROBE" --affinity --tag "$TAG" >out3.txt 2>&1 ||
  fail "launch without binding"
expect_grep "^probe rank=0 cpus=$(echo ${cpus[@]} | tr ' ' ',') ncpus=$n " out3.txt "unbound rank"

# zrt env as the rank program reports its binding
"$ZRT" launch --num_processes 2 --bind_cores_to_rank "$ZRT" env >env.txt 2>&1 ||
  { cat env.txt; fail "zrt env under launch"; }
expect_grep "^affinity of this process: $(expected 0 2) .*bound by zrt launch" env.txt
expect_grep "^RANK=1$" env.txt "rank variables in zrt env"
pass "zrt env shows the binding"
no_leftovers "binding runs"
