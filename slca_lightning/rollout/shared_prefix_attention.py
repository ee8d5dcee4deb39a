"""Attention that reads a group's shared prompt once per group (cascade attention).

In RL rollouts a group's rows share their prompt (the task, and in later turns the whole
history up to the group's fork), so with the prefix copied into every row's cache
(:meth:`~slca_lightning.rollout.kv_cache.GrowingCache.place`) each decode step re-reads the
same prompt keys and values once per row: on CPU at 32 rows of SmolLM2-135M with
~760-token contexts, about half of a decode step. Here the batch cache holds only each row's
own suffix (its prompt suffix and the tokens it sampled); the prefixes are kept as segments
of a tree (:func:`~slca_lightning.rollout.prefixes.prefix_tree`: a root the tasks share,
such as the system prompt and tool schemas, then each task's own part), each segment's keys
and values once per layer, and attention is split into parts:

- over each segment: the queries of all rows that read it in one matrix product against its
  keys (read once), giving each query's output ``o_k`` and log-sum-exp ``l_k``;
- over the row's own suffix (causal, padding masked): ``o_s``, ``l_s``;

merged exactly, two at a time: ``o = (e^{l_a - m} o_a + e^{l_b - m} o_b) / (e^{l_a - m} +
e^{l_b - m})`` with ``m = max(l_a, l_b)``, which is softmax attention over the
concatenation. Scores and the merge are computed in float32; the result equals the
copied-prefix path up to float rounding (greedy tokens the same, log-probs to 1e-4:
``tests/unit/rollout/test_hf_decode.py``).

Use: :func:`shared_prefix_attention` is registered with transformers' ``AttentionInterface``
under :data:`NAME`; :func:`cascade` switches a model's attention to it for the duration of a
sampling loop and publishes the :class:`SharedPrefixState` the function reads (per thread, so
an asynchronous rollout worker's copy of the policy has its own). Models whose attention
modules go through ``ALL_ATTENTION_FUNCTIONS`` (Llama, Qwen2, Mistral, … in transformers 5)
take it; transformers builds no mask for a registered function without a mask interface, so
the masks come from the state.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from slca_lightning.config.checks import check_args
from slca_lightning.logprobs.causal_lm import base_model

__all__ = ["NAME", "SharedPrefixState", "cascade", "mask_bias", "merge_parts", "part_attention"]

NAME = "slca_shared_prefix"
_LOCAL = threading.local()


def part_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of ``q [..., L, d]`` over ``k, v [..., S, d]`` with an additive
    ``bias`` (broadcast to ``[..., L, S]``: 0 where a key may be read, ``-inf`` where not;
    None: every key); ``(output [..., L, d] float32, log-sum-exp [..., L] float32)``. A
    query with no allowed key gets output 0 and log-sum-exp ``-inf`` (it then takes no
    weight in :func:`merge_parts`)."""
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)).mul_(scale)
    if bias is not None:
        scores.add_(bias)
    lse = torch.logsumexp(scores, dim=-1)
    if bias is not None:
        lse_safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    else:
        lse_safe = lse
    probs = scores.sub_(lse_safe[..., None]).exp_()
    return torch.matmul(probs, v.float()), lse


def mask_bias(allowed: torch.Tensor) -> torch.Tensor:
    """The additive bias of a boolean mask: 0 where True, ``-inf`` where False."""
    return torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device).masked_fill_(
        ~allowed, float("-inf")
    )


def merge_parts(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> torch.Tensor:
    """Attention over the union of two disjoint key sets from each part's output and
    log-sum-exp (``out [..., L, d]``, ``lse [..., L]``): the weighted mean of the outputs by
    each part's share of the softmax mass."""
    top = torch.maximum(lse_a, lse_b)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    wa, wb = torch.exp(lse_a - top), torch.exp(lse_b - top)
    return (wa[..., None] * out_a + wb[..., None] * out_b) / (wa + wb)[..., None]


class SharedPrefixState:
    """What :func:`shared_prefix_attention` reads during one sampling loop: the prefix
    segments (each a span of tokens shared by some rows, its keys and values per layer,
    computed once), which batch rows read each segment, and the rows' suffix mask.

    A row's prefix is the chain of segments it belongs to (see
    :func:`~slca_lightning.rollout.prefixes.prefix_tree`): one segment when groups share
    nothing, a root shared by every row (the system prompt and tool schemas) and a
    segment per task below it when they do.

    Args:
        num_layers: decoder layers of the model.
        batch: rows in the batch at the start (batch position ``b`` is row ``b``).
    """

    def __init__(self, num_layers: int, batch: int):
        check_args(SharedPrefixState, locals())
        self.segments: list[list[tuple[torch.Tensor, torch.Tensor]]] = [
            [] for _ in range(num_layers)
        ]  # [layer][segment] -> (keys, values), each [kv_heads, n, head_dim]
        self.membership = torch.zeros((0, batch), dtype=torch.bool)  # [segment, batch]
        self.members: list[torch.Tensor] = []  # per segment: its rows' batch positions
        self.suffix_bias: torch.Tensor | None = None  # [b, 1, 1, L, S], see set_suffix

    def set_suffix(self, mask: torch.Tensor, length: int) -> None:
        """Before each forward: the batch cache's attention mask ``[b, S]`` (the rows'
        suffixes, with the ``length`` new tokens at the end), made once into the additive
        bias every layer reads (padding masked, causal among the new tokens)."""
        suffix = mask.shape[1]
        cols = torch.arange(suffix, device=mask.device)
        rows = torch.arange(length, device=mask.device) + (suffix - length)
        allowed = mask.bool()[:, None, None, None, :] & (cols[None, :] <= rows[:, None])
        self.suffix_bias = mask_bias(allowed)

    def add_segment(
        self, rows: list[int], keys: list[torch.Tensor], values: list[torch.Tensor]
    ) -> None:
        """A segment read by ``rows``: its keys and values per layer, ``[kv_heads, n, d]``."""
        for layer, k, v in zip(self.segments, keys, values, strict=True):
            layer.append((k, v))
        row = torch.zeros((1, self.membership.shape[1]), dtype=torch.bool)
        row[0, rows] = True
        self.membership = torch.cat([self.membership, row])
        self._regroup()

    def keep(self, index: torch.Tensor) -> None:
        """Rows at batch positions ``index`` stay in the batch (finished rows dropped)."""
        self.membership = self.membership[:, index.cpu()]
        self._regroup()

    def _regroup(self) -> None:
        device = self.segments[0][0][0].device if self.segments[0] else torch.device("cpu")
        self.members = [m.nonzero().squeeze(-1).to(device) for m in self.membership]


def shared_prefix_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers attention function (``query [b, H, L, d]``, ``key``/``value`` the
    batch cache's suffix ``[b, KVH, S, d]``) that adds each row's prefix segments from the
    thread's :class:`SharedPrefixState`; returns ``([b, L, H, d], None)``. ``attention_mask``
    is ignored (transformers builds none for this function): the suffix's padding and causality
    come from the state."""
    state: SharedPrefixState | None = getattr(_LOCAL, "state", None)
    if state is None:
        raise RuntimeError(
            f"{NAME} attention ran outside a sampling loop on this thread: the model's config "
            "is shared with a model that another thread is sampling with (give each thread "
            "its own copy, as the asynchronous rollout worker does)"
        )
    b, heads, length, dim = query.shape
    kv_heads = key.shape[1]
    rep = heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    q = query.view(b, kv_heads, rep, length, dim)
    # the rows' own suffixes: each row against its own keys (state.suffix_bias: padding,
    # causality among the new tokens)
    out, lse = part_attention(
        q, key[:, :, None], value[:, :, None], state.suffix_bias.to(query.device), scale
    )
    # each prefix segment: the queries of all rows that read it, in one product, read once
    for (k_p, v_p), members in zip(state.segments[module.layer_idx], state.members, strict=True):
        m = members.numel()
        if m == 0:
            continue
        every = m == b  # a root every row reads: no gather, no scatter
        mine = q if every else q[members]
        qg = mine.permute(1, 0, 2, 3, 4).reshape(kv_heads, m * rep * length, dim)
        o, part_lse = part_attention(qg, k_p, v_p, None, scale)
        o = o.view(kv_heads, m, rep, length, dim).permute(1, 0, 2, 3, 4)
        part_lse = part_lse.view(kv_heads, m, rep, length).permute(1, 0, 2, 3)
        if every:
            out, lse = merge_parts(out, lse, o, part_lse), torch.logaddexp(lse, part_lse)
        else:
            out[members] = merge_parts(out[members], lse[members], o, part_lse)
            lse[members] = torch.logaddexp(lse[members], part_lse)
    out = out.view(b, heads, length, dim).transpose(1, 2).contiguous().to(query.dtype)
    return out, None


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, shared_prefix_attention)


def supports(model: nn.Module) -> bool:
    """Whether ``model``'s attention modules take a registered attention function (they
    read ``config._attn_implementation`` and carry a ``layer_idx``)."""
    base = base_model(model)
    attn = [m for name, m in base.named_modules() if name.endswith("self_attn")]
    return bool(attn) and all(hasattr(m, "layer_idx") for m in attn)


@contextlib.contextmanager
def cascade(model: nn.Module, state: SharedPrefixState) -> Iterator[SharedPrefixState]:
    """Run ``model``'s attention through :func:`shared_prefix_attention` with ``state``
    (this thread's), restoring its own attention implementation afterwards."""
    _register()
    base = base_model(model)
    configs = {id(c): c for m in base.modules() if (c := getattr(m, "config", None)) is not None}
    saved = {key: c._attn_implementation for key, c in configs.items()}
    for c in configs.values():
        c._attn_implementation = NAME
    _LOCAL.state = state
    try:
        yield state
    finally:
        _LOCAL.state = None
        for key, c in configs.items():
            c._attn_implementation = saved[key]
