"""HFEngine's own sampling loop: prefill, then one token a step, finished rows dropped.

``model.generate`` keeps every row of a batch until the last one ends and appends each
token to its KV cache by concatenation; in RL rollouts a group's replies differ a lot in
length (an SFT'd SmolLM2: 38 tokens a turn on average under a 96-token cap), so most of a
batch's late decode steps compute rows that already ended. This loop

- prefills a shared prompt prefix once and repeats its cache over the rows (as
  ``HFEngine(share_prefix=True)`` does for ``generate``), then the rows' own suffixes;
- writes the cache in place (:class:`~slca_lightning.rollout.kv_cache.GrowingKVLayer`);
- samples each token from ``softmax(logits / T)`` of the raw logits (greedy: their argmax),
  the distribution the trainer scores, and keeps that token's float32 log-prob;
- drops finished rows from the batch (cache, mask, positions) once at least
  ``prune_fraction`` of the rows still in it have ended, so a copy of the cache buys
  that many rows' compute for every later step.

Nothing here reads the model's ``generation_config``: no repetition penalty, n-gram ban or
top-k can apply. The random stream differs from ``generate``'s (rows are drawn as a batch
that shrinks), so a seed gives other samples than the ``generate`` path, from the same
distribution.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from slca_lightning.logprobs.causal_lm import base_model


def positions_from_mask(attention: torch.Tensor) -> torch.Tensor:
    """Position ids that follow the attention mask: ``cumsum − 1`` over kept tokens, 0 on
    padding (transformers' own rule for left-padded batches)."""
    return (attention.long().cumsum(-1) - 1).clamp(min=0) * attention.long()


def next_tokens(logits: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row from ``softmax(logits / T)`` (``T <= 0``: argmax, scored at
    T = 1) and return ``(tokens [b], their log-probs [b])`` in float32."""
    logits = logits.float()
    if temperature <= 0:
        tokens = logits.argmax(dim=-1)
        logp = torch.log_softmax(logits, dim=-1)
    else:
        logp = torch.log_softmax(logits / temperature, dim=-1)
        tokens = draw(logp.exp())
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


def draw(probs: torch.Tensor) -> torch.Tensor:
    """One index per row of ``probs [b, V]`` (non-negative, rows need not sum to 1), drawn
    with probability ``probs[i] / sum(probs)`` by inverting the row's cumulative sum at a
    uniform point: a token of probability 0 is never drawn. One uniform number a row
    instead of ``torch.multinomial``'s exponential per vocabulary entry: 1.7 ms instead of
    35 ms at 32 rows of a 49k vocabulary on one CPU thread."""
    cdf = probs.cumsum(dim=-1)
    point = torch.rand(probs.shape[0], 1, device=probs.device, dtype=cdf.dtype) * cdf[:, -1:]
    index = torch.searchsorted(cdf, point, right=True)
    return index.clamp_(max=probs.shape[-1] - 1).squeeze(-1)


def batch_layout(
    prompts: list[list[int]], groups: list[tuple[list[int], int]], pad: int
) -> tuple[torch.Tensor, torch.Tensor, list[tuple[list[int], int]]]:
    """One batch for rows that share prefixes by group: ``(input_ids, attention, groups)``.

    ``groups`` is ``[(rows, shared), ...]`` (every row once; ``shared = 0``: no shared
    prefix). Each row is laid out ``[padding | its group's prefix | padding | own suffix]``:
    prefixes end-aligned at column ``P`` (the longest shared prefix), suffixes end-aligned at
    the last column. Padding has attention 0, so positions (from the mask) and outputs are
    those of the row alone. The groups come back with ``shared`` cut so that every row keeps
    at least one suffix token.
    """
    groups = [
        (rows, max(0, min(n, *(len(prompts[r]) - 1 for r in rows))) if rows else 0)
        for rows, n in groups
    ]
    shared = [0] * len(prompts)
    for rows, n in groups:
        for r in rows:
            shared[r] = n
    width_p = max(shared, default=0)
    width = width_p + max((len(p) - n for p, n in zip(prompts, shared, strict=True)), default=0)
    input_ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    for r, (p, n) in enumerate(zip(prompts, shared, strict=True)):
        if n:
            input_ids[r, width_p - n : width_p] = torch.tensor(p[:n])
            attention[r, width_p - n : width_p] = 1
        if len(p) > n:
            input_ids[r, width - (len(p) - n) :] = torch.tensor(p[n:])
            attention[r, width - (len(p) - n) :] = 1
    return input_ids, attention, [(rows, n) for rows, n in groups if rows]


def sample_loop(
    model: nn.Module,
    prompts: list[list[int]],
    groups: list[tuple[list[int], int]],
    *,
    pad: int,
    max_new_tokens: int,
    temperature: float,
    ended: Callable[[list[int]], str | None],
    cache_name: str,
    keep_last: dict[str, Any],
    prune_fraction: float = 0.25,
    shared_prefix_attention: bool = False,
    min_shared_prefix: int = 64,
) -> tuple[list[list[int]], list[list[float]], list[str | None]]:
    """Generate up to ``max_new_tokens`` per prompt; ``(tokens, logprobs, reasons)`` per row,
    each row ending at the token for which ``ended(row_tokens)`` first named a reason (the
    reason is None for a row that reached the cap).

    ``groups`` (see :func:`batch_layout`) names rows whose first ``shared`` tokens are the
    same: that prefix is prefilled once, as one row, and its keys and values are copied into
    the batch cache for each of its rows; all rows then decode as one batch.
    ``keep_last`` is ``{"logits_to_keep": 1}`` where the model takes it. With
    ``shared_prefix_attention`` the prefixes are not copied: they are kept once, as a tree
    of segments shared across groups where groups share ``min_shared_prefix`` tokens or
    more, and attention reads each segment once per step
    (:mod:`~slca_lightning.rollout.shared_prefix_attention`); the batch cache holds the
    rows' suffixes only.
    """
    from slca_lightning.rollout import shared_prefix_attention as spa
    from slca_lightning.rollout.kv_cache import growing_cache

    device = next(model.parameters()).device
    placeable = growing_cache(model, 0) is not None
    if not placeable:  # transformers' own cache cannot take placed prefixes: no sharing
        groups = [(list(range(len(prompts))), 0)]
    input_ids, attention, groups = batch_layout(prompts, groups, pad)
    input_ids, attention = input_ids.to(device), attention.to(device)
    rows, width = input_ids.shape
    width_p = max((n for _, n in groups), default=0)
    positions = positions_from_mask(attention)
    if shared_prefix_attention and width_p > 0 and spa.supports(model):
        return _cascade_loop(
            model, input_ids, attention, positions, groups, width_p,
            max_new_tokens=max_new_tokens, temperature=temperature, ended=ended,
            cache_name=cache_name, keep_last=keep_last, prune_fraction=prune_fraction,
            min_shared=min_shared_prefix,
        )  # fmt: skip
    kwargs: dict[str, Any] = {}
    if placeable:
        kwargs[cache_name] = growing_cache(model, width + max_new_tokens)

    def forward(ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        out = model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=pos,
            use_cache=True,
            **kwargs,
            **keep_last,
        )
        kwargs[cache_name] = getattr(out, cache_name)
        return out.logits[:, -1, :]

    if width_p > 0:
        batch_cache = kwargs[cache_name]
        for members, n in groups:
            if n == 0:
                continue
            one = growing_cache(model, n)
            first = members[0]
            model(
                input_ids=input_ids[first : first + 1, width_p - n : width_p],
                use_cache=True,
                **{cache_name: one},
                **keep_last,
            )
            batch_cache.place(members, one, end=width_p, batch=rows)
        batch_cache.set_length(width_p)
        logits = forward(input_ids[:, width_p:], attention, positions[:, width_p:])
    else:
        logits = forward(input_ids, attention, positions)

    def keep(index: torch.Tensor) -> None:
        kwargs[cache_name].batch_select_indices(index)

    return _decode(
        logits, attention, positions[:, -1:], forward, keep,
        max_new_tokens=max_new_tokens, temperature=temperature, ended=ended,
        prune_fraction=prune_fraction,
    )  # fmt: skip


def _decode(
    logits: torch.Tensor,
    mask: torch.Tensor,
    last: torch.Tensor,
    forward: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    keep: Callable[[torch.Tensor], None],
    *,
    max_new_tokens: int,
    temperature: float,
    ended: Callable[[list[int]], str | None],
    prune_fraction: float,
) -> tuple[list[list[int]], list[list[float]], list[str | None]]:
    """The decode steps after the prefill: sample from ``logits``, record, drop finished
    rows (``keep(batch positions that stay)`` trims the caches), and call ``forward(next, mask,
    positions)`` for the next logits; ``mask`` and ``last`` (the last positions) cover the
    batch's cache as ``forward`` sees it."""
    rows = logits.shape[0]
    tokens: list[list[int]] = [[] for _ in range(rows)]
    logprobs: list[list[float]] = [[] for _ in range(rows)]
    live = list(range(rows))  # batch position -> row
    reasons: list[str | None] = [None] * rows
    for step in range(max_new_tokens):
        chosen, logp = next_tokens(logits, temperature)
        picked, scores = chosen.tolist(), logp.tolist()  # one copy a step, not one per row
        for b, row in enumerate(live):
            if reasons[row] is None:
                tokens[row].append(picked[b])
                logprobs[row].append(scores[b])
                reasons[row] = ended(tokens[row])
        still = [b for b, row in enumerate(live) if reasons[row] is None]
        if not still or step == max_new_tokens - 1:
            break
        mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=1)
        last = last + 1
        nxt = chosen[:, None]
        if len(live) - len(still) >= max(1, prune_fraction * len(live)):
            index = torch.tensor(still, device=mask.device)
            keep(index)
            mask, last, nxt = mask[index], last[index], nxt[index]
            live = [live[b] for b in still]
        logits = forward(nxt.to(mask.device), mask, last)
    return tokens, logprobs, reasons


def _cascade_loop(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention: torch.Tensor,
    positions: torch.Tensor,
    groups: list[tuple[list[int], int]],
    width_p: int,
    *,
    max_new_tokens: int,
    temperature: float,
    ended: Callable[[list[int]], str | None],
    cache_name: str,
    keep_last: dict[str, Any],
    prune_fraction: float,
    min_shared: int,
) -> tuple[list[list[int]], list[list[float]], list[str | None]]:
    """:func:`sample_loop` with the prefixes kept once, as the segments of a prefix tree
    (:func:`~slca_lightning.rollout.prefixes.prefix_tree`: groups that share ``min_shared``
    tokens or more share a segment), and each segment read once per step."""
    from slca_lightning.rollout import shared_prefix_attention as spa
    from slca_lightning.rollout.kv_cache import growing_cache
    from slca_lightning.rollout.prefixes import prefix_tree

    rows, width = input_ids.shape
    num_layers = len(growing_cache(model, 0).layers)
    state = spa.SharedPrefixState(num_layers, rows)
    shared = [(members, n) for members, n in groups if n]
    prefixes = [input_ids[m[0], width_p - n : width_p] for m, n in shared]
    full: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = []  # [0, end) per segment
    for start, end, gids, parent in prefix_tree([p.tolist() for p in prefixes], min_shared):
        one = growing_cache(model, end)
        if parent >= 0:  # the ancestors' keys and values first, as one row
            for layer, k, v in zip(one.layers, *full[parent], strict=True):
                layer.update(k[None], v[None])
        model(
            input_ids=prefixes[gids[0]][None, start:end],
            position_ids=torch.arange(start, end, device=input_ids.device)[None],
            use_cache=True,
            **{cache_name: one},
            **keep_last,
        )
        keys = [layer.keys[0] for layer in one.layers]
        values = [layer.values[0] for layer in one.layers]
        full.append((keys, values))
        state.add_segment(
            [r for g in gids for r in shared[g][0]],
            [k[:, start:end] for k in keys],
            [v[:, start:end] for v in values],
        )
    cache = growing_cache(model, width - width_p + max_new_tokens)

    def forward(ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        state.set_suffix(mask, ids.shape[1])
        out = model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=pos,
            use_cache=True,
            **{cache_name: cache},
            **keep_last,
        )
        return out.logits[:, -1, :]

    def keep(index: torch.Tensor) -> None:
        cache.batch_select_indices(index)
        state.keep(index)

    mask = attention[:, width_p:]
    with spa.cascade(model, state):
        logits = forward(input_ids[:, width_p:], mask, positions[:, width_p:])
        return _decode(
            logits, mask, positions[:, -1:], forward, keep,
            max_new_tokens=max_new_tokens, temperature=temperature, ended=ended,
            prune_fraction=prune_fraction,
        )  # fmt: skip


def keep_last(model: nn.Module) -> dict[str, Any]:
    """``{"logits_to_keep": 1}`` when the model's forward takes it (no ``[1, P, V]``)."""
    base = base_model(model)
    params = inspect.signature(base.forward).parameters
    return {"logits_to_keep": 1} if "logits_to_keep" in params else {}


def cache_name(model: nn.Module) -> str:
    """The KV-cache keyword of this transformers version (``cache`` from 5.x on)."""
    base = base_model(model)
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def sampled_gap(
    scores: torch.Tensor,
    logits: torch.Tensor,
    new_ids: torch.Tensor,
    end_ids: set[int],
    greedy: bool,
    temperature: float,
) -> float:
    """max |softmax(scores) − softmax(logits / T)| over the real (non-pad) steps of a
    ``generate`` call (``scores``, ``logits``: ``[b, n, V]``); greedy: inf when an argmax
    differs. What ``HFEngine(check_distribution=True)`` records."""
    real = torch.ones(new_ids.shape[:2], dtype=torch.bool)
    for i in range(new_ids.shape[0]):  # steps after a row ended are padding
        ends = [t for t, tok in enumerate(new_ids[i].tolist()) if tok in end_ids]
        if ends:
            real[i, ends[0] + 1 :] = False
    real = real[:, : scores.shape[1]]
    target = torch.softmax(logits / (1.0 if greedy else temperature), dim=-1)
    gap = (torch.softmax(scores, dim=-1) - target).abs().amax(dim=-1)[real]
    value = float(gap.max()) if gap.numel() else 0.0
    if greedy and not torch.equal(scores.argmax(-1)[real], logits.argmax(-1)[real]):
        value = float("inf")
    return value
