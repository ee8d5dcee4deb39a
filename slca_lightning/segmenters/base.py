"""The segmenter interface: which sampled tokens belong to which credit segment."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from slca_lightning.types import RolloutBatch, Segments


class Segmenter(ABC):
    """Splits the assistant mask of a rollout batch into named segments.

    Implementations return :class:`~slca_lightning.types.Segments` whose masks are
    disjoint and whose union is exactly ``batch.assistant_mask``; routers then send each
    channel's advantage only to its segment's tokens.
    """

    @abstractmethod
    def __call__(self, batch: RolloutBatch) -> Segments:
        """Segment ``batch``; masks are ``BoolTensor[B, T]``, presence ``BoolTensor[B]``."""


def check_partition(segments: Segments, assistant_mask: torch.Tensor) -> None:
    """Raise ``ValueError`` unless the segment masks partition ``assistant_mask``.

    Args:
        segments: the segmenter's output.
        assistant_mask: ``BoolTensor[B, T]``.
    """
    mask = assistant_mask.bool()
    total = torch.zeros(mask.shape, dtype=torch.int64, device=mask.device)
    for name, seg in segments.masks.items():
        if tuple(seg.shape) != tuple(mask.shape):
            raise ValueError(
                f"segment {name!r} mask has shape {tuple(seg.shape)}, "
                f"assistant_mask has shape {tuple(mask.shape)}"
            )
        total += seg.to(torch.int64)
    if bool((total > 1).any()):
        raise ValueError("segment masks overlap: a token belongs to two segments")
    if not torch.equal(total.bool(), mask):
        raise ValueError("segment masks do not cover the assistant mask exactly")
