#!/usr/bin/env bash
# test_accelerate_yaml.sh — accelerate launch YAMLs as accelerate writes and
# reads them, through `zrt config check` / `zrt config explain`:
#   * `main_process_port: null` (accelerate writes it) is the default port;
#     `mixed_precision: 'no'` quoted (--defaults) and bare both load;
#   * a relative deepspeed_config_file resolves from the working directory
#     (accelerate's rule); one that is only beside the YAML is used with a note;
#   * mixed_precision fp16 against a DeepSpeed file with bf16 enabled is an
#     error naming both places (accelerate raises on it); "auto" there is fine;
#   * num_machines 2 without a hostfile is rejected by config check as by
#     launch; mpirun_config.mpirun_hostfile is the hostfile;
#   * distributed_type FSDP runs as its ZeRO equivalent: FULL_SHARD -> 3,
#     SHARD_GRAD_OP -> 2, NO_SHARD -> 0, fsdp_reshard_after_forward false -> 2,
#     fsdp_offload_params -> offload to cpu; keys without one are named.
. "$(dirname "$0")/lib.sh"
cd "$T"
mkdir -p sub other
cat >sub/ds.json <<'J'
{"bf16": {"enabled": true}, "train_micro_batch_size_per_gpu": 2}
J
cat >sub/ds_auto.json <<'J'
{"bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": 2}
J
acc() { # acc FILE MIXED DSFILE [extra lines]
  local f=$1 mp=$2 ds=$3
  shift 3
  {
    echo "compute_environment: LOCAL_MACHINE"
    echo "deepspeed_config:"
    echo "  deepspeed_config_file: $ds"
    echo "  zero3_init_flag: false"
    echo "distributed_type: DEEPSPEED"
    echo "machine_rank: 0"
    echo "main_process_port: null"
    echo "mixed_precision: $mp"
    echo "num_processes: 2"
    for l in "$@"; do echo "$l"; done
  } >"$f"
}

acc sub/a.yaml "'no'" ds.json "num_machines: 1"
"$ZRT" config explain sub/a.yaml >a.out 2>&1
expect_status 0 $? "port null, 'no' quoted, ds.json beside the YAML"
expect_grep "^main_process_port = 29500 " a.out
expect_grep "deepspeed_config_file ds.json is not in the working directory \(where accelerate looks\); using sub/ds.json beside the launch YAML" a.out
acc sub/b.yaml no sub/ds.json "num_machines: 1"
"$ZRT" config explain sub/b.yaml >b.out 2>&1
expect_status 0 $? "bare no, ds path from the working directory"
expect_grep "^bf16.enabled = true .*sub/ds.json" b.out
expect_no_grep "not in the working directory" b.out
# zrt launch says so too (the rank program is a no-op: only the launcher's note matters)
"$ZRT" launch --num_processes 1 --config_file sub/a.yaml /bin/true >a_launch.out 2>&1
expect_status 0 $? "launch with ds.json beside the YAML"
expect_grep "deepspeed_config_file ds.json is not in the working directory \(where accelerate looks\); using sub/ds.json beside the launch YAML" a_launch.out
pass "null port, 'no', relative DeepSpeed file from the working directory (else beside the YAML)"

acc sub/c.yaml fp16 sub/ds.json "num_machines: 1"
"$ZRT" config check sub/c.yaml >c.out 2>&1
expect_status 1 $? "fp16 YAML over a bf16 DeepSpeed file"
expect_grep "sub/c.yaml:8:1: mixed_precision fp16 conflicts with sub/ds.json:1:11: bf16.enabled true" c.out
acc sub/d.yaml fp16 sub/ds_auto.json "num_machines: 1"
"$ZRT" config explain sub/d.yaml >d.out 2>&1
expect_status 0 $? "fp16 YAML over an auto DeepSpeed file"
expect_grep "^fp16.enabled = true " d.out
pass "precision conflict between the YAML and the DeepSpeed file is an error, auto is filled"

acc sub/e.yaml bf16 sub/ds.json "num_machines: 2"
"$ZRT" config check sub/e.yaml >e.out 2>&1
expect_status 1 $? "num_machines 2 without hostfile"
expect_grep "num_machines is 2 but no machines are named" e.out
printf 'localhost slots=1\n127.0.0.1 slots=1\n' >hosts
acc sub/f.yaml bf16 sub/ds.json "num_machines: 2" "mpirun_config:" "  mpirun_hostfile: $T/hosts"
"$ZRT" config explain sub/f.yaml >f.out 2>&1
expect_status 0 $? "mpirun_config.mpirun_hostfile"
expect_grep "^hostfile = $T/hosts " f.out
pass "config check rejects what launch rejects; mpirun_hostfile is the hostfile"

fsdp() { # fsdp FILE KEY VALUE OFFLOAD
  cat >"$1" <<Y
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  $2: $3
  fsdp_offload_params: $4
  fsdp_state_dict_type: SHARDED_STATE_DICT
machine_rank: 0
mixed_precision: bf16
num_machines: 1
num_processes: 2
Y
}
for c in "FULL_SHARD true 3 cpu cpu" "SHARD_GRAD_OP false 2 none none" "NO_SHARD false 0 none none" \
  "1 true 3 cpu cpu" "SHARD_GRAD_OP true 2 cpu none"; do
  set -- $c
  fsdp g.yaml fsdp_sharding_strategy "$1" "$2"
  "$ZRT" config explain g.yaml >g.out 2>&1
  expect_status 0 $? "FSDP $1"
  expect_grep "^zero_optimization.stage = $3 " g.out "FSDP $1 stage"
  expect_grep "^zero_optimization.offload_optimizer.device = $4 " g.out "FSDP $1 optimizer offload"
  expect_grep "^zero_optimization.offload_param.device = $5 " g.out "FSDP $1 param offload"
done
expect_grep "distributed_type FSDP runs as ZeRO stage 2, optimizer and parameter offload to cpu; fsdp_config keys without a ZeRO equivalent, ignored: fsdp_auto_wrap_policy, fsdp_state_dict_type" g.out
fsdp g.yaml fsdp_reshard_after_forward false false
"$ZRT" config explain g.yaml >g.out 2>&1
expect_grep "^zero_optimization.stage = 2 " g.out "FSDP2 reshard_after_forward false"
fsdp g.yaml fsdp_sharding_strategy SOMETIMES false
"$ZRT" config check g.yaml >g.out 2>&1
expect_status 1 $? "unknown FSDP strategy"
expect_grep "SOMETIMES\" is not an FSDP sharding strategy" g.out
pass "FSDP YAMLs run as their ZeRO equivalent"
