"""Write a policy as a plain Hugging Face folder that transformers, vLLM and ``slca eval
--model`` load: LoRA merged into the weights, tokenizer with its chat template, generation
config, and ``slca_export.json`` saying where it came from.

Used by ``slca sft`` (``SFTModule.output_dir``) and ``slca export`` (a ``slca fit``
checkpoint → folder, :mod:`slca_lightning.cli.export`). The folder is written to a temporary sibling and renamed into place,
so a crash never leaves half a model where a config points.
"""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path
from typing import Any

from slca_lightning.models.cached_folders import save_model_folder

__all__ = ["export_policy", "merged_model"]

INFO_FILE = "slca_export.json"


def merged_model(model: Any) -> Any:
    """``model`` with any LoRA adapters merged (a copy; the trained model is untouched)."""
    if hasattr(model, "merge_and_unload"):
        return copy.deepcopy(model).merge_and_unload()
    return model


def export_policy(
    model: Any, tokenizer: Any, folder: str | os.PathLike, info: dict | None = None
) -> str:
    """Save ``model`` (LoRA merged) and ``tokenizer`` as an HF folder at ``folder``,
    replacing what is there; return the folder's path.

    Written atomically (:func:`~slca_lightning.models.cached_folders.save_model_folder`): weights as they
    are, the generation config as loaded. ``info`` (e.g. the source model and step) goes
    into ``slca_export.json`` with the time of writing.
    """
    final = Path(folder).expanduser().resolve()
    final.parent.mkdir(parents=True, exist_ok=True)
    record = {**(info or {}), "written": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    save_model_folder(final, merged_model(model), tokenizer, INFO_FILE, record, replace=True)
    return str(final)
