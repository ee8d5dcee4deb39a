"""Shared fixtures of the tool-call tests."""

import pytest

from slca_lightning.demo import ADD
from slca_lightning.types import Task, ToolCall

#: The schema of one ``add(a, b)`` tool (the demo's).
ADD_TOOLS = [ADD]


@pytest.fixture
def add_task() -> Task:
    """ "What is 2+3?" with the add tool; gold: one call ``add(a=2, b=3)``."""
    return Task(
        task_id="t0",
        messages=[{"role": "user", "content": "What is 2+3?"}],
        tools=ADD_TOOLS,
        allowed_tools=["add"],
        gold_calls=[[ToolCall("add", {"a": 2, "b": 3})]],
        question="What is 2+3?",
    )
