#!/bin/bash
# test_env.sh — `zrt env` runs on any machine (no GPU here is normal) and
# prints every section a bug report needs, with facts that match what the
# test sees itself (core count, affinity, MPI version).
. "$(dirname "$0")/lib.sh"
cd "$T"

ZRT_SEED=3 "$ZRT" env >env.txt 2>err.txt
rc=$?
cat env.txt err.txt
expect_status 0 $rc "zrt env"
for s in zrt cpu numa gpus libraries limits environment config; do
  expect_grep "^== $s ==$" env.txt "section $s"
done
expect_grep "^version: [0-9]+\.[0-9]+\.[0-9]+$" env.txt
expect_grep "^CUDA backend: (built|not built)$" env.txt
expect_grep "^NCCL comm: (built|not built)$" env.txt
expect_grep "^CPU comms: mpi, shm \\(ranks on one machine\\), hier" env.txt
expect_grep "^sanitizers: " env.txt
expect_grep "^model: " env.txt
expect_grep "^isa:" env.txt
expect_grep "^cores online: $(getconf _NPROCESSORS_ONLN)$" env.txt
allowed=$(grep Cpus_allowed_list /proc/self/status | awk '{print $2}')
expect_grep "^affinity of this process: $allowed " env.txt
expect_grep "^(nodes: [0-9]+|libnuma: NUMA not available)" env.txt
if command -v mpiexec >/dev/null; then
  v=$(mpiexec --version 2>/dev/null | head -1 | grep -Eo '[0-9]+\.[0-9]+\.[0-9]+' | head -1)
  expect_grep "^MPI: .*$v" env.txt "MPI version"
fi
expect_grep "^OpenBLAS: OpenBLAS [0-9]" env.txt
expect_grep "^jemalloc: " env.txt
expect_grep "^libyaml: [0-9]" env.txt
expect_grep "^cJSON: [0-9]" env.txt
expect_grep "^RLIMIT_MEMLOCK: soft " env.txt
expect_grep "^ZRT_SEED=3$" env.txt
expect_grep "^default config: $ZRT_CONFIG_HOME/default_config.yaml \(not present" env.txt
"$ZRT" env --bogus >/dev/null 2>&1
expect_status 2 $? "zrt env --bogus"
pass "zrt env sections"
