"""Loading ``slca fit`` checkpoints without running code from them.

A Lightning checkpoint is a pickle, and its hyper-parameters name component classes
(``router: {class_path: ...}``) that are imported and instantiated when the module is
rebuilt. A checkpoint from elsewhere is therefore code. Here:

- the file is read with ``torch.load(weights_only=True)``: tensors, containers and plain
  values only; a pickle that needs any other global (``os.system``, ``builtins.eval``, a
  class of some package) is refused before anything runs;
- every class path in the stored hyper-parameters (``class_path`` / ``_class_path`` keys,
  at any depth) must lie under ``slca_lightning`` or ``callbacks`` or a prefix the user
  trusts explicitly (``--trust_class_prefix mypkg``); the instantiator must be Lightning's
  own. Anything else raises :class:`UntrustedCheckpointError` saying which key and why,
  before any import.

Used by ``slca eval --checkpoint``, ``slca fit --ckpt_path`` and
:meth:`SLCAGRPOModule.load_from_checkpoint <slca_lightning.training.module.SLCAGRPOModule>`.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = [
    "TRUSTED_PREFIXES",
    "UntrustedCheckpointError",
    "check_class_paths",
    "class_paths",
    "is_trusted",
    "load_checkpoint",
]

#: Packages whose classes a checkpoint may name without the user's say-so.
TRUSTED_PREFIXES: tuple[str, ...] = ("slca_lightning", "callbacks")
#: The only instantiators Lightning itself accepts (``lightning.pytorch.core.saving``).
_INSTANTIATORS = frozenset(
    {"lightning.pytorch.cli.instantiate_module", "pytorch_lightning.cli.instantiate_module"}
)
_CLASS_KEYS = ("class_path", "_class_path")


class UntrustedCheckpointError(ValueError):
    """A checkpoint that would run code on load (a pickle needing arbitrary globals, or a
    class path outside the trusted prefixes); the message says which part and why."""


def _prefixes(extra: Iterable[str] | str | None) -> tuple[str, ...]:
    if isinstance(extra, str):
        extra = [extra]
    out = list(TRUSTED_PREFIXES)
    for p in extra or ():
        p = str(p).strip().rstrip(".")
        if p:
            out.append(p)
    return tuple(out)


def is_trusted(class_path: str, extra: Iterable[str] | str | None = None) -> bool:
    """Whether ``class_path`` (``pkg.module.Class``) lies under a trusted prefix: the
    prefix itself or a dotted child (``mypkg`` trusts ``mypkg.x.C``, not ``mypkgevil.C``)."""
    return any(class_path == p or class_path.startswith(p + ".") for p in _prefixes(extra))


def class_paths(tree: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    """Every ``(dotted key, value)`` of a ``class_path`` / ``_class_path`` entry in a nested
    structure of mappings and lists (``router.class_path``, ``judges[1].class_path``)."""
    if isinstance(tree, Mapping):
        for k, v in tree.items():
            sub = f"{key}.{k}" if key else str(k)
            if k in _CLASS_KEYS:
                yield sub, v
            else:
                yield from class_paths(v, sub)
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from class_paths(v, f"{key}[{i}]")


def check_class_paths(
    tree: Any, source: str, trust: Iterable[str] | str | None = None, section: str = ""
) -> None:
    """Raise :class:`UntrustedCheckpointError` if any class path in ``tree`` is outside the
    trusted prefixes (or ``_instantiator`` is not Lightning's); nothing is imported."""
    for key, value in class_paths(tree, section):
        if not isinstance(value, str) or not is_trusted(value, trust):
            allowed = ", ".join(_prefixes(trust))
            raise UntrustedCheckpointError(
                f"{source}: {key} = {value!r} is outside the trusted class prefixes "
                f"({allowed}); rebuilding it would import and run code named by the file. "
                f"If you trust it, pass --trust_class_prefix "
                f"{str(value).rsplit('.', 1)[0] if isinstance(value, str) else '<prefix>'}"
            )
    if isinstance(tree, Mapping) and "_instantiator" in tree:
        inst = tree["_instantiator"]
        if inst not in _INSTANTIATORS:
            raise UntrustedCheckpointError(
                f"{source}: {section + '.' if section else ''}_instantiator = {inst!r} is not "
                "Lightning's instantiate_module; refused (it would run code named by the file)"
            )


def load_checkpoint(
    path: str | os.PathLike, trust: Iterable[str] | str | None = None, map_location: Any = "cpu"
) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True`` and check every class path in its
    model and datamodule hyper-parameters; returns the checkpoint dict.

    Raises:
        FileNotFoundError: no such file.
        UntrustedCheckpointError: the pickle needs a global that weights-only loading
            refuses, or a class path is outside the trusted prefixes.
    """
    import torch

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint {path!r} does not exist")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        first = str(err).strip().splitlines()
        why = next((line for line in first if "GLOBAL" in line or "global" in line), first[0])
        raise UntrustedCheckpointError(
            f"{path}: refused: loading it needs more than tensors and plain values "
            f"(weights_only=True): {why.strip()} A checkpoint whose pickle names other "
            "objects can run arbitrary code when loaded."
        ) from None
    if not isinstance(ckpt, Mapping):
        raise UntrustedCheckpointError(f"{path}: not a Lightning checkpoint (no mapping inside)")
    for section in ("hyper_parameters", "datamodule_hyper_parameters"):
        check_class_paths(ckpt.get(section) or {}, path, trust, section)
    return dict(ckpt)
