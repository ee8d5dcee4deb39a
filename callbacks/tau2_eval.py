"""Tau2Eval: τ²-Bench-style Pass^k of the policy on the airline / retail domains."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import lightning as L

from slca_lightning.backends.base import ChatBackend
from slca_lightning.eval.tau2 import Tau2Evaluator

log = logging.getLogger(__name__)


class Tau2Eval(L.Callback):
    """Greedy τ² conversations per domain, scored like τ² (final DB vs the gold replay,
    required communications; Pass^k over ``trials``).

    Runs every ``every_n_steps`` optimizer steps, at the end of fit and at the end of
    validation (not during the sanity check). Scalars go to ``trainer.logger`` as
    ``<prefix>/tau2_<domain>/<key>`` (``pass1``, ``avg_reward``, ``db_match``, …); each
    domain's table to ``<log_dir or default_root_dir>/eval/tau2_<domain>.md`` (rank zero).
    Every rank runs the same conversations (sharded models need all ranks to generate).
    See :class:`~slca_lightning.eval.tau2.Tau2Evaluator` for the arguments.

    Args:
        domains: ``airline`` and/or ``retail``.
        split, tasks_per_domain, trials: which tasks (first N of the split) and how often.
        user: ``"scripted"`` or a ChatBackend playing the user (τ²'s LLM user).
        judge: a ChatBackend for NL assertions (None: not judged, counted in the table).
        every_n_steps: evaluate when ``global_step % every_n_steps == 0`` (None: only at the
            end of fit and of validation).
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
        prefix: str = "eval",
    ) -> None:
        if every_n_steps is not None and every_n_steps <= 0:
            raise ValueError(f"every_n_steps must be positive or None, got {every_n_steps}")
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
        self.every_n_steps, self.prefix = every_n_steps, prefix
        self.last: dict[str, float] = {}
        self._done_at: int | None = None

    def evaluate(self, trainer, pl_module) -> dict[str, float]:
        """Run every domain on ``pl_module.policy``; log the scalars and write the tables."""
        metrics: dict[str, float] = {}
        for name, evaluator in self.evaluators.items():
            report = evaluator.evaluate(pl_module)
            metrics.update(
                {f"{self.prefix}/tau2_{name}/{k}": v for k, v in report.summary().items()}
            )
            if trainer.is_global_zero:
                folder = os.path.join(trainer.log_dir or trainer.default_root_dir, "eval")
                os.makedirs(folder, exist_ok=True)
                path = os.path.join(folder, f"tau2_{name}.md")
                with open(path, "w") as f:
                    f.write(f"# τ² {name} (step {trainer.global_step})\n\n{report.markdown()}\n")
                log.info("τ² %s table written to %s", name, path)
        self._done_at = trainer.global_step
        self.last = metrics
        if trainer.logger is not None:
            trainer.logger.log_metrics(metrics, step=trainer.global_step)
        return metrics

    def _maybe(self, trainer, pl_module) -> None:
        if self._done_at == trainer.global_step:  # same weights already evaluated
            return
        self.evaluate(trainer, pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if self.every_n_steps and step % self.every_n_steps == 0:
            self._maybe(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        self._maybe(trainer, pl_module)

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        self._maybe(trainer, pl_module)
