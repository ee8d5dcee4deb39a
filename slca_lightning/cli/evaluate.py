"""``slca eval``: run evaluators on a checkpoint or a model, outside training.

::

    slca eval --checkpoint runs/quickstart/logs/version_0/checkpoints/last.ckpt \\
        --evaluators in_domain,bfcl --arg bfcl.categories=simple --arg bfcl.limit=5 --out eval/
    slca eval --model tiny-sft --config configs/quickstart.yaml --evaluators in_domain

(also ``python -m slca_lightning.eval``). The model comes from ``--checkpoint`` (a ``slca
fit`` checkpoint: the module is rebuilt from its saved hyper-parameters on top of the
config's ``model:`` section, components included, then its weights are loaded) or
``--model`` (a built-in model, a named pretrained source such as
``smollm2-135m-instruct``, a ``.gguf`` file or a local HF folder). The tasks, agent-loop caps
and simulator come from the ``data:`` section of
``--config`` (default: the ``config.yaml`` that ``slca fit`` saved beside the checkpoint,
one or two folders up; else the built-in synthetic suite); with ``--model`` the config's
``model:`` section (reward head, ...) is used too. Every evaluator writes ``<out>/<name>.md``
and, when it reports rates, ``<out>/<name>.png`` (a bar chart: the in-domain rates, BFCL's
per-category accuracy and overall, τ²'s Pass^k); ``<out>/summary.json`` holds every scalar
(NaN as null) and the paths of the plots. Evaluators are looked up by name in
:mod:`slca_lightning.eval.registry`; options reach them as ``--arg <name>.<key>=<value>``
(the value read as YAML).

``--max-new-tokens N`` replaces the config's ``data.max_new_tokens`` (the token cap of each
reply). When more than half of an evaluator's episodes hit a token cap, one warning line on
stderr says so and names the setting to raise (their scores are of cut-off replies), and
``summary.json`` keeps the fraction under ``capped``. ``--save-episodes`` writes every
episode an evaluator scored (in-domain: one per held-out task) to
``<out>/<name>_episodes.jsonl``, one JSON line each, the transcripts that the fit callback
InDomainEval writes with ``save_episodes: true``
(:func:`~slca_lightning.eval.in_domain.write_episodes`).

Every evaluator reads the model's calls in the run's tool-call format: the config's
``data.tool_format`` (the run's ``config.yaml`` beside a checkpoint), or ``--tool-format``
(``hermes``, ``json``, ``llama3_json``, ``mistral``, ``template:<name>`` or a
``ToolCallFormat`` class path), which replaces it; ``summary.json`` names the one used. While
an evaluator runs, its progress (entries done of the total, time elapsed and left) goes to
stderr.

Checkpoints are read with ``torch.load(weights_only=True)``, and every component class path
in the checkpoint's hyper-parameters (and in a ``config.yaml`` found beside it) must lie
under ``slca_lightning`` or ``callbacks`` or a prefix given with ``--trust_class_prefix``
(:mod:`slca_lightning.training.checkpoints`); anything else is refused, saying which key and why.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import logging
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

import yaml

from slca_lightning.config.checks import ConfigError, validate_config
from slca_lightning.eval.in_domain import (
    cap_warning,
    capped_episodes,
    console_table,
    write_episodes,
)
from slca_lightning.eval.plots import plot_bars
from slca_lightning.eval.registry import EvalContext, available_evaluators, get_evaluator
from slca_lightning.eval.tool_format import format_name, resolve_tool_format
from slca_lightning.training.checkpoints import check_class_paths, load_checkpoint
from slca_lightning.training.console import printable
from slca_lightning.training.threads import apply_threads

__all__ = ["build_parser", "find_run_config", "load_module", "main", "plain_text", "run_command"]

log = logging.getLogger(__name__)


def find_run_config(checkpoint: str) -> str | None:
    """The ``config.yaml`` ``slca fit`` saved for ``checkpoint`` (its folder or up to two
    folders up), or None."""
    folder = os.path.dirname(os.path.abspath(checkpoint))
    for _ in range(3):
        path = os.path.join(folder, "config.yaml")
        if os.path.isfile(path):
            return path
        folder = os.path.dirname(folder)
    return None


def _instantiate(
    config: str | None,
    sections: Sequence[str],
    overrides: dict[str, dict] | None = None,
    trust: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Build the ``sections`` (``data``, ``model``) of a ``slca fit`` config (None: the
    defaults), with ``overrides`` (section → init arguments) on top. With ``trust`` (a
    config that came with a checkpoint), its class paths must lie under the trusted
    prefixes, checked before anything is imported."""
    from jsonargparse import ArgumentParser

    from slca_lightning.rollout.datamodule import RolloutDataModule
    from slca_lightning.training.module import SLCAGRPOModule

    raw: dict[str, Any] = {}
    if config is not None:
        with open(config, encoding="utf-8-sig") as f:
            raw = yaml.safe_load(f) or {}
        if not isinstance(raw, dict):
            raise ValueError(f"{config}: expected a mapping at the top level")
    classes = {"data": RolloutDataModule, "model": SLCAGRPOModule}
    given = {k: dict(raw.get(k) or {}) for k in sections}
    if trust is not None:
        check_class_paths(given, str(config), trust)
    for k, extra in (overrides or {}).items():
        given[k].update(extra)
    parser = ArgumentParser(exit_on_error=False, allow_abbrev=False)
    for name in sections:
        parser.add_class_arguments(classes[name], name, fail_untyped=False)
    try:
        cfg = parser.parse_object(given)
        validate_config(cfg, {k: classes[k] for k in sections})
    except ConfigError:
        raise
    except Exception as err:
        raise ValueError(
            f"{config or 'defaults'}: bad {'/'.join(sections)} section: {err}"
        ) from err
    try:
        build = getattr(parser, "instantiate", None) or parser.instantiate_classes  # < 4.49
        init = build(cfg)
        return {k: init[k] for k in sections}
    except Exception as err:
        raise ValueError(
            f"{config or 'defaults'}: bad {'/'.join(sections)} section: {err}"
        ) from err


def load_module(
    checkpoint: str | None,
    model: str | None,
    config: str | None,
    trust: Sequence[str] = (),
    config_from_checkpoint: bool = False,
) -> Any:
    """The configured module: rebuilt from ``checkpoint`` with its weights, or built for
    ``model`` (with ``config``'s ``model:`` section when given).

    The checkpoint is read weights-only and its class paths checked
    (:func:`~slca_lightning.training.checkpoints.load_checkpoint`, ``trust`` = extra trusted
    prefixes); ``config_from_checkpoint``: ``config`` is the one found beside the
    checkpoint, so its class paths are checked too."""
    if (checkpoint is None) == (model is None):
        raise ValueError("give exactly one of --checkpoint and --model")
    if checkpoint is not None:
        ckpt = load_checkpoint(checkpoint, trust)
        hparams = dict(ckpt.get("hyper_parameters") or {})
        for key in ("_instantiator", "_class_path"):  # checked; the class is SLCAGRPOModule
            hparams.pop(key, None)
        from slca_lightning.training.module import SLCAGRPOModule

        known = inspect.signature(SLCAGRPOModule.__init__).parameters
        dropped = sorted(k for k in hparams if k not in known)
        if dropped:  # a checkpoint of another version: settings this module no longer takes
            log.warning("%s: ignoring stored hyper-parameters %s", checkpoint, dropped)
            hparams = {k: v for k, v in hparams.items() if k in known}
        # the config's model section (components), the checkpoint's settings on top; the
        # policy only exists after configure_model, so the weights are loaded afterwards
        module = _instantiate(
            config, ["model"], {"model": hparams}, trust if config_from_checkpoint else None
        )["model"]
        module.configure_model()
        module.on_load_checkpoint(ckpt)  # a reference left out of the file comes back here
        module.load_state_dict(ckpt["state_dict"])
    else:
        module = _instantiate(config, ["model"], {"model": {"model": model}})["model"]
        module.configure_model()
    module.policy.eval()
    return module


def _parse_args(pairs: Sequence[str], evaluators: Sequence[str]) -> dict[str, dict[str, Any]]:
    options: dict[str, dict[str, Any]] = {name: {} for name in evaluators}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        name, dot, option = key.partition(".")
        if not sep or not dot or not option:
            raise ValueError(f"--arg {pair!r}: expected <evaluator>.<option>=<value>")
        if name not in options:
            raise ValueError(f"--arg {pair!r}: {name!r} is not among --evaluators {evaluators}")
        options[name][option] = yaml.safe_load(value)
    return options


def _clean(value: float) -> float | None:
    return None if isinstance(value, float) and not math.isfinite(value) else value


_ROLE = re.compile(r":[a-z]+:`(~?)([^`<]*?)\s*(?:<[^>]*>)?`")


def plain_text(doc: str) -> str:
    """A reST docstring as plain text for ``--help``: roles (``:mod:`x```) become their
    target, double backquotes and literal-block ``::`` markers go."""

    def role(m: re.Match) -> str:
        target = m.group(2).strip()
        return target.rsplit(".", 1)[-1] if m.group(1) else target

    text = _ROLE.sub(role, doc)
    text = text.replace("``", "")
    text = re.sub(r"\n[ \t]*::[ \t]*\n", "\n", text)  # a lone "::" line
    text = re.sub(r"[ \t]*::\n", ":\n", text)
    return text.strip() + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="slca eval",
        description=plain_text(__doc__ or ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="a slca fit checkpoint (.ckpt)")
    src.add_argument(
        "--model",
        help="tiny | tiny-sft | suite-sft | smollm2-135m-instruct | a .gguf file | a local HF folder",
    )
    p.add_argument("--config", help="a slca fit YAML (data: and, with --model, model:)")
    p.add_argument("--evaluators", default="in_domain", help="comma-separated names")
    p.add_argument("--num-tasks", type=int, default=None, help="in_domain held-out tasks")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        metavar="N",
        help="token cap of each reply, replacing the config's data.max_new_tokens",
    )
    p.add_argument(
        "--save-episodes",
        action="store_true",
        help="write the episodes each evaluator scored to <out>/<name>_episodes.jsonl",
    )
    p.add_argument("--arg", action="append", default=[], help="<evaluator>.<option>=<value>")
    p.add_argument("--out", default="eval", help="folder for the tables and summary.json")
    p.add_argument(
        "--tool-format",
        default=None,
        help="how the model writes its calls, replacing the config's data.tool_format: "
        "hermes | json | llama3_json | mistral | template:<name> | a ToolCallFormat class path",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: OMP_NUM_THREADS, else the cores the load leaves free)",
    )
    add_trust_argument(p)
    return p


def add_trust_argument(parser: argparse.ArgumentParser) -> None:
    """``--trust_class_prefix`` (repeatable), as ``slca eval`` and ``slca export`` take it."""
    parser.add_argument(
        "--trust_class_prefix",
        action="append",
        default=[],
        metavar="PREFIX",
        help="a package whose classes the checkpoint may name besides slca_lightning and "
        "callbacks (repeatable); anything else in a checkpoint is refused",
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the evaluators; write the tables, plots and ``summary.json``; return the summary."""
    args = build_parser().parse_args(argv)
    apply_threads(args.threads, where="slca eval")
    names = [n.strip() for n in args.evaluators.split(",") if n.strip()]
    if not names:
        raise SystemExit(f"--evaluators: no name given (known: {available_evaluators()})")
    evaluators = {n: get_evaluator(n) for n in names}  # unknown names fail before loading
    options = _parse_args(args.arg, names)
    tool_format = None if args.tool_format is None else resolve_tool_format(args.tool_format)
    if args.num_tasks is not None and "in_domain" in options:
        options["in_domain"].setdefault("num_tasks", args.num_tasks)
    config = args.config
    found = config is None and args.checkpoint is not None
    if found:
        config = find_run_config(args.checkpoint)
        if config is None:
            log.warning("no config.yaml beside %s: using the default data module", args.checkpoint)
    trust = args.trust_class_prefix
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens: must be an integer >= 1, got {args.max_new_tokens}")
    module = load_module(args.checkpoint, args.model, config, trust, found)
    caps = {} if args.max_new_tokens is None else {"data": {"max_new_tokens": args.max_new_tokens}}
    datamodule = _instantiate(config, ["data"], caps, trust=trust if found else None)["data"]
    if tool_format is not None:  # before connect(): the agent loop takes it from there
        tool_format.check_turn_end(datamodule.turn_end)
        datamodule.tool_format = tool_format
    datamodule.connect(module.policy, module.tokenizer, module.hparams.get("temperature"))
    os.makedirs(args.out, exist_ok=True)
    source = args.checkpoint or args.model
    summary: dict[str, Any] = {
        "source": source,
        "config": config,
        "tool_format": format_name(datamodule.tool_format),
        "metrics": {},
        "seconds": {},
        "plots": {},
        "capped": {},
        "episodes": {},
    }
    for name, fn in evaluators.items():
        t0 = time.perf_counter()
        scored = _ScoredEpisodes.around(module)
        try:
            result = fn(EvalContext(module, datamodule, options[name], args.out))
        finally:
            scored.detach(module)
        summary["seconds"][name] = round(time.perf_counter() - t0, 3)
        summary["metrics"][name] = {k: _clean(float(v)) for k, v in result.metrics.items()}
        path = os.path.join(args.out, f"{name}.md")
        with open(path, "w") as f:
            f.write(f"# {name} ({source})\n\n{result.markdown}\n")
        if result.bars:
            png = os.path.join(args.out, f"{name}.png")
            summary["plots"][name] = plot_bars(
                result.bars, png, f"{name} ({os.path.basename(source)})", "rate"
            )
        if name == "in_domain" and result.metrics:  # the key columns: the full table is the .md
            brief = console_table([(os.path.basename(source), result.metrics)])
            print(printable(f"\n{name} (every column in {path}):\n{brief}"))
        else:
            print(printable(f"\n{name}:\n{result.markdown}"))
        if scored.episodes:
            _report_episodes(name, scored, datamodule, args, summary)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return summary


class _ScoredEpisodes:
    """The module's reward head, scoring as before, keeping every episode it scores and
    the rewards it gave them (what ``--save-episodes`` writes and the cap check reads)."""

    def __init__(self, head: Any) -> None:
        self.head = head
        self.episodes: list[Any] = []
        self.outputs: list[Any] = []

    @classmethod
    def around(cls, module: Any) -> _ScoredEpisodes:
        """Put a recorder in place of ``module.reward_head`` (left alone, recording nothing,
        where the module does not take one)."""
        scored = cls(getattr(module, "reward_head", None))
        if scored.head is not None:
            with contextlib.suppress(TypeError):  # a head registered as a torch submodule
                module.reward_head = scored
        return scored

    def detach(self, module: Any) -> None:
        """Give ``module`` its own reward head back."""
        if getattr(module, "reward_head", None) is self:
            module.reward_head = self.head

    def __call__(self, episodes: list) -> Any:
        out = self.head(episodes)
        self.episodes += list(episodes)
        self.outputs.append(out)
        return out

    def __getattr__(self, name: str) -> Any:  # lambda_process, judge, channel_names, ...
        if name == "head":
            raise AttributeError(name)
        return getattr(self.head, name)

    def rewards(self) -> Any:
        """The channels of every scored episode, in order (``.channels[name][i]``)."""
        from types import SimpleNamespace

        import torch

        names = [k for k in self.outputs[0].channels if all(k in o.channels for o in self.outputs)]
        return SimpleNamespace(
            channels={
                k: torch.cat([o.channels[k].reshape(-1) for o in self.outputs]) for k in names
            }
        )


def _report_episodes(
    name: str, scored: _ScoredEpisodes, datamodule: Any, args: Any, summary: dict
) -> None:
    """The cap warning (stderr) and ``--save-episodes`` for one evaluator's episodes."""
    max_new = getattr(getattr(datamodule, "sampling", None), "max_new_tokens", None)
    count = capped_episodes(scored.episodes, max_new)
    summary["capped"][name] = round(count["capped"] / max(1, count["episodes"]), 4)
    line = cap_warning(
        scored.episodes,
        max_new,
        getattr(datamodule, "max_response_tokens", None),
        raise_reply="--max-new-tokens (data.max_new_tokens)",
        raise_episode="data.max_response_tokens (--config)",
    )
    if line:
        sys.stderr.write(printable(f"slca eval: warning: {name}: {line}") + "\n")
    if args.save_episodes:
        path = os.path.join(args.out, f"{name}_episodes.jsonl")
        write_episodes(path, scored.episodes, scored.rewards())
        summary["episodes"][name] = path


def run_command(argv: Sequence[str] | None = None) -> None:
    """:func:`main` as a command: a bad argument, file, config or checkpoint ends it with one
    line on stderr (``slca: error: ...``) and exit status 2 (``SLCA_DEBUG=1``: the
    traceback)."""
    from slca_lightning.cli.errors import debug_enabled, one_line

    try:
        main(argv)
    except (ValueError, FileNotFoundError) as err:
        if debug_enabled():
            raise
        sys.stderr.write(f"slca: error: {one_line(str(err))}\n")
        raise SystemExit(2) from None


def script() -> None:
    """Console entry (``python -m slca_lightning.eval``); returns None so the exit status is 0."""
    run_command()
