#!/usr/bin/env bash
# Install with the dev extra, lint, and run the test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh dev
python -m ruff check .
python -m ruff format --check .
python -m pytest -q -p no:cacheprovider "$@"
