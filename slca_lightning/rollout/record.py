"""What the training module keeps of its last rollout batch, for callbacks to read.

After every training step the module sets ``pl_module.last_rollout`` to a
:class:`RolloutRecord`. Callbacks (``RolloutTable``, diagnostics) only read it; nothing in the
training path depends on it, so a callback may ignore a missing or partial record.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from slca_lightning.types import RewardOutput, RolloutBatch, Segments

__all__ = ["RolloutRecord"]


@dataclass
class RolloutRecord:
    """One training step's rollout batch with everything computed from it.

    Attributes:
        batch: the padded rollout batch (``input_ids``, ``assistant_mask``, ``group_ids``,
            row-aligned ``episodes``).
        segments: the segmenter's output; ``masks["tool"]`` and ``masks["summary"]`` are
            ``BoolTensor[B, T]``.
        advantages: ``FloatTensor[B, T]``, the per-token advantages the loss used.
        rewards: the reward head's output; ``channels`` holds ``"tool"``, ``"summary"``,
            ``"total"`` as ``FloatTensor[B]``.
        step: the trainer's ``global_step`` when the batch was trained on.
    """

    batch: RolloutBatch
    segments: Segments
    advantages: torch.Tensor
    rewards: RewardOutput
    step: int
