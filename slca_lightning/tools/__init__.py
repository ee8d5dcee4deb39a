"""Tools: the Schema-Guided LLM Simulator (SGLS, METHOD §7), its backends, MCP, faults.

Parsing, formats, schema checks and sanitizing of calls live one floor down in
:mod:`slca_lightning.calls`; their names are re-exported here, and their old module paths
(``slca_lightning.tools.parsing``, ...) still import (:mod:`slca_lightning.moved`).
"""

from slca_lightning.calls.formats import HermesFormat, JSONFormat, ToolCallFormat
from slca_lightning.calls.parsing import (
    THINK_RE,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    CallEntry,
    ParsedBlock,
    ParseResult,
    parse_tool_calls,
    strip_think,
)
from slca_lightning.moved import alias

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
from slca_lightning.calls.schema import (
    canonical_arguments,
    index_schemas,
    required_params,
    tool_name,
    validate_arguments,
)
from slca_lightning.tools.backends import (
    LLMBackend,
    PythonBackend,
    ScriptedBackend,
    extract_tool_response,
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

# old module paths (before the move to slca_lightning.calls) keep importing
alias(
    {
        f"slca_lightning.tools.{m}": f"slca_lightning.calls.{m}"
        for m in ("parsing", "formats", "schema", "sanitize", "env_errors", "cache")
    }
    | {"slca_lightning.tools.fidelity": "slca_lightning.eval.fidelity"}
)
