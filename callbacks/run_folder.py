"""RunFolder: where a fit writes, said on the console, and ``metrics.csv`` kept whole when a
run is resumed into its own folder."""

from __future__ import annotations

import csv
import os
import re
import textwrap
import time
import warnings
from typing import Any

from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger

from slca_lightning.training.console import printable

__all__ = ["LOG_ROWS_KEY", "RunFolder", "continue_metrics", "metrics_rows", "resume_rows"]

#: The checkpoint key under which :class:`RunFolder` keeps the CSV loggers' row counts.
LOG_ROWS_KEY = "slca_log_rows"
#: Order of the report files in the end-of-fit block (others follow, by name).
_REPORT_ORDER = (".md", ".png", ".json", ".jsonl", ".csv", ".html", ".yaml")


def metrics_rows(path: str) -> list[dict[str, str]]:
    """The data rows of a CSV logger's ``metrics.csv``, in the order they were logged (none
    when the file does not exist)."""
    if not os.path.isfile(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def resume_rows(path: str, rows: int | None, step: int) -> tuple[list[dict[str, str]], int]:
    """The rows of the ``metrics.csv`` at ``path`` that a run resumed from a checkpoint
    keeps, and how many it drops (the resumed run logs those again).

    The kept rows are the first ``rows`` (the count :class:`RunFolder` stored in the
    checkpoint: every row logged before it was saved) or, for a checkpoint without that
    count, every row of a step before ``step`` (the checkpoint's global step: a training
    batch logs at the step count before it, so these are the batches the checkpoint saw).
    """
    old = metrics_rows(path)
    if rows is not None:
        kept = old[: max(0, int(rows))]
    else:
        kept = [r for r in old if _step(r) is not None and _step(r) < step]
    return kept, len(old) - len(kept)


def continue_metrics(logger: CSVLogger, kept: list[dict[str, str]]) -> None:
    """Open ``logger``'s writer on the folder of the run being resumed and write ``kept``
    (:func:`resume_rows`) back at once, so that the file goes on from them.

    Lightning's CSV writer deletes an existing ``metrics.csv`` when it opens its folder
    (its warning about it is silenced here: the rows are written back); rows logged later
    are appended, and a new metric rewrites the header with every row kept. Rank zero only
    (the caller checks)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists")
        writer = logger.experiment
    for row in kept:
        values = {k: v for k, v in row.items() if k != "step" and v not in ("", None)}
        writer.log_metrics(values, _step(row))
    writer.save()


def _step(row: dict[str, str]) -> int | None:
    try:
        return int(float(row.get("step") or ""))
    except ValueError:
        return None


def _count_rows(path: str) -> int:
    if not os.path.isfile(path):
        return 0
    with open(path, newline="") as f:
        return max(0, sum(1 for _ in csv.reader(f)) - 1)


class RunFolder(Callback):
    """Says where a fit writes, and keeps the log position in its checkpoints.

    ``slca fit`` adds it to every fit (:class:`~slca_lightning.cli.app.SLCACLI`). On rank zero:

    - at setup, before the model is built or warm-started: one line naming the run's log
      folder (``trainer.log_dir``, e.g. ``runs/quickstart/logs/version_0``) and the other
      loggers' folders (TensorBoard); a fresh run in ``version_N``, N > 0, adds that earlier
      runs (an interrupted one too) are in the lower versions and how to continue one;
    - at the end of fit: one short block: the checkpoint(s) written (``last.ckpt`` first),
      the report files and folders written into the log folder during this fit
      (``in_domain.md``, plots, ``provenance.json``, ``metrics.csv``, transcripts), the
      other loggers' folders, and the ``slca eval`` command for the last checkpoint;
    - whenever a checkpoint is saved: the CSV loggers' metrics are flushed to disk and their
      row counts stored in the checkpoint under :data:`LOG_ROWS_KEY` (``{"<name>/version_N":
      rows}``), so that a run resumed from it into the same folder keeps exactly the rows
      logged before it (:func:`resume_rows`, :func:`continue_metrics`).

    Args:
        note: appended to the first line (the CLI says there how a resumed run continues
            its folder, or why it cannot).
        width: the end block's lines are wrapped at this many characters.
        prog: the command named in the lines (``slca fit``, ``slca sft``).
    """

    def __init__(self, note: str | None = None, width: int = 100, prog: str = "slca fit") -> None:
        self.note = note
        self.width = width
        self.prog = prog
        self._t0: float | None = None

    # -- where ---------------------------------------------------------------------------
    @staticmethod
    def _other_folders(trainer) -> list[tuple[str, str]]:
        out = []
        for logger in trainer.loggers[1:]:
            folder = getattr(logger, "log_dir", None) or getattr(logger, "save_dir", None)
            if folder:
                name = type(logger).__name__.removesuffix("Logger") or type(logger).__name__
                out.append((name, str(folder)))
        return out

    def setup(self, trainer, pl_module, stage: str) -> None:
        folder = trainer.log_dir  # on every rank: a collective under DDP
        if stage != "fit" or not trainer.is_global_zero:
            return
        self._t0 = time.time()
        if trainer.loggers:
            where = f"{self.prog}: run folder {folder}"
        else:
            where = f"{self.prog}: no logger; checkpoints and reports go to {folder}"
        others = "; ".join(f"{n}: {f}" for n, f in self._other_folders(trainer))
        note = self.note
        number = re.fullmatch(r"version_(\d+)", os.path.basename(str(folder)))
        if note is None and trainer.loggers and number and int(number.group(1)) > 0:
            note = (
                f"a new folder: earlier runs are in version_0..{int(number.group(1)) - 1}; "
                "--ckpt_path <their folder>/checkpoints/last.ckpt continues one there"
            )
        extra = "; ".join(p for p in (others, note) if p)
        print(printable(where + (f" ({extra})" if extra else "")), flush=True)

    # -- the log position in checkpoints -------------------------------------------------
    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        if not trainer.is_global_zero:
            return
        rows = {}
        for logger in trainer.loggers:
            if isinstance(logger, CSVLogger):
                logger.save()  # the rows logged so far are on disk with the checkpoint
                key = os.path.relpath(logger.log_dir, logger.save_dir)
                rows[key] = _count_rows(os.path.join(logger.log_dir, "metrics.csv"))
        if rows:
            checkpoint[LOG_ROWS_KEY] = rows

    # -- what was written ------------------------------------------------------------------
    def _checkpoints(self, trainer) -> list[str]:
        found: list[str] = []
        for cb in trainer.checkpoint_callbacks:
            if not isinstance(cb, ModelCheckpoint):
                continue
            for path in (cb.last_model_path, cb.best_model_path):
                if path and os.path.exists(path) and path not in found:
                    found.append(path)
            folder = cb.dirpath
            if folder and os.path.isdir(folder):
                for name in sorted(os.listdir(folder)):
                    path = os.path.join(folder, name)
                    if path not in found and self._written(path):
                        found.append(path)
        return found

    def _written(self, path: str) -> bool:
        try:
            return self._t0 is None or os.path.getmtime(path) >= self._t0 - 1.0
        except OSError:
            return False

    def _reports(self, folder: str, skip: set[str]) -> tuple[list[str], list[str]]:
        files, folders = [], []
        if not os.path.isdir(folder):
            return files, folders
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if os.path.abspath(path) in skip:
                continue
            if os.path.isdir(path):
                inner = [os.path.join(root, f) for root, _, names in os.walk(path) for f in names]
                n = sum(self._written(p) for p in inner)
                if n:
                    folders.append(f"{name}/ ({n} file{'s' if n > 1 else ''})")
            elif self._written(path):
                files.append(name)
        ext = {e: i for i, e in enumerate(_REPORT_ORDER)}
        files.sort(key=lambda n: (ext.get(os.path.splitext(n)[1], len(ext)), n))
        return files, folders

    def summary(self, trainer, folder: str | None = None) -> str:
        """The end-of-fit block (see the class docstring) for the log folder ``folder``
        (default: ``trainer.log_dir``)."""
        folder = str(folder or trainer.log_dir or trainer.default_root_dir)
        ckpts = self._checkpoints(trainer)
        skip = {
            os.path.abspath(cb.dirpath)
            for cb in trainer.checkpoint_callbacks
            if isinstance(cb, ModelCheckpoint) and cb.dirpath
        }
        files, folders = self._reports(folder, skip)
        lines: list[tuple[str, str]] = []
        if ckpts:
            more = ", ".join(os.path.basename(p) for p in ckpts[1:])
            lines.append(("checkpoint", ckpts[0] + (f" (also {more})" if more else "")))
        else:
            lines.append(("checkpoint", "none (trainer.enable_checkpointing is off)"))
        if files:
            lines.append(("reports", ", ".join(files)))
        if folders:
            lines.append(("folders", ", ".join(folders)))
        lines += self._other_folders(trainer)
        if ckpts and ckpts[0].endswith(".ckpt"):
            lines.append(("evaluate", f"slca eval --checkpoint {ckpts[0]}"))
        label = max(len(k) for k, _ in lines) + 2
        out = [f"{self.prog}: done; run folder {folder}"]
        for key, text in lines:
            out += textwrap.wrap(
                text,
                width=max(self.width, label + 40),
                initial_indent=f"  {key:<{label}}",
                subsequent_indent=" " * (label + 2),
                break_on_hyphens=False,
                break_long_words=False,
            )
        return "\n".join(out)

    def on_fit_end(self, trainer, pl_module) -> None:
        folder = trainer.log_dir  # on every rank (see setup)
        if not trainer.is_global_zero:
            return
        for logger in trainer.loggers:  # metrics.csv is otherwise written after this hook
            if isinstance(logger, CSVLogger):
                logger.save()
        print(printable("\n" + self.summary(trainer, folder)), flush=True)
