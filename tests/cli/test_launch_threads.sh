#!/bin/bash
# test_launch_threads.sh — the thread plan of `zrt launch` (launch_threads.c):
# without OMP_NUM_THREADS each rank runs its share of the launcher's cores
# (cores / local ranks, the first ranks taking the remainder, at least 1);
# a user's OMP_NUM_THREADS is kept and, when ranks x threads exceed the
# cores, warned about; `zrt env` prints the plan, under the launcher and
# for a rank count given with --num_processes. OMP_WAIT_POLICY is left as
# the user has it (libgomp's default otherwise: passive would halve a
# 2-thread rank on free cores; zrt.adaptive_threads handles a taken core),
# and `zrt env` says whose it is.
. "$(dirname "$0")/lib.sh"
need_mpiexec
cd "$T"
unset OMP_NUM_THREADS OMP_WAIT_POLICY GOMP_SPINCOUNT

n=$(grep Cpus_allowed_list /proc/self/status | awk '{print $2}' | tr ',' '\n' |
  awk -F- '{c += (NF == 2 ? $2 - $1 + 1 : 1)} END {print c}')
share() { # threads of local rank $1 of $2 (the rule of cli_thread_plan_make)
  local r=$1 w=$2
  local s=$((n / w + (r < n % w ? 1 : 0)))
  [ $s -lt 1 ] && s=1
  echo $s
}

for w in 1 2 3; do
  "$ZRT" launch --num_processes $w "$PROBE" --affinity --tag "$TAG" >out$w.txt 2>&1 ||
    { cat out$w.txt; fail "launch -n $w"; }
  for ((r = 0; r < w; r++)); do
    expect_grep "^probe rank=$r cpus=.* omp_num_threads=$(share $r $w)$" out$w.txt \
      "rank $r of $w: its share of $n cores"
  done
  if [ $w -gt $n ]; then
    expect_grep "warning: $w ranks on the $n cores of this machine" out$w.txt "too many ranks"
  elif grep -q "warning:" out$w.txt; then
    cat out$w.txt
    fail "a warning with $w ranks on $n cores"
  fi
done
expect_grep "^probe rank=0 omp_wait_policy=unset$" out1.txt "no OpenMP wait policy added by zrt launch"
pass "default OpenMP threads per rank on $n cores: 1 rank $(share 0 1), 2 ranks $(share 0 2)+$(share 1 2)"

# a user's wait policy (or spin count) is kept, and zrt env says whose it is
OMP_WAIT_POLICY=active "$ZRT" launch --num_processes 1 "$PROBE" --affinity --tag "$TAG" >wp.txt 2>&1 ||
  fail "launch with OMP_WAIT_POLICY=active"
expect_grep "^probe rank=0 omp_wait_policy=active$" wp.txt "user's OMP_WAIT_POLICY kept"
GOMP_SPINCOUNT=1000 "$ZRT" launch --num_processes 1 "$PROBE" --affinity --tag "$TAG" >sc.txt 2>&1 ||
  fail "launch with GOMP_SPINCOUNT"
expect_grep "^probe rank=0 omp_wait_policy=unset$" sc.txt "user's GOMP_SPINCOUNT: no policy added"
"$ZRT" launch --num_processes 1 "$ZRT" env >envwp.txt 2>&1 || { cat envwp.txt; fail "zrt env under launch"; }
expect_grep "^OpenMP wait policy: libgomp's default .*zrt.adaptive_threads true" envwp.txt \
  "zrt env: the default policy and the adaptive team"
(unset OMP_WAIT_POLICY GOMP_SPINCOUNT; ZRT_ADAPTIVE_THREADS=false "$ZRT" env) >envplain.txt 2>&1 ||
  fail "zrt env"
expect_grep "^OpenMP wait policy: libgomp's default .*zrt.adaptive_threads false" envplain.txt \
  "zrt env: the adaptive team switched off"
pass "OpenMP wait policy: libgomp's default unless the user set one"


# the user's setting wins; above the cores it is warned about, with a fix
OMP_NUM_THREADS=3 "$ZRT" launch --num_processes 2 "$PROBE" --affinity --tag "$TAG" >user.txt 2>&1 ||
  fail "launch with OMP_NUM_THREADS=3"
expect_grep "^probe rank=1 cpus=.* omp_num_threads=3$" user.txt "user's OMP_NUM_THREADS kept"
if [ $((2 * 3)) -gt $n ]; then
  expect_grep "warning: 2 ranks x 3 OpenMP threads \(OMP_NUM_THREADS\) is more than the $n cores.*unset OMP_NUM_THREADS" \
    user.txt "oversubscription warning"
fi
pass "a user's OMP_NUM_THREADS is kept"

# zrt env: the plan of this rank under the launcher, and for N ranks here
"$ZRT" launch --num_processes 2 "$ZRT" env >env.txt 2>&1 || { cat env.txt; fail "zrt env under launch"; }
expect_grep "^plan \(this rank, under zrt launch\): rank 1 of 2 local ranks: $(share 1 2) OpenMP thread" \
  env.txt "zrt env under launch"
# the main job's config offloads: the copy thread is in the plan
"$ZRT" launch --num_processes 2 --offload_optimizer_device cpu --zero_stage 2 "$ZRT" env >env2.txt 2>&1 ||
  { cat env2.txt; fail "zrt env under launch with offload"; }
expect_grep "^plan \(this rank, under zrt launch\): rank 0 of 2 .* \+ 1 copy thread \(offload pipe" \
  env2.txt "copy thread counted with offload"
"$ZRT" env --num_processes 4 >env4.txt || fail "zrt env --num_processes 4"
expect_grep "^plan of zrt launch with 4 ranks on this machine" env4.txt "zrt env --num_processes"
expect_grep "^  rank 3 of 4 local ranks: $(share 3 4) OpenMP thread" env4.txt "rank 3's share"
"$ZRT" env --num_processes 0 >bad.txt 2>&1 && fail "zrt env --num_processes 0 accepted"
expect_grep "needs a rank count from 1 to 4096, got '0'" bad.txt "bad --num_processes"
pass "zrt env shows the plan"
no_leftovers "thread plan runs"
