"""Every command and Python block of the docs runs here, or says why it does not.

The README and each Markdown file under ``docs/`` (recursively) are read for fenced blocks. A ``python``,
``bash``/``sh``/``shell`` or ``console`` block either runs, or the line before its fence
(blank lines skipped) is a marker with its reason::

    <!-- not run: trains for 10 minutes; tests/integration/test_fit.py covers it -->

A block with neither fails :func:`test_every_block_runs_or_says_why_not`. The blocks of one
page run in order by :func:`test_page_blocks_run`, in a fresh folder holding links to the
repository's ``configs/`` and ``docs/examples/``, so the commands read as from the
repository root while whatever they write stays in the temporary folder:

- a block with a title (```` ```python title="my_segmenter.py" ````, any language) is a
  file: written into the folder under that name (Python is compiled), not executed; a
  title naming a file of the repository (``docs/examples/smoke.yaml``) must show that
  file exactly;
- ``python``: executed in a fresh namespace of this process, the folder as working
  directory and first on ``sys.path`` (modules imported from it are forgotten after the
  page);
- ``bash``: ``bash -euo pipefail -c`` in the folder, ``OMP_NUM_THREADS=1``, nothing added
  to ``PYTHONPATH`` (a command that needs the folder on it says so itself);
- ``console``: each ``$ command`` runs like a bash line, and every other non-empty line of
  the block must appear, in order, among the lines it printed (stdout and stderr).

A "Write your own" file is at most 30 lines. The whole test takes about 2 minutes on 2
CPU cores: the commands train nothing longer than one step of the built-in tiny model.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RUN_LANGS = {"python", "py", "bash", "sh", "shell", "console"}
MARKER = re.compile(r"^\s*<!--\s*not run:\s*(?P<reason>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
TITLE = re.compile(r'title="(?P<title>[^"]+)"')
#: Repository folders linked into each page's working folder.
LINKED = ("configs", "docs/examples")
COMMAND_TIMEOUT_S = 180
MAX_EXAMPLE_LINES = 30


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    title: str | None
    code: str
    not_run: str | None  # the marker's reason, None when there is no marker

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page`` in order (nested fences are not expected)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        indent, fence, info = opened["indent"], opened["fence"], opened["info"].strip()
        start, body = i, []
        i += 1
        while i < len(lines) and not (
            lines[i].strip().startswith(fence) and not lines[i].strip()[len(fence) :].strip()
        ):
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        before = start - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        marker = MARKER.match(lines[before]) if before >= 0 else None
        lang = info.split()[0].lower() if info else ""
        title = TITLE.search(info)
        out.append(
            Block(
                page=page,
                line=start + 1,
                lang=lang,
                title=title["title"] if title else None,
                code="\n".join(body) + "\n",
                not_run=marker["reason"] if marker else None,
            )
        )
    return out


PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]  # the README is a page too


def test_every_block_runs_or_says_why_not():
    problems = []
    for page in PAGES:
        for block in blocks(page):
            if block.not_run is not None and not block.not_run:
                problems.append(f"{block.where}: a 'not run' marker without its reason")
            to_run = block.lang in RUN_LANGS and block.title is None and block.not_run is None
            if to_run and not runnable(block):
                problems.append(f"{block.where}: a {block.lang} block with nothing to run")
            if block.page.parent.name == "write-your-own" and block.title:
                n = len(block.code.strip().splitlines())
                if block.lang == "python" and n > MAX_EXAMPLE_LINES:
                    problems.append(f"{block.where}: {block.title} has {n} lines (max 30)")
    assert not problems, "\n".join(problems)


def runnable(block: Block) -> bool:
    if block.lang == "console":
        return any(line.startswith("$ ") for line in block.code.splitlines())
    return bool(block.code.strip())


def test_the_docs_have_runnable_blocks():
    """The parser sees the docs (a broken fence pattern would make every test pass)."""
    found = [b for p in PAGES for b in blocks(p) if b.lang in RUN_LANGS and b.not_run is None]
    assert len(found) >= 20, [b.where for b in found]


def run_pages() -> list[Path]:
    return [p for p in PAGES if any(b.lang in RUN_LANGS and b.not_run is None for b in blocks(p))]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A fresh folder that reads like the repository root for ``configs/`` and examples."""
    for rel in LINKED:
        target = tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(ROOT / rel, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:  # this page's own modules (my_segmenter, ...)
        module_file = getattr(sys.modules[name], "__file__", None) or ""
        if module_file.startswith(str(tmp_path)):
            del sys.modules[name]


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", NO_COLOR="1", TERM="dumb")
    env.pop("PYTHONPATH", None)  # a command needing the working folder says PYTHONPATH=.
    return env


def run_shell(script: str, where: str, cwd: Path) -> str:
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{where}: exit {result.returncode}\n{script}\n{output[-4000:]}"
    return output


def write_file(block: Block, cwd: Path) -> None:
    repo_file = ROOT / block.title
    if repo_file.is_file():  # the page shows a file of the repository: exactly
        assert block.code == repo_file.read_text(encoding="utf-8"), (
            f"{block.where}: the block differs from {block.title}"
        )
        return
    path = cwd / block.title
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(block.code, encoding="utf-8")
    if block.lang == "python":
        compile(block.code, str(path), "exec")


def run_console(block: Block, cwd: Path) -> None:
    commands: list[tuple[str, list[str]]] = []
    for line in block.code.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        elif line.strip() and commands:
            commands[-1][1].append(line.rstrip())
    for command, expected in commands:
        printed = [line.rstrip() for line in run_shell(command, block.where, cwd).splitlines()]
        position = 0
        for want in expected:
            try:
                position = printed.index(want, position) + 1
            except ValueError:
                pytest.fail(f"{block.where}: `{command}` did not print, in order:\n{want}")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", run_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_page_blocks_run(page, workdir):
    for block in blocks(page):
        if block.title is not None:
            write_file(block, workdir)
        elif block.lang not in RUN_LANGS or block.not_run is not None:
            continue
        elif block.lang in ("python", "py"):
            code = compile(block.code, block.where, "exec")
            exec(code, {"__name__": "__docs__"})
        elif block.lang == "console":
            run_console(block, workdir)
        else:
            run_shell(block.code, block.where, workdir)
