"""The ``slca`` command: LightningCLI over :class:`SLCAGRPOModule` and :class:`RolloutDataModule`.

``slca fit --config configs/quickstart.yaml`` trains; several ``--config`` files layer (later
wins); any component is swapped by ``class_path``, e.g.
``--model.router slca_lightning.advantages.GRPORouter``. ``main(args)`` runs in-process
(tests call it with a list of arguments). ``slca eval`` runs evaluators standalone
(:mod:`slca_lightning.eval.standalone`).
"""

from __future__ import annotations

import sys

from lightning.pytorch.cli import LightningCLI

from slca_lightning.module import SLCAGRPOModule
from slca_lightning.rollout.datamodule import RolloutDataModule


class SLCACLI(LightningCLI):
    """LightningCLI with the project's defaults (config saved beside the logs, overwritten)."""

    def add_arguments_to_parser(self, parser) -> None:
        parser.link_arguments("model.temperature", "data.temperature")


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
    """The ``slca`` console script: runs :func:`main`, exits 0 on success.

    ``slca eval ...`` goes to :mod:`slca_lightning.eval.standalone` instead (evaluators on a
    checkpoint or a model). (Returning the CLI object from a console-script entry point
    would make ``sys.exit`` print it and exit with status 1.)
    """
    if sys.argv[1:2] == ["eval"]:
        from slca_lightning.eval.standalone import main as eval_main

        eval_main(sys.argv[2:])
        return
    main()


if __name__ == "__main__":
    script()
