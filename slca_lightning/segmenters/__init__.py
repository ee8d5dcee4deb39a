"""Segmenters: split sampled tokens into credit segments (tool, summary, ...)."""

from slca_lightning.segmenters.base import Segmenter, check_partition
from slca_lightning.segmenters.mask_runs import MaskRunSegmenter, mask_run_segments
from slca_lightning.segmenters.tags import TagSegmenter, token_char_spans
from slca_lightning.segmenters.whole import WholeSegmenter

__all__ = [
    "MaskRunSegmenter",
    "Segmenter",
    "TagSegmenter",
    "WholeSegmenter",
    "check_partition",
    "mask_run_segments",
    "token_char_spans",
]
