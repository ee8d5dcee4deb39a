"""Episodes → a padded :class:`~slca_lightning.types.RolloutBatch` (right padding)."""

from __future__ import annotations

import torch

from slca_lightning.types import Episode, RolloutBatch


def collate_episodes(
    episodes: list[Episode], pad_token_id: int, pad_to_multiple_of: int = 1
) -> RolloutBatch:
    """Stack episodes row by row: ``prompt_ids + response_ids``, right-padded.

    ``assistant_mask`` is 1 only on sampled response tokens, ``old_logprobs`` holds the
    sampler's log-prob at those positions (0 elsewhere); both are aligned with ``input_ids``.
    """
    for k, ep in enumerate(episodes):
        n = len(ep.response_ids)
        if len(ep.assistant_mask) != n or len(ep.logprobs) != n:
            raise ValueError(
                f"episode {k} (task {ep.task.task_id!r}): response_ids has {n} ids but "
                f"assistant_mask has {len(ep.assistant_mask)} and logprobs {len(ep.logprobs)}"
            )
    lengths = [len(ep.prompt_ids) + len(ep.response_ids) for ep in episodes]
    t = max(lengths, default=0)
    t = -(-t // pad_to_multiple_of) * pad_to_multiple_of if t else 0
    b = len(episodes)
    input_ids = torch.full((b, t), pad_token_id, dtype=torch.long)
    attention = torch.zeros((b, t), dtype=torch.bool)
    assistant = torch.zeros((b, t), dtype=torch.bool)
    logprobs = torch.zeros((b, t), dtype=torch.float32)
    for r, ep in enumerate(episodes):
        p, n = len(ep.prompt_ids), len(ep.response_ids)
        input_ids[r, : p + n] = torch.tensor(ep.prompt_ids + ep.response_ids, dtype=torch.long)
        attention[r, : p + n] = True
        assistant[r, p : p + n] = torch.tensor(ep.assistant_mask, dtype=torch.bool)
        logprobs[r, p : p + n] = torch.tensor(ep.logprobs, dtype=torch.float32)
    return RolloutBatch(
        input_ids=input_ids,
        attention_mask=attention,
        assistant_mask=assistant,
        group_ids=torch.tensor([ep.group_id for ep in episodes], dtype=torch.long),
        old_logprobs=logprobs,
        truncated=torch.tensor([ep.truncated for ep in episodes], dtype=torch.bool),
        episodes=list(episodes),
    )
