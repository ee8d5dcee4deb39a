"""One numeric setting's allowed values (:class:`Range`) and the error a bad value raises.

:class:`ConfigError` messages are one line, ``"<key>: <requirement>, got <value>"``; the
``slca`` command prints them and exits with status 2. The table of every setting's range is
:mod:`slca_lightning.range_table`; :mod:`slca_lightning.config_checks` applies it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ConfigError", "Range", "check_range"]


class ConfigError(ValueError):
    """A configuration value outside its allowed range (or otherwise unusable).

    The message is one line, ``"<key>: <requirement>, got <value>"``; ``key`` and
    ``requirement`` are kept as attributes.
    """

    def __init__(self, key: str, requirement: str, value: Any = dataclasses.MISSING):
        self.key, self.requirement = key, requirement
        got = "" if value is dataclasses.MISSING else f", got {_show(value)}"
        super().__init__(" ".join(f"{key}: {requirement}{got}".split()))


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


@dataclasses.dataclass(frozen=True)
class Range:
    """The allowed values of one numeric setting.

    Args:
        kind: ``"int"`` (an integer; bools are refused) or ``"float"`` (any finite real
            number; integers are accepted; NaN and ±inf never are).
        lo, hi: bounds (None = unbounded).
        lo_open, hi_open: exclude the bound itself.
        none: ``None`` (YAML ``null``) is allowed too.
        each: the setting is a sequence (or a mapping, its values) whose every element must
            satisfy the range.
    """

    kind: str = "float"
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    none: bool = False
    each: bool = False

    def describe(self) -> str:
        """The requirement in words, e.g. ``"must be an integer >= 1 or null"``."""
        what = "an integer" if self.kind == "int" else "a number"
        if self.lo is not None and self.hi is not None:
            left, right = "(" if self.lo_open else "[", ")" if self.hi_open else "]"
            bound = f" in {left}{_fmt(self.lo)}, {_fmt(self.hi)}{right}"
        elif self.lo is not None:
            bound = f" {'>' if self.lo_open else '>='} {_fmt(self.lo)}"
        elif self.hi is not None:
            bound = f" {'<' if self.hi_open else '<='} {_fmt(self.hi)}"
        else:
            bound = "" if self.kind == "int" else " (finite)"
        text = f"{what}{bound}"
        if self.each:
            text = f"a list (or mapping) of {'integers' if self.kind == 'int' else 'numbers'}"
            text += f"{bound}" if bound.strip() else ""
        return f"must be {text}{' or null' if self.none else ''}"

    def ok(self, value: Any) -> bool:
        """Whether one scalar ``value`` is allowed."""
        if value is None:
            return self.none
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind == "int" and not isinstance(value, int):
            return False
        if not math.isfinite(value):
            return False
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return not (self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi))

    def check(self, key: str, value: Any) -> None:
        """Raise :class:`ConfigError` naming ``key`` unless ``value`` is allowed."""
        if not self.each or value is None:
            if not self.ok(value):
                raise ConfigError(key, self.describe(), value)
            return
        if isinstance(value, Mapping):
            items = [(f"{key}.{k}", v) for k, v in value.items()]
        elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
            items = [(f"{key}[{i}]", v) for i, v in enumerate(value)]
        else:
            raise ConfigError(key, self.describe(), value)
        single = dataclasses.replace(self, each=False, none=False)
        for k, v in items:
            if not single.ok(v):
                raise ConfigError(k, single.describe(), v)


def check_range(
    key: str,
    value: Any,
    lo: float | None = None,
    hi: float | None = None,
    *,
    kind: str = "float",
    lo_open: bool = False,
    hi_open: bool = False,
    none: bool = False,
) -> None:
    """Check one value: ``check_range("model.max_turns", v, 1, kind="int")``."""
    Range(kind, lo, hi, lo_open, hi_open, none).check(key, value)
