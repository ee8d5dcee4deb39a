"""What ``slca fit`` prints: one step-counting progress bar per fit and no repeated noise.

- :class:`StepProgressBar` counts optimiser steps against ``trainer.max_steps`` in one bar
  for the whole fit (``RL: 12/30``, ``SFT warm start: 120/300``) instead of Lightning's
  per-epoch bars, whose epochs are meaningless for an endless rollout stream (Rich printed
  ``Epoch 0/-2``).
- :func:`quiet_console` drops what a user can do nothing about (Lightning's experimental-API
  notes about ``dataloader_iter``, a PyTorch deprecation inside Lightning, the "Tip:"
  advertisements, "max_steps reached" under a bar that shows it, transformers' per-load
  "Loading weights" bars) and prints every other Lightning info line at most once per
  process (the warm start's nested trainer repeated the GPU/TPU lines).
- :func:`printable` escapes control characters (a random model's sampled bytes) in text
  bound for the terminal, keeping newlines and tabs.
"""

from __future__ import annotations

import logging
import re
import sys
import unicodedata
import warnings
from typing import Any

from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

from slca_lightning.config.checks import check_args

__all__ = ["NOISE", "OnceFilter", "StepProgressBar", "printable", "quiet_console"]

#: Warning messages (regular expressions) that say nothing a user can act on.
NOISE: tuple[str, ...] = (
    r"You are using the `dataloader_iter` step flavor",  # our on-policy design, by choice
    r"Found `dataloader_iter` argument in the `training_step`",
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",  # inside Lightning
    r".*modules in eval mode",  # Lightning's summary of frozen helper modules
    r"The number of training batches \(\d+\) is smaller than the logging interval",
    r"LightningCLI's args parameter is intended to run from within Python",
)
_DROP_INFO = (
    re.compile(r"^💡 Tip:"),  # advertisements
    re.compile(r"^`Trainer\.fit` stopped: `max_steps=\d+` reached"),  # the bar shows k/k
)


class OnceFilter(logging.Filter):
    """A logging filter for Lightning's loggers: each distinct info message passes once,
    the ones matching ``drop`` (compiled patterns) never; warnings and other loggers'
    records always pass."""

    def __init__(self, drop: tuple[re.Pattern, ...] = _DROP_INFO) -> None:
        super().__init__()
        self.drop = drop
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(("lightning", "pytorch_lightning")):
            return True  # on a shared (root) handler: other loggers pass untouched
        text = record.getMessage()
        if any(p.search(text) for p in self.drop):
            return False
        if record.levelno >= logging.WARNING:
            return True
        if text in self.seen:
            return False
        self.seen.add(text)
        return True


_FILTER = OnceFilter()

#: Characters that move the cursor, reorder or clear what a terminal shows without being
#: control characters (category ``Cc``): line/paragraph separators, bidirectional overrides.
_INVISIBLE = frozenset("\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def printable(text: str) -> str:
    """``text`` safe for a terminal: every control character (C0, DEL, C1: ESC sequences,
    carriage returns, bells) and every line-separator or bidirectional-override character
    becomes a visible escape (``\\x1b``, ``\\u202e``); newlines and tabs stay as they are."""
    out = []
    for c in str(text):
        if c in "\n\t":
            out.append(c)
        elif unicodedata.category(c) == "Cc":
            out.append(f"\\x{ord(c):02x}")
        elif c in _INVISIBLE:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out)


def quiet_console() -> None:
    """Install the warning filters of :data:`NOISE` and :class:`OnceFilter` on Lightning's
    console loggers (idempotent)."""
    for pattern in NOISE:
        warnings.filterwarnings("ignore", message=pattern)
    try:  # transformers' own bars ("Loading weights", "Writing model shards") on every load
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover - transformers is a dependency
        pass
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logger = logging.getLogger(name)
        targets = [logger, *logger.handlers]
        if logger.propagate:
            targets += logging.getLogger().handlers
        for target in targets:
            if _FILTER not in target.filters:
                target.addFilter(_FILTER)


class StepProgressBar(TQDMProgressBar):
    """One progress bar per fit, counting optimiser steps up to ``trainer.max_steps``.

    Args:
        description: the bar's label (``"RL"``, ``"SFT warm start"``).
        refresh_rate: update every this many batches.
    """

    def __init__(self, description: str = "RL", refresh_rate: int = 1) -> None:
        check_args(StepProgressBar, locals())
        super().__init__(refresh_rate=refresh_rate)
        self.description = description

    def _total(self, trainer) -> int | None:
        steps = trainer.max_steps
        return int(steps) if steps is not None and steps > 0 else None

    def init_train_tqdm(self) -> Tqdm:
        """The bar, labelled and sized from the start (no "Training 0/?" line first)."""
        return Tqdm(
            desc=self.description,
            total=self._total(self.trainer),
            initial=int(self.trainer.global_step),  # a resumed run starts there
            unit="step",
            position=(2 * self.process_position),
            disable=self.is_disabled,
            leave=True,
            dynamic_ncols=True,
            file=sys.stdout,
            smoothing=0,
            bar_format=self.BAR_FORMAT,
        )

    def on_train_start(self, trainer, pl_module) -> None:
        self.train_progress_bar = self.init_train_tqdm()

    def on_train_epoch_start(self, trainer, *_: Any) -> None:
        """One bar for the whole fit: epochs of an endless rollout stream mean nothing."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        bar = self.train_progress_bar
        if bar is None or bar.disable:
            return
        if (batch_idx + 1) % max(self.refresh_rate, 1) == 0 or trainer.global_step == bar.total:
            bar.n = int(trainer.global_step)
            bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=False)
            bar.refresh()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        """Nothing: the bar lives until the end of fit."""

    def on_train_end(self, trainer, pl_module) -> None:
        bar = self.train_progress_bar
        if bar is not None and not bar.disable and bar.n != trainer.global_step:
            bar.n = int(trainer.global_step)
            bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=False)
            bar.refresh()
        super().on_train_end(trainer, pl_module)

    def get_metrics(self, trainer, pl_module) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items
