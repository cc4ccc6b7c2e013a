#!/usr/bin/env bash
# test_zrt_test.sh — `zrt test` with a launch config, as `accelerate test`:
# 2 ranks, the real alignment-handbook ZeRO-3 YAML (bf16, optimizer and
# parameter offload to cpu) plus --num_processes 2: one PASS line per
# collective (exact against the closed form) and for training (loss falls);
# exit 0. Then a broken run (every step's gradients made non-finite on the
# last rank, ZRT_INJECT_NONFINITE_GRADS): the training line says FAIL with
# what to do, and the exit status is non-zero.
. "$(dirname "$0")/lib.sh"
need_mpiexec
SRC=${ZRT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$T"
YAML=$SRC/tests/data/real_configs/alignment-handbook__deepspeed_zero3.yaml
"$ZRT" test --config_file "$YAML" --num_processes 2 >a.out 2>&1
expect_status 0 $? "zrt test of the ZeRO-3 offload YAML"
for c in all-reduce all-gather reduce-scatter broadcast; do
  expect_grep "^zrt test: PASS $c +.*max \|diff\| 0" a.out "$c line"
done
expect_grep "^zrt test: PASS training +\(stage 3, bf16, offload_optimizer cpu, 2 ranks\): loss" a.out
expect_grep "^zrt test: all checks passed" a.out
pass "zrt test: collectives exact, training at stage 3 bf16 offload"

ZRT_TEST_HOOKS=1 ZRT_INJECT_NONFINITE_GRADS=1,2,3,4,5,6,7,8 "$ZRT" test --num_processes 2 --zero_stage 1 \
  --mixed_precision bf16 >b.out 2>&1
expect_status nonzero $? "zrt test with broken gradients"
expect_grep "^zrt test: PASS all-reduce" b.out
expect_grep "^zrt test: FAIL training .*8 skipped -- the configured stage" b.out
expect_grep "^zrt test: some checks FAILED" b.out
pass "zrt test: a failing check says FAIL, what to do, and exits non-zero"
