"""EngineChatBackend: a real (tiny, random) local model answers as the SGLS tool server."""

from slca_lightning.rollout.engine_chat_backend import EngineChatBackend
from slca_lightning.tools.simulator import SchemaGuidedSimulator
from slca_lightning.tools.tool_backends import LLMBackend
from slca_lightning.types import Task, ToolCall

TOOL = {
    "type": "function",
    "function": {
        "name": "echo",
        "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
    },
}


def test_engine_backend_answers_batches_deterministically_when_greedy():
    backend = EngineChatBackend("tiny", max_tokens=8)
    msgs = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "hello there"}]]
    a = backend.chat_batch(msgs)
    b = backend.chat_batch(msgs)
    assert len(a) == 2 and a == b and all(isinstance(x, str) for x in a)
    assert backend.chat(msgs[0]) == a[0]


def test_simulator_over_a_local_model_never_raises():
    sim = SchemaGuidedSimulator(
        LLMBackend(EngineChatBackend("tiny", max_tokens=8), temperature=0.0),
        timeout_s=None,
        max_retries=0,
    )
    task = Task(task_id="t", messages=[], tools=[TOOL], allowed_tools=["echo"])
    result = sim(ToolCall("echo", {"x": "a"}), task)
    assert isinstance(result.content, str)  # a random model: an observation or an error one
