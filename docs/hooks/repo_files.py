"""MkDocs hook: the repository's own reports and changelog, served at their repository paths.

The results pages link the study READMEs and reports where they live
(``experiments/*/README.md``, ``experiments/*/REPORT*.md``, ``benchmarks/*.md``,
``CHANGELOG.md``) instead of copying them: this hook adds each of those files to the site
under its repository path (``experiments/learning/README.md`` → ``experiments/learning/``),
so a docs page links ``../experiments/learning/README.md`` and strict mode checks the link.

Their own relative links keep working when the target is on the site too: another of these
pages, or a file they link that exists in the repository (a PNG, a JSON or CSV result),
which is added as a static file. A link whose target is not a file (a folder) or does not
exist is rewritten as the repository path in code (``experiments/learning/results/pooled``),
so strict mode never fails on a report's link while every link of the docs' own pages is
still validated.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.repo_files")

ROOT = Path(__file__).resolve().parents[2]
#: The repository files served as pages (globs relative to the repository root).
PAGES = (
    "CHANGELOG.md",
    "benchmarks/README.md",
    "benchmarks/RESULTS.md",
    "experiments/*/README.md",
    "experiments/*/REPORT*.md",
    "experiments/*/results*/README.md",
    "experiments/*/results*/REPORT*.md",
    "experiments/smollm2/results/EFFECT.md",
    "experiments/smollm2/results/*/REPORT.md",
)
#: A Markdown link or image: ``[text](target)`` / ``![alt](target)`` (no nested brackets).
LINK = re.compile(r"(!?)\[([^\]\n]*)\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")

_repo_pages: set[str] = set()


def repo_pages() -> list[str]:
    """The repository-relative paths of :data:`PAGES` that exist, sorted."""
    found = {p.relative_to(ROOT).as_posix() for g in PAGES for p in ROOT.glob(g) if p.is_file()}
    return sorted(found)


def _targets(markdown: str, page: str) -> list[str]:
    """Repository paths of the relative link targets of ``markdown`` (a page at ``page``)."""
    out = []
    for match in LINK.finditer(_without_code(markdown)):
        path = _resolve(match[3], page)
        if path is not None:
            out.append(path)
    return out


def _resolve(target: str, page: str) -> str | None:
    """``target`` (relative to ``page``) as a repository path, or None for a URL/anchor."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return None
    path = target.split("#", 1)[0]
    if not path:
        return None
    return posixpath.normpath(posixpath.join(posixpath.dirname(page), path))


def _without_code(markdown: str) -> str:
    """``markdown`` with fenced code blocks blanked (their links are not links)."""
    out, fence = [], None
    for line in markdown.splitlines():
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match[1]
        elif fence is not None and line.strip().startswith(fence):
            fence = None
            line = ""
        out.append("" if fence is not None else line)
    return "\n".join(out)


def on_files(files: Files, config: Any) -> Files:
    """Add the repository pages and the existing files they link."""
    _repo_pages.clear()
    pages = [p for p in repo_pages() if files.get_file_from_path(p) is None]
    assets: set[str] = set()
    for page in pages:
        files.append(File.generated(config, page, abs_src_path=str(ROOT / page)))
        _repo_pages.add(page)
        text = (ROOT / page).read_text(encoding="utf-8")
        for path in _targets(text, page):
            source = ROOT / path
            if path.startswith("..") or not source.is_file() or path.endswith(".md"):
                continue
            assets.add(path)
    for path in sorted(assets):
        if files.get_file_from_path(path) is None:
            files.append(File.generated(config, path, abs_src_path=str(ROOT / path)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """In a repository page, turn a link to anything not on the site into its path in code."""
    src = page.file.src_uri
    if src not in _repo_pages:
        return markdown

    def fix(match: re.Match) -> str:
        path = _resolve(match[3], src)
        if path is None or files.get_file_from_path(path) is not None:
            return match[0]
        log.debug("%s: link to %s (not a file on the site) shown as its path", src, match[3])
        shown = f"`{path}`"
        text = match[2].strip("`")
        return (
            shown if text in (match[3], path, posixpath.basename(path)) else f"{match[2]} ({shown})"
        )

    lines, fence = [], None
    for line in markdown.splitlines(keepends=True):
        opened = _FENCE.match(line)
        if fence is None and opened:
            fence = opened[1]
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is None:
            line = LINK.sub(fix, line)
        lines.append(line)
    return "".join(lines)
