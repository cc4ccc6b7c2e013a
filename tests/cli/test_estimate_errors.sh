#!/bin/bash
# test_estimate_errors.sh — bad input to `zrt estimate-memory` exits 2 with a
# message naming the option, the value and what is expected; good input
# with the offload options prints the nvme column.
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
E=("$ZRT" estimate-memory)

check 2 "give exactly one of --model NAME or --params N" "${E[@]}"
check 2 "unknown --model 'gpt5'" "${E[@]}" --model gpt5
check 2 "unknown option '--bogus' \(see --help\)" "${E[@]}" --params 1e6 --bogus 1
check 2 "--max_reuse 'x' is not a non-negative number" "${E[@]}" --params 1e6 --max_reuse x
check 2 "--offload_device 'disk' is not cpu or nvme" "${E[@]}" --params 1e6 --offload_device disk
check 2 "--offload_param_device 'ram' is not cpu or nvme" "${E[@]}" --params 1e6 \
  --offload_param_device ram
check 2 "--param_buffer_count '0' must be at least 1" "${E[@]}" --params 1e6 \
  --param_buffer_count 0
check 2 "--device_memory 'lots' is not a size \(e.g. 16GiB, 8e9\)" "${E[@]}" --params 1e6 \
  --device_memory lots
check 2 "--dtype 'fp8': expected fp32, fp16 or bf16" "${E[@]}" --params 1e6 --dtype fp8
check 2 "--world_sizes '1,x': expected comma-separated positive integers" "${E[@]}" \
  --params 1e6 --world_sizes 1,x
pass "bad options"

check 0 "nvme \(disk\)" "${E[@]}" --params 1e6 --world_sizes 2 --offload_device nvme \
  --offload_param_device nvme --param_buffer_count 2
pass "nvme options"
