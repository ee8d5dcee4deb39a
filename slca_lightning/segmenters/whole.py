"""One segment for the whole response, as plain GRPO sees it."""

from __future__ import annotations

from slca_lightning.segmenters.base import Segmenter
from slca_lightning.types import RolloutBatch, Segments


class WholeSegmenter(Segmenter):
    """Every sampled token in one segment named ``"whole"``, present iff the row sampled
    anything. Routers that treat all tokens alike (GRPO, ToolPO's global term) accept it;
    segment-wise routers (SLCA, MT-GRPO) need a tool/summary segmenter and say so."""

    def __call__(self, batch: RolloutBatch) -> Segments:
        mask = batch.assistant_mask.bool()
        return Segments(masks={"whole": mask}, present={"whole": mask.any(dim=1)})
