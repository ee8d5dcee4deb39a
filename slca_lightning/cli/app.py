"""The classes behind the ``slca`` command (imported by :mod:`slca_lightning.cli.commands` only when
a command runs, so that ``slca fit --help`` served from its cache never imports Lightning).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from slca_lightning.cli.errors import debug_enabled, one_line
from slca_lightning.config.checks import ConfigError, validate_config
from slca_lightning.training.checkpoints import UntrustedCheckpointError
from slca_lightning.training.threads import apply_threads

__all__ = ["SLCACLI", "ResumePoint", "SLCAArgumentParser", "version_folder"]


@dataclass
class ResumePoint:
    """Where ``--ckpt_path`` resumes: the checkpoint, its global step and the CSV loggers'
    row counts it stored (:data:`callbacks.run_folder.LOG_ROWS_KEY`)."""

    path: str
    step: int
    rows: dict[str, int] = field(default_factory=dict)


def version_folder(ckpt_path: str) -> tuple[str, int] | None:
    """``(<save_dir>/<name>, N)`` when ``ckpt_path`` lies in
    ``<save_dir>/<name>/version_N/checkpoints/``, else None."""
    ckpt_dir = os.path.dirname(os.path.abspath(ckpt_path))
    if os.path.basename(ckpt_dir) != "checkpoints":
        return None
    version_dir = os.path.dirname(ckpt_dir)
    found = re.fullmatch(r"version_(\d+)", os.path.basename(version_dir))
    return (os.path.dirname(version_dir), int(found.group(1))) if found else None


def _logger_kind(entry: Any) -> str | None:
    """``"csv"`` or ``"tensorboard"`` for a logger config entry of those classes, else None."""
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    path = entry.get("class_path") if hasattr(entry, "get") else None
    if not isinstance(path, str) or "." not in path:
        return None
    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    if isinstance(cls, type) and issubclass(cls, CSVLogger):
        return "csv"
    if isinstance(cls, type) and issubclass(cls, TensorBoardLogger):
        return "tensorboard"
    return None


class SLCAArgumentParser(LightningArgumentParser):
    """LightningCLI's parser, but a parse error prints one line (no usage dump) and exits 2.

    The usage and the option list are printed by ``--help`` only. With ``exit_on_error``
    off (or ``SLCA_DEBUG=1``) errors are raised as jsonargparse does.
    """

    #: the command line being parsed (set by :class:`SLCACLI`), read by the error messages
    argv: tuple[str, ...] = ()

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error or debug_enabled():
            return super().error(message, ex)
        self._logger.error(message)
        from slca_lightning.cli.parse_errors import explain

        better = explain(one_line(message, limit=4000), self, self.argv)
        sys.stderr.write(f"slca: error: {one_line(better, limit=1000)}\n")
        sys.exit(2)


class SLCACLI(LightningCLI):
    """LightningCLI with the project's checks: full option names only (no abbreviations),
    every numeric setting range-checked before anything is built, one-line errors, and
    ``--ckpt_path`` checkpoints loaded without running code from them.

    Every fit also gets :class:`~callbacks.run_folder.RunFolder` (the run folder printed at
    the start, the checkpoints and reports written at the end), and, when checkpointing is
    on and no ``ModelCheckpoint`` is configured, ``ModelCheckpoint(save_last=True,
    save_top_k=0)``: ``<log_dir>/checkpoints/last.ckpt``, written at the end of fit (after
    the end-of-fit evaluations), is the run's one checkpoint.

    A run resumed with ``--ckpt_path <save_dir>/<name>/version_N/checkpoints/X.ckpt``
    continues in ``version_N``: the CSV and TensorBoard loggers whose version is not set get
    ``version=N`` (TensorBoard also ``purge_step``, hiding the first run's events the resumed
    run logs again), and ``metrics.csv`` keeps the rows logged before the checkpoint and
    drops the later ones, which the resumed run logs again
    (:func:`~callbacks.run_folder.resume_rows`). A checkpoint elsewhere starts a new version
    folder, and the first line of the fit says so.
    """

    def __init__(self, *args: Any, prog: str = "slca fit", **kwargs: Any) -> None:
        kwargs.setdefault("parser_class", SLCAArgumentParser)
        kwargs.setdefault("parser_kwargs", {}).setdefault("prog", prog)
        self.prog = prog
        argv = kwargs.get("args")
        self._argv = (
            [str(a) for a in (sys.argv[1:] if argv is None else argv)]
            if not isinstance(argv, dict)
            else []
        )
        self._resume: ResumePoint | None = None
        self._resume_note: str | None = None
        self._continue: dict[str, list[dict[str, str]]] = {}  # CSV log_dir -> kept rows
        super().__init__(*args, **kwargs)

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """``fit`` only: the module has no validation, test or predict step (the held-out
        evaluation runs inside fit and as ``slca eval``)."""
        return {"fit": LightningCLI.subcommands()["fit"]}

    def _add_subcommands(self, parser: LightningArgumentParser, **kwargs: Any) -> None:
        super()._add_subcommands(parser, **kwargs)
        for sub in self._subcommand_parsers.values():
            sub.prog = self.prog  # "slca fit" / "slca sft", not "slca [options] fit"

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        kwargs.setdefault("allow_abbrev", False)
        parser = super().init_parser(**kwargs)
        parser.argv = tuple(self._argv)
        return parser

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument(
            "--threads",
            type=int | None,
            default=None,
            help=(
                "torch threads of this run (rollouts, updates, evaluation). Default: "
                "OMP_NUM_THREADS when set, else the cores the machine's load average leaves "
                "free, at least 1 (slca_lightning.training.threads); logged and kept in provenance.json."
            ),
        )
        parser.add_argument(
            "--trust_class_prefix",
            type=list[str],
            default=[],
            help=(
                "Packages (e.g. mypkg) whose classes a --ckpt_path checkpoint may name besides "
                "slca_lightning and callbacks; anything else in a checkpoint is refused."
            ),
        )

    # -- config time ----------------------------------------------------------------------
    def _section(self) -> Any:
        sub = self.config.get("subcommand")
        return self.config[sub] if sub else self.config

    def _parse_ckpt_path(self) -> None:
        """Merge the model hyper-parameters of ``--ckpt_path`` into the config, as Lightning
        does, but only after the checkpoint passed :func:`~slca_lightning.training.checkpoints.
        load_checkpoint` (weights-only, trusted class paths): nothing in it is imported
        before that."""
        sub = self.config.get("subcommand")
        if not sub:
            return
        section = self.config[sub]
        ckpt_path = section.get("ckpt_path")
        if not ckpt_path or not os.path.isfile(ckpt_path):
            return
        from callbacks.run_folder import LOG_ROWS_KEY
        from slca_lightning.training.checkpoints import load_checkpoint

        trust = section.get("trust_class_prefix") or []
        ckpt = load_checkpoint(ckpt_path, trust)
        rows = ckpt.get(LOG_ROWS_KEY)
        self._resume = ResumePoint(ckpt_path, int(ckpt.get("global_step") or 0), dict(rows or {}))
        hparams = dict(ckpt.get("hyper_parameters") or {})
        hparams.pop("_instantiator", None)
        if not hparams:
            return
        if "_class_path" in hparams:
            hparams = {"class_path": hparams.pop("_class_path"), "dict_kwargs": hparams}
        self.config = self.parser.parse_object({sub: {"model": hparams}}, self.config)

    def before_instantiate_classes(self) -> None:
        section = self._section()
        roots = {"model": self.model_class, "data": self.datamodule_class}
        validate_config(section, {k: v for k, v in roots.items() if v is not None})
        threads = section.get("threads")
        if threads is not None and threads < 1:
            raise ConfigError("threads", "must be an integer >= 1 (or null: the default)", threads)
        try:
            apply_threads(threads, where=f"slca {self.config.get('subcommand') or ''}".strip())
        except ValueError as err:  # a malformed OMP_NUM_THREADS
            raise ConfigError("OMP_NUM_THREADS", one_line(str(err))) from None
        self._continue_run_folder(section)

    def _continue_run_folder(self, section: Any) -> None:
        """A resumed run's CSV/TensorBoard loggers take the version of the folder its
        checkpoint lies in (see the class docstring); the rows ``metrics.csv`` keeps are
        read here and written back once the trainer is built."""
        from callbacks.run_folder import resume_rows

        resume = self._resume
        trainer = section.get("trainer") if resume is not None else None
        if resume is None or trainer is None:
            return
        value = trainer.get("logger")
        entries = [e for e in (value if isinstance(value, list) else [value]) if e is not None]
        loggers = []
        for entry in entries:
            kind = _logger_kind(entry)
            args = entry.get("init_args") if kind else None
            if args is not None and args.get("version") is None:
                save_dir = str(args.get("save_dir") or ".")
                name = args.get("name") or ""
                loggers.append((kind, args, os.path.abspath(os.path.join(save_dir, name)), name))
        found = version_folder(resume.path)
        if found is None or not any(root == found[0] for _, _, root, _ in loggers):
            if value is not False:  # no logger: nothing is logged anywhere
                self._resume_note = (
                    f"resumed from {resume.path}, which is not in <save_dir>/<name>/version_N/"
                    "checkpoints/ of a CSV or TensorBoard logger configured for this run: "
                    "logging to a new folder"
                )
            return
        version = found[1]
        purge, kept_total, dropped_total = resume.step, 0, 0
        for kind, args, logger_root, name in loggers:
            args["version"] = version
            if kind != "csv":
                continue
            log_dir = os.path.join(logger_root, f"version_{version}")
            key = os.path.join(name, f"version_{version}")
            kept, dropped = resume_rows(
                os.path.join(log_dir, "metrics.csv"), resume.rows.get(key), resume.step
            )
            self._continue[os.path.abspath(log_dir)] = kept
            kept_total, dropped_total = kept_total + len(kept), dropped_total + dropped
            if any(int(float(r.get("step") or -1)) >= resume.step for r in kept):
                purge = resume.step + 1  # the checkpoint came after the rows of its step
        for kind, args, _, _ in loggers:
            if kind == "tensorboard" and args.get("purge_step") is None:
                args["purge_step"] = purge
        note = f"resumed at step {resume.step}: continuing version_{version}"
        if self._continue:
            note += f", metrics.csv keeps its {kept_total} rows logged before the checkpoint"
            if dropped_total:
                note += f" (the {dropped_total} logged after it are logged again)"
        self._resume_note = note

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except (ConfigError, UntrustedCheckpointError):
            raise
        except ValueError as err:  # a constructor refusing a setting: a config error too
            if debug_enabled():
                raise
            from slca_lightning.cli.parse_errors import explain

            better = explain(one_line(str(err), limit=4000), self.parser, self._argv)
            if better.startswith("trainer.logger: "):  # says its own key
                raise ConfigError(*better.split(": ", 1)) from err
            raise ConfigError("config", one_line(better)) from err
        self._write_back_metrics()

    def _write_back_metrics(self) -> None:
        """Rank zero: the CSV loggers of a resumed run go on from the rows kept of their
        folder's ``metrics.csv`` (:meth:`_continue_run_folder`)."""
        trainer = getattr(self, "trainer", None)
        if not self._continue or trainer is None or not trainer.is_global_zero:
            return
        from lightning.pytorch.loggers import CSVLogger

        from callbacks.run_folder import continue_metrics

        for logger in trainer.loggers:
            if not isinstance(logger, CSVLogger):
                continue
            kept = self._continue.get(os.path.abspath(logger.log_dir))
            if kept is not None:
                continue_metrics(logger, kept)

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list) -> Any:
        """Lightning's trainer, with :class:`~slca_lightning.training.console.StepProgressBar` (one
        bar counting optimiser steps) unless the progress bar is off or one is configured, and
        on a fit :class:`~callbacks.run_folder.RunFolder`, ``RunProvenance`` and, when
        checkpointing is on and no ``ModelCheckpoint`` is configured,
        ``ModelCheckpoint(save_last=True, save_top_k=0)`` (``checkpoints/last.ckpt``)."""
        from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar

        from callbacks.run_folder import RunFolder
        from slca_lightning.training.console import StepProgressBar

        configured = [*(config.get("callbacks") or []), *callbacks]
        if config.get("enable_progress_bar", True) is not False and not any(
            isinstance(c, ProgressBar) for c in configured
        ):
            label = getattr(self.model_class, "progress_label", "RL")
            callbacks = [*callbacks, StepProgressBar(label)]
        if self.config.get("subcommand") in (None, "fit"):  # <log_dir>/provenance.json, every fit
            from slca_lightning.cli.provenance import RunProvenance

            section = self._section()
            resolved = section.as_dict() if hasattr(section, "as_dict") else dict(section)
            callbacks = [*callbacks, RunProvenance(config=resolved)]
            callbacks = [*callbacks, RunFolder(note=self._resume_note, prog=self.prog)]
            checkpointing = config.get("enable_checkpointing") is not False
            if checkpointing and not any(isinstance(c, ModelCheckpoint) for c in configured):
                callbacks = [*callbacks, ModelCheckpoint(save_last=True, save_top_k=0)]
        return super()._instantiate_trainer(config, callbacks)

    def _prepare_subcommand_kwargs(self, subcommand: str) -> dict[str, Any]:
        kwargs = super()._prepare_subcommand_kwargs(subcommand)
        if "weights_only" in kwargs:
            if kwargs["weights_only"] is False:
                raise ConfigError(
                    f"{subcommand}.weights_only",
                    "must be true: checkpoints are loaded without running code from them",
                    False,
                )
            kwargs["weights_only"] = True
        return kwargs
