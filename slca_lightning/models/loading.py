"""Load ``(model, tokenizer)`` from a built-in name, a named source, a ``.gguf`` file, a folder
or a Hugging Face Hub id (``org/name[@revision]``, through the standard HF cache: :mod:`.hub`).

The loader every other part calls through :func:`slca_lightning.models.policy.load_policy`, which
adds the built-in SFT warm starts (``"tiny-sft"``, ``"suite-sft"``: trained on first use by
:mod:`slca_lightning.models.warm_start`). SFT itself loads through :func:`load_model`, so
training a model never depends on the module that trains the warm starts.

Tokenizers come back with a pad token (the eos token when they have none) and
``padding_side="right"``, the layout of training batches; generation code left-pads its
prompts itself (:mod:`slca_lightning.rollout.hf_engine`).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from slca_lightning.models.names import BUILTIN_MODELS, WARM_START_BASES, warm_start_base

__all__ = [
    "BUILTIN_MODELS",
    "DTYPES",
    "TINY_HIDDEN_SIZE",
    "TINY_NUM_LAYERS",
    "WARM_START_BASES",
    "load_model",
    "load_tokenizer",
    "warm_start_base",
    "zero_dropout",
]

#: Size of the ``"tiny"`` model: Qwen2, hidden 128, 4 layers, 4 heads (2 KV heads), MLP 256,
#: tied embeddings over the 518-token tiny vocabulary: 0.66 M parameters.
TINY_HIDDEN_SIZE = 128
TINY_NUM_LAYERS = 4


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _dtype(dtype: str) -> Any:
    if dtype != "auto" and dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {[*DTYPES, 'auto']}")
    return DTYPES.get(dtype, "auto")


def _finish_tokenizer(tokenizer: Any) -> Any:
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    return tokenizer


def _build_builtin(name: str, seed: int) -> tuple[Any, Any]:
    if name == "tiny":
        from slca_lightning.models.tiny import build_tiny_model, build_tiny_tokenizer

        tokenizer = build_tiny_tokenizer()
        return build_tiny_model(tokenizer, TINY_HIDDEN_SIZE, TINY_NUM_LAYERS, seed=seed), tokenizer
    from slca_lightning.models.suite import build_suite_model, build_suite_tokenizer

    tokenizer = build_suite_tokenizer()
    return build_suite_model(tokenizer, seed=seed), tokenizer


def load_model(
    model: str, dtype: str = "float32", seed: int = 0, warm_start: Any = None
) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)``.

    Args:
        model: a built-in model, ``"tiny"`` (0.66M-parameter Qwen2, see
            :data:`TINY_HIDDEN_SIZE`) or ``"suite"`` (the suite model of
            :mod:`slca_lightning.models.suite`), randomly initialised from ``seed``; the
            same name with ``-sft`` (``"tiny-sft"``, ``"suite-sft"``, and
            ``"suite-pooled-sft"``, see :data:`WARM_START_BASES`): that model after
            ``warm_start(base=...)`` (the folder it returns; given by
            :func:`slca_lightning.models.policy.load_policy`, refused without it); a named pretrained source
            of :data:`slca_lightning.models.pretrained.SOURCES` (``"smollm2-135m-instruct"``,
            from its install extra) or a ``.gguf`` file, dequantised once into the cache;
            the path of a local HF folder with ``config.json``; or, when no local path of
            that name exists, a Hugging Face Hub id ``"org/name"`` or
            ``"org/name@revision"`` (a branch, tag or commit), resolved to its snapshot
            folder in the standard HF cache, downloaded on first use or read from the cache
            alone under ``HF_HUB_OFFLINE=1`` (:func:`slca_lightning.models.hub.resolve_hub_model`).
            A ChatML template without the tool role gets the hermes one
            (:mod:`slca_lightning.models.chat`).
        dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` or ``"auto"`` (the folder's own).
        seed: initialisation seed of a random built-in model (ignored otherwise).

    Raises:
        FileNotFoundError: the folder does not exist or has no ``config.json``; a Hub id
            that cannot be loaded (gated, missing, not cached while offline) raises its
            subclass :class:`slca_lightning.models.hub.HubModelError`, one line saying what
            to do.
    """
    if model in BUILTIN_MODELS:
        net, tokenizer = _build_builtin(model, seed)
        torch_dtype = _dtype(dtype)
        return (net if torch_dtype == "auto" else net.to(torch_dtype)), _finish_tokenizer(tokenizer)
    from slca_lightning.models.chat import adapt_chat_template
    from slca_lightning.models.hub import is_hub_id, resolve_hub_model
    from slca_lightning.models.pretrained import SOURCES, resolve_model_path

    base = warm_start_base(model)
    if base is not None:
        if warm_start is None:
            raise ValueError(
                f"model {model!r} is a built-in warm start, trained on first use: load it "
                "with slca_lightning.models.policy.load_policy (or point at its cache folder)"
            )
        path = warm_start(base=base)
    else:
        path = resolve_model_path(model) or os.path.expanduser(model)
        if not os.path.exists(path) and is_hub_id(model):  # a local path wins over a Hub id
            path = resolve_hub_model(model)
    if not os.path.isdir(path):
        names = [repr(n) for n in (*BUILTIN_MODELS, *(f"{b}-sft" for b in WARM_START_BASES))]
        raise FileNotFoundError(
            f"model folder {path!r} does not exist (expected one of "
            f"{', '.join(names + [repr(n) for n in SOURCES])}, a .gguf file, a local "
            "Hugging Face folder or a Hugging Face Hub id such as Qwen/Qwen2.5-0.5B-Instruct "
            "or org/name@revision)"
        )
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(f"model folder {path!r} has no config.json")
    from transformers import AutoModelForCausalLM

    net = AutoModelForCausalLM.from_pretrained(path, dtype=_dtype(dtype), local_files_only=True)
    tokenizer = load_tokenizer(path)
    return net, _finish_tokenizer(adapt_chat_template(tokenizer, where=model))


def load_tokenizer(path: str) -> Any:
    """The tokenizer of a model folder, tokenizing exactly as it did when it was saved.

    A folder saved from a tokenizer built on ``tokenizer.json`` alone (the built-in models'
    and their warm starts': ``tokenizer_class: TokenizersBackend``) loads as that class:
    ``AutoTokenizer`` would pick the class of the model's type (``qwen2`` →
    ``Qwen2Tokenizer``), whose own pre-tokenizer splits runs of newlines and digits
    differently from the saved one, so prompts would not get the ids the model was trained
    on. Every other folder loads through ``AutoTokenizer``."""
    import json

    import transformers

    config = os.path.join(path, "tokenizer_config.json")
    cls_name = None
    if os.path.isfile(config):
        with open(config, encoding="utf-8") as fh:
            cls_name = json.load(fh).get("tokenizer_class")
    plain = getattr(transformers, "TokenizersBackend", None)
    if plain is not None and cls_name == "TokenizersBackend":
        return plain.from_pretrained(path, local_files_only=True)
    return transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)


def zero_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """Set every dropout probability of ``model`` to 0 (modules and the config's
    ``*dropout*`` fields, which attention implementations read), in place."""
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.p = 0.0
        if hasattr(module, "attention_dropout") and isinstance(module.attention_dropout, float):
            module.attention_dropout = 0.0
    config = getattr(model, "config", None)
    for key in list(vars(config)) if config is not None else []:
        if "dropout" in key and isinstance(getattr(config, key), float):
            setattr(config, key, 0.0)
    return model
