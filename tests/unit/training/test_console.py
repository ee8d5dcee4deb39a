"""What a fit prints (:mod:`slca_lightning.training.console`): one step-counting bar per fit,
noise filtered, repeated Lightning info lines once."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.demos.boring_classes import BoringModel
from torch.utils.data import DataLoader

from slca_lightning.training.console import OnceFilter, StepProgressBar, quiet_console

ROOT = Path(__file__).resolve().parents[3]


def test_one_bar_counts_optimiser_steps_across_epochs(tmp_path, capsys):
    bar = StepProgressBar("RL")
    trainer = L.Trainer(
        max_steps=7,  # 3 batches per epoch: 3 epochs, one bar
        callbacks=[bar],
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        limit_val_batches=0,  # RL has no validation loop
        default_root_dir=tmp_path,
        accelerator="cpu",
    )
    data = DataLoader(torch.randn(3, 32), batch_size=1)
    trainer.fit(BoringModel(), train_dataloaders=data)
    assert trainer.current_epoch >= 2 and trainer.global_step == 7
    assert bar.train_progress_bar.total == 7 and bar.train_progress_bar.n == 7
    out = capsys.readouterr().out.replace("\r", "\n")
    assert "RL: 100%" in out and "7/7" in out
    assert "Epoch" not in out and "Training" not in out and "/-" not in out
    assert all(line.startswith("RL:") for line in out.splitlines() if "%|" in line)


def test_noise_warnings_are_dropped_and_others_kept():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_console()
        warnings.warn(
            "You are using the `dataloader_iter` step flavor. Here be dragons.",
            UserWarning,
            stacklevel=1,
        )
        warnings.warn("`isinstance(treespec, LeafSpec)` is deprecated", FutureWarning, stacklevel=1)
        warnings.warn("something a user should see", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["something a user should see"]


def test_lightning_info_lines_once_tips_never_other_loggers_untouched():
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Keep()
    handler.addFilter(OnceFilter())
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero.test")
    mine = logging.getLogger("slca_lightning.test_console")
    for logger in (rank_zero, mine):
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    try:
        for _ in range(2):
            rank_zero.info("GPU available: False, used: False")
            rank_zero.info("💡 Tip: For seamless cloud logging, try installing litlogger")
            rank_zero.info("`Trainer.fit` stopped: `max_steps=300` reached.")
            rank_zero.warning("a warning")
            mine.info("same line")
    finally:
        for logger in (rank_zero, mine):
            logger.removeHandler(handler)
    assert records == [
        "GPU available: False, used: False",
        "a warning",
        "same line",
        "a warning",
        "same line",
    ]
