"""LoRA adapters on a causal LM (peft): the settings and the wrapper.

With LoRA the frozen KL reference is the same network with its adapters disabled, and the
optimizer holds the adapters only (:class:`~slca_lightning.training.module.SLCAGRPOModule`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["LoraSettings", "apply_lora"]


@dataclass
class LoraSettings:
    """LoRA adapter settings for :func:`apply_lora` (rank, scale ``alpha / r``, targets)."""

    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: str | list[str] = "all-linear"


def apply_lora(model: Any, settings: LoraSettings | None = None) -> Any:
    """Wrap ``model`` in a peft LoRA model: only the adapter weights stay trainable."""
    from peft import LoraConfig, get_peft_model

    s = settings if settings is not None else LoraSettings()
    kw = {"lora_alpha": s.alpha, "lora_dropout": s.dropout, "target_modules": s.target_modules}
    return get_peft_model(model, LoraConfig(r=s.r, task_type="CAUSAL_LM", **kw))
