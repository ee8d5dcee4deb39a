"""The ``slca`` command: LightningCLI over :class:`SLCAGRPOModule` and :class:`RolloutDataModule`.

``slca fit --config configs/quickstart.yaml`` trains; several ``--config`` files layer (later
wins); any component is swapped by ``class_path``, e.g.
``--model.router slca_lightning.advantages.GRPORouter``. ``main(args)`` runs in-process
(tests call it with a list of arguments). ``slca eval`` runs evaluators standalone
(:mod:`slca_lightning.eval.standalone`).

Configuration errors end the command with one line on stderr and exit status 2: an unknown
or mistyped key or value (options must be spelled out in full: no abbreviations), and a
numeric setting outside its range (:mod:`slca_lightning.config_checks`), e.g.
``slca: error: data.max_turns: must be an integer >= 1, got -1``. The usage text is printed
by ``--help`` only. ``SLCA_DEBUG=1`` shows the traceback instead.

``--ckpt_path`` checkpoints are read with ``weights_only=True`` and the component class
paths stored in them must lie under ``slca_lightning`` or ``callbacks`` or a prefix given
with ``--trust_class_prefix`` (:mod:`slca_lightning.checkpoints`).
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from slca_lightning.checkpoints import UntrustedCheckpointError
from slca_lightning.config_checks import ConfigError, validate_config
from slca_lightning.module import SLCAGRPOModule
from slca_lightning.rollout.datamodule import RolloutDataModule

__all__ = ["SLCACLI", "SLCAArgumentParser", "main", "one_line", "script"]


def _debug() -> bool:
    return os.environ.get("SLCA_DEBUG", "").strip() not in ("", "0", "false")


_UNION = re.compile(
    r'Parser key "(?P<key>[^"]+)": Does not validate against any of the Union subtypes.*?'
    r"Problem with given class_path '(?P<cls>[^']+)':\s*(?P<why>.*?)"
    r"(?:\s+- Expected a <class 'NoneType'>.*)?$",
    re.S,
)


def one_line(message: str, limit: int = 400) -> str:
    """A (possibly multi-line) error message as one line of at most ``limit`` characters;
    jsonargparse's "does not validate against any of the Union subtypes" dump is reduced to
    the component's own complaint."""
    text = " ".join(str(message).split())
    union = _UNION.match(text)
    if union:
        text = f"{union['key']} ({union['cls']}): {union['why']}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class SLCAArgumentParser(LightningArgumentParser):
    """LightningCLI's parser, but a parse error prints one line (no usage dump) and exits 2.

    The usage and the option list are printed by ``--help`` only. With ``exit_on_error``
    off (or ``SLCA_DEBUG=1``) errors are raised as jsonargparse does.
    """

    def error(self, message: str, ex: Exception | None = None):
        if not self.exit_on_error or _debug():
            return super().error(message, ex)
        self._logger.error(message)
        sys.stderr.write(f"slca: error: {one_line(message)}\n")
        sys.exit(2)


class SLCACLI(LightningCLI):
    """LightningCLI with the project's checks: full option names only (no abbreviations),
    every numeric setting range-checked before anything is built, one-line errors, and
    ``--ckpt_path`` checkpoints loaded without running code from them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("parser_class", SLCAArgumentParser)
        super().__init__(*args, **kwargs)

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        kwargs.setdefault("allow_abbrev", False)
        return super().init_parser(**kwargs)

    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("model.temperature", "data.temperature")
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
        does, but only after the checkpoint passed :func:`~slca_lightning.checkpoints.
        load_checkpoint` (weights-only, trusted class paths): nothing in it is imported
        before that."""
        sub = self.config.get("subcommand")
        if not sub:
            return
        section = self.config[sub]
        ckpt_path = section.get("ckpt_path")
        if not ckpt_path or not os.path.isfile(ckpt_path):
            return
        from slca_lightning.checkpoints import load_checkpoint

        trust = section.get("trust_class_prefix") or []
        hparams = dict(load_checkpoint(ckpt_path, trust).get("hyper_parameters") or {})
        hparams.pop("_instantiator", None)
        if not hparams:
            return
        if "_class_path" in hparams:
            hparams = {"class_path": hparams.pop("_class_path"), "dict_kwargs": hparams}
        self.config = self.parser.parse_object({sub: {"model": hparams}}, self.config)

    def before_instantiate_classes(self) -> None:
        validate_config(self._section())

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except (ConfigError, UntrustedCheckpointError):
            raise
        except ValueError as err:  # a constructor refusing a setting: a config error too
            if _debug():
                raise
            raise ConfigError("config", one_line(str(err))) from err

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


def main(args: list[str] | None = None, run: bool = True) -> SLCACLI:
    """Build (and by default run) the CLI in-process; returns it (tests inspect it)."""
    return SLCACLI(
        SLCAGRPOModule,
        RolloutDataModule,
        args=args,
        run=run,
        save_config_kwargs={"overwrite": True},
    )


def script() -> None:
    """The ``slca`` console script: runs :func:`main`, exits 0 on success, 2 with one line
    on stderr for a configuration error (``SLCA_DEBUG=1`` shows the traceback instead).

    ``slca eval ...`` goes to :mod:`slca_lightning.eval.standalone` instead (evaluators on a
    checkpoint or a model). (Returning the CLI object from a console-script entry point
    would make ``sys.exit`` print it and exit with status 1.)
    """
    try:
        if sys.argv[1:2] == ["eval"]:
            from slca_lightning.eval.standalone import main as eval_main

            eval_main(sys.argv[2:])
            return
        main()
    except (ConfigError, UntrustedCheckpointError) as err:
        if _debug():
            raise
        sys.stderr.write(f"slca: error: {one_line(str(err))}\n")
        raise SystemExit(2) from None


if __name__ == "__main__":
    script()
