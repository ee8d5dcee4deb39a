"""``slca fit --help`` and ``slca sft --help`` served from a cache: importing Lightning alone
takes seconds, so the text is kept in ``$SLCA_CACHE/help/``, keyed by the versions of Python
and the libraries, the source files of ``slca_lightning`` and ``callbacks`` and the terminal
width; a repeated ``--help`` prints at once."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import io
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from slca_lightning.models.cached_folders import default_cache_dir

__all__ = ["help_cache_path", "serve_help"]

_HELP_ARGV = (["fit", "--help"], ["fit", "-h"], ["sft", "--help"], ["sft", "-h"])
_LIBRARIES = ("lightning", "jsonargparse", "torch", "transformers", "peft", "docstring-parser")


def help_cache_path(argv: list[str]) -> str | None:
    """Where the text of ``slca <argv>`` is cached, or None when that command is not a plain
    ``--help`` (a ``--config`` changes the defaults shown, so it is never cached)."""
    if list(argv) not in _HELP_ARGV:
        return None
    prog = os.path.basename(sys.argv[0]) if sys.argv else ""
    parts = [sys.version, sys.executable, prog, " ".join(argv), os.environ.get("COLUMNS", "")]
    try:
        parts.append(str(os.get_terminal_size(sys.__stdout__.fileno()).columns))
    except (OSError, ValueError, AttributeError):
        parts.append("-")
    for lib in _LIBRARIES:
        try:
            parts.append(f"{lib}={importlib.metadata.version(lib)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{lib}=-")
    for package in ("slca_lightning", "callbacks"):
        spec = importlib.util.find_spec(package)
        for folder in (spec and spec.submodule_search_locations) or []:
            for root, dirs, files in os.walk(folder):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(files):
                    if name.endswith(".py"):
                        st = os.stat(os.path.join(root, name))
                        parts.append(f"{os.path.join(root, name)}:{st.st_size}:{st.st_mtime_ns}")
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]
    return os.path.join(default_cache_dir(), "help", f"{digest}.txt")


class _Tee(io.TextIOBase):
    """Writes go to ``stream`` and are kept (the help text, to cache it)."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.parts = stream, []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _store(path: str, text: str) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError:  # a read-only cache only costs the speed-up
        pass


def serve_help(argv: list[str], run: Callable[[], Any]) -> bool:
    """Print ``slca <argv>`` (a plain ``--help``) from the cache, or call ``run`` (which
    prints it and exits 0) and cache its text; False when ``argv`` is not such a command."""
    path = help_cache_path(argv)
    if path is None:
        return False
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as fh:
            sys.stdout.write(fh.read())
        sys.stdout.flush()
        return True
    tee, real = _Tee(sys.stdout), sys.stdout
    sys.stdout = tee
    try:
        run()
    except SystemExit as done:
        if done.code not in (0, None):
            raise
        _store(path, "".join(tee.parts))
    finally:
        sys.stdout = real
    return True
