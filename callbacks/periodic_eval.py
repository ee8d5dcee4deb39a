"""PeriodicEval: the schedule and table-writing shared by the benchmark callbacks."""

from __future__ import annotations

import logging
import os

import lightning as L

log = logging.getLogger(__name__)


class PeriodicEval(L.Callback):
    """Calls :meth:`evaluate` every ``every_n_steps`` optimizer steps, at the end of fit and
    at the end of validation (not during the sanity check), at most once per weights
    (``global_step``). Subclasses compute the metrics in :meth:`measure` (writing their
    tables with :meth:`write_table`); :meth:`evaluate` keeps them in ``self.last`` and logs
    them to ``trainer.logger`` as ``<log_prefix><key>``.

    Args:
        every_n_steps: evaluate when ``global_step % every_n_steps == 0`` (None: only at the
            end of fit and of validation).
        log_prefix: put before every key when logging (``self.last`` keeps the bare keys).
    """

    def __init__(self, every_n_steps: int | None = None, log_prefix: str = "") -> None:
        if every_n_steps is not None and every_n_steps <= 0:
            raise ValueError(f"every_n_steps must be positive or None, got {every_n_steps}")
        self.every_n_steps = every_n_steps
        self.log_prefix = log_prefix
        self.last: dict[str, float] = {}
        self._done_at: int | None = None

    def measure(self, trainer, pl_module) -> dict[str, float]:  # pragma: no cover - abstract
        """Run the evaluation on ``pl_module``, write its tables, return its scalars."""
        raise NotImplementedError

    def evaluate(self, trainer, pl_module) -> dict[str, float]:
        """:meth:`measure`, then keep the scalars in ``self.last`` and log them."""
        metrics = self.measure(trainer, pl_module)
        self._done_at = trainer.global_step
        self.last = metrics
        if trainer.logger is not None:
            trainer.logger.log_metrics(
                {f"{self.log_prefix}{k}": v for k, v in metrics.items()}, step=trainer.global_step
            )
        return metrics

    def write_table(self, trainer, filename: str, text: str) -> None:
        """Write ``text`` to ``<log_dir or default_root_dir>/eval/<filename>`` on rank zero."""
        if not trainer.is_global_zero:
            return
        folder = os.path.join(trainer.log_dir or trainer.default_root_dir, "eval")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, filename)
        with open(path, "w") as f:
            f.write(text)
        log.info("%s: table written to %s", type(self).__name__, path)

    def _maybe(self, trainer, pl_module) -> None:
        if self._done_at == trainer.global_step:  # same weights already evaluated
            return
        self.evaluate(trainer, pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.every_n_steps and trainer.global_step % self.every_n_steps == 0:
            self._maybe(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        self._maybe(trainer, pl_module)

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        self._maybe(trainer, pl_module)
