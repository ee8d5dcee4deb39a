"""A Griffe extension: the package's docstrings as mkdocstrings' Google parser reads them.

Two conventions of the package's docstrings that the Google parser does not know are
rewritten before parsing (the source is never changed):

- reST inline roles (``:class:`~a.b.C```, ``:func:`f```, ``:mod:`a.b```): in Markdown a
  role would show as ``:class:`` followed by code. Each becomes an optional cross-reference
  (``<autoref optional>``: a link when the target is documented on the site, plain code
  otherwise, never a build warning). Double-backtick literals are valid Markdown code.
- a reST literal-block marker (a paragraph ending in ``::``): ``text::`` becomes
  ``text:`` and a lone ``::`` goes; the indented block after it is a Markdown code block.
- one ``Args:`` entry for several names (``eps_low, eps_high: PPO clip range``, the name
  list possibly running onto a second line): Griffe would warn that no parameter is named
  ``"eps_low, eps_high"``. The entry is repeated once per name.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(
    r":(?:class|func|meth|mod|data|attr|exc|obj|py:[a-z]+):`(~?)([^`<]+?)(?:\s*<([^>]+)>)?`"
)
_LITERAL = re.compile(r"(``.+?``)", re.DOTALL)  # a double-backtick span: code, left alone
_LITERAL_MARKER = re.compile(r"(?m)^([ \t]*)::[ \t]*\n|(?<=\S)::[ \t]*$")
_SECTION = re.compile(r"^(\s*)(Args|Arguments|Parameters|Attributes|Other Parameters):\s*$")


def _role(match: re.Match, scope: str) -> str:
    tilde, text, target = match[1], re.sub(r"\s+", "", match[2]), match[3]
    identifier = (target or text).lstrip(".")
    shown = text if target else (identifier.rsplit(".", 1)[-1] if tilde else identifier)
    if "." not in identifier and scope:  # a name of the same module
        identifier = f"{scope}.{identifier}"
    return f'<autoref optional identifier="{identifier}"><code>{shown}</code></autoref>'


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def split_grouped_entries(text: str) -> str:
    """Repeat an ``a, b: text`` entry of an Args/Attributes section once per name."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        out.append(lines[i])
        section = _SECTION.match(lines[i])
        i += 1
        if not section:
            continue
        base, entry = len(section[1]), None
        while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > base):
            line = lines[i]
            i += 1
            entry = _indent(line) if entry is None and line.strip() else entry
            if not line.strip() or _indent(line) != entry:
                out.append(line)
                continue
            while ":" not in line and line.rstrip().endswith(",") and i < len(lines):
                line = f"{line.rstrip()} {lines[i].strip()}"  # the name list goes on
                i += 1
            head, sep, rest = line.strip().partition(":")
            names = [n.strip() for n in head.split(",")]
            if not sep or len(names) < 2 or not all(n.isidentifier() for n in names):
                out.append(line)
                continue
            body = []
            while i < len(lines) and lines[i].strip() and _indent(lines[i]) > entry:
                body.append(lines[i])
                i += 1
            for name in names:
                out += [f"{' ' * entry}{name}:{rest}", *body]
    return "\n".join(out)


class PackageDocstrings(griffe.Extension):
    """Rewrite roles and grouped entries in every docstring before it is parsed."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        docstring = obj.docstring
        if docstring is None:
            return
        text = docstring.value
        if ":`" in text:
            scope = obj.path if obj.is_module else obj.module.path
            parts = _LITERAL.split(text)  # odd items: literal spans
            for i in range(0, len(parts), 2):
                parts[i] = _ROLE.sub(lambda m: _role(m, scope), parts[i])
            text = "".join(parts)
        text = _LITERAL_MARKER.sub(lambda m: "" if m[1] is not None else ":", text)
        docstring.value = split_grouped_entries(text)
