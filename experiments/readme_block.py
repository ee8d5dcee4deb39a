"""Replace the generated block between two marker lines of a Markdown file.

The experiments and benchmarks write their tables into READMEs between an HTML-comment pair
(``<!-- ...: begin -->`` … ``<!-- ...: end -->``); :func:`replace_block` is the one place that
rewrites such a block, so every generator keeps the markers and the text around them as they are.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["replace_block"]


def replace_block(path: Path | str, begin: str, end: str, body: str) -> None:
    """Write ``body`` between the first ``begin`` marker of ``path`` and the ``end`` after it.

    The markers stay on lines of their own (``body`` gets exactly one newline before ``end``);
    a file without both markers, in that order, is a ``ValueError`` naming the file and marker.
    """
    path = Path(path)
    text = path.read_text()
    if begin not in text:
        raise ValueError(f"{path}: no {begin!r} marker to replace the block after")
    head, rest = text.split(begin, 1)
    if end not in rest:
        raise ValueError(f"{path}: no {end!r} marker after {begin!r}")
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}\n{body.rstrip(chr(10))}\n{end}{tail}")
