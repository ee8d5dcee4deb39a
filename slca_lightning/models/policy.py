"""The policy loader: ``(model, tokenizer)`` for any model name, the built-in warm starts
included (:func:`load_policy`)."""

from __future__ import annotations

from typing import Any

from slca_lightning.models.loading import load_model
from slca_lightning.models.warm_start import warm_start

__all__ = ["load_policy"]


def load_policy(model: str, dtype: str = "float32", seed: int = 0) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)``: :func:`~slca_lightning.models.loading.load_model` with
    the built-in warm starts (``"tiny-sft"`` trained on first use and cached; ``"suite-sft"``
    and ``"suite-pooled-sft"`` shipped in the package, :mod:`slca_lightning.models.shipped`)."""
    return load_model(model, dtype=dtype, seed=seed, warm_start=warm_start)
