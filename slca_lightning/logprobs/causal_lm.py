"""Token log-probs of a causal LM on a batch: plain, with a shared prompt prefix, or grouped.

- :func:`sequence_logprobs` gives ``log π(x_t | x_<t)`` aligned with ``input_ids``
  (ARCHITECTURE "The training step" 4: chunked, no float32 ``[B, T, V]``);
- :func:`shared_prefix_logprobs` runs a prefix every row shares once (its KV cache repeated);
- :func:`grouped_logprobs` does that per rollout group.

For :data:`PLAIN_HEAD_MODELS` the log-probs come from the hidden states through the head a
chunk at a time (:mod:`slca_lightning.logprobs.chunked`).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import Tensor

from slca_lightning.logprobs.chunked import (
    DEFAULT_CHUNK_SIZE,
    token_logprobs,
    token_logprobs_from_hidden,
)

__all__ = [
    "PLAIN_HEAD_MODELS",
    "base_model",
    "common_prefix_len",
    "grouped_logprobs",
    "plain_head",
    "sequence_logprobs",
    "shared_prefix_logprobs",
]


#: Causal-LM classes whose logits are exactly ``lm_head(decoder(...).last_hidden_state)``
#: (no soft-capping or scaling): their log-probs are taken from the hidden states.
PLAIN_HEAD_MODELS = frozenset(
    {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM"}
)


def base_model(model: Any) -> Any:
    """The network under ``model``'s peft LoRA wrapper (its ``get_base_model()``), or
    ``model`` itself when it has none: what reads the architecture's own modules, config
    or forward signature looks at."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def plain_head(model: Any) -> tuple[Any, Any] | None:
    """``(decoder, lm_head)`` of a model of :data:`PLAIN_HEAD_MODELS` (peft-wrapped too)
    whose head is a plain ``nn.Linear``; None otherwise (other architectures, a head with
    adapters, FSDP-sharded models, whose root forward gathers the head's shards)."""
    base = base_model(model)
    if type(base).__name__ not in PLAIN_HEAD_MODELS:
        return None
    config = getattr(base, "config", None)
    if any(getattr(config, k, None) for k in ("final_logit_softcapping", "logit_scale")):
        return None
    try:
        from torch.distributed.fsdp import FSDPModule

        if isinstance(base, FSDPModule):
            return None
    except ImportError:  # pragma: no cover - torch without FSDP2
        pass
    head = base.get_output_embeddings()
    if type(head) is not torch.nn.Linear:
        return None
    return base.get_decoder(), head


def _head_logprobs(
    head: Any,
    hidden: Tensor,
    targets: Tensor,
    temperature: float,
    chunk_size: int,
    return_entropy: bool,
) -> Tensor | tuple[Tensor, Tensor]:
    """:func:`~slca_lightning.logprobs.chunked.token_logprobs_from_hidden` of ``lm_head(hidden) / T``."""
    bias = head.bias
    if temperature != 1.0:  # (h / T) W^T + b / T = (h W^T + b) / T
        hidden = hidden / temperature
        bias = None if bias is None else bias / temperature
    return token_logprobs_from_hidden(
        hidden, head.weight, targets, chunk_size, bias, return_entropy
    )


def sequence_logprobs(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    return_entropy: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Per-token ``log π(input_ids[t] | input_ids[:t])`` of a causal LM, ``[B, T]`` float32.

    Computed with :func:`~slca_lightning.logprobs.chunked.token_logprobs` on
    ``logits[:, :-1] / temperature`` against ``input_ids[:, 1:]`` and shifted right by one,
    so it is aligned with ``input_ids``: position 0 (no context) and padded positions
    (``attention_mask == 0``) hold 0. Differentiable. With ``return_entropy`` also returns
    the entropy ``[B, T]`` of the distribution that scored each token, same alignment.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    keep = attention_mask.bool()
    parts = plain_head(model)
    # Right padding only (every row a prefix of ones): the causal mask already hides the
    # padding from every real token, so the model runs without a padding mask, which lets
    # SDPA take its fused causal kernel (~2x faster on CPU); pad positions are zeroed below.
    right_padded = bool(keep[:, 0].all()) and bool((keep[:, 1:] <= keep[:, :-1]).all())
    mask = None if right_padded else attention_mask
    if parts is not None:  # hidden states through the head a chunk at a time: no [B, T, V]
        decoder, head = parts
        hidden = decoder(input_ids=input_ids, attention_mask=mask).last_hidden_state  # [B, T, H]
        out = _head_logprobs(
            head, hidden[:, :-1], input_ids[:, 1:], temperature, chunk_size, return_entropy
        )
    else:
        logits = model(input_ids=input_ids, attention_mask=mask).logits  # [B, T, V]
        scores = logits[:, :-1]
        if temperature != 1.0:
            scores = scores / temperature
        out = token_logprobs(scores, input_ids[:, 1:], chunk_size, return_entropy)  # [B, T-1]

    def align(x: Tensor) -> Tensor:
        x = torch.nn.functional.pad(x, (1, 0))  # [B, T-1] -> [B, T], position 0 = 0
        return torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))

    if return_entropy:
        return align(out[0]), align(out[1])
    return align(out)


def shared_prefix_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prefix_len: int,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    return_entropy: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """:func:`sequence_logprobs` for rows that share their first tokens.

    The first ``prefix_len`` tokens (equal in every row, e.g. one tool-listing system
    prompt) run once, their KV cache is repeated over the ``B`` rows and the rest runs on
    top of it: the same values and gradients as the plain batch (up to float rounding) for
    a fraction of the cost when the prefix is most of each row (SFT batches of one tool
    prompt, the G rollouts of a GRPO group). Rows must be right-padded.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    batch, width = input_ids.shape
    if not 0 < prefix_len < width:
        raise ValueError(f"prefix_len must be in [1, {width}), got {prefix_len}")
    prefix = input_ids[:1, :prefix_len]  # [1, P]
    parts = plain_head(model)
    net = model if parts is None else parts[0]  # the decoder: hidden states, no [B, T, V]
    base = base_model(model)
    name = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
    out = net(input_ids=prefix, use_cache=True)
    cache = getattr(out, name)  # transformers ≥ 5 names it "cache", older "past_key_values"
    if cache is None:  # no KV cache (gradient checkpointing in training): score plainly
        return sequence_logprobs(
            model, input_ids, attention_mask, temperature, chunk_size, return_entropy
        )
    cache.batch_repeat_interleave(batch)
    rest_out = net(input_ids=input_ids[:, prefix_len:], **{name: cache})
    if parts is None:
        head, rest = out.logits, rest_out.logits  # [1, P, V], [B, T-P, V]
        if temperature != 1.0:
            head, rest = head / temperature, rest / temperature
    else:
        head, rest = out.last_hidden_state, rest_out.last_hidden_state  # [1, P, H], [B, T-P, H]

    def score(scores: Tensor, targets: Tensor) -> tuple[Tensor, Tensor | None]:
        if parts is None:
            got = token_logprobs(scores, targets, chunk_size, return_entropy)
        else:
            got = _head_logprobs(parts[1], scores, targets, temperature, chunk_size, return_entropy)
        return (got[0], got[1]) if return_entropy else (got, None)

    parts = [
        score(head[:, :-1], prefix[:, 1:]),  # [1, P-1], the same for every row
        score(head[:, -1:].expand(batch, -1, -1), input_ids[:, prefix_len : prefix_len + 1]),
        score(rest[:, :-1], input_ids[:, prefix_len + 1 :]),  # [B, T-P-1]
    ]
    keep = attention_mask.bool()

    def join(i: int) -> Tensor:
        pre, bridge, tail = (p[i] for p in parts)
        x = torch.cat([pre.expand(batch, -1), bridge.expand(batch, -1), tail], 1)
        x = torch.nn.functional.pad(x, (1, 0))  # [B, T], position 0 = 0
        return torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))

    return (join(0), join(1)) if return_entropy else join(0)


def grouped_logprobs(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor,
    group_ids: Tensor,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    return_entropy: bool = False,
    min_prefix: int = 32,
) -> Tensor | tuple[Tensor, Tensor]:
    """:func:`sequence_logprobs` of a rollout micro-batch, one shared prefix per group.

    The G rollouts of a task share their whole prompt (system prompt with the tool list and
    the user turn), usually most of each row. Rows are split by ``group_ids``; a group whose
    common prefix has at least ``min_prefix`` tokens goes through
    :func:`shared_prefix_logprobs` (its prompt runs once, not G times), any other through
    :func:`sequence_logprobs`. Same values and gradients as one plain batch up to float
    rounding. Rows must be right-padded (as :func:`~slca_lightning.rollout.collate.
    collate_episodes` pads).
    """
    kw = {"temperature": temperature, "chunk_size": chunk_size, "return_entropy": return_entropy}
    width = input_ids.shape[1]
    outs: list[tuple[Tensor, Tensor | None]] = []
    order: list[Tensor] = []
    for gid in torch.unique(group_ids, sorted=True):
        rows = (group_ids == gid).nonzero().flatten()
        ids, am = input_ids[rows], attention_mask[rows]
        length = int(am.sum(1).max())  # drop the padding columns every row of the group has
        ids, am = ids[:, :length], am[:, :length]
        prefix = min(common_prefix_len(ids, am), length - 1)
        if prefix >= min_prefix and len(rows) > 1:
            got = shared_prefix_logprobs(model, ids, am, prefix, **kw)
        else:
            got = sequence_logprobs(model, ids, am, **kw)
        pair = got if return_entropy else (got, None)
        outs.append(tuple(None if x is None else _pad_to(x, width) for x in pair))
        order.append(rows)
    index = torch.argsort(torch.cat(order))
    lp = torch.cat([o[0] for o in outs])[index]
    if not return_entropy:
        return lp
    return lp, torch.cat([o[1] for o in outs])[index]


def _pad_to(x: Tensor, width: int) -> Tensor:
    """Right-pad ``[B, t]`` with zeros to ``[B, width]``."""
    return torch.nn.functional.pad(x, (0, width - x.shape[1]))


def common_prefix_len(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """Length of the token prefix shared by all rows (within every row's real tokens)."""
    same = (input_ids == input_ids[:1]).all(0) & attention_mask.bool().all(0)  # [T]
    return int(same.long().cumprod(0).sum())
