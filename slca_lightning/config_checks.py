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
import math
import typing
from collections.abc import Mapping, Sequence
from typing import Any

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


# -- the vocabulary of the table ---------------------------------------------------------
COUNT = Range("int", 1)  # sizes, steps, turns, tokens: at least one
COUNT_OR_NONE = Range("int", 1, none=True)
NATURAL = Range("int", 0)  # may be zero
NATURAL_OR_NONE = Range("int", 0, none=True)
SEED = Range("int", 0)
SEED_OR_NONE = Range("int", 0, none=True)
POSITIVE = Range("float", 0, lo_open=True)
POSITIVE_OR_NONE = Range("float", 0, lo_open=True, none=True)
NONNEG = Range("float", 0)
FRACTION = Range("float", 0, 1)  # a probability or a rate
FINITE = Range("float")  # any finite real (weights, penalties)
TEMPERATURE = Range("float", 0)  # 0 = greedy
SAMPLING_TEMPERATURE = Range("float", 0, lo_open=True)  # RL sampling: log-probs need T > 0

_SFT = {"seed": SEED, "learning_rate": POSITIVE, "weight_decay": NONNEG, "warmup_steps": NATURAL}

#: ``module.Qualname`` → argument → allowed range. Subclasses inherit their bases' rules.
RANGES: dict[str, dict[str, Range]] = {
    # -- the module and the data module (the top-level ``model:`` and ``data:``) ----------
    "slca_lightning.module.SLCAGRPOModule": {
        "learning_rate": POSITIVE,
        "weight_decay": NONNEG,
        "warmup_steps": NATURAL,
        "ppo_epochs": COUNT,
        "mini_batches": COUNT,
        "micro_batch_size": COUNT,
        "eps_low": Range("float", 0, 1, hi_open=True),
        "eps_high": NONNEG,
        "dual_clip": Range("float", 1, lo_open=True, none=True),
        "kl_coef": NONNEG,
        "entropy_coef": NONNEG,
        "negative_weight": NONNEG,
        "max_grad_norm": POSITIVE_OR_NONE,
        "temperature": SAMPLING_TEMPERATURE,
        "tis_cap": POSITIVE_OR_NONE,
        "logprob_chunk_size": COUNT,
        "seed": SEED,
    },
    "slca_lightning.models.lora.LoraSettings": {
        "r": COUNT,
        "alpha": COUNT,
        "dropout": Range("float", 0, 1, hi_open=True),
    },
    "slca_lightning.rollout.datamodule.RolloutDataModule": {
        "prompts_per_step": COUNT,
        "group_size": COUNT,
        "max_turns": COUNT,
        "max_calls_per_turn": COUNT,
        "max_new_tokens": COUNT,
        "max_response_tokens": COUNT,
        "max_tool_response_tokens": COUNT,
        "temperature": SAMPLING_TEMPERATURE,
        "top_p": Range("float", 0, 1, lo_open=True),
        "seed": SEED,
        "max_env_error_rate": Range("float", 0, 1, none=True),
        "min_env_errors": NATURAL,
    },
    "slca_lightning.rollout.agent_loop.AgentLoop": {
        "max_turns": COUNT,
        "max_calls_per_turn": COUNT,
        "max_response_tokens": COUNT,
        "max_tool_response_tokens": COUNT,
    },
    "slca_lightning.rollout.scripted_engine.ScriptedEngine": {"logprob": Range("float", hi=0)},
    "slca_lightning.rollout.hf_engine.HFEngine": {
        "max_batch_size": COUNT,
        "min_shared_prefix": NATURAL,
    },
    "slca_lightning.rollout.vllm_engine.VLLMEngine": {
        "gpu_memory_utilization": Range("float", 0, 1, lo_open=True),
        "tensor_parallel_size": COUNT,
        "max_model_len": COUNT_OR_NONE,
        "sync_bucket_mb": COUNT,
        "sync_timeout_s": POSITIVE,
        "seed": SEED,
    },
    # -- warm start ------------------------------------------------------------------------
    "slca_lightning.models.sft.SFTModule": {
        **_SFT,
        "chunk_size": COUNT,
        "share_prefix": NATURAL,
        "context_weight": NONNEG,
        "final_lr_fraction": FRACTION,
    },
    "slca_lightning.models.sft.SFTDataModule": {
        "n_tasks": NATURAL,  # 0: Toucan rows only
        "seed": SEED,
        "batch_size": COUNT,
        "toucan_limit": NATURAL_OR_NONE,
        "max_tokens": COUNT_OR_NONE,
        "skip": Range("int", 0, none=True, each=True),
    },
    # -- advantage routers -----------------------------------------------------------------
    "slca_lightning.advantages.routing.ChannelRouter": {"eps": POSITIVE},
    "slca_lightning.advantages.routing.Term": {"weight": FINITE},
    "slca_lightning.advantages.presets.SLCARouter": {
        "tool_weight": FINITE,
        "summary_weight": FINITE,
    },
    "slca_lightning.advantages.presets.ToolPORouter": {"action_weight": FINITE},
    "slca_lightning.advantages.presets.MTGRPORouter": {"outcome_weight": FINITE},
    # -- rewards and judges ----------------------------------------------------------------
    "slca_lightning.rewards.hierr.HierarchicalReward": {
        "process_weights": Range("float", 0, none=True, each=True),
        "lambda_process": NONNEG,
        "lambda_summary": NONNEG,
        "omission_penalty": FINITE,
        "min_reply_chars": NATURAL,
    },
    "slca_lightning.rewards.judges.LLMJudge": {
        "temperature": TEMPERATURE,
        "max_tokens": COUNT_OR_NONE,
        "seed": SEED_OR_NONE,
        "max_result_chars": COUNT_OR_NONE,
    },
    "slca_lightning.rewards.rule_judge.RuleJudge": {
        "grounding_weight": NONNEG,
        "coverage_weight": NONNEG,
        "length_weight": NONNEG,
        "grounding_saturation": COUNT,
        "min_words": NATURAL,
        "max_words": COUNT,
        "max_fact_words": COUNT,
    },
    "slca_lightning.rewards.noisy_judge.NoisyJudge": {"noise_std": NONNEG, "seed": SEED},
    "slca_lightning.rewards.reward_model_judge.RewardModelJudge": {
        "positive_label": NATURAL,
        "max_length": COUNT,
        "batch_size": COUNT,
        "max_result_chars": COUNT_OR_NONE,
    },
    "slca_lightning.rewards.rltr.LLMCompletenessVerifier": {
        "n": COUNT,
        "temperature": TEMPERATURE,
        "max_tokens": COUNT_OR_NONE,
    },
    "slca_lightning.rewards.rltr.RLTRReward": {
        "n": COUNT_OR_NONE,
        "repeat_penalty": FINITE,
        "error_penalty": FINITE,
        "malformed_reward": FINITE,
    },
    # -- tools, simulators, backends -------------------------------------------------------
    "slca_lightning.tools.sgls.SchemaGuidedSimulator": {
        "timeout_s": POSITIVE_OR_NONE,
        "max_retries": NATURAL,
        "retry_backoff_s": NONNEG,
        "max_workers": COUNT,
        "latency_window": COUNT,
    },
    "slca_lightning.tools.backends.LLMBackend": {
        "temperature": TEMPERATURE,
        "max_tokens": COUNT,
        "seed": SEED_OR_NONE,
    },
    "slca_lightning.calls.cache.SimulatorCache": {
        "max_memory_entries": NATURAL,
        "timeout_s": POSITIVE,
    },
    "slca_lightning.tools.faults.FaultInjector": {
        "timeout_rate": FRACTION,
        "server_error_rate": FRACTION,
        "malformed_rate": FRACTION,
        "seed": SEED,
        "timeout_sleep_s": NONNEG,
    },
    "slca_lightning.tools.mcp_backend.MCPBackend": {
        "timeout_s": POSITIVE,
        "connect_timeout_s": POSITIVE,
        "max_result_chars": COUNT_OR_NONE,
    },
    "slca_lightning.tools.replay.ReplayBackend": {"limit": COUNT_OR_NONE},
    "slca_lightning.rollout.engine_backend.EngineChatBackend": {
        "max_tokens": COUNT,
        "batch_size": COUNT,
    },
    "slca_lightning.backends.openai.OpenAIBackend": {
        "timeout_s": POSITIVE,
        "max_retries": NATURAL,
        "retry_backoff_s": NONNEG,
        "max_in_flight": COUNT,
        "max_reply_chars": COUNT,
    },
    # -- task sources ----------------------------------------------------------------------
    "slca_lightning.data.sources.SyntheticTasks": {
        "n_train": COUNT,
        "n_heldout": NATURAL,
        "seed": SEED,
        "irrelevant_fraction": FRACTION,
        "parallel_fraction": FRACTION,
        "multistep_fraction": FRACTION,
        "train_start": NATURAL,
        "heldout_start": NATURAL_OR_NONE,
    },
    "slca_lightning.data.synthetic.SyntheticTaskGenerator": {
        "seed": SEED,
        "irrelevant_fraction": FRACTION,
        "parallel_fraction": FRACTION,
        "multistep_fraction": FRACTION,
        "distractor_families": NATURAL,
    },
    "slca_lightning.data.sources.JsonlTasks": {
        "heldout_fraction": Range("float", 0, 1, hi_open=True),
        "seed": SEED,
    },
    "slca_lightning.data.sources.ToucanTasks": {
        "heldout_fraction": Range("float", 0, 1, hi_open=True),
        "seed": SEED,
    },
    # -- evaluation ------------------------------------------------------------------------
    "slca_lightning.eval.metrics.EpisodeMetrics": {
        "scale": POSITIVE,
        "process_weights": Range("float", 0, none=True, each=True),
        "taus": Range("float", 0, 1, each=True),
    },
    "slca_lightning.eval.metrics.SuccessAtTau": {"taus": Range("float", 0, 1, each=True)},
    "slca_lightning.eval.bfcl.evaluator.BFCLEvaluator": {
        "limit": COUNT_OR_NONE,
        "seed": SEED,
        "max_new_tokens": COUNT,
        "batch_size": COUNT,
        "max_prompt_tokens": COUNT_OR_NONE,
    },
    "slca_lightning.eval.tau2.evaluator.Tau2Evaluator": {
        "limit": COUNT_OR_NONE,
        "trials": COUNT,
        "max_agent_turns": COUNT,
        "max_user_turns": COUNT,
        "max_calls_per_turn": COUNT,
        "max_new_tokens": COUNT,
        "batch_size": COUNT,
        "max_context_tokens": COUNT_OR_NONE,
        "max_tool_response_tokens": COUNT,
        "temperature": TEMPERATURE,
    },
    "slca_lightning.eval.tau2.loop.PolicyAgent": {
        "max_new_tokens": COUNT,
        "max_context_tokens": COUNT_OR_NONE,
        "max_tool_response_tokens": COUNT,
        "temperature": TEMPERATURE,
        "batch_size": COUNT,
        "seed": SEED,
    },
    "slca_lightning.eval.tau2.users.LLMUser": {
        "temperature": TEMPERATURE,
        "max_tokens": COUNT,
        "max_turns": COUNT,
    },
    "slca_lightning.eval.tau2.users.ScriptedUser": {"max_turns": COUNT},
    # -- callbacks -------------------------------------------------------------------------
    "slca_lightning.console.StepProgressBar": {"refresh_rate": COUNT},
    "callbacks.periodic_eval.PeriodicEval": {"every_n_steps": COUNT_OR_NONE},
    "callbacks.in_domain_eval.InDomainEval": {
        "every_n_steps": COUNT_OR_NONE,
        "num_tasks": COUNT_OR_NONE,
        "batch_size": COUNT,
    },
    "callbacks.bfcl_eval.BFCLEval": {
        "samples_per_category": COUNT_OR_NONE,
        "max_new_tokens": COUNT,
        "every_n_steps": COUNT_OR_NONE,
        "seed": SEED,
        "batch_size": COUNT,
        "max_prompt_tokens": COUNT_OR_NONE,
    },
    "callbacks.tau2_eval.Tau2Eval": {
        "tasks_per_domain": COUNT_OR_NONE,
        "trials": COUNT,
        "every_n_steps": COUNT_OR_NONE,
        "max_agent_turns": COUNT,
        "max_user_turns": COUNT,
        "max_new_tokens": COUNT,
        "batch_size": COUNT,
        "max_context_tokens": COUNT_OR_NONE,
    },
    "callbacks.gradient_diagnostics.GradientDiagnostics": {
        "every_n_steps": COUNT,
        "micro_batch_size": COUNT_OR_NONE,
    },
    "callbacks.heldout_table.HeldoutTable": {"num_tasks": COUNT},
    "callbacks.rollout_table.RolloutTable": {
        "every_n_steps": COUNT,
        "num_episodes": COUNT,
        "max_tokens": Range("int", 2),
    },
}

#: Classes with numeric ``__init__`` arguments that are records filled by code (results,
#: episodes, parsed blocks), never settings read from a config: no range rules.
RECORDS: frozenset[str] = frozenset(
    {
        "slca_lightning.advantages.base.RoutedAdvantages",
        "slca_lightning.cli.SLCACLI",
        "slca_lightning.config_checks.Range",
        "slca_lightning.data.errors.RowReader",
        "slca_lightning.data.toucan_sft.SFTTrajectory",
        "slca_lightning.eval.bfcl.evaluator.BFCLReport",
        "slca_lightning.calls.formats.Canonical",
        "slca_lightning.eval.bfcl.multi_turn.MultiTurnEntry",
        "slca_lightning.eval.in_domain.InDomainResult",
        "slca_lightning.eval.metrics.EpisodeStats",
        "slca_lightning.eval.registry.EvalResult",
        "slca_lightning.eval.tau2.evaluator.Tau2Report",
        "slca_lightning.eval.tau2.loop.Conversation",
        "slca_lightning.eval.tau2.scoring.Tau2Score",
        "slca_lightning.rewards.judges.JudgeVerdict",
        "slca_lightning.rollout.engine.Generation",
        "slca_lightning.rollout.engine.SamplingConfig",  # built from the checked data.* keys
        "slca_lightning.rollout.record.RolloutRecord",
        "slca_lightning.calls.parsing.ParseResult",
        "slca_lightning.calls.parsing.ParsedBlock",
        "slca_lightning.types.Episode",
        "slca_lightning.types.RolloutBatch",
        "slca_lightning.types.ToolResult",
    }
)


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
    SLCAGRPOModule, ``data`` → RolloutDataModule, as :class:`~slca_lightning.cli_app.SLCACLI`
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
