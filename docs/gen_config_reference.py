"""Write docs/reference/configuration.md: every setting of the configurable classes.

    python docs/gen_config_reference.py           # rewrite the page
    python docs/gen_config_reference.py --check   # exit 1 when the committed page is stale

Read from the code, nothing typed by hand: the classes are found by importing every module
of ``slca_lightning`` and ``callbacks`` and taking the subclasses of each component base
(segmenters, routers, reward heads, ...); each setting's type and default come from
``inspect.signature`` of the constructor, its allowed range from
``slca_lightning.config.ranges.RANGES`` through ``slca_lightning.config.checks.rules_for``
(the table ``slca fit`` checks every value against), and its description from the first
sentence of the ``Args:`` (or ``Attributes:``) entry of the class docstring, or of the
nearest base class that documents the same name. Every class of ``RANGES`` appears.
``tests/docs/test_docs_config_reference.py`` fails when the committed page differs.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import json
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "configuration.md"
PACKAGES = ("slca_lightning", "callbacks")
#: Modules never walked: test helpers and ``__main__`` modules (importing one runs it).
SKIP = ("slca_lightning.testing",)
#: Longer defaults (prompt templates) are cut to this many characters.
MAX_DEFAULT = 60


def load_modules() -> list[Any]:
    """Import every module of :data:`PACKAGES` (sorted by name)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    modules = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        modules.append(package)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            if info.name.startswith(SKIP) or info.name.endswith("__main__"):
                continue
            modules.append(importlib.import_module(info.name))
    return sorted(modules, key=lambda m: m.__name__)


def all_classes(modules: list[Any]) -> list[type]:
    """Public classes defined in ``modules``."""
    out = []
    for module in modules:
        for name, obj in vars(module).items():
            public = not name.startswith("_")
            if public and inspect.isclass(obj) and obj.__module__ == module.__name__:
                out.append(obj)
    return sorted(out, key=key_of)


def key_of(cls: type) -> str:
    """``module.Qualname``, the key of ``RANGES``."""
    return f"{cls.__module__}.{cls.__qualname__}"


def class_path(cls: type) -> str:
    """The shortest path a config can name ``cls`` by below the top package (the package
    that re-exports it, e.g. ``slca_lightning.advantages.SLCARouter``), else its full path."""
    parts = cls.__module__.split(".")
    for i in range(2 if parts[0] == "slca_lightning" else 1, len(parts)):
        package = sys.modules.get(".".join(parts[:i]))
        if package is not None and getattr(package, cls.__name__, None) is cls:
            return f"{'.'.join(parts[:i])}.{cls.__name__}"
    return key_of(cls)


# -- docstrings ----------------------------------------------------------------------------
_SECTION = re.compile(r"^(\s*)(Args|Arguments|Attributes|Parameters):\s*$")
_ROLE = re.compile(r":[a-z]+:`(~?)([^`<]*?)(?:\s*<([^>]+)>)?`")
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "approx.")


def doc_entries(cls: type) -> dict[str, str]:
    """``name → text`` of the ``Args:``/``Attributes:`` entries of ``cls``'s own docstring
    (or its ``__init__``'s); an entry ``a, b: text`` documents both names."""
    out: dict[str, str] = {}
    for doc in (
        cls.__dict__.get("__doc__"),
        getattr(cls.__dict__.get("__init__"), "__doc__", None),
    ):
        lines = inspect.cleandoc(doc or "").splitlines()
        i = 0
        while i < len(lines):
            match = _SECTION.match(lines[i])
            i += 1
            if not match:
                continue
            entries: list[list[str]] = []
            indent = None
            while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > len(match[1])):
                line = lines[i]
                i += 1
                if not line.strip():
                    continue
                indent = _indent(line) if indent is None else indent
                name_list_goes_on = entries and ":" not in " ".join(entries[-1])
                if _indent(line) == indent and not name_list_goes_on:
                    entries.append([line.strip()])
                elif entries:
                    entries[-1].append(line.strip())
            for entry in entries:
                text = " ".join(entry)
                head, sep, body = text.partition(":")
                if not sep:
                    continue
                head = re.sub(r"\(.*\)", "", head)  # "name (type)"
                for name in head.split(","):
                    name = name.strip().lstrip("*")
                    if name.isidentifier():
                        out.setdefault(name, body.strip())
    return out


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def first_sentence(text: str) -> str:
    """The text up to its first sentence end (a period before a capital letter or code)."""
    for match in re.finditer(r"\.\s+(?=[A-Z`])", text):
        before = text[: match.start() + 1]
        if not before.endswith(_ABBREVIATIONS):
            return before
    return text


def markdown_text(text: str) -> str:
    """reST in docstrings as Markdown: ``x`` → `x`, :class:`~a.B` → `B`; pipes outside code
    escaped for a table cell."""
    text = _ROLE.sub(_role, text)
    text = text.replace("``", "`")
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("|", "\\|")
    return "`".join(parts)


def _role(match: re.Match) -> str:
    """:class:`~a.b.C` → `C`, :func:`a.b` → `a.b`, :mod:`text <a.b>` → text."""
    tilde, name, target = match[1], re.sub(r"\s+", "", match[2]), match[3]
    if target:
        return name
    return f"`{name.rsplit('.', 1)[-1] if tilde else name}`"


def describe(cls: type, name: str) -> str:
    """The first sentence documenting ``name`` in ``cls`` or its nearest base."""
    for klass in getattr(cls, "__mro__", (cls,)):
        text = doc_entries(klass).get(name)
        if text:
            return markdown_text(first_sentence(text))
    return ""


# -- settings ------------------------------------------------------------------------------
def settings(cls: type) -> list[inspect.Parameter]:
    """The constructor's named parameters (no ``self``, ``*args``, ``**kwargs``)."""
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p for p in signature.parameters.values() if p.kind in kinds]


def show_type(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return ""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return f"`{text}`"


def show_default(param: inspect.Parameter) -> str:
    value = param.default
    if value is inspect.Parameter.empty:
        return "required"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    try:
        text = json.dumps(value, ensure_ascii=False)
    except TypeError:
        text = repr(value)
    if len(text) > MAX_DEFAULT:  # a prompt template: its start, and where the rest is
        return f"`{text[: MAX_DEFAULT - 10]}…` ({len(text)} characters)"
    return f"`{text}`"


def table(cls: type) -> list[str]:
    from slca_lightning.config.checks import rules_for

    rules = rules_for(cls)
    params = settings(cls)
    if not params:
        return ["No settings."]
    rows = ["| setting | type | default | allowed | description |", "|---|---|---|---|---|"]
    for p in params:
        rule = rules.get(p.name)
        allowed = rule.describe().removeprefix("must be ") if rule else ""
        cells = [f"`{p.name}`", show_type(p.annotation), show_default(p), allowed]
        rows.append("| " + " | ".join([*cells, describe(cls, p.name)]) + " |")
    return rows


def summary_line(cls: type) -> str:
    doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
    head = doc.split("\n\n", 1)[0].replace("\n", " ").strip()
    return markdown_text(first_sentence(head)) if head else ""


# -- the page ------------------------------------------------------------------------------
def sections(classes: list[type]) -> list[tuple[str, str, list[type]]]:
    """``(title, where it is set, classes)`` in page order."""
    from lightning.pytorch import Callback

    from slca_lightning.advantages.base import AdvantageRouter
    from slca_lightning.advantages.routing import Term
    from slca_lightning.calls.formats import ToolCallFormat
    from slca_lightning.chat_backends.base import ChatBackend
    from slca_lightning.data.task_sources import TaskSource
    from slca_lightning.models.lora import LoraSettings
    from slca_lightning.models.sft import SFTDataModule, SFTModule
    from slca_lightning.rewards.base import ChannelReward, RewardHead
    from slca_lightning.rewards.judges import SummaryJudge
    from slca_lightning.rollout.datamodule import RolloutDataModule
    from slca_lightning.rollout.engine import RolloutEngine
    from slca_lightning.segmenters.base import Segmenter
    from slca_lightning.tools.base import ToolBackend, ToolSimulator
    from slca_lightning.training.module import SLCAGRPOModule

    def subclasses(base: type, *, package: str = "") -> list[type]:
        return [
            c
            for c in classes
            if issubclass(c, base)
            and c is not base
            and not inspect.isabstract(c)
            and key_of(c).startswith(package)
        ]

    return [
        ("`model:` the LightningModule", "model", [SLCAGRPOModule]),
        ("`model.lora:` LoRA", "model.lora", [LoraSettings]),
        ("Segmenters", "model.segmenter", subclasses(Segmenter)),
        ("Advantage routers", "model.router", [*subclasses(AdvantageRouter), Term]),
        ("Reward heads", "model.reward_head", subclasses(RewardHead)),
        (
            "Extra reward channels",
            "model.reward_head.init_args.extra_channels",
            subclasses(ChannelReward),
        ),
        ("Summary judges", "model.reward_head.init_args.judge", subclasses(SummaryJudge)),
        ("`data:` the rollout data module", "data", [RolloutDataModule]),
        ("Task sources", "data.tasks", subclasses(TaskSource)),
        ("Rollout engines", "data.engine", subclasses(RolloutEngine)),
        ("Tool simulators", "data.simulator", subclasses(ToolSimulator)),
        ("Tool backends", "data.simulator.init_args.backend", subclasses(ToolBackend)),
        (
            "Chat backends",
            "the `backend`/`client` of LLM judges, LLM tool backends and users",
            subclasses(ChatBackend),
        ),
        ("Tool-call formats", "data.tool_format", subclasses(ToolCallFormat)),
        (
            "Callbacks",
            "trainer.callbacks",
            [*subclasses(Callback, package="callbacks."), *_named(classes, "StepProgressBar")],
        ),
        (
            "`slca sft`: the warm start",
            "`slca sft` `model:` and `data:`",
            [SFTModule, SFTDataModule],
        ),
    ]


def _named(classes: list[type], name: str) -> list[type]:
    return [c for c in classes if c.__name__ == name]


HEADER = """\
# Configuration reference

<!-- Generated by docs/gen_config_reference.py from the code; do not edit by hand.
     tests/docs/test_docs_config_reference.py fails when it is stale. -->

Every setting of the classes a config builds: the top-level `model:` and `data:` of
`slca fit`, and every component chosen by `class_path` (with its settings under
`init_args`). Generated from the code by `python docs/gen_config_reference.py`:

- **type** and **default**: the constructor's signature (`required`: no default);
- **allowed**: the range rule of `slca_lightning.config.ranges.RANGES`, the table that
  `slca fit`, `slca sft` and `slca eval` check every numeric value against before building
  anything (a value outside it stops the command with one line such as
  `slca: error: data.max_turns: must be an integer >= 1, got -1`); empty: no numeric rule;
- **description**: the first sentence of the class docstring's `Args:` entry (the full
  text is in the [API reference](../api/index.md) and in `slca fit --help`).

A component is set by its class path, with its settings under `init_args`:

```yaml
model:
  router:
    class_path: slca_lightning.advantages.SLCARouter
    init_args: {tool_weight: 1.0, summary_weight: 0.5}
```

or on the command line: `--model.router slca_lightning.advantages.SLCARouter
--model.router.init_args.summary_weight 0.5`.
"""


def render() -> str:
    from slca_lightning.config.ranges import RANGES

    classes = all_classes(load_modules())
    lines = [HEADER]
    shown: set[str] = set()
    for title, where, members in sections(classes):
        lines += [
            f"## {title}",
            "",
            f"Set at: `{where}`." if "`" not in where else f"Set at: {where}.",
            "",
        ]
        for cls in members:
            shown.add(key_of(cls))
            lines += _class_block(cls)
    rest = [c for c in classes if key_of(c) in RANGES and key_of(c) not in shown]
    missing = sorted(set(RANGES) - {key_of(c) for c in classes})
    if missing:
        raise SystemExit(f"RANGES names classes that do not exist: {missing}")
    lines += [
        "## Other classes with range rules",
        "",
        "Classes built inside the components above (agent loop, caches, evaluators, "
        "metrics), whose numeric settings the same table checks.",
        "",
    ]
    for cls in rest:
        lines += _class_block(cls)
    return "\n".join(lines).rstrip() + "\n"


def _class_block(cls: type) -> list[str]:
    path = class_path(cls)
    out = [
        f"### {cls.__name__}",
        "",
        f"`{path}`" + (f" (defined in `{key_of(cls)}`)" if path != key_of(cls) else ""),
    ]
    summary = summary_line(cls)
    if summary:
        out[-1] += f": {summary}"
    return [*out, "", *table(cls), ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python docs/gen_config_reference.py")
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
