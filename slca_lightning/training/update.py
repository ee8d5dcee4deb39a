"""The policy update of :class:`~slca_lightning.training.module.SLCAGRPOModule`: log-probs and
optimiser steps.

:class:`PolicyUpdate` is an object the module owns (``module.policy_update``) that turns a scored
rollout into optimiser steps (the module's ``training_step`` orchestrates: rewards,
segments, advantages, diagnostics, then this). It reads only its :class:`UpdateSettings`
and what each call hands it (the model, the device, the optimiser, the backward function): the mini/micro-batch partition of a PPO epoch, the old and
reference log-probs computed with the first epoch's own partition (so the first optimiser
step sees ratio 1 and KL 0 bit for bit), ``ppo_epochs`` passes of
:func:`~slca_lightning.training.losses.policy_loss` with each micro-batch weighted by its share of the
aggregation's normaliser, gradient clipping and the scheduler, and the per-segment loss
split (:meth:`PolicyUpdate.loss_parts`) the gradient diagnostics read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn

from slca_lightning.logprobs.causal_lm import grouped_logprobs, sequence_logprobs
from slca_lightning.rollout.record import RolloutRecord
from slca_lightning.training.losses import AGGREGATION_ALIASES, logprob_mismatch, policy_loss
from slca_lightning.types import RolloutBatch

__all__ = [
    "PolicyUpdate",
    "UpdateContext",
    "UpdateSettings",
    "pack_by_tokens",
    "row_lengths",
    "step_times",
]

#: The phases of one step whose times add up to ``time/step``.
STEP_PHASES = (
    "time/rollout",
    "time/reward_and_advantage",
    "time/diagnostics",
    "time/old_logprobs",
    "time/ref_logprobs",
    "time/update",
)


def step_times(metrics: dict[str, float]) -> dict[str, float]:
    """``time/step`` (the sum of :data:`STEP_PHASES`) and ``time/framework_fraction``
    (reward, advantage and diagnostics time over the step's). With asynchronous rollouts
    (``time/rollout_wait`` present) the trainer's share of the rollout is its wait for the
    batch, not the worker's ``time/rollout``, which overlapped the previous update."""
    phases = dict(metrics)
    if "time/rollout_wait" in phases:
        phases["time/rollout"] = phases["time/rollout_wait"]
    total = sum(phases.get(k, 0.0) for k in STEP_PHASES)
    out = {"time/step": total}
    if total > 0:
        framework = metrics.get("time/reward_and_advantage", 0.0) + metrics.get(
            "time/diagnostics", 0.0
        )
        out["time/framework_fraction"] = framework / total
    return out


_WEIGHTED_BY_TOKENS = {"token-mean", "dapo", "bnpo"}


#: Logged as the optimiser steps' mean of each mini-batch's objective (Σ over micro-batches
#: of weight × loss), whatever the micro-batch split; the other stats are token-weighted.
_OBJECTIVE = ("loss", "pg_loss")


def row_lengths(batch: RolloutBatch) -> torch.Tensor:
    """``[B]`` real (attended) tokens per row of a right-padded batch."""
    return batch.attention_mask.sum(dim=1)


@dataclass(frozen=True)
class UpdateSettings:
    """The module's settings the update reads (``model.*`` of a config, same names)."""

    temperature: float
    logprob_chunk_size: int
    shared_prefix: bool
    mini_batches: int
    micro_batch_size: int
    ppo_epochs: int
    kl_coef: float
    entropy_coef: float
    eps_low: float
    eps_high: float
    dual_clip: float | None
    aggregation: str
    max_grad_norm: float | None
    mask_truncated: bool
    seed: int
    micro_batch_tokens: int | None = None

    @classmethod
    def from_hparams(cls, hparams: Any) -> UpdateSettings:
        """The settings of a module's ``hparams`` (a mapping with at least these keys)."""
        return cls(**{f.name: hparams[f.name] for f in fields(cls) if f.name in hparams})


def pack_by_tokens(
    rows: torch.Tensor, lengths: torch.Tensor, budget: int, max_rows: int
) -> list[torch.Tensor]:
    """Micro-batches of ``rows`` whose padded size (rows × the longest row's length) stays
    within ``budget`` tokens, at most ``max_rows`` rows each: rows sorted by length, longest
    first (stable), cut greedily. A row longer than the budget is a micro-batch alone.

    ``lengths`` is ``[B]`` over the whole batch; ``rows`` indexes it. Example: lengths 9, 3,
    3, 8 with budget 16 → ``[[0], [3, 1], [2]]`` (9 alone; 8 and 3 as 2 × 8 = 16; the last
    3 would make 3 × 8).
    """
    rows, lengths = rows.cpu(), lengths.cpu()  # a plan of row indices, on the host
    order = rows[torch.argsort(lengths[rows], descending=True, stable=True)]
    out: list[list[int]] = []
    longest = 0
    for r in order.tolist():
        n = int(lengths[r])
        if out and len(out[-1]) < max_rows and (len(out[-1]) + 1) * max(longest, n) <= budget:
            out[-1].append(r)
            longest = max(longest, n)
        else:
            out.append([r])
            longest = n
    return [torch.tensor(m, dtype=torch.long) for m in out]


@dataclass
class UpdateContext:
    """Where one update runs: the device, whether the batch is this process's whole batch
    (prefix sharing needs every rank to run the same forwards), and the data module's
    ``max_response_tokens`` (Dr.GRPO's constant normaliser; None when it has none)."""

    device: torch.device
    single_process: bool = True
    max_response_tokens: int | None = None


class PolicyUpdate:
    """Computes log-probs and runs the PPO-clip update of a rollout batch.

    Args:
        settings: the loss and batching settings (:class:`UpdateSettings`).
    """

    def __init__(self, settings: UpdateSettings):
        self.settings = settings
        self._warned_norm_length = False

    def logprobs(
        self, model, batch: RolloutBatch, rows: torch.Tensor, ctx: UpdateContext, entropy=False
    ):
        """Log-probs (and with ``entropy`` the entropies) of ``rows`` of ``batch``, ``[b, T]``;
        a group's shared prompt prefix runs once when ``shared_prefix`` is on."""
        st = self.settings
        kw = {
            "temperature": st.temperature,
            "chunk_size": st.logprob_chunk_size,
            "return_entropy": entropy,
        }
        ids, am = batch.input_ids[rows], batch.attention_mask[rows]
        width = ids.shape[1]
        if st.micro_batch_tokens is not None:  # cut to this micro-batch's longest row
            keep = int(am.sum(dim=1).max()) if len(rows) else width
            ids, am = ids[:, :keep], am[:, :keep]
        if st.shared_prefix and ctx.single_process:
            out = grouped_logprobs(model, ids, am, batch.group_ids[rows], **kw)
        else:
            out = sequence_logprobs(model, ids, am, **kw)
        if ids.shape[1] == width:
            return out
        pad = width - ids.shape[1]  # back to the batch's width: zeros on the cut padding
        grow = lambda t: torch.nn.functional.pad(t, (0, pad))  # noqa: E731
        return tuple(grow(t) for t in out) if isinstance(out, tuple) else grow(out)

    def partition(
        self, b: int, gen: torch.Generator, lengths: torch.Tensor | None = None
    ) -> list[list[torch.Tensor]]:
        """One PPO epoch's rows: mini-batches (shuffled when there are several), each a list
        of micro-batches of at most ``micro_batch_size`` rows, and with
        ``micro_batch_tokens`` packed by ``lengths`` (``[B]`` real tokens per row):
        :func:`pack_by_tokens`."""
        st = self.settings
        order = torch.randperm(b, generator=gen) if st.mini_batches > 1 else torch.arange(b)
        minis = [m for m in torch.tensor_split(order, st.mini_batches) if len(m)]
        if st.micro_batch_tokens is None or lengths is None:
            return [list(torch.split(mini, st.micro_batch_size)) for mini in minis]
        return [
            pack_by_tokens(mini, lengths, st.micro_batch_tokens, st.micro_batch_size)
            for mini in minis
        ]

    @torch.no_grad()
    def full_logprobs(
        self,
        model,
        batch: RolloutBatch,
        ctx: UpdateContext,
        plan: list[list[torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """Log-probs of every row, computed micro-batch by micro-batch as in ``plan`` (the
        first epoch's partition), so the first update sees bit-identical values."""
        if plan is None:
            plan = self.partition(
                batch.batch_size, torch.Generator().manual_seed(0), row_lengths(batch)
            )
        out = torch.zeros(batch.input_ids.shape, dtype=torch.float32, device=ctx.device)
        for mini in plan:
            for micro in mini:
                micro = micro.to(ctx.device)
                out[micro] = self.logprobs(model, batch, micro, ctx).float()
        return out

    def norm_length(self, batch: RolloutBatch, ctx: UpdateContext) -> int | None:
        """``max_len`` of :func:`~slca_lightning.training.losses.aggregate` (Dr.GRPO's constant
        normaliser; None for the other modes): the data module's ``max_response_tokens``,
        the most loss-carrying tokens a row can have. Without one, the padded length ``T``
        of this batch (which varies between batches), with a one-time warning."""
        mode = self.settings.aggregation
        if AGGREGATION_ALIASES.get(mode, mode) != "seq-mean-token-sum-norm":
            return None
        if ctx.max_response_tokens:
            return int(ctx.max_response_tokens)
        if not self._warned_norm_length:
            self._warned_norm_length = True
            rank_zero_warn(
                f"model.aggregation={mode!r} divides by a constant length, but the data module "
                "has no max_response_tokens: falling back to the padded batch length, which "
                "changes from batch to batch"
            )
        return int(batch.input_ids.shape[1])

    def loss_parts(
        self, policy, record: RolloutRecord, rows: torch.Tensor, ctx: UpdateContext
    ) -> dict[str, torch.Tensor]:
        """The policy-gradient loss of ``rows`` of a rollout, split by segment (diagnostics).

        For each segment ``s`` of ``record.segments.masks``: the surrogate at ratio 1 (the
        current log-probs serve as old ones) with the advantages zeroed outside ``s``,
        aggregated like training over the whole loss mask, so the parts sum to the
        policy-gradient loss of the rows (no KL or entropy term). Differentiable in the
        policy's parameters (one forward shared by every part).
        """
        st = self.settings
        batch = record.batch
        rows = rows.to(ctx.device)
        logp = self.logprobs(policy, batch, rows, ctx)  # [b, T]
        mask = batch.assistant_mask[rows].to(ctx.device)
        if st.mask_truncated and batch.truncated is not None:
            mask = mask & ~batch.truncated[rows].to(ctx.device)[:, None]
        adv = record.advantages.to(ctx.device)[rows]
        norm_len = self.norm_length(batch, ctx)
        parts = {}
        for name, seg in record.segments.masks.items():
            seg_adv = torch.where(seg.to(ctx.device)[rows], adv, torch.zeros_like(adv))
            parts[name], _ = policy_loss(
                logp,
                logp.detach(),
                seg_adv,
                mask,
                aggregation=st.aggregation,
                max_len=norm_len,
            )
        return parts

    def run(
        self,
        policy,
        batch: RolloutBatch,
        advantages: torch.Tensor,
        loss_mask: torch.Tensor,
        old: torch.Tensor | None,
        ref: torch.Tensor | None,
        ctx: UpdateContext,
        optimizer: Any,
        scheduler: Any,
        backward: Callable[[torch.Tensor], None],
        gen: torch.Generator,
        plan: list[list[torch.Tensor]] | None = None,
        is_w: torch.Tensor | None = None,
        keep: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """``ppo_epochs`` passes of optimiser steps over ``batch``; returns the step's
        ``train/*`` metrics.

        The first pass uses ``plan`` (the partition the old and reference log-probs were
        computed with, so the first optimiser step sees ratio 1 and, with reference =
        policy, KL 0, bit for bit), later ones reshuffle with ``gen``. ``old`` None: the
        current log-probs, detached, serve (ratio exactly 1). ``keep`` (``[B]`` bool): only
        those rows run forward/backward; the normalisers (``mini_tokens``, ``mini_rows``,
        ``len(mini)``) still count every row, and a mini-batch with no kept row still takes
        its optimiser step, on zero gradients. ``backward(loss)`` is the trainer's
        (Lightning's ``manual_backward``: precision and strategy hooks)."""
        st = self.settings
        b = batch.batch_size
        lengths = row_lengths(batch)
        if plan is None:
            plan = self.partition(b, gen, lengths)
        sums: dict[str, float] = {}
        objective: dict[str, float] = {}  # mean over optimiser steps of each step's objective
        tokens = 0.0
        grad_norms = []
        engine_logp = batch.old_logprobs if old is None else None  # mismatch on the fly
        mismatch = [0.0, 0]
        norm_len = self.norm_length(batch, ctx)
        params = [p for p in policy.parameters() if p.requires_grad]
        for epoch in range(st.ppo_epochs):
            for micros in plan if epoch == 0 else self.partition(b, gen, lengths):
                mini = torch.cat(micros)
                optimizer.zero_grad(set_to_none=True)
                mini_tokens = int(loss_mask[mini].sum())
                mini_rows = (
                    int(loss_mask[mini].any(dim=1).sum())
                    if st.aggregation in ("seq-mean-token-mean", "grpo")
                    else len(mini)
                )
                ran = 0
                for micro in micros:
                    if keep is not None:
                        micro = micro[keep[micro].cpu()]
                        if len(micro) == 0:
                            continue
                    ran += 1
                    micro = micro.to(ctx.device)
                    logp, ent = self.logprobs(policy, batch, micro, ctx, entropy=True)
                    mask = loss_mask[micro]
                    if engine_logp is not None:
                        m = batch.assistant_mask[micro]
                        n_m = int(m.sum())
                        mismatch[0] += logprob_mismatch(logp.detach(), engine_logp[micro], m) * n_m
                        mismatch[1] += n_m
                    if st.aggregation in _WEIGHTED_BY_TOKENS:
                        weight = int(mask.sum()) / max(mini_tokens, 1)
                    elif st.aggregation in ("seq-mean-token-mean", "grpo"):
                        weight = int(mask.any(dim=1).sum()) / max(mini_rows, 1)
                    else:
                        weight = len(micro) / len(mini)
                    loss, stats = policy_loss(
                        logp,
                        logp.detach() if old is None else old[micro],
                        advantages[micro],
                        mask,
                        ref_logprobs=None if ref is None else ref[micro],
                        kl_coef=st.kl_coef,
                        entropy=ent,
                        entropy_coef=st.entropy_coef,
                        eps_low=st.eps_low,
                        eps_high=st.eps_high,
                        dual_clip=st.dual_clip,
                        aggregation=st.aggregation,
                        max_len=norm_len,
                        is_weights=None if is_w is None else is_w[micro],
                    )
                    backward(loss * weight)
                    n = stats.pop("num_tokens")
                    tokens += n
                    for k in _OBJECTIVE:  # the mini-batch's objective: Σ weight · loss
                        objective[k] = objective.get(k, 0.0) + stats.pop(k) * weight
                    for k, v in stats.items():  # token-weighted means over micro-batches
                        sums[k] = sums.get(k, 0.0) + v * n
                if not ran:  # every row skipped: the step an all-zero gradient takes
                    for p in params:
                        p.grad = torch.zeros_like(p)
                max_norm = st.max_grad_norm if st.max_grad_norm is not None else float("inf")
                grad_norms.append(float(torch.nn.utils.clip_grad_norm_(params, max_norm)))
                optimizer.step()
                scheduler.step()
        out = {f"train/{k}": v / max(tokens, 1.0) for k, v in sums.items()}
        out.update({f"train/{k}": v / max(len(grad_norms), 1) for k, v in objective.items()})
        out["train/tokens"] = tokens / max(st.ppo_epochs, 1)
        out["train/grad_norm"] = sum(grad_norms) / max(len(grad_norms), 1)
        out["train/lr"] = float(scheduler.get_last_lr()[0])
        if engine_logp is not None:
            out["rollout/logprob_mismatch"] = mismatch[0] / max(mismatch[1], 1)
        return out
