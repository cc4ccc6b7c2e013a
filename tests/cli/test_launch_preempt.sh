#!/usr/bin/env bash
# test_launch_preempt.sh — SIGTERM or SIGINT to `zrt launch` during
# training: the launcher passes the signal to each rank (not to mpiexec),
# the ranks finish the step, save, print "interrupted ... checkpoint saved"
# and exit 75, and the launcher exits 75 (issue 21, item 5). Checked:
#   * exit status 75 and the ranks' interruption line on the launcher's
#     output (it used to exit 128+signal, 143/130, with the line lost: its
#     SIGTERM to mpiexec started Open MPI's teardown, which stops the
#     output and sleeps in mpiexec's event loop while the ranks' MPI_Finalize
#     waits on it, until the SIGKILL after the 3 s grace);
#   * latest names the step the line gives; the launcher ends well inside
#     the grace (the time is printed);
#   * every /dev/shm file the ranks had mapped (Open MPI's vader segments,
#     zrt's shm comm) is gone, and no rank process is left;
#   * a requeue wrapper `until zrt launch ...; [ $? -ne 75 ]` goes round
#     once more on the 75 and the resumed run finishes the job (exit 0,
#     latest = the last step).
set -uo pipefail
. "$(dirname "$0")/gpt2_lib.sh" launchpre
export OMP_NUM_THREADS=1 ZRT_LOG_LEVEL=warn OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset ZRT_CONFIG_FILE
export TMPDIR=$D # the launcher's run directories
RUN=(--model tiny --n_layer 1 --n_embd 32 --seq_len 32 --batch_size 2 --val_every 0
  --data "$D/corpus.txt" --save_interval 100000)

# interrupted SIG CKDIR LOG STEPS: launches 2 ranks, sends SIG to the
# launcher once step 5 is printed; sets RC, MS (signal to exit), SHM (the
# /dev/shm files the ranks had mapped), PIDS (the rank programs)
interrupted() {
  local sig=$1 ck=$2 log=$3 steps=$4
  "$Z" launch --num_processes 2 "$EXE" "${RUN[@]}" --steps "$steps" --save "$ck" >"$log" 2>&1 &
  local lp=$! t0
  for _ in $(seq 600); do grep -q "^step 5/" "$log" && break; sleep 0.05; done
  grep -q "^step 5/" "$log" || { kill -9 $lp; cat "$log"; fail "SIG$sig: training never reached step 5"; }
  # this job's rank programs, from its run directory (other tests may run
  # the same program at the same time)
  PIDS=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$D"/zrt-run-*/rank[0-9]*.pid 2>/dev/null)
  [ "$(echo $PIDS | wc -w)" = 2 ] || { kill -9 $lp; fail "SIG$sig: no pid records of the 2 ranks: $PIDS"; }
  SHM=$(for p in $PIDS; do awk '$6 ~ /^\/dev\/shm\// {print $6}' "/proc/$p/maps" 2>/dev/null; done | sort -u)
  t0=$(date +%s%N)
  kill -"$sig" $lp
  for _ in $(seq 600); do kill -0 $lp 2>/dev/null || break; sleep 0.1; done
  kill -0 $lp 2>/dev/null && { kill -9 $lp; cat "$log"; fail "SIG$sig: the launcher still runs 60 s after the signal"; }
  wait $lp
  RC=$?
  MS=$((($(date +%s%N) - t0) / 1000000))
}

for sig in TERM INT; do
  interrupted $sig "$D/ck_$sig" "$D/$sig.log" 2000
  [ "$RC" = 75 ] || { cat "$D/$sig.log"; fail "SIG$sig to zrt launch: exit $RC, expected 75"; }
  k=$(sed -n 's/^interrupted (.*) after step \([0-9]*\) of 2000: checkpoint saved.*/\1/p' "$D/$sig.log")
  [ -n "$k" ] || { cat "$D/$sig.log"; fail "SIG$sig: the ranks' interruption line is missing"; }
  grep -q "^zrt launch: every rank exited with status 75; exiting with it$" "$D/$sig.log" ||
    { cat "$D/$sig.log"; fail "SIG$sig: no launcher line on the ranks' common status"; }
  [ "$(cat "$D/ck_$sig/latest")" = "step_$k" ] || fail "SIG$sig: latest is $(cat "$D/ck_$sig/latest"), expected step_$k"
  [ -n "$SHM" ] || fail "SIG$sig: the ranks mapped no /dev/shm file (nothing to check)"
  for f in $SHM; do [ -e "$f" ] && fail "SIG$sig: $f is left in /dev/shm"; done
  for p in $PIDS; do kill -0 "$p" 2>/dev/null && fail "SIG$sig: rank process $p is left"; done
  ls -d "$D"/zrt-run-* >/dev/null 2>&1 && fail "SIG$sig: the run directory was kept: $(ls -d "$D"/zrt-run-*)"
  echo "ok: SIG$sig to zrt launch: $(grep '^interrupted' "$D/$sig.log"); exit 75 after $MS ms; $(echo $SHM | wc -w) /dev/shm files of the ranks all gone"
done

# A requeue wrapper: the first attempt is preempted (SIGTERM), the loop goes
# round on the 75, the next attempt resumes and finishes.
M=300
attempts=0
until
  attempts=$((attempts + 1))
  if [ $attempts = 1 ]; then
    interrupted TERM "$D/rq" "$D/rq1.log" $M
    (exit $RC)
  else
    "$Z" launch --num_processes 2 "$EXE" "${RUN[@]}" --steps $M --save "$D/rq" --resume "$D/rq" \
      >"$D/rq$attempts.log" 2>&1
  fi
  rc=$?
  [ $rc -ne 75 ]
do
  [ $attempts -lt 3 ] || break
done
[ $attempts = 2 ] && [ $rc = 0 ] || { cat "$D"/rq*.log; fail "requeue wrapper: $attempts attempts, last exit $rc (want 2 attempts, 0)"; }
k=$(sed -n 's/^interrupted (.*) after step \([0-9]*\) of.*/\1/p' "$D/rq1.log")
grep -q "^resumed from $D/rq at step $k " "$D/rq2.log" || { cat "$D/rq2.log"; fail "the second attempt did not resume at step $k"; }
[ "$(cat "$D/rq/latest")" = "step_$M" ] || fail "requeue wrapper: latest is $(cat "$D/rq/latest"), expected step_$M"
echo "ok: requeue wrapper: attempt 1 exit 75 at step $k, attempt 2 resumed there and finished (exit 0, latest step_$M)"
echo PASS
