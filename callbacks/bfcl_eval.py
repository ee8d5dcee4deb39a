"""BFCLEval: BFCL single-turn accuracy of the policy, with BFCL's own data and checker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from callbacks.periodic_eval import PeriodicEval
from slca_lightning.config.checks import check_args
from slca_lightning.eval.bfcl.evaluator import BFCLEvaluator
from slca_lightning.eval.tool_format import resolve_tool_format, tool_format_of


class BFCLEval(PeriodicEval):
    """Greedy BFCL accuracy per category and BFCL's summaries (overall, non-live, live, …).

    Runs every ``every_n_steps`` optimizer steps, at the end of fit and at the end of
    validation (so ``slca validate`` / ``slca eval`` on a checkpoint runs it; not during the
    sanity check). Scalars go to ``trainer.logger`` as ``<prefix>/<category>`` and
    ``<prefix>/<summary>``; the table to ``<log_dir or default_root_dir>/eval/<name>.md``.
    See :class:`~slca_lightning.eval.bfcl.BFCLEvaluator` for how prompts are built and
    scored. Replies are read in the run's tool-call format (``trainer.datamodule.tool_format``,
    i.e. ``data.tool_format``; hermes tags without a data module) unless ``tool_format`` names
    one. Every rank runs the same entries (sharded models need all ranks to generate);
    rank zero writes the table and reports progress on stderr.

    Args:
        categories: BFCL categories or groups (``all`` = single-turn, ``ast``, ``live``,
            ``multi_turn`` …).
        samples_per_category: entries per category, a seeded sample (None: all of them;
            a CPU run uses a few).
        max_new_tokens: generation cap of the reply.
        every_n_steps: evaluate when ``global_step % every_n_steps == 0`` (None: only at the
            end of fit and of validation).
        seed: seed of the per-category sample.
        batch_size: prompts per ``generate`` call.
        tool_prompt: ``"template"`` (chat template ``tools=``) or ``"system"`` (the hermes
            system prompt of training).
        max_prompt_tokens: longer prompts count as failures without generating.
        tool_format: how the model writes its calls (``hermes``, ``json``, ``llama3_json``,
            a class path …; see :func:`~slca_lightning.eval.tool_format.resolve_tool_format`);
            None: the data module's.
        prefix: logging prefix.
        name: table file name (without ``.md``).
    """

    def __init__(
        self,
        categories: str | Sequence[str] = "all",
        samples_per_category: int | None = 20,
        max_new_tokens: int = 512,
        every_n_steps: int | None = None,
        seed: int = 0,
        batch_size: int = 8,
        tool_prompt: Literal["template", "system"] = "template",
        max_prompt_tokens: int | None = None,
        tool_format: str | None = None,
        prefix: str = "bfcl",
        name: str = "bfcl",
    ) -> None:
        check_args(BFCLEval, locals())
        super().__init__(every_n_steps, log_prefix=f"{prefix}/")
        self.evaluator = BFCLEvaluator(
            categories,
            limit=samples_per_category,
            seed=seed,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            tool_prompt=tool_prompt,
            max_prompt_tokens=max_prompt_tokens,
        )
        self.prefix, self.name = prefix, name
        self.tool_format = None if tool_format is None else resolve_tool_format(tool_format)

    def measure(self, trainer, pl_module) -> dict[str, float]:
        """Run BFCL on ``pl_module.policy`` (calls read in the run's tool-call format);
        write the table, return the scalars."""
        fmt = self.tool_format
        if fmt is None:
            fmt = tool_format_of(getattr(trainer, "datamodule", None))
        self.evaluator.tool_format = resolve_tool_format(fmt)
        self.evaluator.progress = bool(trainer.is_global_zero)
        report = self.evaluator.run(pl_module.policy, pl_module.tokenizer)
        metrics = report.metrics()
        text = f"# BFCL (step {trainer.global_step})\n\n{report.markdown()}\n"
        self.write_table(trainer, f"{self.name}.md", text)
        return metrics
