"""The tool-call format evaluators read a model's replies with.

A model writes its calls in one format (:mod:`slca_lightning.calls.formats`: hermes tags,
bare JSON, a transformers response template); the run names it as ``data.tool_format`` and
the agent loop reads every turn through it. The evaluators do the same: the in-domain one
through the data module's agent loop, BFCL (single- and multi-turn) and τ² by turning each
reply into its canonical hermes text
(:meth:`~slca_lightning.calls.formats.ToolCallFormat.canonical`) before their hermes decoders
read it. The default, :class:`~slca_lightning.calls.formats.HermesFormat`, leaves the text
unchanged, so hermes models score exactly as before.

:func:`resolve_tool_format` turns what a user writes (``slca eval --tool-format``,
``--arg bfcl.tool_format=...``, a callback's ``tool_format``) into a format:

- None: :class:`HermesFormat`;
- a :class:`~slca_lightning.calls.formats.ToolCallFormat`: itself;
- a short name: ``hermes`` (:class:`HermesFormat`), ``json`` (:class:`JSONFormat`), the name of
  a built-in response template other than hermes (``llama3_json``, ``mistral``:
  :class:`~slca_lightning.calls.template_format.ResponseTemplateFormat`), or
  ``template:<name>`` for any built-in template (``template:hermes`` included);
- a class name (``JSONFormat``) or class path (``slca_lightning.calls.formats.JSONFormat``),
  built without arguments;
- a mapping ``{class_path: ..., init_args: {...}}``, as in a config's ``data.tool_format``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from slca_lightning.calls.formats import HermesFormat, JSONFormat, ToolCallFormat

__all__ = ["SHORT_NAMES", "format_name", "resolve_tool_format", "tool_format_of"]

#: Short names of the shipped formats (``template:<name>`` and template names come on top).
SHORT_NAMES: dict[str, type[ToolCallFormat]] = {"hermes": HermesFormat, "json": JSONFormat}
_TEMPLATE_CLASS = "slca_lightning.calls.template_format.ResponseTemplateFormat"
_BARE_CLASSES = {
    "HermesFormat": "slca_lightning.calls.formats.HermesFormat",
    "JSONFormat": "slca_lightning.calls.formats.JSONFormat",
    "ResponseTemplateFormat": _TEMPLATE_CLASS,
}


def _template_names() -> list[str]:
    from slca_lightning.calls.template_format import RESPONSE_TEMPLATES

    return sorted(RESPONSE_TEMPLATES)


def _template(name: str) -> ToolCallFormat:
    from slca_lightning.calls.template_format import ResponseTemplateFormat

    return ResponseTemplateFormat(name)


def _class(path: str) -> type[ToolCallFormat]:
    path = _BARE_CLASSES.get(path, path)
    module, _, name = path.rpartition(".")
    if not module:
        raise ValueError(
            f"unknown tool-call format {path!r}: expected {sorted(SHORT_NAMES)}, a response "
            f"template name ({', '.join(_template_names())}; or template:<name>), a class name "
            f"({', '.join(sorted(_BARE_CLASSES))}) or a class path"
        )
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"tool-call format {path!r} cannot be imported: {err}") from err
    if not (isinstance(cls, type) and issubclass(cls, ToolCallFormat)):
        raise ValueError(f"tool-call format {path!r} is not a ToolCallFormat subclass")
    return cls


def resolve_tool_format(spec: Any = None) -> ToolCallFormat:
    """``spec`` (see the module docstring) → a :class:`ToolCallFormat`.

    Raises:
        ValueError: a name, class path or mapping that names no tool-call format.
    """
    if spec is None:
        return HermesFormat()
    if isinstance(spec, ToolCallFormat):
        return spec
    if isinstance(spec, Mapping):
        if "class_path" not in spec:
            raise ValueError(f"tool-call format mapping needs a class_path, got {dict(spec)}")
        cls = _class(str(spec["class_path"]))
        args = dict(spec.get("init_args") or {})
        try:
            return cls(**args)
        except TypeError as err:
            raise ValueError(
                f"tool-call format {spec['class_path']}: bad init_args: {err}"
            ) from err
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"tool-call format must be a name, class path or mapping, got {spec!r}")
    name = spec.strip()
    if name.lower() in SHORT_NAMES:
        return SHORT_NAMES[name.lower()]()
    if name.startswith("template:"):
        return _template(name.split(":", 1)[1].strip())
    if "." not in name and name not in _BARE_CLASSES and name in _template_names():
        return _template(name)
    return _class(name)()


def tool_format_of(holder: Any) -> ToolCallFormat | None:
    """The ``tool_format`` of a data module (or any object holding one), else None."""
    fmt = getattr(holder, "tool_format", None)
    return fmt if isinstance(fmt, ToolCallFormat) else None


def format_name(fmt: ToolCallFormat) -> str:
    """A short label of ``fmt`` for logs and tables (``JSONFormat``,
    ``ResponseTemplateFormat(llama3_json)``)."""
    name = type(fmt).__name__
    template = getattr(fmt, "spec", None)
    if template is not None:
        from slca_lightning.calls.template_format import RESPONSE_TEMPLATES

        known = next((k for k, v in RESPONSE_TEMPLATES.items() if v == template), "custom")
        return f"{name}({known})"
    return name
