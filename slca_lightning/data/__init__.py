"""Task data: the built-in synthetic suite, the Toucan RL loader and the project's JSONL format."""

from slca_lightning.data.format_errors import (
    DataFormatError,
    JsonlTaskFormatError,
    ToucanFormatError,
)
from slca_lightning.data.prompt import render_hermes_system_prompt
from slca_lightning.data.suite import ToolSuite, builtin_suite
from slca_lightning.data.synthetic import SyntheticTaskGenerator, reference_answer, tool_call_block
from slca_lightning.data.tasks import load_jsonl_tasks, save_jsonl_tasks, task_to_record
from slca_lightning.data.toucan import load_toucan_rl

__all__ = [
    "DataFormatError",
    "JsonlTaskFormatError",
    "SyntheticTaskGenerator",
    "ToolSuite",
    "ToucanFormatError",
    "builtin_suite",
    "load_jsonl_tasks",
    "load_toucan_rl",
    "reference_answer",
    "render_hermes_system_prompt",
    "save_jsonl_tasks",
    "task_to_record",
    "tool_call_block",
]
