"""The loss assembly of :class:`~slca_lightning.module.SLCAGRPOModule`: log-probs and the update.

:class:`PolicyUpdate` is the half of the module that turns a scored rollout into optimiser
steps (the other half, ``training_step``, orchestrates: rewards, segments, advantages,
diagnostics, then this): the mini/micro-batch partition of a PPO epoch, the old and
reference log-probs computed with the first epoch's own partition (so the first optimiser
step sees ratio 1 and KL 0 bit for bit), ``ppo_epochs`` passes of
:func:`~slca_lightning.losses.policy_loss` with each micro-batch weighted by its share of the
aggregation's normaliser, gradient clipping and the scheduler, and the per-segment loss
split (:meth:`PolicyUpdate.loss_parts`) the gradient diagnostics read.
"""

from __future__ import annotations

import torch
from lightning.pytorch.utilities import rank_zero_warn

from slca_lightning.losses import AGGREGATION_ALIASES, logprob_mismatch, policy_loss
from slca_lightning.policy import grouped_logprobs, sequence_logprobs
from slca_lightning.rollout.record import RolloutRecord
from slca_lightning.types import RolloutBatch

__all__ = ["PolicyUpdate", "step_times"]

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
    (reward, advantage and diagnostics time over the step's)."""
    total = sum(metrics.get(k, 0.0) for k in STEP_PHASES)
    out = {"time/step": total}
    if total > 0:
        framework = metrics.get("time/reward_and_advantage", 0.0) + metrics.get(
            "time/diagnostics", 0.0
        )
        out["time/framework_fraction"] = framework / total
    return out


_WEIGHTED_BY_TOKENS = {"token-mean", "dapo", "bnpo"}


class PolicyUpdate:
    """Mixin of the LightningModule: computes log-probs and runs the PPO-clip update.

    Reads ``self.hparams`` (``temperature``, ``logprob_chunk_size``, ``shared_prefix``,
    ``mini_batches``, ``micro_batch_size``, ``ppo_epochs``, the loss settings), ``self.policy``
    and the Lightning module's optimiser, scheduler and ``manual_backward``.
    """

    def _logprobs(self, model, batch: RolloutBatch, rows: torch.Tensor, entropy: bool = False):
        kw = {
            "temperature": self.hparams.temperature,
            "chunk_size": self.hparams.logprob_chunk_size,
            "return_entropy": entropy,
        }
        ids, am = batch.input_ids[rows], batch.attention_mask[rows]
        single_process = self._trainer is None or self.trainer.world_size == 1
        if self.hparams.shared_prefix and single_process:
            return grouped_logprobs(model, ids, am, batch.group_ids[rows], **kw)
        return sequence_logprobs(model, ids, am, **kw)

    def _partition(self, b: int, gen: torch.Generator) -> list[list[torch.Tensor]]:
        """One PPO epoch's rows: mini-batches (shuffled when there are several), each a list
        of micro-batches of at most ``micro_batch_size`` rows."""
        hp = self.hparams
        order = torch.randperm(b, generator=gen) if hp.mini_batches > 1 else torch.arange(b)
        minis = torch.tensor_split(order, hp.mini_batches)
        return [list(torch.split(mini, hp.micro_batch_size)) for mini in minis if len(mini)]

    @torch.no_grad()
    def _full_logprobs(
        self, model, batch: RolloutBatch, plan: list[list[torch.Tensor]] | None = None
    ) -> torch.Tensor:
        """Log-probs of every row, computed micro-batch by micro-batch as in ``plan`` (the
        first epoch's partition), so the first update sees bit-identical values."""
        if plan is None:
            plan = self._partition(batch.batch_size, torch.Generator().manual_seed(0))
        out = torch.zeros(batch.input_ids.shape, dtype=torch.float32, device=self.device)
        for mini in plan:
            for micro in mini:
                micro = micro.to(self.device)
                out[micro] = self._logprobs(model, batch, micro).float()
        return out

    def _norm_length(self, batch: RolloutBatch) -> int | None:
        """``max_len`` of :func:`~slca_lightning.losses.aggregate` (Dr.GRPO's constant
        normaliser; None for the other modes): the data module's ``max_response_tokens``,
        the most loss-carrying tokens a row can have. Without one, the padded length ``T``
        of this batch (which varies between batches), with a one-time warning."""
        mode = self.hparams.aggregation
        if AGGREGATION_ALIASES.get(mode, mode) != "seq-mean-token-sum-norm":
            return None
        cap = getattr(getattr(self._trainer, "datamodule", None), "max_response_tokens", None)
        if cap:
            return int(cap)
        if not self._warned_norm_length:
            self._warned_norm_length = True
            rank_zero_warn(
                f"model.aggregation={mode!r} divides by a constant length, but the data module "
                "has no max_response_tokens: falling back to the padded batch length, which "
                "changes from batch to batch"
            )
        return int(batch.input_ids.shape[1])

    def loss_parts(self, record: RolloutRecord, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """The policy-gradient loss of ``rows`` of a rollout, split by segment (diagnostics).

        For each segment ``s`` of ``record.segments.masks``: the surrogate at ratio 1 (the
        current log-probs serve as old ones) with the advantages zeroed outside ``s``,
        aggregated like training over the whole loss mask, so the parts sum to the
        policy-gradient loss of the rows (no KL or entropy term). Differentiable in the
        policy's parameters (one forward shared by every part).
        """
        hp = self.hparams
        batch = record.batch
        rows = rows.to(self.device)
        logp = self._logprobs(self.policy, batch, rows)  # [b, T]
        mask = batch.assistant_mask[rows].to(self.device)
        if hp.mask_truncated and batch.truncated is not None:
            mask = mask & ~batch.truncated[rows].to(self.device)[:, None]
        adv = record.advantages.to(self.device)[rows]
        norm_len = self._norm_length(batch)
        parts = {}
        for name, seg in record.segments.masks.items():
            seg_adv = torch.where(seg.to(self.device)[rows], adv, torch.zeros_like(adv))
            parts[name], _ = policy_loss(
                logp,
                logp.detach(),
                seg_adv,
                mask,
                aggregation=hp.aggregation,
                max_len=norm_len,
            )
        return parts

    def _update(
        self, batch, advantages, loss_mask, old, ref, is_w=None, gen=None, plan=None, keep=None
    ) -> dict[str, float]:
        """``ppo_epochs`` passes; the first uses ``plan`` (the partition the old and
        reference log-probs were computed with, so the first optimiser step sees ratio 1
        and, with reference = policy, KL 0, bit for bit), later ones reshuffle with ``gen``.
        ``keep`` (``[B]`` bool): only those rows run forward/backward; the normalisers
        (``mini_tokens``, ``mini_rows``, ``len(mini)``) still count every row, and a
        mini-batch with no kept row still takes its optimiser step, on zero gradients."""
        hp = self.hparams
        opt = self.optimizers()
        sched = self.lr_schedulers()
        b = batch.batch_size
        if gen is None:
            gen = torch.Generator().manual_seed(hp.seed * 1_000_003 + int(self.global_step))
        if plan is None:
            plan = self._partition(b, gen)
        sums: dict[str, float] = {}
        tokens = 0.0
        grad_norms = []
        engine_logp = batch.old_logprobs if old is None else None  # mismatch on the fly
        mismatch = [0.0, 0]
        norm_len = self._norm_length(batch)
        for epoch in range(hp.ppo_epochs):
            for micros in plan if epoch == 0 else self._partition(b, gen):
                mini = torch.cat(micros)
                opt.zero_grad(set_to_none=True)
                mini_tokens = int(loss_mask[mini].sum())
                mini_rows = (
                    int(loss_mask[mini].any(dim=1).sum())
                    if hp.aggregation in ("seq-mean-token-mean", "grpo")
                    else len(mini)
                )
                ran = 0
                for micro in micros:
                    if keep is not None:
                        micro = micro[keep[micro].cpu()]
                        if len(micro) == 0:
                            continue
                    ran += 1
                    micro = micro.to(self.device)
                    logp, ent = self._logprobs(self.policy, batch, micro, entropy=True)
                    mask = loss_mask[micro]
                    if engine_logp is not None:
                        m = batch.assistant_mask[micro]
                        mismatch[0] += logprob_mismatch(logp.detach(), engine_logp[micro], m) * int(
                            m.sum()
                        )
                        mismatch[1] += int(m.sum())
                    if hp.aggregation in _WEIGHTED_BY_TOKENS:
                        weight = int(mask.sum()) / max(mini_tokens, 1)
                    elif hp.aggregation in ("seq-mean-token-mean", "grpo"):
                        weight = int(mask.any(dim=1).sum()) / max(mini_rows, 1)
                    else:
                        weight = len(micro) / len(mini)
                    loss, stats = policy_loss(
                        logp,
                        logp.detach() if old is None else old[micro],
                        advantages[micro],
                        mask,
                        ref_logprobs=None if ref is None else ref[micro],
                        kl_coef=hp.kl_coef,
                        entropy=ent,
                        entropy_coef=hp.entropy_coef,
                        eps_low=hp.eps_low,
                        eps_high=hp.eps_high,
                        dual_clip=hp.dual_clip,
                        aggregation=hp.aggregation,
                        max_len=norm_len,
                        is_weights=None if is_w is None else is_w[micro],
                    )
                    self.manual_backward(loss * weight)
                    n = stats.pop("num_tokens")
                    tokens += n
                    for k, v in stats.items():  # token-weighted means over micro-batches
                        sums[k] = sums.get(k, 0.0) + v * n
                params = [p for p in self.policy.parameters() if p.requires_grad]
                if not ran:  # every row skipped: the step an all-zero gradient takes
                    for p in params:
                        p.grad = torch.zeros_like(p)
                max_norm = hp.max_grad_norm if hp.max_grad_norm is not None else float("inf")
                grad_norms.append(float(torch.nn.utils.clip_grad_norm_(params, max_norm)))
                opt.step()
                sched.step()
        out = {f"train/{k}": v / max(tokens, 1.0) for k, v in sums.items()}
        out["train/tokens"] = tokens / max(hp.ppo_epochs, 1)
        out["train/grad_norm"] = sum(grad_norms) / max(len(grad_norms), 1)
        out["train/lr"] = float(sched.get_last_lr()[0])
        if engine_logp is not None:
            out["rollout/logprob_mismatch"] = mismatch[0] / max(mismatch[1], 1)
        return out
