#!/bin/bash
# test_comm_hier.sh — the hierarchical comm over two "machines" on one host,
# as tests/cli/test_launch_multinode.sh makes them (a second Open MPI daemon
# on 127.0.0.2 through a stand-in ssh; TCP over loopback between them):
#  - 2 machines x 2 ranks, comm auto: hier is picked and says why; every
#    collective, dtype, reduction and count of tests/mpi/test_comm_hier.c
#    against the flat MPI comm at the bound docs/comms.md states, with 4 KiB
#    shm regions so that the node level takes many rounds;
#  - 2 machines x 1 rank: auto keeps mpi (one info line, why); hier asked
#    for runs with an empty node level and passes the same comparisons;
#  - 3 + 1 ranks (uneven) and ranks placed round-robin (not contiguous):
#    hier asked for falls back to mpi on every rank with the reason;
#  - the watchdog over 2 x 2 (test_comm_watchdog with ZRT_TEST_COMM=hier):
#    a rank late by more than the timeout, the request waited on again;
#  - a level that cannot be made (bad ZRT_COMM_SHM_REGION): the error names
#    the level, its machine and world ranks;
#  - a rank killed on the second machine: its machine's other rank fails
#    within seconds naming it through both levels' words (mpiexec runs with
#    orte_enable_recovery so the survivors are not killed first; it then
#    does not end by itself and is stopped by timeout).
. "$(dirname "$0")/lib.sh"
need_mpiexec
TESTS=${ZRT_BUILD_DIR:-$ZRT_BIN/..}/tests
HIER=$TESTS/test_comm_hier
WDOG=$TESTS/test_comm_watchdog
[ -x "$HIER" ] && [ -x "$WDOG" ] || fail "$HIER or $WDOG not built"
cd "$T"
loopback_machines
printf 'localhost slots=2\n127.0.0.2 slots=2\n' >hosts22
printf 'localhost slots=1\n127.0.0.2 slots=1\n' >hosts11
printf 'localhost slots=3\n127.0.0.2 slots=1\n' >hosts31
export ZRT_LOG_LEVEL=info
MPX=(mpiexec --allow-run-as-root --oversubscribe --bind-to none)

# run NAME HOSTS NP COMM EXPECT [mpiexec args...]
run() {
  local name=$1 hosts=$2 np=$3 comm=$4 expect=$5
  shift 5
  ZRT_TEST_COMM=$comm ZRT_TEST_EXPECT=$expect timeout 300 "${MPX[@]}" --hostfile "$hosts" \
    -n "$np" "$@" "$HIER" "$TAG" >"$name.txt" 2>&1
  local rc=$?
  [ $rc -ne 124 ] || fail "$name hung"
  expect_status 0 $rc "$name ($np ranks, comm $comm)"
  expect_grep "all checks passed" "$name.txt"
  expect_no_grep "FAIL" "$name.txt"
}

ZRT_COMM_SHM_REGION=4KiB run two2 hosts22 4 auto hier --map-by ppr:2:node
for r in 0 1 2 3; do
  expect_grep "^\[zrt rank $r\] info: comm: hier \(CPU backend, 2 machines x 2 ranks: shm within a machine, mpi across\); rank $r of 4, local $((r % 2)) of 2$" two2.txt
done
grep -E "^(comm|all_reduce sum bf16 n=20011|reduce_scatter sum bf16 even base=5003)" two2.txt
pass "2 machines x 2 ranks: auto picks hier; every collective within the bound of the flat comm"

run two1 hosts11 2 hier hier
expect_grep "comm: hier \(CPU backend, 2 machines x 1 rank: nothing within a machine, mpi across\)" two1.txt
run two1auto hosts11 2 auto mpi
expect_grep "comm: mpi \(CPU backend, world size 2 on several machines; hier not used: one rank per machine \(2 machines\)" two1auto.txt
pass "2 machines x 1 rank: hier asked for serves it; auto stays mpi and says why"

run uneven hosts31 4 hier mpi
expect_grep "warn: comm: hier requested but uneven machines: machine 0 has 3 ranks, machine 1 has 1" uneven.txt
[ "$(grep -c 'comm: mpi (CPU backend, world size 4 on several machines; hier not used: uneven' uneven.txt)" = 4 ] ||
  fail "every rank of the 3 + 1 run should log the fallback"
run roundrobin hosts22 4 hier mpi --map-by node
expect_grep "hier not used: ranks not placed contiguously: rank 1 is on machine 1, expected machine 0 \(place ranks by machine: mpiexec --map-by ppr:2:node\)" roundrobin.txt
pass "uneven machines and round-robin placement fall back to mpi with the reason"

ZRT_TEST_COMM=hier timeout 300 "${MPX[@]}" --hostfile hosts22 -n 4 --map-by ppr:2:node "$WDOG" \
  "$TAG" >wdog.txt 2>&1
rc=$?
[ $rc -ne 124 ] || fail "watchdog run hung"
expect_status 0 $rc "test_comm_watchdog over hier, 2 x 2"
expect_grep "rank 0 comm hier" wdog.txt
expect_grep "rank 2 watchdog: collective #3 all_reduce \(4096 bytes\) did not complete within 1s" wdog.txt
pass "the watchdog times out a hier collective and the request completes when waited on again"

# a level that cannot be made: the error names the level and its world ranks
ZRT_COMM_SHM_REGION=12 timeout 120 "${MPX[@]}" --hostfile hosts22 -n 4 --map-by ppr:2:node "$HIER" \
  "$TAG" >badlevel.txt 2>&1
rc=$?
[ $rc -ne 124 ] || fail "run with a bad ZRT_COMM_SHM_REGION hung"
expect_status nonzero $rc "hier with a node level that cannot be made"
expect_grep 'creating comm "hier": hier comm: creating the node-level comm of machine 1 \(world ranks 2\.\.3\): ZRT_COMM_SHM_REGION="12": expected a size' badlevel.txt
pass "a level that cannot be made is named with its machine and world ranks"

ZRT_TEST_HIER_DIE=3 timeout -k 5 20 "${MPX[@]}" --hostfile hosts22 -n 4 --map-by ppr:2:node \
  --mca orte_enable_recovery 1 "$HIER" "$TAG" >die.txt 2>&1
expect_grep "^rank 2 after [0-9.]+s: ZRT_ERR_COMM: hier comm, node level on machine 1 \(its local rank k is world rank 2\+k\): shm comm: rank 1 \(pid [0-9]+\) died: .* in collective #2 all_reduce" die.txt
expect_no_grep "FAIL" die.txt
no_leftovers "the dead-rank run"
pass "a rank killed on machine 1 is named by its machine's other rank"
