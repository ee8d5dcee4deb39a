"""User-facing errors as one line: what ``slca`` prints on stderr before exiting with status 2.

Light on purpose (no Lightning, no torch): the ``slca`` entry point, the eval runner and the
export command all report through it, and ``slca fit --help`` served from its cache must
stay cheap.
"""

from __future__ import annotations

import os
import re

__all__ = ["one_line"]


def debug_enabled() -> bool:
    return os.environ.get("SLCA_DEBUG", "").strip() not in ("", "0", "false")


_UNION = re.compile(
    r'Parser key "(?P<key>[^"]+)": Does not validate against any of the Union subtypes.*?'
    r"Problem with given class_path '(?P<cls>[^']+)':\s*(?P<why>.*?)"
    r"(?:\s+- Expected a <class 'NoneType'>.*)?$",
    re.S,
)


def one_line(message: str, limit: int = 400) -> str:
    """A (possibly multi-line) error message as one line of at most ``limit`` characters;
    jsonargparse's "does not validate against any of the Union subtypes" dump is reduced to
    the component's own complaint."""
    text = " ".join(str(message).split())
    union = _UNION.match(text)
    if union:
        text = f"{union['key']} ({union['cls']}): {union['why']}"
    return text if len(text) <= limit else text[: limit - 3] + "..."
