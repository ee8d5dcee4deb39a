"""Tools: parsing model tool calls (and, elsewhere in this folder, validating and simulating them)."""

from slca_lightning.tools.formats import HermesFormat, JSONFormat, ToolCallFormat
from slca_lightning.tools.parsing import (
    THINK_RE,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    CallEntry,
    ParsedBlock,
    ParseResult,
    parse_tool_calls,
    strip_think,
)

__all__ = [
    "THINK_RE",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "CallEntry",
    "HermesFormat",
    "JSONFormat",
    "ParseResult",
    "ParsedBlock",
    "ToolCallFormat",
    "parse_tool_calls",
    "strip_think",
]

# Schema helpers, the SGLS simulator (METHOD §7) and its backends.
from slca_lightning.tools.backends import (
    LLMBackend,
    PythonBackend,
    ScriptedBackend,
    extract_tool_response,
)
from slca_lightning.tools.schema import (
    canonical_arguments,
    index_schemas,
    required_params,
    tool_name,
    validate_arguments,
)
from slca_lightning.tools.sgls import (
    SchemaGuidedSimulator,
    ToolBackend,
    ToolSimulator,
    unknown_tool_message,
)

__all__ += [
    "LLMBackend",
    "PythonBackend",
    "SchemaGuidedSimulator",
    "ScriptedBackend",
    "ToolBackend",
    "ToolSimulator",
    "canonical_arguments",
    "extract_tool_response",
    "index_schemas",
    "required_params",
    "tool_name",
    "unknown_tool_message",
    "validate_arguments",
]
