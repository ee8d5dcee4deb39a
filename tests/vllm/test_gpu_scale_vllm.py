"""``benchmarks/gpu_scale.py``'s VLLMEngine section, dry-run size, on the real vLLM (CPU build).

Real parts: the script's own section in a subprocess (random tiny Qwen2 saved to a folder,
VLLMEngine with ``skip_tokenizer_init``, one timed ``generate`` and one full weight sync).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_scale.py"


def test_vllm_section_measures_tokens_per_second_and_sync(vllm_module):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--section", "rollout-vllm"],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    assert 0 < result["tokens"] <= 4 * 16  # 4 prompts × ≤ 16 new tokens (a random EOS may end one)
    assert result["tokens_per_s"] > 0 and result["start_s"] > 0
    assert result["sync_s"] > 0 and result["sync_mb"] > 1.0
