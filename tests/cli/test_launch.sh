#!/bin/bash
# test_launch.sh — `zrt launch` starts 2 real ranks under mpiexec: each sees
# RANK / LOCAL_RANK / WORLD_SIZE / LOCAL_WORLD_SIZE, and the config values it
# resolves follow flag > environment > launch YAML > DeepSpeed file >
# default, the same as `zrt config explain` reports (with the source). A
# successful run removes its run directory.
. "$(dirname "$0")/lib.sh"
need_mpiexec

cd "$T"
cat > ds.json <<'J'
{"train_micro_batch_size_per_gpu": 2,
 "gradient_accumulation_steps": 4,
 "gradient_clipping": 0.5,
 "zero_optimization": {"stage": 1, "reduce_bucket_size": 1000}}
J
cat > launch.yaml <<'Y'
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
num_processes: 2
deepspeed_config:
  zero_stage: 3
  gradient_accumulation_steps: 8
Y
KEYS="--key zero_optimization.stage --key gradient_accumulation_steps --key gradient_clipping
      --key zero_optimization.reduce_bucket_size --key zrt.seed --key zrt.comm_timeout_s"

# 1. what the ranks see
ZRT_COMM_TIMEOUT_S=77 "$ZRT" launch --config_file launch.yaml --deepspeed_config_file ds.json \
  --zero_stage 2 --set zrt.seed=9 "$PROBE" $KEYS --tag "$TAG" >out.txt 2>err.txt
rc=$?
cat out.txt err.txt
expect_status 0 $rc "zrt launch of 2 probes"
for r in 0 1; do
  expect_grep "^probe rank=$r local_rank=$r world_size=2 local_world_size=2$" out.txt "rank $r env"
  expect_grep "^probe rank=$r zero_optimization.stage=2$" out.txt "rank $r: flag beats YAML"
  expect_grep "^probe rank=$r gradient_accumulation_steps=8$" out.txt "rank $r: YAML beats DS file"
  expect_grep "^probe rank=$r gradient_clipping=0.5$" out.txt "rank $r: DS file beats default"
  expect_grep "^probe rank=$r zero_optimization.reduce_bucket_size=1000$" out.txt "rank $r: DS file"
  expect_grep "^probe rank=$r zrt.seed=9$" out.txt "rank $r: --set flag"
  expect_grep "^probe rank=$r zrt.comm_timeout_s=77$" out.txt "rank $r: environment beats default"
done
[ "$(grep -c ' ready$' out.txt)" -eq 2 ] || fail "expected 2 ranks ready"
ls "$T"/zrt-run-* >/dev/null 2>&1 && fail "run directory left after a successful run"
pass "ranks see env and config with the right precedence"

# 2. the environment cannot override a flag, even through the rank's own
#    environment (the rank re-reads ZRT_* after the launcher's file)
ZRT_SEED=5 "$ZRT" launch --num_processes 2 --set zrt.seed=9 "$PROBE" --key zrt.seed \
  --tag "$TAG" >out2.txt 2>&1 || fail "launch with ZRT_SEED"
[ "$(grep -c '^probe rank=[01] zrt.seed=9$' out2.txt)" -eq 2 ] || { cat out2.txt; fail "flag > env"; }
ZRT_SEED=5 "$ZRT" launch --num_processes 2 "$PROBE" --key zrt.seed --tag "$TAG" >out3.txt 2>&1 ||
  fail "launch with ZRT_SEED"
[ "$(grep -c '^probe rank=[01] zrt.seed=5$' out3.txt)" -eq 2 ] || { cat out3.txt; fail "env > default"; }
pass "flag > environment > default for zrt keys"

# 3. the same precedence through `zrt config explain`, with sources
ZRT_COMM_TIMEOUT_S=77 "$ZRT" config explain ds.json launch.yaml --set zero_optimization.stage=2 \
  --set zrt.seed=9 >explain.txt || { cat explain.txt; fail "config explain"; }
expect_grep '^zero_optimization.stage = 2 .*\(flag --set zero_optimization.stage\)' explain.txt
expect_grep '^gradient_accumulation_steps = 8 .*\(file launch.yaml:6(:[0-9]+)?\)' explain.txt
expect_grep '^gradient_clipping = 0.5 .*\(file ds.json:3(:[0-9]+)?\)' explain.txt
expect_grep '^zrt.comm_timeout_s = 77 .*\(environment ZRT_COMM_TIMEOUT_S\)' explain.txt
expect_grep '^zrt.bind_cores_to_rank = false .*\(default\)' explain.txt
expect_grep '^train_batch_size = 32 = micro 2 x accumulation 8 x world 2$' explain.txt
expect_grep '^working dtype = fp32' explain.txt
pass "config explain shows values, sources and derived values"

# 4. the default launch config ($ZRT_CONFIG_HOME/default_config.yaml) is used
mkdir -p "$ZRT_CONFIG_HOME"
printf 'num_processes: 2\ndeepspeed_config:\n  gradient_accumulation_steps: 6\n' \
  >"$ZRT_CONFIG_HOME/default_config.yaml"
"$ZRT" launch "$PROBE" --key gradient_accumulation_steps --tag "$TAG" >out4.txt 2>&1 ||
  { cat out4.txt; fail "launch with the default config"; }
[ "$(grep -c '^probe rank=[01] gradient_accumulation_steps=6$' out4.txt)" -eq 2 ] ||
  { cat out4.txt; fail "default config file not used"; }
pass "default config file"
no_leftovers "successful runs"
