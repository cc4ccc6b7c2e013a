#!/bin/bash
# test_launch_errors.sh — bad usage of `zrt launch` fails before anything
# starts, with a message that says what is wrong and what to do.
. "$(dirname "$0")/lib.sh"
cd "$T"

check() { # check WANT_STATUS PATTERN cmd...
  local want=$1 pat=$2
  shift 2
  "$@" >out.txt 2>&1
  local rc=$?
  expect_status "$want" $rc "$*"
  expect_grep "$pat" out.txt "output of: $*"
}

check 2 "unknown option '--num_process' \(did you mean --num_processes\?\)" \
  "$ZRT" launch --num_process 2 true
check 2 "option --zero_stage needs a value" "$ZRT" launch --zero_stage
check 2 "no PROGRAM given" "$ZRT" launch --num_processes 2
check 2 "program 'zrt_no_such_program_x' not found \(not a file and not in PATH\)" \
  "$ZRT" launch zrt_no_such_program_x
check 2 "program './nothere' not found" "$ZRT" launch ./nothere
check 2 'zero_optimization.stage: "?7"? .*0..3' "$ZRT" launch --zero_stage 7 true
check 2 'mixed_precision: "fp8" is not one of no\|fp16\|bf16' \
  "$ZRT" launch --mixed_precision fp8 true

printf 'deepspeed_config:\n  zero_stage: 9\nnum_processes: two\n' >bad.yaml
check 2 'bad.yaml:2:3: zero_optimization.stage: 9 is out of range' \
  "$ZRT" launch --config_file bad.yaml true
expect_grep 'bad.yaml:3:1: num_processes: expected an integer, got "two"' out.txt \
  "every error of the file is reported"
check 2 "nope.yaml" "$ZRT" launch --config_file nope.yaml true

printf 'localhost slots=2\nlocalhost2 slots=2\n' >hosts
check 2 'num_processes 3 is not a multiple of num_machines 2' \
  "$ZRT" launch --hostfile hosts --num_processes 3 true
# a FIFO named as the hostfile is an error naming it, never a hang
mkfifo fifo_hosts
check 2 "hostfile 'fifo_hosts' is a FIFO \(named pipe\), not a regular file" \
  timeout -k 5 30 "$ZRT" launch --hostfile fifo_hosts --num_processes 2 true
check 2 "hostfile 'fifo_hosts' is a FIFO \(named pipe\), not a regular file" \
  timeout -k 5 30 "$ZRT" launch --hostfile fifo_hosts --include localhost --num_processes 2 true
check 2 'num_machines is 2 but no machines are named: pass --hostfile' \
  "$ZRT" launch --num_machines 2 --num_processes 2 true
check 0 'nothing to start here' "$ZRT" launch --num_machines 2 --num_processes 2 --machine_rank 1 true
check 0 "^mpiexec .*-n 4 --hostfile $T/hosts --map-by ppr:2:node .*launch __rank true$" \
  "$ZRT" launch --dry_run --hostfile "$T/hosts" --num_processes 4 true
check 0 "^mpiexec .*-n 2 -H a:1,b:1 --map-by ppr:1:node .*launch __rank true$" \
  "$ZRT" launch --dry_run --hosts a:1,b:1 --num_machines 2 --num_processes 2 true
check 0 "-x MASTER_ADDR .*" \
  "$ZRT" launch --dry_run --main_process_ip 10.0.0.1 --num_processes 2 true
# a single process on this machine runs without mpiexec
check 0 "^[^ ]*zrt launch __rank true$" "$ZRT" launch --dry_run --num_processes 1 true
check 0 "--num_processes N" "$ZRT" launch --help
# --metrics takes a path only when it looks like one; the config carries it
for m in "--metrics run.jsonl" "--metrics=run.jsonl" "--metrics"; do
  "$ZRT" launch $m --dry_run true >m.txt 2>&1 || { cat m.txt; fail "dry run with $m"; }
  want=run.jsonl
  [ "$m" = "--metrics" ] && want=zrt_metrics.jsonl
  expect_grep "\"metrics_path\": *\"$want\"" m.txt "the config a dry run shows after $m"
  expect_grep "launch __rank true$" m.txt "program after $m"
done
# a dry run keeps no run directory (TMPDIR is this test's own directory)
leftover=$(ls -d "$T"/zrt-run-* 2>/dev/null || true)
[ -z "$leftover" ] || fail "a dry run left run directories behind: $leftover"
pass "launch usage errors"
