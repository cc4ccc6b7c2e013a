#!/bin/bash
# test_config_cli.sh — `zrt config`: the questionnaire answered from a pipe
# (with an invalid answer re-asked) writes an accelerate-style launch YAML
# that `zrt config check` accepts and `zrt launch` / explain read back; EOF
# in the middle writes nothing; --defaults; check reports every error;
# explain and reference.
. "$(dirname "$0")/lib.sh"
cd "$T"

# answers: environment, cpu only, machines, processes, precision (bad, then
# good), stage, offload optimizer (bad, then nvme), its path, offload
# params (stage 3 only), accumulation, clipping
printf 'LOCAL_MACHINE\nyes\n1\n2\nfp8\nBF16\n3\ndisk\nnvme\n/tmp/nv\ncpu\n4\n0.75\n' |
  "$ZRT" config --config_file "$T/sub/dir/launch.yaml" >q.txt 2>&1
rc=$?
cat q.txt
expect_status 0 $rc "questionnaire from a pipe"
expect_grep "invalid answer 'fp8': .*choose one of: no, fp16, bf16" q.txt "re-ask on a bad enum"
expect_grep "invalid answer 'disk'" q.txt "re-ask on a bad offload device"
expect_grep "ZeRO optimization stage\? \[0-3\]" q.txt "stage choices from the schema"
expect_grep "^zrt config: wrote $T/sub/dir/launch.yaml$" q.txt
Y=$T/sub/dir/launch.yaml
expect_grep '^distributed_type: DEEPSPEED$' "$Y"
expect_grep '^deepspeed_config:$' "$Y"
expect_grep '^  zero_stage: 3$' "$Y"
expect_grep '^  offload_optimizer_device: nvme$' "$Y"
expect_grep '^  offload_optimizer_nvme_path: "/tmp/nv"$' "$Y"
expect_grep '^  offload_param_device: cpu$' "$Y"
expect_grep '^mixed_precision: bf16$' "$Y"
expect_grep '^use_cpu: true$' "$Y"
"$ZRT" config check "$Y" >chk.txt 2>&1 || { cat chk.txt; fail "check of the written YAML"; }
expect_grep "^$Y: ok$" chk.txt
"$ZRT" config explain "$Y" >ex.txt 2>&1 || { cat ex.txt; fail "explain of the written YAML"; }
expect_grep '^zero_optimization.stage = 3 ' ex.txt
expect_grep '^zero_optimization.offload_param.device = cpu ' ex.txt
expect_grep '^gradient_accumulation_steps = 4 ' ex.txt
expect_grep '^gradient_clipping = 0.75 ' ex.txt
expect_grep '^bf16.enabled = true ' ex.txt
expect_grep '^working dtype = bf16' ex.txt
pass "questionnaire -> YAML -> check / explain"

# EOF in the middle: clear error, nothing written
printf 'LOCAL_MACHINE\nno\n1\n' | "$ZRT" config --config_file "$T/eof.yaml" >eof.txt 2>&1
rc=$?
expect_status 1 $rc "questionnaire cut short"
expect_grep 'input ended before every question was answered .*nothing written' eof.txt
[ -e "$T/eof.yaml" ] && fail "a cut-short questionnaire wrote $T/eof.yaml"
ls "$T" | grep -q 'eof.yaml.tmp' && fail "temporary file left"
pass "EOF writes nothing"

# --defaults: default path under $ZRT_CONFIG_HOME (directories created)
"$ZRT" config --defaults </dev/null >d.txt 2>&1 || { cat d.txt; fail "config --defaults"; }
D=$ZRT_CONFIG_HOME/default_config.yaml
expect_grep "^zrt config: wrote $D$" d.txt
expect_grep '^num_processes: [0-9]+$' "$D"
expect_grep '^  zero_stage: 2$' "$D"
# quoted as accelerate's yaml.safe_dump writes it (YAML 1.1 reads a bare no as false)
expect_grep "^mixed_precision: 'no'$" "$D"
"$ZRT" config check "$D" >/dev/null || fail "check of the --defaults file"
"$ZRT" env >env.txt 2>&1 || fail "zrt env"
expect_grep "^default config: $D$" env.txt "zrt env names the default config"
expect_grep '^  distributed_type: DEEPSPEED$' env.txt "zrt env shows its contents"
pass "--defaults"

# check: every error, non-zero status, and a good file next to a bad one
cat >bad.yaml <<'B'
num_processes: 0
deepspeed_config:
  zero_stage: 5
  offload_optimizer_device: tape
B
echo '{"zero_optimization": {"stag": 2}}' >bad.json
"$ZRT" config check bad.yaml bad.json "$Y" >c.txt 2>&1
rc=$?
cat c.txt
expect_status 1 $rc "check with invalid files"
expect_grep '^bad.yaml:1:[0-9]+: num_processes' c.txt
expect_grep '^bad.yaml:3:[0-9]+: zero_optimization.stage: 5 is out of range' c.txt
expect_grep '^bad.yaml:4:[0-9]+: .*offload_optimizer.device: "tape" is not one of none\|cpu\|nvme' c.txt
expect_grep '^bad.yaml: invalid$' c.txt
expect_grep "bad.json:1:[0-9]+: .*zero_optimization.stag.*did you mean .*stage" c.txt
expect_grep "^$Y: ok$" c.txt
pass "check reports every error"

# usage errors
"$ZRT" config chek x >u.txt 2>&1
expect_status 2 $? "config chek"
expect_grep "unknown argument 'chek' \(did you mean check\?\)" u.txt
"$ZRT" config explain --world_size 0 >u.txt 2>&1
expect_status 2 $? "explain --world_size 0"
"$ZRT" config explain --set zrt.sead=1 >u.txt 2>&1
expect_status 1 $? "explain --set unknown key"
expect_grep "zrt.sead.*did you mean.*zrt.seed" u.txt

# explain at another world size; reference
printf '{"train_batch_size": 48, "train_micro_batch_size_per_gpu": 3}\n' >tb.json
"$ZRT" config explain tb.json --world_size 4 >w.txt || { cat w.txt; fail "explain --world_size"; }
expect_grep '^train_batch_size = 48 = micro 3 x accumulation 4 x world 4$' w.txt
"$ZRT" config reference >ref.md || fail "config reference"
expect_grep 'zero_optimization.stage' ref.md
expect_grep 'ZRT_SEED' ref.md
pass "explain --world_size, reference"
