"""Weight sync into a running vLLM: HF-named full weights out of the trainer, into the workers.

:func:`full_state_items` yields the policy's weights under their plain Hugging Face names
(FSDP2 shards gathered, LoRA merged); :class:`WeightSyncExtension` is mixed into vLLM's worker
(``worker_extension_cls``) and loads buckets of them. Nothing here imports vLLM.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn


def pack_weights(tensors: dict[str, torch.Tensor]) -> bytes:
    """A bucket of CPU tensors as ``torch.save`` bytes (``collective_rpc`` mangles tensors)."""
    buf = io.BytesIO()
    torch.save({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, buf)
    return buf.getvalue()


class WeightSyncExtension:
    """Mixed into vLLM's worker (``worker_extension_cls``): loads a bucket of HF-named weights.

    Tensors arrive as ``torch.save`` bytes because ``collective_rpc`` turns tensor arguments
    into lists. CUDA workers ``load_weights`` each bucket as it comes. On CPU, ``load_weights``
    cannot write into the oneDNN-packed layers: buckets are staged, then one ``reload_weights``
    re-runs the loader over them and the tied ``lm_head`` is re-packed.
    """

    def slca_load_weights(self, payload: bytes) -> int:
        """Load one bucket (CUDA: now; CPU: staged until :meth:`slca_commit_weights`)."""
        weights = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
        if getattr(self, "device", torch.device("cpu")).type == "cpu":
            staged = self.__dict__.setdefault("_slca_staged", {})
            staged.update(weights)
            return len(weights)
        device = self.device
        self.model_runner.model.load_weights(
            weights=((k, v.to(device)) for k, v in weights.items())
        )
        return len(weights)

    def slca_commit_weights(self) -> int:
        """CPU: re-run the loader over the staged weights, then re-pack the tied head."""
        staged = self.__dict__.pop("_slca_staged", None)
        if not staged:
            return 0
        self.reload_weights(weights_iterator=iter(staged.items()))
        model = self.model_runner.model
        head = getattr(model, "lm_head", None)
        embed = getattr(getattr(model, "model", None), "embed_tokens", None)
        tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
        if tied and head is not None and embed is not None:
            head.weight = embed.weight
            _repack(head)
        return len(staged)

    def slca_ping(self) -> str:
        return "ok"


def _repack(layer: Any) -> None:
    method = getattr(layer, "quant_method", None)
    hook = getattr(method, "process_weights_after_loading", None)
    if hook is not None:
        hook(layer)


def full_state_items(
    model: nn.Module, merge_lora: bool = True
) -> Iterator[tuple[str, torch.Tensor]]:
    """``(hf_name, full tensor)`` of ``model``, one at a time (all ranks must iterate).

    FSDP2 shards (``DTensor``) are gathered with ``full_tensor()``; a peft model yields its
    base weights with the adapters merged in (``merge_lora``; copied, since the adapters are
    unmerged in place afterwards) and without the ``lora_`` and ``base_model.model.`` names,
    i.e. the names of the plain Hugging Face checkpoint.
    """
    peft = hasattr(model, "merge_adapter") and hasattr(model, "unmerge_adapter")
    if peft and merge_lora:
        model.merge_adapter()
    try:
        for name, tensor in model.state_dict().items():
            if peft and "lora_" in name:
                continue
            if hasattr(tensor, "full_tensor"):
                tensor = tensor.full_tensor()
            elif peft and merge_lora:
                tensor = tensor.clone()  # a view of the merged weight: unmerging rewrites it
            if peft:
                name = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
            yield name, tensor.detach()
    finally:
        if peft and merge_lora:
            model.unmerge_adapter()
