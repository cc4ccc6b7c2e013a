#!/bin/bash
# test_launch_fail.sh — a rank that exits 3, or is killed by SIGKILL, or
# hangs in a collective ends the whole launch: the launcher exits non-zero
# naming the rank and how it ended, and no rank process is left. (The
# `timeout` is a hang guard, not a timing assertion.)
. "$(dirname "$0")/lib.sh"
need_mpiexec
cd "$T"

timeout 60 "$ZRT" launch --num_processes 2 "$PROBE" --exit-rank 1 --code 3 --sleep 120 \
  --tag "$TAG" >out.txt 2>&1
rc=$?
[ $rc -ne 124 ] || fail "launcher hung after a rank exited 3"
expect_status 3 $rc "launch where rank 1 exits 3"
expect_grep '^zrt launch: rank 1 exited with status 3$' out.txt
expect_grep 'rank 0 was killed by signal 15 \(SIGTERM\)' out.txt
no_leftovers "rank 1 exited 3"
pass "rank exit status"

# mpiexec itself dies while it aborts the job (Open MPI 4.1.4 can segfault in
# PMIx_Finalize there) and leaves rank 0 running: the launcher ends it and
# still reports how every rank ended. The stand-in mpiexec freezes the real
# one (SIGSTOP) once both ranks run, so it cannot end rank 0 itself, kills
# it (SIGKILL) once rank 1's exit record exists, then crashes itself.
cat >crashy-mpiexec <<'EOS'
#!/bin/bash
mpiexec "$@" &
m=$!
until [ -e "$ZRT_RUN_DIR/rank0.pid" ] && [ -e "$ZRT_RUN_DIR/rank1.pid" ]; do
  kill -0 $m 2>/dev/null || exit 1
  sleep 0.01
done
kill -STOP $m
until [ -e "$ZRT_RUN_DIR/rank1.exit" ]; do sleep 0.05; done
kill -KILL $m
kill -SEGV $$
EOS
chmod +x crashy-mpiexec
ZRT_MPIEXEC=$T/crashy-mpiexec timeout 60 "$ZRT" launch --num_processes 2 "$PROBE" --exit-rank 1 \
  --code 3 --sleep 120 --tag "$TAG" >out1b.txt 2>&1
rc=$?
[ $rc -ne 124 ] || fail "launcher hung after mpiexec crashed"
expect_status 3 $rc "launch where rank 1 exits 3 and mpiexec crashes"
expect_grep '^zrt launch: rank 1 exited with status 3$' out1b.txt
expect_grep 'rank 0 was killed by signal 15 \(SIGTERM\)' out1b.txt
expect_grep '^zrt launch: note: mpiexec itself then died of SIGSEGV while ending the job' out1b.txt
no_leftovers "mpiexec crashed"
pass "mpiexec crash during abort"

# rank 0's wrapper is killed (SIGKILL) before it can write an exit record
# (its program goes with it, PR_SET_PDEATHSIG): the launcher reports the
# ranks that did record their end and names rank 0 as one without a record.
cat >wrapkill-mpiexec <<'EOS'
#!/bin/bash
mpiexec "$@" &
m=$!
until [ -e "$ZRT_RUN_DIR/rank0.pid" ] && [ -e "$ZRT_RUN_DIR/rank1.pid" ]; do
  kill -0 $m 2>/dev/null || exit 1
  sleep 0.01
done
w=$(sed -n 's/.*"wrapper_pid":\([0-9]*\).*/\1/p' "$ZRT_RUN_DIR/rank0.pid")
kill -KILL "$w"
wait $m
EOS
chmod +x wrapkill-mpiexec
ZRT_MPIEXEC=$T/wrapkill-mpiexec timeout 60 "$ZRT" launch --num_processes 2 "$PROBE" --sleep 120 \
  --tag "$TAG" >out1c.txt 2>&1
rc=$?
[ $rc -ne 124 ] || fail "launcher hung after a rank wrapper was killed"
[ $rc -ne 0 ] || fail "launch where rank 0's wrapper was killed exited 0"
expect_grep '^zrt launch:   then rank 0 ended without an exit record \(its wrapper was killed' out1c.txt
no_leftovers "rank 0 wrapper killed"
pass "rank without an exit record"

timeout 60 "$ZRT" launch --num_processes 2 "$PROBE" --kill-rank 0 --sleep 120 \
  --tag "$TAG" >out2.txt 2>&1
rc=$?
[ $rc -ne 124 ] || fail "launcher hung after a rank was killed"
expect_status 137 $rc "launch where rank 0 is SIGKILLed"
expect_grep '^zrt launch: rank 0 was killed by signal 9 \(SIGKILL\)$' out2.txt
no_leftovers "rank 0 killed"
pass "rank killed by a signal"

# a rank stuck outside a collective: the other one's watchdog (1 s) fires,
# writes its status file and the launcher names the rank that is behind
ZRT_LOG_LEVEL=warn timeout 60 "$ZRT" launch --num_processes 2 "$PROBE" --hang-rank 1 --sleep 120 \
  --tag "$TAG" >out3.txt 2>&1
rc=$?
[ $rc -ne 124 ] || fail "launcher hung after a watchdog timeout"
expect_status 1 $rc "launch with a hung rank"
expect_grep '^zrt launch: rank 0 exited with status 1$' out3.txt
expect_grep 'rank 0 watchdog: last completed collective #1 all_reduce \(4 bytes\); timed out waiting in #2 all_reduce' out3.txt
expect_grep 'rank 1 wrote no watchdog status: .* behind' out3.txt
no_leftovers "watchdog timeout"
pass "watchdog status report"

# a program that is not there on the rank side (found by the launcher's
# check only when it is in PATH: here it is a path that vanishes)
cp "$PROBE" ./probe_copy
timeout 60 "$ZRT" launch --num_processes 2 --dry_run ./probe_copy >dry.txt 2>&1 ||
  fail "dry run"
expect_grep '^mpiexec .* -n 2 .* launch __rank \./probe_copy$' dry.txt "dry run command"
pass "dry run"
