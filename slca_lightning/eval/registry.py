"""Evaluators by name, for ``slca eval``: ``in_domain``, ``bfcl`` and any that register.

An evaluator is a function ``fn(ctx: EvalContext) -> EvalResult``. Built in:

- ``in_domain``: :func:`~slca_lightning.eval.in_domain.evaluate_in_domain` on the data
  module's held-out tasks (options: ``num_tasks``, ``batch_size``);
- ``bfcl``: :class:`~slca_lightning.eval.bfcl.BFCLEvaluator` (options: its constructor's
  arguments, e.g. ``categories``, ``limit``, ``max_new_tokens``).

Every evaluator reads the model's calls in the run's tool-call format
(:func:`context_tool_format`: the data module's ``tool_format``, which ``slca eval`` takes
from the config's ``data.tool_format`` or its ``--tool-format`` flag; an evaluator's own
``tool_format`` option wins) and reports its progress on stderr while it runs.

Another evaluator plugs in with :func:`register_evaluator` (``register_evaluator("tau2",
fn)`` at import of its module); the modules of :data:`PLUGIN_MODULES` are imported on the
first lookup of an unknown name, so such a registration needs no edit here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "PLUGIN_MODULES",
    "EvalContext",
    "EvalResult",
    "available_evaluators",
    "context_tool_format",
    "get_evaluator",
    "register_evaluator",
]


@dataclass
class EvalContext:
    """What an evaluator gets.

    Attributes:
        module: the :class:`~slca_lightning.training.module.SLCAGRPOModule` (``policy``,
            ``tokenizer``, ``reward_head``), already configured.
        datamodule: the :class:`~slca_lightning.rollout.datamodule.RolloutDataModule`
            (tasks, agent-loop caps, simulator), connected to the policy.
        options: this evaluator's options (``--arg <name>.<key>=<value>``).
        out_dir: where tables are written.
    """

    module: Any
    datamodule: Any
    options: dict[str, Any] = field(default_factory=dict)
    out_dir: str = "."


@dataclass
class EvalResult:
    """One evaluator's scalars, its table (Markdown, written to ``<out>/<name>.md``) and the
    rates drawn as a bar chart in ``<out>/<name>.png`` (``bars``, values in [0, 1]; empty:
    no plot)."""

    metrics: dict[str, float]
    markdown: str
    bars: dict[str, float] = field(default_factory=dict)


Evaluator = Callable[[EvalContext], EvalResult]


def context_tool_format(ctx: Any) -> Any:
    """The tool-call format of ``ctx``'s data module (a
    :class:`~slca_lightning.calls.formats.ToolCallFormat`), or None when it has none."""
    from slca_lightning.eval.tool_format import tool_format_of

    return tool_format_of(getattr(ctx, "datamodule", None))


_REGISTRY: dict[str, Evaluator] = {}

#: Imported on the first lookup of an unknown name (they call :func:`register_evaluator`).
PLUGIN_MODULES: list[str] = ["slca_lightning.eval.tau2"]


def register_evaluator(name: str, fn: Evaluator, overwrite: bool = False) -> Evaluator:
    """Make ``fn`` available as ``slca eval --evaluators <name>``; returns ``fn``."""
    if not name or not name.replace("_", "").isalnum():
        raise ValueError(f"evaluator name must be letters, digits and '_', got {name!r}")
    if name in _REGISTRY and _REGISTRY[name] is not fn and not overwrite:
        raise ValueError(f"an evaluator named {name!r} is already registered")
    _REGISTRY[name] = fn
    return fn


_PLUGIN_ERRORS: dict[str, str] = {}


def _load_plugins() -> None:
    """Import the plugin modules; one that is absent or fails to import is noted (and named
    by :func:`get_evaluator`'s error), so one broken plugin never hides the others."""
    for path in PLUGIN_MODULES:
        if path in _PLUGIN_ERRORS:
            continue
        try:
            importlib.import_module(path)
        except ModuleNotFoundError as err:
            if err.name != path:
                _PLUGIN_ERRORS[path] = f"{type(err).__name__}: {err}"
        except Exception as err:
            _PLUGIN_ERRORS[path] = f"{type(err).__name__}: {err}"


def available_evaluators() -> list[str]:
    """Names that :func:`get_evaluator` resolves (plugins imported)."""
    _load_plugins()
    return sorted(_REGISTRY)


def get_evaluator(name: str) -> Evaluator:
    """The evaluator registered as ``name``.

    Raises:
        KeyError: an unknown name (the message lists the known ones).
    """
    if name not in _REGISTRY:
        _load_plugins()
    if name not in _REGISTRY:
        failed = "".join(f"; plugin {p} failed to import ({e})" for p, e in _PLUGIN_ERRORS.items())
        raise KeyError(f"unknown evaluator {name!r}: expected one of {sorted(_REGISTRY)}{failed}")
    return _REGISTRY[name]


# -- built-ins -----------------------------------------------------------------------------
#: In-domain metrics that are rates in [0, 1] (the others are counts per episode).
_IN_DOMAIN_RATES = (
    "tool_accuracy",
    "success@0.7",
    "success@0.8",
    "success@0.9",
    "success@1",
    "name_f1",
    "arg_match",
    "process",
    "tool_call_validity",
    "redundancy",
)


def _in_domain(ctx: EvalContext) -> EvalResult:
    from slca_lightning.eval.in_domain import evaluate_in_domain, markdown_rows

    opts = dict(ctx.options)
    unknown = set(opts) - {"num_tasks", "batch_size", "progress"}
    if unknown:
        raise ValueError(
            f"in_domain: unknown options {sorted(unknown)} (num_tasks, batch_size, progress)"
        )
    m = ctx.module
    result = evaluate_in_domain(
        m.policy, m.tokenizer, m.reward_head, ctx.datamodule, sync_on_compute=False, **opts
    )
    if not result.metrics:
        raise ValueError(
            f"in_domain: the task source {type(ctx.datamodule.source).__name__} has no "
            "held-out tasks (set data.tasks' held-out split in the config)"
        )
    n = len(result.episodes)
    table = markdown_rows([(f"{n} held-out tasks, greedy", result.metrics)])
    bars = {k: v for k, v in result.metrics.items() if k in _IN_DOMAIN_RATES}
    return EvalResult(result.metrics, table, bars)


def _bfcl(ctx: EvalContext) -> EvalResult:
    from slca_lightning.eval.bfcl.evaluator import BFCLEvaluator

    options = dict(ctx.options)
    if options.get("tool_format") is None:
        options["tool_format"] = context_tool_format(ctx)
    try:
        evaluator = BFCLEvaluator(**options)
    except TypeError as err:
        raise ValueError(f"bfcl: bad options {sorted(ctx.options)}: {err}") from err
    report = evaluator.run(ctx.module.policy, ctx.module.tokenizer)
    bars = dict(report.accuracy)  # per category, then BFCL's overall mean
    if "overall" in report.summary:
        bars["overall"] = report.summary["overall"]
    return EvalResult(report.metrics(), report.markdown(), bars)


register_evaluator("in_domain", _in_domain)
register_evaluator("bfcl", _bfcl)
