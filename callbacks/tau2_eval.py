"""Tau2Eval: τ²-Bench-style Pass^k of the policy on the airline / retail domains."""

from __future__ import annotations

from collections.abc import Sequence

from callbacks.periodic_eval import PeriodicEval
from slca_lightning.chat_backends.base import ChatBackend
from slca_lightning.config.checks import check_args
from slca_lightning.eval.tau2.evaluator import Tau2Evaluator
from slca_lightning.eval.tool_format import resolve_tool_format, tool_format_of


class Tau2Eval(PeriodicEval):
    """Greedy τ² conversations per domain, scored like τ² (final DB vs the gold replay,
    required communications; Pass^k over ``trials``).

    Runs every ``every_n_steps`` optimizer steps, at the end of fit and at the end of
    validation (not during the sanity check). Scalars go to ``trainer.logger`` as
    ``<prefix>/tau2_<domain>/<key>`` (``pass1``, ``avg_reward``, ``db_match``, …); each
    domain's table to ``<log_dir or default_root_dir>/eval/tau2_<domain>.md`` (rank zero).
    Every rank runs the same conversations (sharded models need all ranks to generate);
    rank zero reports progress on stderr. The agent's calls are read in the run's tool-call
    format (``trainer.datamodule.tool_format``, i.e. ``data.tool_format``; hermes tags without
    a data module) unless ``tool_format`` names one. See
    :class:`~slca_lightning.eval.tau2.Tau2Evaluator` for the arguments.

    Args:
        domains: ``airline`` and/or ``retail``.
        split, tasks_per_domain, trials: which tasks (first N of the split) and how often.
        user: ``"scripted"`` or a ChatBackend playing the user (τ²'s LLM user).
        judge: a ChatBackend for NL assertions (None: not judged, counted in the table).
        every_n_steps: evaluate when ``global_step % every_n_steps == 0`` (None: only at the
            end of fit and of validation).
        tool_format: how the model writes its calls (``hermes``, ``json``, ``llama3_json``,
            a class path …; see :func:`~slca_lightning.eval.tool_format.resolve_tool_format`);
            None: the data module's.
        prefix: logging prefix.
    """

    def __init__(
        self,
        domains: Sequence[str] = ("airline", "retail"),
        split: str = "test",
        tasks_per_domain: int | None = 10,
        trials: int = 1,
        user: str | ChatBackend = "scripted",
        judge: ChatBackend | None = None,
        every_n_steps: int | None = None,
        max_agent_turns: int = 30,
        max_user_turns: int = 10,
        max_new_tokens: int = 512,
        batch_size: int = 8,
        tool_prompt: str = "template",
        include_policy: bool = True,
        max_context_tokens: int | None = None,
        tool_format: str | None = None,
        prefix: str = "eval",
    ) -> None:
        check_args(Tau2Eval, locals())
        super().__init__(every_n_steps)
        self.evaluators = {
            d: Tau2Evaluator(
                d,
                split,
                tasks_per_domain,
                trials,
                user=user,
                judge=judge,
                max_agent_turns=max_agent_turns,
                max_user_turns=max_user_turns,
                max_new_tokens=max_new_tokens,
                batch_size=batch_size,
                tool_prompt=tool_prompt,
                include_policy=include_policy,
                max_context_tokens=max_context_tokens,
            )
            for d in domains
        }
        self.prefix = prefix
        self.tool_format = None if tool_format is None else resolve_tool_format(tool_format)

    def measure(self, trainer, pl_module) -> dict[str, float]:
        """Run every domain on ``pl_module.policy`` (calls read in the run's tool-call
        format); write the tables, return the scalars."""
        fmt = self.tool_format
        if fmt is None:
            fmt = tool_format_of(getattr(trainer, "datamodule", None))
        fmt = resolve_tool_format(fmt)
        metrics: dict[str, float] = {}
        for name, evaluator in self.evaluators.items():
            evaluator.tool_format = fmt
            evaluator.progress = bool(trainer.is_global_zero)
            report = evaluator.evaluate(pl_module)
            metrics.update(
                {f"{self.prefix}/tau2_{name}/{k}": v for k, v in report.summary().items()}
            )
            text = f"# τ² {name} (step {trainer.global_step})\n\n{report.markdown()}\n"
            self.write_table(trainer, f"tau2_{name}.md", text)
        return metrics
