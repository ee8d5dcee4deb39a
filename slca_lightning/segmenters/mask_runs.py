"""The paper's segmenter: contiguous runs of the assistant mask.

Each row's assistant mask is cut into its maximal runs of ones ``S_1 … S_K`` (one run per
assistant turn, since tool responses and chat glue sit between turns with mask 0). The last
run is the summary segment; the union of all earlier runs is the tool segment, including any
reasoning or prose inside those turns (METHOD §3, the reference behaviour). A row takes part
in the tool channel iff ``K ≥ 2`` and in the summary channel iff ``K ≥ 1``. An episode that
ends on a tool call still has its last run called "summary", as in the reference code.

The first token of the last run is where the policy chooses between calling another tool
and answering. Under the paper's rule that choice is credited by the summary channel, so a
rollout that answers after the first step of a multi-step task is judged on its summary
alone for stopping, and the execution channel's penalty for the missing steps lands on the
calls it did make. ``stop_decision_tokens = n`` moves the first ``n`` tokens of the last run
into the tool segment of rows that have one (``K ≥ 2``): stopping becomes an execution
decision. Rows with one run (no call at all) stay as in the paper, where the omission guard
already routes the penalty to the summary channel.
"""

from __future__ import annotations

import torch

from slca_lightning.segmenters.base import Segmenter
from slca_lightning.types import RolloutBatch, Segments


def mask_run_segments(assistant_mask: torch.Tensor, stop_decision_tokens: int = 0) -> Segments:
    """Split ``assistant_mask`` into the tool segment (all runs but the last) and the summary
    segment (the last run).

    Args:
        assistant_mask: ``BoolTensor[B, T]``, 1 on sampled tokens.
        stop_decision_tokens: in rows with at least two runs, this many first tokens of the
            last run go to the tool segment instead (0: the paper's rule).

    Returns:
        Segments with masks ``{"tool", "summary"}`` (``BoolTensor[B, T]``, a partition of
        the mask) and presence ``tool = K ≥ 2``, ``summary = K ≥ 1`` (``BoolTensor[B]``).
    """
    if assistant_mask.dim() != 2:
        raise ValueError(f"assistant_mask must be [B, T], got shape {tuple(assistant_mask.shape)}")
    if stop_decision_tokens < 0:
        raise ValueError(f"stop_decision_tokens must be >= 0, got {stop_decision_tokens}")
    mask = assistant_mask.bool()
    prev = torch.zeros_like(mask)
    prev[:, 1:] = mask[:, :-1]
    starts = mask & ~prev  # [B, T] first token of each run
    run_index = torch.cumsum(starts.to(torch.int64), dim=1)  # [B, T] 1-based run number
    if mask.shape[1]:
        num_runs = run_index[:, -1:]  # [B, 1] runs per row
    else:
        num_runs = torch.zeros(mask.shape[0], 1, dtype=torch.int64, device=mask.device)
    summary = mask & (run_index == num_runs)
    k = num_runs.squeeze(1)  # [B]
    if stop_decision_tokens:
        rank = torch.cumsum(summary.to(torch.int64), dim=1)  # [B, T] 1-based within the run
        decision = summary & (rank <= stop_decision_tokens) & (k >= 2).unsqueeze(1)
        summary = summary & ~decision
    tool = mask & ~summary
    return Segments(
        masks={"tool": tool, "summary": summary},
        present={"tool": k >= 2, "summary": k >= 1},
    )


class MaskRunSegmenter(Segmenter):
    """Last assistant run = summary, earlier runs = tool (the paper's rule, METHOD §3).

    Args:
        stop_decision_tokens: how many first tokens of the last run (the choice between
            another call and the answer) are credited as tool tokens in rows that made a
            call; 0, the default, is the paper's rule.
    """

    def __init__(self, stop_decision_tokens: int = 0) -> None:
        if stop_decision_tokens < 0:
            raise ValueError(
                f"MaskRunSegmenter.stop_decision_tokens must be >= 0, got {stop_decision_tokens}"
            )
        self.stop_decision_tokens = stop_decision_tokens

    def __call__(self, batch: RolloutBatch) -> Segments:
        return mask_run_segments(batch.assistant_mask, self.stop_decision_tokens)
