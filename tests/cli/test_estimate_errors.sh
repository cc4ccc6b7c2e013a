#!/bin/bash
# test_estimate_errors.sh — bad input to `zrt estimate-memory` exits 2 with a
# message naming the option, the value and what is expected; good input
# with the offload options prints the nvme column; --hf_config reads a
# GPT-2 config.json into exactly the preset's numbers (gpt2: the same JSON
# as --model gpt2), counts a Llama, Mistral or Qwen2 config.json per module
# to the parameter count each model is published with (tests/data/
# hf_configs), and refuses other architectures, missing keys and bad
# values by name; every row of stages 1-3 carries DeepSpeed's figure;
# --offload_ratio out of range or with nvme is refused, and the Twin-Flow
# split of the stage-3 optimizer rows is printed; --backend takes cpu or
# cuda (cuda: a smaller GPT-2 activation figure, named in the table). bf16 master weights
# (--bf16_master_weights_and_grads, --bf16_optimizer_states): refused
# without --dtype bf16 / Adam / the masters, as the engine refuses them;
# accepted, only the optimizer-offload rows, whose host master32 and grads
# are half the fp32 figure (and optim_state with bf16 states).
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

check 2 "give exactly one of --model NAME, --hf_config config.json or --params N" "${E[@]}"
check 2 "unknown --model 'gpt5'" "${E[@]}" --model gpt5
check 2 "--backend 'gpu': expected cpu or cuda" "${E[@]}" --model tiny --backend gpu
# --backend cuda: the CUDA kernels' arena (unit.test_memest_cuda_acts checks it to the byte)
check 0 '"backend":"cuda"' "${E[@]}" --model gpt2 --batch_size 8 --dtype bf16 --backend cuda --json
cuda_act=$(sed -n 's/.*"activation_bytes":\([0-9]*\).*/\1/p' out.txt)
check 0 '"backend":"cpu"' "${E[@]}" --model gpt2 --batch_size 8 --dtype bf16 --json
cpu_act=$(sed -n 's/.*"activation_bytes":\([0-9]*\).*/\1/p' out.txt)
[ -n "$cuda_act" ] && [ -n "$cpu_act" ] && [ "$cuda_act" -lt "$cpu_act" ] ||
  fail "--backend cuda: activation_bytes $cuda_act not below the cpu figure $cpu_act"
check 0 "activations 3.10 GiB per rank \(cuda kernels\)" "${E[@]}" --model gpt2 --batch_size 8 \
  --dtype bf16 --backend cuda
check 2 "unknown option '--bogus' \(see --help\)" "${E[@]}" --params 1e6 --bogus 1
check 2 "--max_reuse 'x' is not a non-negative number" "${E[@]}" --params 1e6 --max_reuse x
check 2 "--offload_device 'disk' is not cpu or nvme" "${E[@]}" --params 1e6 --offload_device disk
check 2 "--offload_param_device 'ram' is not cpu or nvme" "${E[@]}" --params 1e6 \
  --offload_param_device ram
check 2 "--param_buffer_count '0' must be at least 1" "${E[@]}" --params 1e6 \
  --param_buffer_count 0
check 2 "--grad_accum '0' must be from 1 to 65536" "${E[@]}" --model tiny --grad_accum 0
check 2 "--device_memory 'lots' is not a size \(e.g. 16GiB, 8e9\)" "${E[@]}" --params 1e6 \
  --device_memory lots
check 2 "--dtype 'fp8': expected fp32, fp16 or bf16" "${E[@]}" --params 1e6 --dtype fp8
check 2 "--world_sizes '1,x': expected comma-separated positive integers" "${E[@]}" \
  --params 1e6 --world_sizes 1,x
check 2 "--offload_ratio '1.5' is not a number in 0..1 \(offload_optimizer.ratio\)" "${E[@]}" \
  --params 1e6 --offload_ratio 1.5
check 2 "--offload_ratio 0.5 with --offload_device nvme: the engine refuses" "${E[@]}" \
  --params 1e6 --offload_ratio 0.5 --offload_device nvme
pass "bad options"

check 0 "Twin-Flow ratio 0.5 \(sub_group_size 0\), world 2 stage 3 optimizer: 2 of 4 sub-groups on the device" \
  "${E[@]}" --model tiny --world_sizes 2 --offload_ratio 0.5 --sub_group_size 0
pass "Twin-Flow split printed"

check 0 "nvme \(disk\)" "${E[@]}" --params 1e6 --world_sizes 2 --offload_device nvme \
  --offload_param_device nvme --param_buffer_count 2
pass "nvme options"

cat >gpt2.json <<'JSON'
{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 12, "n_embd": 768,
 "n_head": 12, "vocab_size": 256, "n_positions": 1024, "n_ctx": 1024}
JSON
"${E[@]}" --hf_config gpt2.json --seq_len 128 --world_sizes 1,2 --json >hf.json || fail "--hf_config run"
"${E[@]}" --model gpt2 --seq_len 128 --world_sizes 1,2 --json >preset.json || fail "--model run"
python3 - hf.json preset.json <<'PY' || fail "--hf_config differs from the gpt2 preset"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["model"] == "hf_config", a["model"]
a["model"] = b["model"]
assert a == b, "hf_config and preset JSON differ"
rows = [c for c in a["configs"] if c["stage"] >= 1]
assert rows and all("deepspeed" in c for c in rows), "a stage 1-3 row without DeepSpeed's figure"
assert all("deepspeed" not in c for c in a["configs"] if c["stage"] == 0)
PY
check 0 "DeepSpeed gpu / cpu" "${E[@]}" --hf_config gpt2.json --world_sizes 2
echo '{"model_type": "llama", "num_hidden_layers": 2}' >llama.json
check 2 "\"hidden_size\" is missing .a llama config has" "${E[@]}" --hf_config llama.json
echo '{"model_type": "t5", "num_layers": 2}' >t5.json
check 2 "model_type \"t5\" — the layouts here are gpt2" "${E[@]}" --hf_config t5.json
# Llama-family config.json files (tests/data/hf_configs/SOURCES): the
# per-module count equals the parameter count each model is published with
HFD=${ZRT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/data/hf_configs
while IFS='|' read -r file what want; do
  case "$file" in '#'* | '') continue ;; esac
  "${E[@]}" --hf_config "$HFD/$file" --world_sizes 1,8 --json >hf_dec.json ||
    fail "--hf_config $file ($what)"
  got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["params"])' hf_dec.json)
  [ "$got" = "$want" ] || fail "$file ($what): $got parameters, published $want"
  echo "ok: $what: $got parameters (published $want)"
done <"$HFD/SOURCES"
check 0 "lm_head 0 \(tied\) = 494032768 parameters" "${E[@]}" --hf_config "$HFD/qwen2.5-0.5b.json"
echo '{"n_layer": 2, "n_embd": 64, "n_head": 2, "vocab_size": 256}' >nopos.json
check 2 "\"n_positions\" is missing" "${E[@]}" --hf_config nopos.json
echo '{"n_layer": 2, "n_embd": 64.5, "n_head": 2, "vocab_size": 256, "n_positions": 64}' >bad.json
check 2 "\"n_embd\" must be a positive integer" "${E[@]}" --hf_config bad.json
echo '{"n_layer": 2, "n_embd": 64, "n_head": 3, "vocab_size": 256, "n_positions": 64}' >heads.json
check 2 "n_head 3 does not divide n_embd 64" "${E[@]}" --hf_config heads.json
echo 'not json' >junk.json
check 2 "not a JSON object" "${E[@]}" --hf_config junk.json
check 2 "Hugging Face config 'missing.json' cannot be opened: it does not exist" "${E[@]}" --hf_config missing.json
mkfifo fifo.json
check 2 "Hugging Face config 'fifo.json' is a FIFO \\(named pipe\\), not a regular file" timeout -k 5 30 "${E[@]}" --hf_config fifo.json
check 2 "give exactly one of" "${E[@]}" --hf_config gpt2.json --model gpt2
pass "--hf_config"

check 2 "--bf16_master_weights_and_grads true needs --dtype bf16" "${E[@]}" --params 1e6 \
  --bf16_master_weights_and_grads true
check 2 "--bf16_optimizer_states true needs --bf16_master_weights_and_grads true" "${E[@]}" \
  --params 1e6 --dtype bf16 --bf16_optimizer_states true
check 2 "--bf16_master_weights_and_grads expects true or false, got 'yes'" "${E[@]}" \
  --params 1e6 --dtype bf16 --bf16_master_weights_and_grads yes
check 2 "runs on the CPU Adam: --optimizer adam or adamw" "${E[@]}" --params 1e6 --dtype bf16 \
  --optimizer sgd --bf16_master_weights_and_grads true
check 2 "with --offload_device nvme: the engine refuses it" "${E[@]}" --params 1e6 --dtype bf16 \
  --offload_device nvme --bf16_master_weights_and_grads true
B=("${E[@]}" --params 1e6 --dtype bf16 --world_sizes 2 --json)
"${B[@]}" >fp32m.json || fail "estimate with fp32 masters"
"${B[@]}" --bf16_master_weights_and_grads true >bf16m.json || fail "estimate with bf16 masters"
"${B[@]}" --bf16_master_weights_and_grads true --bf16_optimizer_states true >bf16ms.json ||
  fail "estimate with bf16 masters and states"
python3 - fp32m.json bf16m.json bf16ms.json <<'PY' || fail "bf16 master estimates"
import json, sys
f, m, ms = (json.load(open(p)) for p in sys.argv[1:])
assert m["master_dtype"] == "bf16" and m["optimizer_state_dtype"] == "fp32", m
assert ms["optimizer_state_dtype"] == "bf16", ms
def rows(d):
    return {(c["stage"], c["offload"]): c for c in d["configs"]}
F, M, MS = rows(f), rows(m), rows(ms)
assert all(k[1] != "none" for k in M) and all(k[0] != 0 for k in M), sorted(M)
for k in M:
    a, b, c = F[k]["host"], M[k]["host"], MS[k]["host"]
    assert b["master32"] * 2 == a["master32"] and b["grads"] * 2 == a["grads"], (k, a, b)
    assert b["optim_state"] == a["optim_state"] and c["optim_state"] * 2 == a["optim_state"], (k, a, c)
    print(f"stage {k[0]} {k[1]}: host master32 {a['master32']} -> {b['master32']}, optim_state "
          f"{a['optim_state']} -> {c['optim_state']}")
PY
pass "bf16 master weights in estimate-memory"
