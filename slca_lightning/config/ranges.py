"""What values every numeric setting may take: the :class:`Range` rule, the error a bad value
raises, and the table of every configurable class's ranges (:data:`RANGES`).

:class:`ConfigError` messages are one line, ``"<key>: <requirement>, got <value>"``; the
``slca`` command prints them and exits with status 2. Keys of :data:`RANGES` are
``module.Qualname`` of the class; subclasses inherit their bases' rules. Records built by
code, never from a config, are listed in :data:`RECORDS`. A unit test fails when a public
class has a numeric argument without a rule here; :mod:`slca_lightning.config.checks`
applies the table, and the docs' configuration reference is generated from it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["RANGES", "RECORDS", "ConfigError", "Range", "check_range"]


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

_SFT = {
    "seed": SEED,
    "learning_rate": POSITIVE_OR_NONE,
    "weight_decay": NONNEG,
    "warmup_steps": NATURAL,
}

#: ``module.Qualname`` → argument → allowed range. Subclasses inherit their bases' rules.
RANGES: dict[str, dict[str, Range]] = {
    # -- the module and the data module (the top-level ``model:`` and ``data:``) ----------
    "slca_lightning.training.module.SLCAGRPOModule": {
        "learning_rate": POSITIVE_OR_NONE,
        "weight_decay": NONNEG,
        "warmup_steps": NATURAL,
        "ppo_epochs": COUNT,
        "mini_batches": COUNT,
        "micro_batch_size": COUNT,
        "micro_batch_tokens": COUNT_OR_NONE,
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
        "top_p": Range("float", 0, 1, lo_open=True),
        "max_staleness": NATURAL,
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
        "prune_fraction": Range("float", 0, 1),
    },
    "slca_lightning.rollout.kv_cache.GrowingKVLayer": {"reserve": NATURAL},
    "slca_lightning.rollout.shared_prefix_attention.SharedPrefixState": {
        "num_layers": COUNT,
        "batch": COUNT,
    },
    "slca_lightning.rollout.kv_cache.GrowingCache": {"num_layers": COUNT, "reserve": NATURAL},
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
        "decay_steps": COUNT_OR_NONE,
    },
    "slca_lightning.models.sft.SFTDataModule": {
        "n_tasks": NATURAL,  # 0: Toucan rows only
        "seed": SEED,
        "batch_size": COUNT,
        "toucan_limit": NATURAL_OR_NONE,
        "max_tokens": COUNT_OR_NONE,
        "skip": Range("int", 0, none=True, each=True),
        "string_arguments_fraction": FRACTION,
    },
    # -- advantage routers -----------------------------------------------------------------
    "slca_lightning.segmenters.mask_runs.MaskRunSegmenter": {"stop_decision_tokens": NATURAL},
    "slca_lightning.advantages.routing.ChannelRouter": {"eps": POSITIVE},
    "slca_lightning.advantages.routing.Term": {"weight": FINITE},
    "slca_lightning.advantages.presets.SLCARouter": {
        "tool_weight": FINITE,
        "summary_weight": FINITE,
    },
    "slca_lightning.advantages.presets.ToolPORouter": {"action_weight": FINITE},
    "slca_lightning.advantages.presets.MTGRPORouter": {"outcome_weight": FINITE},
    # -- rewards and judges ----------------------------------------------------------------
    "slca_lightning.rewards.hierarchical.HierarchicalReward": {
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
    "slca_lightning.tools.simulator.SchemaGuidedSimulator": {
        "timeout_s": POSITIVE_OR_NONE,
        "max_retries": NATURAL,
        "retry_backoff_s": NONNEG,
        "max_workers": COUNT,
        "latency_window": COUNT,
    },
    "slca_lightning.tools.tool_backends.LLMBackend": {
        "temperature": TEMPERATURE,
        "max_tokens": COUNT,
        "seed": SEED_OR_NONE,
    },
    "slca_lightning.calls.result_cache.SimulatorCache": {
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
    "slca_lightning.rollout.engine_chat_backend.EngineChatBackend": {
        "max_tokens": COUNT,
        "batch_size": COUNT,
    },
    "slca_lightning.chat_backends.openai.OpenAIBackend": {
        "timeout_s": POSITIVE,
        "max_retries": NATURAL,
        "retry_backoff_s": NONNEG,
        "max_in_flight": COUNT,
        "max_reply_chars": COUNT,
    },
    # -- task sources ----------------------------------------------------------------------
    "slca_lightning.data.task_sources.SyntheticTasks": {
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
    "slca_lightning.data.task_sources.JsonlTasks": {
        "heldout_fraction": Range("float", 0, 1, hi_open=True),
        "seed": SEED,
    },
    "slca_lightning.data.task_sources.ToucanTasks": {
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
    "slca_lightning.training.console.StepProgressBar": {"refresh_rate": COUNT},
    "callbacks.run_folder.RunFolder": {"width": COUNT},
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
        "slca_lightning.cli.app.SLCACLI",
        "slca_lightning.models.warm_start.WarmStartRun",
        "slca_lightning.cli.app.ResumePoint",
        "slca_lightning.rollout.async_stream.AsyncRolloutStream",  # built by the data module
        "slca_lightning.training.update.UpdateContext",
        "slca_lightning.training.update.UpdateSettings",  # read from the module's checked hparams
        "slca_lightning.config.ranges.Range",
        "slca_lightning.data.format_errors.RowReader",
        "slca_lightning.data.toucan_sft.SFTTrajectory",
        "slca_lightning.eval.bfcl.evaluator.BFCLReport",
        "slca_lightning.calls.formats.Canonical",
        "slca_lightning.models.pretrained.ModelSource",  # the named sources, written in code
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
