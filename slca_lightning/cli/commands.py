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

This module imports no Lightning at load time: the classes live in
:mod:`slca_lightning.cli.app`, and the text of ``slca fit --help`` (and ``slca --help``) is
kept in ``$SLCA_CACHE/help/`` keyed by the versions of Python and the libraries, the
source files of ``slca_lightning`` and ``callbacks`` and the terminal width, so a repeated
``--help`` prints at once (importing Lightning alone takes several seconds).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import io
import os
import sys
import tempfile
from typing import Any

from slca_lightning.cli.errors import debug_enabled, one_line
from slca_lightning.config.checks import ConfigError
from slca_lightning.models.cached_folders import default_cache_dir
from slca_lightning.training.checkpoints import UntrustedCheckpointError

__all__ = [
    "ConfigError",
    "help_cache_path",
    "main",
    "one_line",
    "script",
    "sft",
]


def main(args: list[str] | None = None, run: bool = True) -> Any:
    """Build (and by default run) the CLI in-process; returns the
    :class:`~slca_lightning.cli.app.SLCACLI` (tests inspect it)."""
    from slca_lightning.rollout.datamodule import RolloutDataModule
    from slca_lightning.training.module import SLCAGRPOModule

    return _cli(SLCAGRPOModule, RolloutDataModule, args, run)


def sft(args: list[str] | None = None, run: bool = True) -> Any:
    """``slca sft``: LightningCLI over :class:`~slca_lightning.models.sft.SFTModule` and
    :class:`~slca_lightning.models.sft.SFTDataModule` (``args`` without a subcommand; ``fit`` is
    implied when ``run``), with the same checks, thread setting and provenance as ``slca
    fit``. ``model.output_dir`` receives the trained model as an HF folder."""
    from slca_lightning.models.sft import SFTDataModule, SFTModule

    args = list(sys.argv[2:] if args is None else args)
    return _cli(SFTModule, SFTDataModule, ["fit", *args] if run else args, run)


def _cli(module_class: type, datamodule_class: type, args: list[str] | None, run: bool) -> Any:
    """:class:`~slca_lightning.cli.app.SLCACLI` over the two classes; the run's thread count
    (``--threads``) ends with it, so callers in-process keep theirs."""
    import torch

    from slca_lightning.cli.app import SLCACLI
    from slca_lightning.cli.console import quiet_console

    quiet_console()
    threads = torch.get_num_threads()
    try:
        return SLCACLI(
            module_class,
            datamodule_class,
            args=args,
            run=run,
            save_config_kwargs={"overwrite": True},
        )
    finally:
        torch.set_num_threads(threads)


# -- the help cache -------------------------------------------------------------------------
_HELP_ARGV = (["--help"], ["-h"], ["fit", "--help"], ["fit", "-h"])
_LIBRARIES = ("lightning", "jsonargparse", "torch", "transformers", "peft", "docstring-parser")


def help_cache_path(argv: list[str]) -> str | None:
    """Where the text of ``slca <argv>`` is cached, or None when that command is not a plain
    ``--help`` (a ``--config`` changes the defaults shown, so it is never cached)."""
    if list(argv) not in _HELP_ARGV:
        return None
    prog = os.path.basename(sys.argv[0]) if sys.argv else ""
    parts = [sys.version, sys.executable, prog, " ".join(argv), os.environ.get("COLUMNS", "")]
    try:
        parts.append(str(os.get_terminal_size(sys.__stdout__.fileno()).columns))
    except (OSError, ValueError, AttributeError):
        parts.append("-")
    for lib in _LIBRARIES:
        try:
            parts.append(f"{lib}={importlib.metadata.version(lib)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{lib}=-")
    for package in ("slca_lightning", "callbacks"):
        spec = importlib.util.find_spec(package)
        for folder in (spec and spec.submodule_search_locations) or []:
            for root, dirs, files in os.walk(folder):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(files):
                    if name.endswith(".py"):
                        st = os.stat(os.path.join(root, name))
                        parts.append(f"{os.path.join(root, name)}:{st.st_size}:{st.st_mtime_ns}")
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]
    return os.path.join(default_cache_dir(), "help", f"{digest}.txt")


class _Tee(io.TextIOBase):
    """Writes go to ``stream`` and are kept (the help text, to cache it)."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.parts = stream, []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _store(path: str, text: str) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError:  # a read-only cache only costs the speed-up
        pass


def _help(argv: list[str]) -> bool:
    """Serve ``slca [fit] --help`` from the cache, or run it and cache its text; False when
    ``argv`` is not such a command."""
    path = help_cache_path(argv)
    if path is None:
        return False
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as fh:
            sys.stdout.write(fh.read())
        sys.stdout.flush()
        return True
    tee, real = _Tee(sys.stdout), sys.stdout
    sys.stdout = tee
    try:
        main(argv)
    except SystemExit as done:
        if done.code not in (0, None):
            raise
        _store(path, "".join(tee.parts))
    finally:
        sys.stdout = real
    return True


def script() -> None:
    """The ``slca`` console script: runs :func:`main`, exits 0 on success, 2 with one line
    on stderr for a configuration error, an untrusted checkpoint or a malformed task file
    (``SLCA_DEBUG=1`` shows the traceback instead).

    ``slca eval ...`` goes to :mod:`slca_lightning.cli.evaluate` instead (evaluators on a
    checkpoint or a model). (Returning the CLI object from a console-script entry point
    would make ``sys.exit`` print it and exit with status 1.)
    """
    argv = sys.argv[1:]
    if argv[:1] == ["sft"]:
        _user_errors(lambda: sft(argv[1:]))
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
    _user_errors(lambda: _help(argv) or main())


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
