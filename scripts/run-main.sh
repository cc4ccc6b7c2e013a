#!/usr/bin/env bash
# run-main.sh — the README's first quick-start command: set-up (missing Debian
# packages, build), then the main job: the GPT example trained under ZeRO
# stage 3 with optimizer + parameter offload on 2 local ranks (CPU backend
# when there is no GPU). Extra arguments go to train_gpt2.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p build/run
exec build/bin/zrt launch --config_file examples/configs/zero3_offload.yaml \
  build/bin/train_gpt2 --model tiny --steps "${ZRT_MAIN_STEPS:-200}" --val_every 50 --sample 200 \
  --metrics build/run/metrics.jsonl --save build/run/ckpt --save_interval 100 "$@"
