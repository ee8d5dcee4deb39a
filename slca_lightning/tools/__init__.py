"""Tools: the Schema-Guided LLM Simulator (SGLS, METHOD §7) and the tool backends behind it.

- :mod:`.simulator`: :class:`SchemaGuidedSimulator` (validate, cache, then the backend with
  retries and deadlines; never raises);
- :mod:`.tool_backends`: what answers a validated call: the built-in Python tools, an LLM
  role-playing the API (METHOD §7), scripted answers; :mod:`.replay` (recorded answers),
  :mod:`.mcp_backend` (a real MCP server), :mod:`.faults` (injected faults);
- :mod:`.suite_mcp_server`: the built-in suite served over MCP.

How calls are parsed, written and checked lives one floor down, in
:mod:`slca_lightning.calls`.
"""

from slca_lightning.tools.base import ToolBackend, ToolError, ToolSimulator
from slca_lightning.tools.simulator import SchemaGuidedSimulator, unknown_tool_message
from slca_lightning.tools.tool_backends import (
    LLMBackend,
    PythonBackend,
    ScriptedBackend,
    extract_tool_response,
)

__all__ = [
    "LLMBackend",
    "PythonBackend",
    "SchemaGuidedSimulator",
    "ScriptedBackend",
    "ToolBackend",
    "ToolError",
    "ToolSimulator",
    "extract_tool_response",
    "unknown_tool_message",
]
