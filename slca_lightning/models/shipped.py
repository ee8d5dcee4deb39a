"""Warm starts whose trained weights ship inside the package (``models/weights/``).

Each shipped warm start is two files in :data:`WEIGHTS_DIR`: ``<name>.safetensors`` (the
model's float32 weights, tied embeddings stored once) and ``<name>.json``, its manifest: the
command that rebuilt it, the recipe's settings, the selected step and the validation curve
that chose it, the first training losses, wall time, threads, library versions, the weights'
sha256, the digest of the tokenizer it was trained with, and its recorded greedy episodes on
held-out tasks (``tests/unit/models/test_shipped_warm_starts.py`` replays them).

:func:`shipped_folder` checks the file against the manifest's sha256 (a missing or damaged
file is one line naming it, the expected sha256 and the command that rebuilds it), builds
the architecture and tokenizer in code, loads the weights and writes them once into the
cache as an HF folder (keyed by the sha256), which every consumer (trainer, evaluators,
vLLM, transformers) reads. Nothing trains.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from pathlib import Path
from typing import Any

from slca_lightning.models.cached_folders import default_cache_dir, is_complete, save_model_folder

__all__ = [
    "WEIGHTS_DIR",
    "ShippedWeightsError",
    "file_sha256",
    "is_shipped",
    "manifest",
    "shipped_folder",
    "tokenizer_digest",
]

log = logging.getLogger("slca_lightning.models.policy")

#: Where the shipped weights and their manifests live.
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
_DONE_FILE = "slca_shipped_warm_start.json"
_SAID: set[str] = set()


class ShippedWeightsError(FileNotFoundError):
    """A shipped warm start's weights file is missing or does not match its manifest."""


def manifest(name: str, weights_dir: Path | None = None) -> dict[str, Any] | None:
    """The manifest of the shipped warm start ``name`` (e.g. ``"suite-sft"``), or None."""
    path = Path(weights_dir or WEIGHTS_DIR) / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def is_shipped(name: str) -> bool:
    """Whether ``name`` ships in the package (its manifest is there)."""
    return manifest(name) is not None


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tokenizer_digest(tokenizer: Any) -> str:
    """A digest of ``tokenizer``'s vocabulary (token → id, added tokens included): shipped
    weights are only meaningful with the tokenizer they were trained with."""
    vocab = sorted(tokenizer.get_vocab().items())
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()


def _checked_file(name: str, info: dict[str, Any], weights_dir: Path) -> Path:
    path = weights_dir / info["file"]
    rebuild = f"rebuild it with: {info['command']}"
    if not path.is_file():
        raise ShippedWeightsError(
            f"{path}: the shipped weights of warm start {name!r} are missing (expected "
            f"sha256 {info['sha256']}); {rebuild}"
        )
    sha = file_sha256(path)
    if sha != info["sha256"]:
        raise ShippedWeightsError(
            f"{path}: the shipped weights of warm start {name!r} are damaged (sha256 {sha}, "
            f"expected {info['sha256']}); {rebuild}"
        )
    return path


def shipped_folder(name: str, cache_dir: str | None = None, weights_dir: Path | None = None) -> str:
    """The HF folder of the shipped warm start ``name``, written once into the cache.

    Raises:
        ShippedWeightsError: the weights file is missing or its sha256 is not the manifest's.
        ValueError: the tokenizer built here is not the one the weights were trained with.
    """
    from slca_lightning.models.loading import load_model

    weights_dir = Path(weights_dir or WEIGHTS_DIR)
    info = manifest(name, weights_dir)
    if info is None:
        raise ShippedWeightsError(
            f"{weights_dir / (name + '.json')}: no shipped warm start {name!r}"
        )
    path = _checked_file(name, info, weights_dir)
    root = Path(cache_dir or default_cache_dir()).expanduser()
    final = root / f"{name}-shipped-{info['sha256'][:16]}"
    said = (
        f"warm start {name}: shipped weights {path.name} (sha256 {info['sha256'][:12]}, "
        f"SFT step {info['step']} of {info['settings']['steps']}, built {info['built']}); "
        "nothing trained"
    )
    if not is_complete(final, _DONE_FILE):
        from safetensors.torch import load_model as load_weights

        model, tokenizer = load_model(info["settings"]["base"], seed=0)  # the architecture
        digest = tokenizer_digest(tokenizer)
        if digest != info["tokenizer_sha256"]:
            raise ValueError(
                f"{path}: the tokenizer built by this version of slca_lightning (vocabulary "
                f"sha256 {digest[:12]}) is not the one warm start {name!r} was trained with "
                f"({info['tokenizer_sha256'][:12]}); {info['command']} retrains it"
            )
        load_weights(model, str(path), strict=True)
        root.mkdir(parents=True, exist_ok=True)
        save_model_folder(final, model.eval(), tokenizer, _DONE_FILE, {**info, "from": str(path)})
    log.info(said)
    if said not in _SAID:  # once per process (the policy and its reference both load it)
        _SAID.add(said)
        print(said, file=sys.stderr, flush=True)
    return str(final)
