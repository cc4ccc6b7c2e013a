#!/usr/bin/env bash
# test_gpt2_shm_full.sh — a /dev/shm too small for the stage-3 shard arena
# (2 ranks, the shm comm's shared collective buffers): the error names the
# real cause first ("/dev/shm has N bytes free", what to do), not the
# device-memory hint "model states ... try a higher stage", which is for a
# device that ran out (cli.test_bigger_than_device keeps that). /dev/shm
# is a 16 MiB tmpfs in a private mount namespace (unshare), so nothing of
# the machine's /dev/shm is touched; skipped (77) where that is not allowed.
set -uo pipefail
. "$(dirname "$0")/gpt2_lib.sh" gpt2shm
export OMP_NUM_THREADS=1 ZRT_LOG_LEVEL=warn
unset ZRT_CONFIG_FILE
unshare --mount --propagation private sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm' 2>/dev/null ||
  { echo "SKIP: no private mount namespace with a tmpfs here (needs CAP_SYS_ADMIN)"; exit 77; }
cmd="mount -t tmpfs -o size=16m tmpfs /dev/shm && exec ${MPI[*]} -n 2 $EXE --model tiny --n_layer 4 \
--n_embd 512 --seq_len 32 --batch_size 2 --steps 1 --val_every 0 --data $D/corpus.txt \
--set zero_optimization.stage=3"
if unshare --mount --propagation private sh -c "$cmd" >"$D/run.log" 2>&1; then
  cat "$D/run.log"
  fail "stage 3 ran in a 16 MiB /dev/shm"
fi
line=$(grep -m1 "zrt_engine_build(tr.eng) failed: ZRT_ERR_OOM: zrt_comm_mem_alloc: [0-9]* bytes of shared memory" "$D/run.log")
[ -n "$line" ] || { cat "$D/run.log"; fail "the failing rank's message does not start with the shared-memory allocation"; }
echo "$line"
echo "$line" | grep -q "/dev/shm has [0-9]* bytes free, this rank needs [0-9]*. Enlarge /dev/shm" ||
  fail "no free/needed bytes and what to do"
grep -q "model states" "$D/run.log" && { cat "$D/run.log"; fail "the device-memory hint came with a /dev/shm failure"; }
echo PASS
