"""InDomainEval: greedy episodes on the held-out tasks, logged, tabled and plotted."""

from __future__ import annotations

import os
from typing import Any

from lightning.pytorch.callbacks import Callback

from callbacks.reward_curves import plot_curves
from slca_lightning.config.checks import check_args
from slca_lightning.eval.in_domain import (
    cap_warning,
    console_table,
    evaluate_in_domain,
    markdown_rows,
    write_episodes,
)
from slca_lightning.rewards.base import RewardHead
from slca_lightning.rewards.judges import SummaryJudge
from slca_lightning.training.console import printable

__all__ = ["InDomainEval", "second_judge_metrics"]


def second_judge_metrics(head: Any, judge: SummaryJudge, episodes: list, name: str) -> dict:
    """``{name}/summary`` and ``{name}/success@0.9`` of ``episodes`` under ``head`` with its
    judge swapped for ``judge`` (the head itself is left as it was)."""
    saved = head.judge
    head.judge = judge
    try:
        out = head(episodes)
    finally:
        head.judge = saved
    called = out.flags["judge_called"]
    summary = out.channels["summary"][called]
    scale = float(getattr(head, "lambda_process", 1.0) + getattr(head, "lambda_summary", 1.0))
    success = (out.channels["total"] / scale >= 0.9).float()
    return {
        f"{name}/summary": float(summary.mean()) if summary.numel() else 0.0,
        f"{name}/success@0.9": float(success.mean()) if success.numel() else 0.0,
    }


class InDomainEval(Callback):
    """METHOD §8's in-domain metrics of the policy on the data module's held-out tasks.

    Each evaluation runs one greedy episode per held-out task (the first ``num_tasks``) with
    the training caps, simulator and tool-call format (``data.tool_format``: calls are read the
    way the model writes them; :func:`~slca_lightning.eval.in_domain.evaluate_in_domain`),
    scores them with ``reward_head`` (default: the module's own), and

    - logs ``<prefix>/<metric>`` (``success@0.9``, ``name_f1``, ``arg_match``, ``process``,
      ``tool_call_validity``, ``tool_calls_per_episode``, ``redundancy``,
      ``tokens_per_episode``, …) to every logger at the current step;
    - rewrites ``<log_dir>/<filename>``: a Markdown table with one row per evaluation so far
      (every metric); the console gets its key columns, at most 100 characters wide
      (:func:`~slca_lightning.eval.in_domain.console_table`), and one warning line when
      more than half of the episodes hit a token cap;
    - at the end of fit writes ``<log_dir>/<plot_filename>``: strict tool accuracy and
      Success@0.9 per evaluation, and the evaluated tool calls per episode beside the
      training rollouts' ``rollout/tool_calls_per_episode``.

    Every rank runs the same tasks (a sharded model needs every rank to generate); rank
    zero writes the files.

    Args:
        every_n_steps: evaluate when ``global_step % every_n_steps == 0`` (None: never
            during training).
        num_tasks: held-out tasks per evaluation (None: all).
        at_start: evaluate before the first step.
        at_end: evaluate at the end of fit (not twice if the last step was just evaluated).
        batch_size: episodes generated together.
        prefix: logging prefix.
        filename: the Markdown table.
        plot_filename: the PNG (None: no plot).
        verbose: print the table after each evaluation, and the progress (tasks done,
            time elapsed and left) on stderr while it runs.
        reward_head: scores the evaluated episodes (Success@τ reads its ``total``); None =
            the module's training reward head. Set it to evaluate with another judge than
            the one training sees (e.g. a noise-free judge when training on a noisy one).
        second_judges: judges the training never sees, by name: the same episodes are
            scored again with ``reward_head``'s rule but each of these judges, and
            ``<name>/summary`` (mean summary reward over the episodes judged) and
            ``<name>/success@0.9`` join the metrics (e.g. ``ReferenceJudge``, so a
            summary gain is not just the training judge being gamed).
        save_episodes: also write ``<log_dir>/in_domain_episodes/step_<k>.jsonl``, one
            line per evaluated episode (task id, kind, question, gold calls, assistant turns,
            observations, finish reason, channel rewards, exact-call flag), for transcripts
            (:func:`~slca_lightning.eval.in_domain.write_episodes`, which ``slca eval
            --save-episodes`` uses too).

    Attributes:
        rows: ``[(label, step, metrics)]`` of every evaluation (kept in checkpoints).
    """

    def __init__(
        self,
        every_n_steps: int | None = None,
        num_tasks: int | None = 32,
        at_start: bool = True,
        at_end: bool = True,
        batch_size: int = 32,
        prefix: str = "eval/in_domain",
        filename: str = "in_domain.md",
        plot_filename: str | None = "in_domain_curves.png",
        verbose: bool = True,
        reward_head: RewardHead | None = None,
        second_judges: dict[str, SummaryJudge] | None = None,
        save_episodes: bool = False,
    ) -> None:
        check_args(InDomainEval, locals())
        if every_n_steps is not None and every_n_steps < 1:
            raise ValueError(f"InDomainEval.every_n_steps must be ≥ 1 or null, got {every_n_steps}")
        if num_tasks is not None and num_tasks < 1:
            raise ValueError(f"InDomainEval.num_tasks must be ≥ 1 or null, got {num_tasks}")
        self.every_n_steps, self.num_tasks = every_n_steps, num_tasks
        self.at_start, self.at_end = at_start, at_end
        self.batch_size = batch_size
        self.prefix, self.filename, self.plot_filename = prefix, filename, plot_filename
        self.verbose = verbose
        self.reward_head = reward_head
        self.second_judges = dict(second_judges or {})
        self.save_episodes = save_episodes
        self.rows: list[tuple[str, int, dict[str, float]]] = []
        self.rollout_calls: list[tuple[int, float]] = []
        self.table_path: str | None = None
        self.plot_path: str | None = None

    # -- evaluation -----------------------------------------------------------------------
    def evaluate(self, trainer, pl_module, label: str | None = None) -> dict[str, float]:
        """Run one evaluation now; log it and rewrite the table. Returns the metrics."""
        dm = trainer.datamodule
        if dm is None or not hasattr(dm, "source"):
            return {}
        step = int(trainer.global_step)
        if self.verbose and trainer.is_global_zero:  # it takes a while: say what runs
            what = f"{self.num_tasks} held-out tasks" if self.num_tasks else "the held-out tasks"
            print(f"\nin-domain: evaluating {what}, greedy (step {step})...", flush=True)
        result = evaluate_in_domain(
            pl_module.policy,
            pl_module.tokenizer,
            self.reward_head if self.reward_head is not None else pl_module.reward_head,
            dm,
            self.num_tasks,
            self.batch_size,
            progress=self.verbose and trainer.is_global_zero,
            sync_on_compute=False,
        )
        if not result.metrics:
            return {}
        head = self.reward_head if self.reward_head is not None else pl_module.reward_head
        for judge_name, judge in self.second_judges.items():
            result.metrics.update(second_judge_metrics(head, judge, result.episodes, judge_name))
        if self.save_episodes and trainer.is_global_zero:
            write_episodes(
                os.path.join(_log_dir(trainer), "in_domain_episodes", f"step_{step}.jsonl"),
                result.episodes,
                head(result.episodes),
            )
        name = f"step {step}" + (f" ({label})" if label else "")
        self.rows.append((name, step, result.metrics))
        logged = {f"{self.prefix}/{k}": v for k, v in result.metrics.items()}
        for logger in trainer.loggers:
            logger.log_metrics(logged, step=step)
        if trainer.is_global_zero:
            table = markdown_rows([(n, m) for n, _, m in self.rows])
            folder = _log_dir(trainer)
            os.makedirs(folder, exist_ok=True)
            self.table_path = os.path.join(folder, self.filename)
            with open(self.table_path, "w") as f:
                f.write(
                    f"# In-domain evaluation ({len(result.episodes)} held-out tasks, greedy)\n\n"
                )
                f.write(table + "\n")
            if self.verbose:
                brief = console_table([(n, m) for n, _, m in self.rows])
                title = f"in-domain ({len(result.episodes)} held-out tasks, greedy; every column"
                print(printable(f"\n{title} in {self.filename}):\n{brief}\n"))
                self._warn_capped(dm, result.episodes)
        return result.metrics

    def _warn_capped(self, datamodule, episodes: list) -> None:
        sampling = getattr(datamodule, "sampling", None)
        line = cap_warning(
            episodes,
            getattr(sampling, "max_new_tokens", None),
            getattr(datamodule, "max_response_tokens", None),
        )
        if line:
            print(printable(f"in-domain: warning: {line}"), flush=True)

    def _evaluated_at(self, step: int) -> bool:
        return bool(self.rows) and self.rows[-1][1] == step

    # -- hooks ----------------------------------------------------------------------------
    def on_train_start(self, trainer, pl_module) -> None:
        dm = trainer.datamodule
        if dm is not None and getattr(dm, "loop", None) is None and hasattr(dm, "connect"):
            dm.connect(pl_module.policy, pl_module.tokenizer)
        if self.at_start and not self._evaluated_at(int(trainer.global_step)):
            self.evaluate(trainer, pl_module, "start")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = int(trainer.global_step)
        calls = trainer.callback_metrics.get("rollout/tool_calls_per_episode")
        if calls is not None and calls.numel() == 1:
            self.rollout_calls.append((step, float(calls)))
        due = self.every_n_steps and step % self.every_n_steps == 0
        if due and not self._evaluated_at(step):
            self.evaluate(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.at_end and not self._evaluated_at(int(trainer.global_step)):
            self.evaluate(trainer, pl_module, "end")
        if self.plot_filename and self.rows and trainer.is_global_zero:
            self.plot_path = os.path.join(_log_dir(trainer), self.plot_filename)
            plot_curves(self.curves(), self.plot_path, self.panels(), title="In-domain evaluation")

    # -- plot -----------------------------------------------------------------------------
    def panels(self) -> list[list[str]]:
        """Panel 1: strict tool accuracy and Success@0.9; panel 2: evaluated vs
        training-rollout calls per episode."""
        return [
            [f"{self.prefix}/tool_accuracy", f"{self.prefix}/success@0.9"],
            [f"{self.prefix}/tool_calls_per_episode", "rollout/tool_calls_per_episode"],
        ]

    def curves(self) -> dict[str, list[tuple[int, float]]]:
        """The plotted series, ``{name: [(step, value)]}``."""
        out: dict[str, list[tuple[int, float]]] = {}
        for key in ("tool_accuracy", "success@0.9", "tool_calls_per_episode"):
            series = [(s, m[key]) for _, s, m in self.rows if key in m]
            if series:
                out[f"{self.prefix}/{key}"] = series
        if self.rollout_calls:
            out["rollout/tool_calls_per_episode"] = list(self.rollout_calls)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"rows": [list(r) for r in self.rows], "rollout_calls": list(self.rollout_calls)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.rows = [(str(n), int(s), dict(m)) for n, s, m in state_dict.get("rows", [])]
        self.rollout_calls = [(int(s), float(v)) for s, v in state_dict.get("rollout_calls", [])]


def _log_dir(trainer) -> str:
    return str(trainer.log_dir or trainer.default_root_dir)
