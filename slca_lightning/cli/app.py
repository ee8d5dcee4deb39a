"""The classes behind the ``slca`` command (imported by :mod:`slca_lightning.cli.commands` only when
a command runs, so that ``slca fit --help`` served from its cache never imports Lightning).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from slca_lightning.cli.errors import debug_enabled, one_line
from slca_lightning.config.checks import ConfigError, validate_config
from slca_lightning.training.checkpoints import UntrustedCheckpointError
from slca_lightning.training.threads import apply_threads

__all__ = ["SLCACLI", "SLCAArgumentParser"]


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
    ``--ckpt_path`` checkpoints loaded without running code from them."""

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
        from slca_lightning.training.checkpoints import load_checkpoint

        trust = section.get("trust_class_prefix") or []
        hparams = dict(load_checkpoint(ckpt_path, trust).get("hyper_parameters") or {})
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
            if better.startswith("trainer.logger:"):  # says its own key
                raise ConfigError(*better.split(": ", 1)) from err
            raise ConfigError("config", one_line(better)) from err

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list) -> Any:
        """Lightning's trainer, with :class:`~slca_lightning.training.console.StepProgressBar` (one
        bar counting optimiser steps) unless the progress bar is off or one is configured."""
        from lightning.pytorch.callbacks import ProgressBar

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
