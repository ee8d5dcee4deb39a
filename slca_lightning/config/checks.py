"""Range checks of every numeric setting, at config time, with one-line messages.

One declarative table, :data:`RANGES`, maps each configurable class (``module.Qualname``)
to the allowed range of each of its numeric ``__init__`` arguments. Two entry points read it:

- :func:`validate_config` walks a parsed ``slca fit`` config (``model``, ``data``,
  ``trainer.callbacks``, and every nested ``class_path``/``init_args`` component) before
  anything is instantiated, so a bad value fails with its full key::

      data.max_turns: must be an integer >= 1, got -1
      model.router.init_args.eps: must be a number > 0, got nan

- :func:`check_args` is called by the constructors of the main classes (module, data
  module, agent loop, engines, callbacks), so the Python API checks the same ranges.

Both raise :class:`ConfigError` (a ``ValueError``), whose message is exactly one line; the
``slca`` command prints it to stderr and exits with status 2. A unit test walks every
public class of ``slca_lightning`` and ``callbacks`` and fails when a numeric argument has
no rule here (records built by code, never from a config, are listed in :data:`RECORDS`).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import typing
from collections.abc import Mapping
from typing import Any

from slca_lightning.config.ranges import RANGES, RECORDS, ConfigError, Range, check_range

__all__ = [
    "RANGES",
    "RECORDS",
    "ConfigError",
    "Range",
    "check_args",
    "check_range",
    "rules_for",
    "validate_config",
]


def class_key(cls: type) -> str:
    """``module.Qualname`` of a class (the key of :data:`RANGES`)."""
    return f"{cls.__module__}.{cls.__qualname__}"


def rules_for(cls: type) -> dict[str, Range]:
    """The range rules of ``cls``'s arguments, its bases' included (nearest class wins)."""
    rules: dict[str, Range] = {}
    for klass in reversed(getattr(cls, "__mro__", (cls,))):
        rules.update(RANGES.get(class_key(klass), {}))
    return rules


def check_args(cls: type, values: Mapping[str, Any], prefix: str | None = None) -> None:
    """Check the arguments in ``values`` (e.g. a constructor's ``locals()``) that ``cls``
    has rules for; keys are reported as ``<prefix>.<name>`` (default prefix: the class
    name). Raises :class:`ConfigError` on the first bad one."""
    head = cls.__name__ if prefix is None else prefix
    for name, rule in rules_for(cls).items():
        if name in values:
            rule.check(f"{head}.{name}" if head else name, values[name])


# -- walking a parsed config ---------------------------------------------------------------
def _plain(value: Any) -> Any:
    """A jsonargparse Namespace (or nested ones) as plain dicts and lists."""
    as_dict = getattr(value, "as_dict", None)
    if callable(as_dict):
        value = as_dict()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _resolve(class_path: str) -> type | None:
    """Import ``module.Class`` (already imported by the parser for a parsed config)."""
    module, _, name = class_path.rpartition(".")
    if not module:
        return None
    try:
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return obj if inspect.isclass(obj) else None


def _annotation_class(cls: type, name: str) -> type | None:
    """The class an argument of ``cls.__init__`` is annotated with (``X | None`` → X),
    when it has range rules or is a dataclass; else None."""
    try:
        hint = typing.get_type_hints(cls.__init__).get(name)
    except Exception:
        return None
    candidates = [hint, *typing.get_args(hint)]
    for c in candidates:
        if inspect.isclass(c) and (dataclasses.is_dataclass(c) or rules_for(c)):
            return c
    return None


def _walk(value: Any, key: str, cls: type | None) -> None:
    if isinstance(value, Mapping) and isinstance(value.get("class_path"), str):
        target = _resolve(value["class_path"])
        args = {**(value.get("init_args") or {}), **(value.get("dict_kwargs") or {})}
        _walk_args(args, f"{key}.init_args", target)
    elif isinstance(value, Mapping) and cls is not None:
        _walk_args(value, key, cls)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            _walk(v, f"{key}.{k}", None)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _walk(v, f"{key}[{i}]", None)


def _walk_args(args: Mapping[str, Any], key: str, cls: type | None) -> None:
    if cls is not None:
        check_args(cls, args, key)
    for name, v in args.items():
        if isinstance(v, (Mapping, list)):
            sub = _annotation_class(cls, name) if cls is not None else None
            _walk(v, f"{key}.{name}", sub)


def validate_config(config: Any, roots: Mapping[str, type] | None = None) -> None:
    """Check every numeric setting of a parsed ``slca fit`` config (a dict or jsonargparse
    Namespace: the subcommand's section) before instantiation.

    ``roots`` maps top-level keys to their classes (``slca fit``: ``model`` →
    SLCAGRPOModule, ``data`` → RolloutDataModule, as :class:`~slca_lightning.cli.app.SLCACLI`
    passes them; this module sits below both and imports neither); every other key
    (``trainer`` with its callbacks, ...) is walked for nested ``class_path`` components.
    Raises :class:`ConfigError`.
    """
    tree = _plain(config)
    roots = roots or {}
    for top, value in tree.items():
        if value is None or top in ("subcommand", "config"):
            continue
        _walk(value, top, roots.get(top))
