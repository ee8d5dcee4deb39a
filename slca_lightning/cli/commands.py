"""The ``slca`` command: LightningCLI over :class:`SLCAGRPOModule` and :class:`RolloutDataModule`.

``slca fit --config configs/quickstart.yaml`` trains; several ``--config`` files layer (later
wins); any component is swapped by ``class_path``, e.g.
``--model.router slca_lightning.advantages.GRPORouter``. ``main(args)`` runs in-process
(tests call it with a list of arguments). ``slca eval`` runs evaluators standalone
(:mod:`slca_lightning.cli.evaluate`); ``slca sft --config configs/sft_smollm2.yaml``
warm-starts any model by SFT (:func:`sft`) and ``slca export --checkpoint X --out DIR``
writes a trained policy as an HF folder (:mod:`slca_lightning.cli.export`).

Configuration errors end the command with one line on stderr and exit status 2: an unknown
or mistyped key or value (options must be spelled out in full: no abbreviations), and a
numeric setting outside its range (:mod:`slca_lightning.config.checks`), e.g.
``slca: error: data.max_turns: must be an integer >= 1, got -1``. The usage text is printed
by ``--help`` only. ``SLCA_DEBUG=1`` shows the traceback instead.

``--ckpt_path`` checkpoints are read with ``weights_only=True`` and the component class
paths stored in them must lie under ``slca_lightning`` or ``callbacks`` or a prefix given
with ``--trust_class_prefix`` (:mod:`slca_lightning.training.checkpoints`).

This module imports no Lightning at load time: ``slca`` and ``slca --help`` print the list of
commands at once, the classes live in :mod:`slca_lightning.cli.app`, and ``slca fit --help``
is served from a cache (:mod:`slca_lightning.cli.help_cache`).
"""

from __future__ import annotations

import difflib
import sys
from typing import Any

from slca_lightning.cli.errors import debug_enabled, one_line
from slca_lightning.cli.help_cache import serve_help
from slca_lightning.config.checks import ConfigError
from slca_lightning.training.checkpoints import UntrustedCheckpointError

__all__ = ["COMMANDS", "main", "overview", "script", "sft"]

#: Every ``slca`` subcommand and what it does, in the order a newcomer meets them.
COMMANDS: dict[str, str] = {
    "fit": "train a policy with SLCA-GRPO or any other router (configs/quickstart.yaml to start)",
    "sft": "supervised warm start of any model on tool-calling demonstrations (HF folder out)",
    "eval": "run evaluators (in-domain, BFCL, τ²) on a checkpoint or a model, standalone",
    "export": "write a fit checkpoint's policy as a Hugging Face folder (LoRA merged)",
    "warm-start": "retrain a shipped warm start by its recipe (suite-sft, suite-pooled-sft)",
}
#: Lightning's other subcommands, and where what they would do lives here.
_REMOVED = {
    "validate": "the held-out evaluation runs inside fit (callbacks.InDomainEval) and "
    "standalone as `slca eval --checkpoint CKPT --evaluators in_domain`",
    "test": "evaluation is `slca eval` (in_domain, bfcl, tau2)",
    "predict": "rollouts of a trained policy are written by `slca eval` and by fit's callbacks",
}


def overview() -> str:
    """What ``slca`` and ``slca --help`` print: every subcommand with one line each."""
    width = max(map(len, COMMANDS))
    lines = [
        "usage: slca COMMAND [options]   (slca COMMAND --help for its options)",
        "",
        "SLCA-GRPO: segment-locked credit assignment for RL fine-tuning of tool-calling agents.",
        "",
        "commands:",
        *(f"  {name:<{width}}  {text}" for name, text in COMMANDS.items()),
        "",
        "start with:  slca fit --config configs/quickstart.yaml",
    ]
    return "\n".join(lines)


def main(args: list[str] | None = None, run: bool = True) -> Any:
    """Build (and by default run) the CLI in-process; returns the
    :class:`~slca_lightning.cli.app.SLCACLI` (tests inspect it)."""
    from slca_lightning.rollout.datamodule import RolloutDataModule
    from slca_lightning.training.module import SLCAGRPOModule

    return _cli(SLCAGRPOModule, RolloutDataModule, args, run, "slca fit")


def sft(args: list[str] | None = None, run: bool = True) -> Any:
    """``slca sft``: LightningCLI over :class:`~slca_lightning.models.sft.SFTModule` and
    :class:`~slca_lightning.models.sft.SFTDataModule` (``args`` without a subcommand; ``fit`` is
    implied when ``run``), with the same checks, thread setting and provenance as ``slca
    fit``. ``model.output_dir`` receives the trained model as an HF folder."""
    from slca_lightning.models.sft import SFTDataModule, SFTModule

    args = list(sys.argv[2:] if args is None else args)
    return _cli(SFTModule, SFTDataModule, ["fit", *args] if run else args, run, "slca sft")


def _cli(
    module_class: type, datamodule_class: type, args: list[str] | None, run: bool, prog: str
) -> Any:
    """:class:`~slca_lightning.cli.app.SLCACLI` over the two classes; the run's thread count
    (``--threads``) ends with it, so callers in-process keep theirs."""
    import torch

    from slca_lightning.cli.app import SLCACLI
    from slca_lightning.training.console import quiet_console

    quiet_console()
    threads = torch.get_num_threads()
    try:
        return SLCACLI(
            module_class,
            datamodule_class,
            args=args,
            run=run,
            save_config_kwargs={"overwrite": True},
            prog=prog,
        )
    finally:
        torch.set_num_threads(threads)


def script() -> None:
    """The ``slca`` console script: dispatches to the subcommand of :data:`COMMANDS`, exits 0
    on success, 2 with one line on stderr for a configuration error, an untrusted checkpoint
    or a malformed task file (``SLCA_DEBUG=1`` shows the traceback instead). ``slca`` alone
    and ``slca --help`` print :func:`overview`. (Returning the CLI object from a
    console-script entry point would make ``sys.exit`` print it and exit with status 1.)
    """
    argv = sys.argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(overview())
        return
    command = argv[0]
    if command not in COMMANDS:
        sys.stderr.write(f"slca: error: {unknown_command(command)}\n")
        raise SystemExit(2)
    if command == "fit":
        _user_errors(lambda: serve_help(argv, lambda: main(argv)) or main(argv))
        return
    if command == "sft":
        _user_errors(lambda: serve_help(argv, lambda: sft(argv[1:])) or sft(argv[1:]))
        return
    if argv[:1] == ["export"]:
        from slca_lightning.cli.export import main as export

        _user_errors(lambda: export(argv[1:]))
        return
    if argv[:1] == ["warm-start"]:
        from slca_lightning.cli.warm_start import main as build_warm_start

        _user_errors(lambda: build_warm_start(argv[1:]))
        return
    if argv[:1] == ["eval"]:
        from slca_lightning.cli.evaluate import run_command

        run_command(argv[1:])
        return


def unknown_command(command: str) -> str:
    """The one-line error for ``slca COMMAND`` when COMMAND is not a subcommand."""
    known = ", ".join(COMMANDS)
    if command in _REMOVED:
        return f"there is no `slca {command}`: {_REMOVED[command]} (commands: {known})"
    if command.startswith("-"):
        return f"put a command first, e.g. `slca fit {command} ...` (commands: {known})"
    close = difflib.get_close_matches(command, list(COMMANDS), n=1)
    hint = f"did you mean `slca {close[0]}`? " if close else ""
    return f"unknown command {command!r}; {hint}commands: {known}"


def _user_errors(run: Any) -> None:
    """Run ``run()``; a settings, checkpoint or task-file error the user made ends the
    command with one line on stderr and exit status 2 (``SLCA_DEBUG=1``: the traceback)."""
    try:
        run()
    except FileNotFoundError as err:
        if debug_enabled():
            raise
        sys.stderr.write(f"slca: error: {one_line(str(err))}\n")
        raise SystemExit(2) from None
    except ValueError as err:
        from slca_lightning.data.format_errors import DataFormatError

        user_error = (ConfigError, UntrustedCheckpointError, DataFormatError)
        if not isinstance(err, user_error) or debug_enabled():
            raise
        sys.stderr.write(f"slca: error: {one_line(str(err))}\n")
        raise SystemExit(2) from None


if __name__ == "__main__":
    script()
