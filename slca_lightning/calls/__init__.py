"""Tool calls as text and JSON: the lowest floor every other part reads calls through.

- :mod:`~slca_lightning.calls.parsing`: the hermes ``<tool_call>`` parser (METHOD §4.1's
  ``fmt`` counts);
- :mod:`~slca_lightning.calls.formats`: other ways models write calls, turned into hermes;
- :mod:`~slca_lightning.calls.schema`: JSON-schema checks of arguments;
- :mod:`~slca_lightning.calls.sanitize`: cleaning hostile names, arguments and text;
- :mod:`~slca_lightning.calls.gold`: gold calls in the data's shapes → steps;
- :mod:`~slca_lightning.calls.env_errors`: environment failures as observations;
- :mod:`~slca_lightning.calls.result_cache`: the on-disk cache of simulated results and judgements.

Nothing here imports another part of the package except :mod:`slca_lightning.types`.
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
from slca_lightning.calls.template_format import ResponseTemplateFormat

__all__ = [
    "THINK_RE",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "CallEntry",
    "HermesFormat",
    "JSONFormat",
    "ParseResult",
    "ParsedBlock",
    "ResponseTemplateFormat",
    "ToolCallFormat",
    "parse_tool_calls",
    "strip_think",
]
