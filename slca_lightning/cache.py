"""Where slca_lightning keeps what it builds once: warm starts, dequantised models, help text."""

from __future__ import annotations

import os

__all__ = ["default_cache_dir"]


def default_cache_dir() -> str:
    """``$SLCA_CACHE``, else ``~/.cache/slca_lightning``."""
    return os.environ.get("SLCA_CACHE") or os.path.expanduser("~/.cache/slca_lightning")
