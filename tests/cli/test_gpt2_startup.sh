#!/usr/bin/env bash
# test_gpt2_startup.sh — train_gpt2's start-up never hangs and always ends
# on a signal (issue 21, item 2).
#   * a FIFO as --data, as --val_data, as config.json of an --init DIR and
#     as the shard index --init names is an error naming the flag (or the
#     call), the path and "a FIFO" within seconds (it used to block in
#     open() for ever; each run is under `timeout` so a regression fails
#     instead of hanging the suite);
#   * SIGTERM and SIGINT during a start-up that waits (rank 0 of 2 whose
#     peer never starts MPI: it waits in the engine's creation) end the
#     program at once with status 75 and a line saying nothing was saved
#     (the handler used to only raise a flag the training loop reads, so
#     the program waited on).
set -uo pipefail
. "$(dirname "$0")/gpt2_lib.sh" gpt2start
export OMP_NUM_THREADS=1 ZRT_LOG_LEVEL=warn
unset ZRT_CONFIG_FILE
RUN=(--model tiny --n_layer 1 --n_embd 32 --seq_len 32 --batch_size 2 --steps 2 --val_every 0)
mkdir -p "$D/hf"
mkfifo "$D/fifo.txt" "$D/hf/config.json"

fifo_case() { # fifo_case WHAT STATUS MESSAGE-START ARGS...
  local what=$1 want=$2 head=$3
  shift 3
  local t0=$SECONDS
  timeout -k 5 30 "$EXE" "${RUN[@]}" "$@" >"$D/$what.log" 2>&1
  local rc=$?
  [ $rc = 124 ] || [ $rc = 137 ] && fail "$what: train_gpt2 still blocked after 30 s (SIGTERM did not end it either: exit $rc)"
  [ $rc = "$want" ] || { cat "$D/$what.log"; fail "$what: exit $rc, expected $want"; }
  grep -q -- "^train_gpt2: $head.*'$D/.*' is a FIFO (named pipe), not a regular file" "$D/$what.log" ||
    { cat "$D/$what.log"; fail "$what: the message does not name the flag, the path and a FIFO"; }
  echo "ok: $what: $(grep '^train_gpt2: ' "$D/$what.log" | head -1) ($((SECONDS - t0)) s)"
}
fifo_case data 2 "--data: " --data "$D/fifo.txt"
fifo_case val_data 2 "--val_data: " --data "$D/corpus.txt" --val_data "$D/fifo.txt"
fifo_case init 2 "--init " --data "$D/corpus.txt" --init "$D/hf"
# the library's reader: a sharded checkpoint's index named by --init
mkfifo "$D/model.safetensors.index.json"
fifo_case index 1 "zrt_engine_load_safetensors.*shard index" --data "$D/corpus.txt" \
  --init "$D/model.safetensors.index.json"

# A signal while start-up waits: rank 1 of the job is `sleep`, so rank 0
# waits for it in zrt_engine_create. The signal goes once the handlers are
# in place (SigCgt in /proc), like a scheduler's would after the start.
caught() { # caught PID SIGNUM: the process has a handler for it
  local m
  m=$(awk '/^SigCgt:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
  [ -n "$m" ] && (((0x$m >> ($2 - 1)) & 1))
}
for sig in TERM INT; do
  "${MPI[@]}" -n 1 "$EXE" "${RUN[@]}" --data "$D/corpus.txt" --save "$D/ck_$sig" : -n 1 sleep 120 \
    >"$D/sig_$sig.log" 2>&1 &
  mp=$!
  pid=
  for _ in $(seq 300); do
    pid=$(pgrep -P "$mp" -f train_gpt2 | head -1)
    [ -n "$pid" ] && caught "$pid" "$(kill -l "$sig")" && break
    sleep 0.05
  done
  [ -n "$pid" ] || { kill -9 "$mp"; cat "$D/sig_$sig.log"; fail "SIG$sig: train_gpt2 never started"; }
  sleep 1 # well into the wait for the peer
  grep -q "^step 1/" "$D/sig_$sig.log" && fail "SIG$sig: a step ran: the start-up did not wait"
  t0=$(date +%s%N)
  kill -"$sig" "$pid"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  ms=$((($(date +%s%N) - t0) / 1000000))
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid" "$mp" 2>/dev/null
    fail "SIG$sig during start-up: train_gpt2 still running 10 s later"
  fi
  wait "$mp"
  rc=$?
  [ "$rc" = 75 ] || { cat "$D/sig_$sig.log"; fail "SIG$sig during start-up: exit $rc, expected 75"; }
  grep -q "^train_gpt2: interrupted (SIG$sig) during start-up, before any step: nothing was saved" "$D/sig_$sig.log" ||
    { cat "$D/sig_$sig.log"; fail "SIG$sig: no start-up interruption line"; }
  [ -e "$D/ck_$sig" ] && fail "SIG$sig: --save DIR was written during start-up"
  echo "ok: SIG$sig during start-up: ended in $ms ms, exit 75"
done
echo PASS
