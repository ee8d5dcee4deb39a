"""HeldoutTable: the in-domain table before and after training (a preset of InDomainEval)."""

from __future__ import annotations

from callbacks.in_domain_eval import InDomainEval
from slca_lightning.config.checks import check_args

__all__ = ["HeldoutTable"]


class HeldoutTable(InDomainEval):
    """:class:`~callbacks.in_domain_eval.InDomainEval` at the start and the end of fit only,
    logged as ``heldout/<metric>`` and written to ``heldout.md`` (no plot).

    Args:
        num_tasks: held-out tasks evaluated (greedy, one episode each).
    """

    def __init__(self, num_tasks: int = 32) -> None:
        check_args(HeldoutTable, locals())
        super().__init__(
            every_n_steps=None,
            num_tasks=num_tasks,
            at_start=True,
            at_end=True,
            prefix="heldout",
            filename="heldout.md",
            plot_filename=None,
        )
