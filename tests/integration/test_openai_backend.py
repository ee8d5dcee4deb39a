"""OpenAIBackend against a loopback OpenAI-compatible server that misbehaves on purpose.

Real parts: the official ``openai`` client inside OpenAIBackend, real HTTP on 127.0.0.1 to
``ChatStandIn`` (a standard-library server started by each test), SchemaGuidedSimulator +
LLMBackend and LLMJudge as users wire them, and (one test) the tiny model answering behind
the server through EngineChatBackend. Boundary: the server is a stand-in, not vLLM, because
the failure modes (closed connection, non-JSON, huge body, hang) must be produced on
demand; the real vLLM server is tests/vllm/test_openai_backend_vllm.py.
"""

from __future__ import annotations

import json
import time

import pytest

from slca_lightning.chat_backends import ChatBackendError, OpenAIBackend
from slca_lightning.chat_backends.openai import ChatReplyTooLarge, ChatServerError, ChatTimeout
from slca_lightning.data.suite import builtin_suite
from slca_lightning.rewards.judges import JudgeRequest, LLMJudge
from slca_lightning.testing.servers import ChatStandIn
from slca_lightning.tools.simulator import SchemaGuidedSimulator
from slca_lightning.tools.tool_backends import LLMBackend
from slca_lightning.types import Task, ToolCall

TASK = Task(task_id="t", messages=[], tools=builtin_suite().tools_of(["math"]))
CALL = ToolCall("add", {"a": 2, "b": 3})


def tool_reply(messages):
    """Answer like the real ``add``: read the call out of the simulator's prompt."""
    call = json.loads(messages[-1]["content"].split("Function call:\n", 1)[1])
    total = call["arguments"]["a"] + call["arguments"]["b"]
    return f'<tool_response>{{"result": {total}}}</tool_response>'


@pytest.fixture
def server():
    with ChatStandIn("ok", reply=tool_reply, huge_bytes=4_000_000, hang_s=20) as s:
        yield s


def backend(server, **kw):
    kw.setdefault("timeout_s", 1.0)
    kw.setdefault("max_retries", 1)
    kw.setdefault("retry_backoff_s", 0.0)
    return OpenAIBackend(server.url, "stand-in", **kw)


def test_ok_reply_and_sampling_settings_reach_the_server(server):
    chat = backend(server)
    messages = [{"role": "user", "content": "Function call:\n" + json.dumps(CALL.__dict__)}]
    reply = chat.chat(messages, temperature=0.6, max_tokens=17, seed=123)
    assert reply == '<tool_response>{"result": 5}</tool_response>'
    body = server.last_request
    assert body["model"] == "stand-in" and body["messages"] == messages
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0.6, 17, 123)
    assert chat.stats["llm_calls"] == 1 and chat.stats["llm_failures"] == 0
    assert len(chat.latencies()) == 1


def test_simulator_over_openai_backend_gives_the_real_result(server):
    sim = SchemaGuidedSimulator(LLMBackend(backend(server), seed=0), retry_backoff_s=0.0)
    result = sim(CALL, TASK)
    assert not result.is_error and json.loads(result.content) == {"result": 5}
    assert server.requests == 1 and sim.stats["backend_calls"] == 1
    snapshot = sim.stats_snapshot()  # what SimulatorStats logs: the chat backend's counters too
    assert snapshot["llm_calls"] == 1 and snapshot["llm_failures"] == 0


@pytest.mark.parametrize("mode", ["close", "non_json", "huge", "hang", "error500"])
def test_each_bad_server_mode_is_a_bounded_counted_error_observation(server, mode):
    server.mode = mode
    chat = backend(server, timeout_s=0.5, max_reply_chars=10_000)
    sim = SchemaGuidedSimulator(LLMBackend(chat), max_retries=1, retry_backoff_s=0.0, cache=True)
    start = time.perf_counter()
    result = sim(CALL, TASK)
    elapsed = time.perf_counter() - start
    # 2 simulator attempts × 2 client attempts × 0.5 s timeout at most, plus slack
    assert elapsed < 5.0, f"{mode}: {elapsed:.2f} s"
    assert result.is_error and result.error_kind == "backend_error"
    expected = {
        "close": "ChatConnectionError",
        "non_json": "ChatBadResponse",
        "huge": "ChatReplyTooLarge",
        "hang": "ChatTimeout",
        "error500": "ChatServerError",
    }[mode]
    assert json.loads(result.content)["error"].startswith(expected + ":")
    assert server.url.removesuffix("/v1") in result.content  # the message names the endpoint
    assert sim.stats["backend_errors"] == 1 and sim.stats["backend_calls"] == 2
    assert chat.stats["llm_calls"] == 2 and chat.stats["llm_failures"] == 2
    retried = mode in ("close", "hang", "error500")  # malformed bodies are not retried
    assert chat.stats["llm_retries"] == (2 if retried else 0)
    assert server.requests == (4 if retried else 2)
    if mode == "hang":
        assert chat.stats["llm_timeouts"] == 4
    assert sim(CALL, TASK).is_error and sim.stats["cache_hits"] == 0  # errors never cached


@pytest.mark.parametrize("mode", ["close", "non_json", "huge", "hang"])
def test_each_bad_server_mode_is_a_counted_failed_verdict(server, mode):
    server.mode = mode
    chat = backend(server, timeout_s=0.5, max_retries=0, max_reply_chars=10_000)
    judge = LLMJudge(chat, cache=True)
    start = time.perf_counter()
    verdicts = judge.score([JudgeRequest("q?", ["r"], "a reply"), JudgeRequest("q2", [], "b")])
    assert time.perf_counter() - start < 4.0
    assert [v.failed for v in verdicts] == [True, True] and [v.score for v in verdicts] == [0, 0]
    assert judge.stats["judge_failed"] == 2 and judge.stats["judge_calls"] == 2
    assert chat.stats["llm_failures"] >= 2


def test_judge_rates_through_the_server_and_caches(server):
    server.reply = lambda messages: "Grounded and complete.\n<rating>4</rating>"
    judge = LLMJudge(backend(server), cache=True)
    requests = [JudgeRequest("q?", ["r"], "reply"), JudgeRequest("other?", [], "reply")]
    assert [v.score for v in judge.score(requests)] == [0.75, 0.75]
    assert [v.score for v in judge.score(requests)] == [0.75, 0.75]
    assert server.requests == 2 and judge.stats["judge_cache_hits"] == 2


def test_server_errors_are_retried_with_backoff_then_raised(server):
    server.mode = "error500"
    chat = backend(server, max_retries=2, retry_backoff_s=0.05)
    start = time.perf_counter()
    with pytest.raises(ChatServerError, match="HTTP 500") as info:
        chat.chat([{"role": "user", "content": "x"}])
    assert time.perf_counter() - start >= 0.05 + 0.1  # back-off 0.05 × 2**attempt
    assert info.value.status_code == 500 and server.requests == 3
    assert chat.stats["llm_retries"] == 2 and chat.stats["llm_failures"] == 1


def test_huge_reply_text_under_the_body_cap_is_still_refused(server):
    server.reply = lambda messages: "x" * 5_000
    with pytest.raises(ChatReplyTooLarge, match="max_reply_chars=1000"):
        backend(server, max_reply_chars=1_000).chat([{"role": "user", "content": "x"}])


def test_hang_is_bounded_by_timeout_and_raises_a_timeout(server):
    server.mode = "hang"
    chat = backend(server, timeout_s=0.3, max_retries=0)
    start = time.perf_counter()
    with pytest.raises(ChatTimeout) as info:
        chat.chat([{"role": "user", "content": "x"}])
    assert time.perf_counter() - start < 2.0
    assert isinstance(info.value, ChatBackendError) and "0.3 s" in str(info.value)


def test_chat_batch_overlaps_requests_up_to_max_in_flight():
    messages = [[{"role": "user", "content": f"m{i}"}] for i in range(16)]
    with ChatStandIn("ok", delay_s=0.2) as server:
        wide = OpenAIBackend(server.url, "m", timeout_s=10, max_in_flight=16)
        start = time.perf_counter()
        replies = wide.chat_batch(messages)
        overlapped = time.perf_counter() - start
        narrow = OpenAIBackend(server.url, "m", timeout_s=10, max_in_flight=2)
        start = time.perf_counter()
        narrow.chat_batch(messages[:6])
        capped = time.perf_counter() - start
    assert replies == [f"m{i}" for i in range(16)]  # the echo server, in order
    assert overlapped < 16 * 0.2 / 3, f"16 requests took {overlapped:.2f} s"
    assert capped >= 3 * 0.2 - 0.02, f"6 requests, 2 in flight, took {capped:.2f} s"
    assert server.requests == 22 and wide.stats["llm_calls"] == 16


def test_tiny_model_behind_the_server_answers_like_in_process():
    from slca_lightning.rollout.engine_chat_backend import EngineChatBackend

    engine = EngineChatBackend("tiny", max_tokens=8)
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    with ChatStandIn("ok", reply=engine) as server:
        served = OpenAIBackend(server.url, "tiny", timeout_s=60).chat(messages, max_tokens=8)
    assert served == engine.chat(messages, max_tokens=8) and isinstance(served, str)


def test_bad_settings_fail_naming_them():
    with pytest.raises(ValueError, match="timeout_s"):
        OpenAIBackend("http://127.0.0.1:1/v1", "m", timeout_s=0)
