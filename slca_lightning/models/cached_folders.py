"""Where slca_lightning keeps what it builds once: warm starts, dequantised models, help text."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["default_cache_dir", "is_complete", "save_model_folder"]


def default_cache_dir() -> str:
    """``$SLCA_CACHE``, else ``~/.cache/slca_lightning``."""
    return os.environ.get("SLCA_CACHE") or os.path.expanduser("~/.cache/slca_lightning")


def is_complete(folder: Path, done_file: str) -> bool:
    """A cached model folder is complete when its marker file and ``config.json`` exist."""
    return (folder / done_file).is_file() and (folder / "config.json").is_file()


def save_model_folder(
    final: Path,
    model: Any,
    tokenizer: Any,
    done_file: str,
    info: dict[str, Any],
    replace: bool = False,
) -> None:
    """Save ``model`` and ``tokenizer`` as the folder ``final``, atomically.

    They go to a temporary sibling with ``info`` as JSON in ``done_file`` (the completion
    marker), which is then renamed into place: an interrupted save never leaves a partial
    folder. A damaged ``final`` (marker missing) is replaced, and with ``replace`` any
    ``final`` is (an export); otherwise, when another process completed ``final`` first,
    its save is kept (a cache).
    """
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / done_file).write_text(json.dumps(info, indent=2, default=str))
        if final.exists() and (replace or not is_complete(final, done_file)):
            shutil.rmtree(final)
        try:
            os.replace(tmp, final)
        except OSError:  # another process finished first: keep its complete save
            if not is_complete(final, done_file):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
