"""Parse errors that say what to do: the parser's message, completed with what it left out.

:func:`explain` takes jsonargparse's message (and the parser and the command line) and adds:

- an unknown key (``--model.routr``, a YAML key, a class's init argument): the closest known
  keys ("did you mean model.router?");
- a class path that does not resolve (``...advantages.GRPORoutr``): the classes known for
  that slot, the closest first;
- a YAML syntax error (jsonargparse says ``"<unicode string>", line 2``): the config file
  and its line and column;
- a logger whose package is missing (``WandbLogger`` without ``wandb``, which jsonargparse
  reports as "Not a valid subclass of Logger"): the ``pip install`` line.

Everything here runs only after a parse failed, so it may import freely.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
import re
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["LOGGER_PACKAGES", "class_choices", "explain", "parser_keys"]

#: Lightning's loggers that need a package of their own → the pip package.
LOGGER_PACKAGES = {
    "WandbLogger": "wandb",
    "MLFlowLogger": "mlflow",
    "CometLogger": "comet-ml",
    "NeptuneLogger": "neptune",
}
_IMPORT_NAMES = {"comet-ml": "comet_ml"}


def parser_keys(parser: Any) -> list[str]:
    """Every option key a jsonargparse parser (and its subcommand parsers) accepts."""
    keys: set[str] = set()
    seen: set[int] = set()

    def walk(p: Any) -> None:
        if id(p) in seen:
            return
        seen.add(id(p))
        for action in getattr(p, "_actions", []):
            for sub in getattr(action, "_name_parser_map", {}).values():
                walk(sub)
            dest = getattr(action, "dest", None)
            if dest and dest not in ("help", "config", "print_config") and dest != "==SUPPRESS==":
                keys.add(dest)

    walk(parser)
    return sorted(keys)


def _close(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The choices closest to ``word``: those within 0.05 of the best match (at least 0.75
    alike), else the closest by the last dotted part alone."""
    choices = list(choices)
    scored = sorted(
        ((difflib.SequenceMatcher(None, word, c).ratio(), c) for c in choices), reverse=True
    )
    best = scored[0][0] if scored else 0.0
    found = [c for r, c in scored[:n] if r >= max(0.75, best - 0.05)]
    if not found:  # match the last dotted part alone ("routr" vs "model.router")
        last = {c.rsplit(".", 1)[-1]: c for c in choices}
        found = [last[m] for m in difflib.get_close_matches(word.rsplit(".", 1)[-1], last, n=n)]
    return found


def _public_path(cls: type) -> str:
    """The shortest importable dotted path of ``cls`` (a package that re-exports it first)."""
    parts = cls.__module__.split(".")
    for i in range(1, len(parts) + 1):
        module = ".".join(parts[:i])
        try:
            if getattr(importlib.import_module(module), cls.__name__, None) is cls:
                return f"{module}.{cls.__name__}"
        except Exception:
            continue
    return f"{cls.__module__}.{cls.__name__}"


def class_choices(base_path: str, near: str | None = None) -> list[str]:
    """Importable class paths of the concrete subclasses of ``base_path`` (the slot's type)
    among the modules loaded after importing ``near``'s package, ``base_path``'s package and
    the project's component packages."""
    module, _, name = base_path.rpartition(".")
    try:
        base = getattr(importlib.import_module(module), name)
    except Exception:
        return []
    for package in {p for p in (near, module) if p}:
        root = package.split(".")[0]
        for candidate in (package.rpartition(".")[0], package, root):
            try:
                importlib.import_module(candidate)
            except Exception:
                continue
    out: set[str] = set()
    stack = [base]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            stack.append(sub)
            if not inspect.isabstract(sub) and not sub.__name__.startswith("_"):
                out.add(_public_path(sub))
    return sorted(out)


def _class_path_error(message: str) -> str | None:
    bad = re.search(r"Problem with given class_path '([\w.]+)'", message)
    key = re.search(r'Parser key "([\w.]+)"', message)
    base = re.search(r"Subtypes: \[<class '([\w.]+)'>", message)
    if not bad:
        return None
    wrong = bad.group(1)
    slot = key.group(1) if key else "a class_path"
    choices = class_choices(base.group(1), wrong) if base else []
    hint = ""
    if choices:
        close = _close(wrong.rsplit(".", 1)[-1], [c.rsplit(".", 1)[-1] for c in choices], n=1)
        best = [c for c in choices if close and c.rsplit(".", 1)[-1] == close[0]]
        if best:
            hint = f" did you mean {best[0]}?"
        hint += f" Classes for {slot}: {', '.join(choices)}"
    return f"{slot}: no class {wrong}.{hint}"


def _unknown_key_error(message: str, parser: Any) -> str | None:
    unknown = re.search(r"unrecognized arguments: (--[\w.]+)", message)
    unknown = unknown or re.search(r"does not accept option '([\w.]+)'", message)
    if unknown:
        key = unknown.group(1).lstrip("-")
        known = parser_keys(parser) if parser is not None else []
        if key in known:  # a known key given a value or form it does not take
            return None
        close = _close(key, known)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        return f"unknown key {key!r}{hint} (`slca fit --help` lists every key)"
    arg = re.search(r"^([\w.]+) \(([\w.]+)\): Option '(\w+)' is not accepted", message)
    if arg:
        slot, class_path, name = arg.groups()
        module, _, cls_name = class_path.rpartition(".")
        try:
            params = inspect.signature(
                getattr(importlib.import_module(module), cls_name)
            ).parameters
        except Exception:
            return None
        known = [p for p in params if p not in ("self", "args", "kwargs")]
        close = _close(name, known)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        return (
            f"{slot}: {class_path} has no argument {name!r}{hint} "
            f"(its arguments: {', '.join(known)})"
        )
    return None


def _config_files(argv: Sequence[str]) -> list[str]:
    files, args = [], list(argv)
    for i, a in enumerate(args):
        if a in ("--config", "-c") and i + 1 < len(args):
            files.append(args[i + 1])
        elif a.startswith("--config="):
            files.append(a.split("=", 1)[1])
    return files


def _yaml_error(message: str, argv: Sequence[str]) -> str | None:
    if "<unicode string>" not in message and "Problems parsing config" not in message:
        return None
    import yaml

    for path in _config_files(argv):
        try:
            with open(path, encoding="utf-8") as fh:
                yaml.safe_load(fh)
        except OSError:
            continue
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(err, "problem", None) or str(err)
            context = getattr(err, "context", None)
            said = f"{context}: {problem}" if context else problem
            return f"config file {path}{where}: YAML syntax error ({said})"
    return None


def _logger_error(message: str, argv: Sequence[str]) -> str | None:
    if "Logger" not in message:
        return None
    text = " ".join([message, *argv])
    for name, package in LOGGER_PACKAGES.items():
        if name in text and importlib.util.find_spec(_IMPORT_NAMES.get(package, package)) is None:
            return (
                f"trainer.logger: lightning.pytorch.loggers.{name} needs the {package} package: "
                f"pip install {package}"
            )
    return None


_GENERIC = (
    "Expected a <class",
    "Not a valid subclass of",
    "Subclass types expect",
    "a class path (str)",
    "a dict with",
    "a dict without",
)


def _constructor_error(message: str) -> str | None:
    """A union-type failure whose real cause is a constructor's own exception (jsonargparse
    lists it among the generic "Expected a <class ...>" lines): that cause alone."""
    if "Does not validate against any of the Union subtypes" not in message:
        return None
    parts = [p.strip() for p in message.split(" - ")[1:]]
    causes = [p for p in parts if p and not p.startswith(_GENERIC) and "Got value" not in p]
    key = re.search(r'Parser key "([\w.]+)"', message)
    if not causes:
        return None
    where = key.group(1) if key else ("trainer.logger" if "Logger" in message else "config")
    return f"{where}: {causes[0]}"


def explain(message: str, parser: Any = None, argv: Sequence[str] = ()) -> str:
    """``message`` made actionable (see the module docstring); unchanged when nothing
    applies."""
    for better in (
        _yaml_error(message, argv),
        _logger_error(message, argv),
        _class_path_error(message),
        _unknown_key_error(message, parser),
        _constructor_error(message),
    ):
        if better:
            return better
    return message
