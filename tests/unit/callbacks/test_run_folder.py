"""RunFolder's pieces without a fit: which ``metrics.csv`` rows a resumed run keeps, Lightning's
real CSVLogger going on from them (it deletes an existing file when it opens its folder),
and the checkpoint's version folder read from its path."""

from __future__ import annotations

import csv
import warnings
from pathlib import Path

from lightning.pytorch.loggers import CSVLogger

from callbacks.run_folder import continue_metrics, metrics_rows, resume_rows
from slca_lightning.cli.app import version_folder


def first_run(root: Path) -> Path:
    """A finished 2-step run's metrics.csv: an evaluation at step 0, training rows at steps
    0 and 1, an end-of-fit evaluation at step 2 (the order Lightning writes them)."""
    logger = CSVLogger(root, name="logs")
    logger.log_metrics({"eval/acc": 0.25}, step=0)
    logger.log_metrics({"train/loss": 1.5}, step=0)
    logger.log_metrics({"train/loss": 1.25}, step=1)
    logger.log_metrics({"eval/acc": 0.5}, step=2)
    logger.finalize("success")
    return Path(logger.log_dir) / "metrics.csv"


def test_the_stored_count_keeps_exactly_the_rows_logged_before_the_checkpoint(tmp_path):
    path = first_run(tmp_path)
    # checkpoint saved after the end-of-fit evaluation: all 4 rows are its own
    kept, dropped = resume_rows(str(path), 4, step=2)
    assert [r["step"] for r in kept] == ["0", "0", "1", "2"] and dropped == 0
    # checkpoint saved before it: the resumed run evaluates step 2 again
    kept, dropped = resume_rows(str(path), 3, step=2)
    assert [r["step"] for r in kept] == ["0", "0", "1"] and dropped == 1


def test_without_a_count_the_rows_before_the_checkpoint_step_are_kept(tmp_path):
    path = first_run(tmp_path)
    kept, dropped = resume_rows(str(path), None, step=1)
    assert [(r["step"], r["train/loss"]) for r in kept] == [("0", ""), ("0", "1.5")]
    assert dropped == 2
    assert resume_rows(str(tmp_path / "none.csv"), None, step=3) == ([], 0)


def test_the_csv_logger_goes_on_from_the_kept_rows(tmp_path):
    path = first_run(tmp_path)
    kept, _ = resume_rows(str(path), None, step=2)
    logger = CSVLogger(tmp_path, name="logs", version=0)  # the resumed run's logger
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "previous log files will be deleted"
        continue_metrics(logger, kept)
    assert [r["step"] for r in metrics_rows(str(path))] == ["0", "0", "1"]  # on disk already
    logger.log_metrics({"train/loss": 1.0}, step=2)
    logger.log_metrics({"train/loss": 0.75, "train/new_metric": 3.0}, step=3)  # a new column
    logger.finalize("success")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["step"], r["train/loss"]) for r in rows] == [
        ("0", ""),
        ("0", "1.5"),
        ("1", "1.25"),
        ("2", "1.0"),
        ("3", "0.75"),
    ]
    assert rows[0]["eval/acc"] == "0.25" and rows[-1]["train/new_metric"] == "3.0"


def test_the_version_folder_of_a_checkpoint_path(tmp_path):
    ckpt = tmp_path / "runs" / "logs" / "version_3" / "checkpoints" / "last.ckpt"
    assert version_folder(str(ckpt)) == (str(tmp_path / "runs" / "logs"), 3)
    assert version_folder(str(tmp_path / "ckpt" / "epoch=0-step=2.ckpt")) is None
    assert version_folder(str(tmp_path / "version_x" / "checkpoints" / "a.ckpt")) is None
