"""SLCAGRPOModule: the LightningModule that turns rollout batches into policy updates.

One ``training_step`` per rollout batch (manual optimisation):

1. ``next(dataloader_iter)`` makes the data module generate the batch *now*, with the
   weights of the latest optimiser step (no prefetch, so strictly on-policy);
2. rewards (``reward_head``), segments (``segmenter``) and token advantages (``router``) are
   computed once for the whole batch, since the group statistics need every row;
3. ``old_logprobs``: with one PPO epoch and one mini-batch the ratio is exactly 1 and the
   current log-probs (detached) serve; otherwise one no-grad forward before the updates
   (``old_logprobs="rollout"`` trusts the engine's sampling log-probs instead). ``"auto"``
   also recomputes when the engine's log-probs are not trusted (``logprobs_trusted =
   False``, vLLM) or ``tis_cap`` is set; ``tis_cap = C`` weights each token's surrogate by
   ``min(exp(old − engine), C)`` (truncated importance sampling), and
   ``rollout/logprob_mismatch`` (mean |trainer − engine| log-prob on sampled tokens) is
   logged every step;
4. ``ppo_epochs × mini_batches`` optimiser steps, each accumulating ``manual_backward`` over
   micro-batches weighted so the loss equals the chosen aggregation over the mini-batch,
   with gradient clipping and an LR scheduler step after each optimiser step.

The module orchestrates; the method lives in the injected components, in
:mod:`slca_lightning.training.losses` and in the update (:mod:`slca_lightning.training.update`).
``trainer.max_steps`` counts optimiser steps: ``ppo_epochs × mini_batches`` per batch.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
from lightning.pytorch.utilities import rank_zero_warn

from slca_lightning.advantages import (
    AdvantageRouter,
    SLCARouter,
    constant_channels,
    no_signal_message,
    routing_diagnostics,
    signal_rows,
    weight_negatives,
)
from slca_lightning.config.checks import check_args
from slca_lightning.models.fsdp import shard_fsdp2
from slca_lightning.models.loading import zero_dropout
from slca_lightning.models.lora import LoraSettings, apply_lora
from slca_lightning.models.policy import load_policy
from slca_lightning.models.pretrained import fill_learning_rate
from slca_lightning.rewards import HierarchicalReward, RewardHead, check_channels
from slca_lightning.rollout.record import RolloutRecord
from slca_lightning.segmenters import MaskRunSegmenter, Segmenter
from slca_lightning.training.console import StepProgressBar, quiet_console
from slca_lightning.training.losses import logprob_mismatch, truncated_is_weight
from slca_lightning.training.reference import drop_reference, restore_reference, weights_digest
from slca_lightning.training.threads import ensure_threads
from slca_lightning.training.update import (
    PolicyUpdate,
    UpdateContext,
    UpdateSettings,
    row_lengths,
    step_times,
)
from slca_lightning.types import RolloutBatch, to_device


class SLCAGRPOModule(L.LightningModule):
    """Policy (+ frozen reference) trained by a segment-routed PPO-clip objective.

    Args:
        model: a built-in model (``"tiny"``, ``"suite"``, their cached SFT warm starts
            ``"tiny-sft"``, ``"suite-sft"``, ``"suite-pooled-sft"``), a named pretrained source
            (``"smollm2-135m-instruct"``), a ``.gguf`` file or a local HF folder.
        segmenter: which tokens are tool / summary (default: the paper's mask runs).
        reward_head: channel rewards per episode (default: HierR with the rule judge).
        router: the advantage estimator (default: SLCA; GRPO, ToolPO, RLTR, MT-GRPO are one
            ``class_path`` away).
        learning_rate, weight_decay: AdamW. ``learning_rate: null`` (default) takes the
            model's own (:func:`~slca_lightning.models.pretrained.default_learning_rate`: a named
            source's, 5e-5 for the built-in models, 1e-6 for any other model, the paper's).
        warmup_steps: linear warm-up in optimiser steps.
        lr_schedule: ``"constant"`` (paper), ``"linear"`` or ``"cosine"`` decay to 0 at max_steps.
        ppo_epochs: passes over each rollout batch (μ).
        mini_batches: optimiser steps per pass (the batch is split into this many parts).
        micro_batch_size: rows per forward/backward (gradient accumulation inside a mini-batch).
        micro_batch_tokens: a token budget per forward/backward (None: off). Rows of a
            mini-batch are sorted by length and packed so that rows × the longest row's
            length stays within it (and rows ≤ ``micro_batch_size``); each micro-batch is cut
            to its own longest row, so memory follows the budget, not the longest row of
            the whole batch times the row count. The loss is the row split's.
        eps_low, eps_high: PPO clip range ``[1 − eps_low, 1 + eps_high]``.
        dual_clip: dual-clip constant for negative advantages (None = off).
        kl_coef: k3 KL-to-reference coefficient in the loss (0 = no reference model).
        entropy_coef: entropy bonus coefficient.
        aggregation: ``token-mean`` (paper), ``seq-mean-token-mean`` (``grpo``),
            ``seq-mean-token-sum``, ``seq-mean-token-sum-norm`` (``dr_grpo``: divides by
            the constant ``rows × data.max_response_tokens``, whatever the padding).
        negative_weight: scale of negative token advantages (1 = the paper; < 1 damps the
            push away from below-average samples, :func:`~slca_lightning.advantages.
            weight_negatives`).
        skip_no_signal_rows: skip the forward/backward of rows whose advantages are all 0
            (every row of a group with equal rewards; ``adv/signal_fraction`` is the share
            left). The same update when ``kl_coef`` and ``entropy_coef`` are 0 (those rows'
            loss gradient is exactly 0 and the loss normalisers still count them); with a KL
            or entropy term it drops those rows' share of it, so it is off by default.
        save_reference: write the frozen KL reference into checkpoints. Off: it is left
            out and rebuilt from ``model`` on load, checked against the SHA-256 of its
            weights stored in the checkpoint (:mod:`slca_lightning.training.reference`).
        mask_truncated: drop episodes that hit a cap from the loss.
        max_grad_norm: gradient clipping (None = off).
        temperature: the sampling temperature (log-probs are of the scaled policy).
        old_logprobs: ``"auto"``, ``"recompute"`` or ``"rollout"`` (see module docstring).
        tis_cap: truncated importance-sampling cap ``C`` between the trainer's and the
            engine's log-probs (None = off; 2.0 is common with vLLM).
        fsdp_param_dtype: under ``ModelParallelStrategy`` (FSDP2), the compute dtype of the
            sharded policy and reference (mixed precision, e.g. ``"bfloat16"``; None = dtype).
        lora: LoRA settings; the reference is then the adapter-disabled base.
        logprob_chunk_size: rows per chunk of the chunked log-softmax.
        shared_prefix: compute each group's shared prompt once per micro-batch
            (:func:`~slca_lightning.models.policy.grouped_logprobs`: same values, a fraction of the
            cost when the prompt is most of each row); off under multi-process training,
            where every rank must run the same number of forward passes.
        dtype: policy dtype (``float32``, ``bfloat16``).
        seed: seeds model creation and mini-batch shuffling.
    """

    def __init__(
        self,
        model: str = "tiny-sft",
        segmenter: Segmenter | None = None,
        reward_head: RewardHead | None = None,
        router: AdvantageRouter | None = None,
        learning_rate: float | None = None,
        weight_decay: float = 0.0,
        warmup_steps: int = 0,
        lr_schedule: Literal["constant", "linear", "cosine"] = "constant",
        ppo_epochs: int = 1,
        mini_batches: int = 1,
        micro_batch_size: int = 8,
        micro_batch_tokens: int | None = None,
        eps_low: float = 0.2,
        eps_high: float = 0.2,
        dual_clip: float | None = None,
        kl_coef: float = 0.001,
        entropy_coef: float = 0.0,
        aggregation: str = "token-mean",
        negative_weight: float = 1.0,
        skip_no_signal_rows: bool = False,
        save_reference: bool = False,
        mask_truncated: bool = False,
        max_grad_norm: float | None = 1.0,
        temperature: float = 1.0,
        old_logprobs: Literal["auto", "recompute", "rollout"] = "auto",
        tis_cap: float | None = None,
        fsdp_param_dtype: str | None = None,
        lora: LoraSettings | None = None,
        logprob_chunk_size: int = 1024,
        shared_prefix: bool = True,
        dtype: str = "float32",
        seed: int = 0,
    ) -> None:
        check_args(SLCAGRPOModule, locals(), "model")  # every numeric range (range_table)
        quiet_console()  # used from Python, the console is the CLI's too
        super().__init__()
        if old_logprobs not in ("auto", "recompute", "rollout"):
            raise ValueError(
                f"model.old_logprobs must be auto, recompute or rollout, got {old_logprobs!r}"
            )
        self.save_hyperparameters(ignore=["segmenter", "reward_head", "router"])
        fill_learning_rate(self.hparams, "rl")  # null: the model's own rate
        self.automatic_optimization = False
        self.lora = LoraSettings(**lora) if isinstance(lora, dict) else lora
        self.segmenter = segmenter or MaskRunSegmenter()
        self.reward_head = reward_head or HierarchicalReward()
        self.router = router or SLCARouter()
        self.policy: torch.nn.Module | None = None
        self.reference: torch.nn.Module | None = None
        self.tokenizer: Any = None
        self.last_rollout: RolloutRecord | None = None
        self.constant_reward_warn_steps = 10
        self._constant_streak: dict[str, int] = {}
        self.policy_update = PolicyUpdate(UpdateSettings.from_hparams(self.hparams))
        self._reference_digest: str | None = None

    def setup(self, stage: str) -> None:
        """Used from Python (``L.Trainer().fit(module, data)``), a fit gets what ``slca fit``
        gets: its thread choice, and one step-counting progress bar in place of Lightning's
        default per-epoch one (whose epochs mean nothing for an endless rollout stream:
        ``Epoch 0/-2``); a progress bar of the user's own is kept."""
        ensure_threads(where="SLCAGRPOModule")
        trainer = self._trainer
        bar = getattr(trainer, "progress_bar_callback", None)
        if trainer is not None and type(bar) in (TQDMProgressBar, RichProgressBar):
            step_bar = StepProgressBar("RL")
            trainer.callbacks = [step_bar if c is bar else c for c in trainer.callbacks]
            step_bar.setup(trainer, self, stage)  # the callbacks' setup hooks already ran

    def update_context(self) -> UpdateContext:
        """Where this module's update runs (device, one process or several, the data
        module's ``max_response_tokens``)."""
        single = self._trainer is None or self._trainer.world_size == 1
        cap = getattr(getattr(self._trainer, "datamodule", None), "max_response_tokens", None)
        return UpdateContext(self.device, single, cap)

    def loss_parts(self, record: RolloutRecord, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """The policy-gradient loss of ``rows`` of a rollout, split by segment
        (:meth:`~slca_lightning.training.update.PolicyUpdate.loss_parts`; the gradient
        diagnostics read it)."""
        return self.policy_update.loss_parts(self.policy, record, rows, self.update_context())

    @classmethod
    def load_from_checkpoint(  # type: ignore[override]
        cls, checkpoint_path: Any, *args: Any, trust_class_prefix: Any = (), **kwargs: Any
    ) -> SLCAGRPOModule:
        """Lightning's ``load_from_checkpoint``, after the checkpoint passed
        :func:`slca_lightning.training.checkpoints.load_checkpoint` (read weights-only; every class
        path in its hyper-parameters under ``slca_lightning``, ``callbacks`` or a prefix of
        ``trust_class_prefix``), and itself read weights-only."""
        from slca_lightning.training.checkpoints import check_class_paths, load_checkpoint

        load_checkpoint(checkpoint_path, trust_class_prefix)
        if kwargs.get("hparams_file"):
            import yaml

            with open(kwargs["hparams_file"]) as fh:
                check_class_paths(
                    yaml.safe_load(fh), str(kwargs["hparams_file"]), trust_class_prefix
                )
        kwargs["weights_only"] = True
        return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)

    # -- models --------------------------------------------------------------------------
    def configure_model(self) -> None:
        if self.policy is not None:
            return
        hp = self.hparams
        policy, tokenizer = load_policy(hp.model, dtype=hp.dtype, seed=hp.seed)
        if self.lora is not None:
            policy = apply_lora(policy, self.lora)
        elif hp.kl_coef > 0:
            self.reference = zero_dropout(copy.deepcopy(policy).requires_grad_(False))
        # RL samples and scores one deterministic network: no dropout, so train mode (what
        # Lightning expects of a module it trains) computes exactly what eval mode does
        for net in [n for n in (policy, self.reference) if n is not None]:
            zero_dropout(net).train()
        mesh = getattr(self, "_device_mesh", None)  # set by ModelParallelStrategy (FSDP2)
        if mesh is not None:
            for net in (policy, self.reference):
                if net is not None:
                    shard_fsdp2(net, mesh, hp.fsdp_param_dtype)
        self.policy, self.tokenizer = policy, tokenizer
        if hasattr(self.segmenter, "tokenizer") and self.segmenter.tokenizer is None:
            self.segmenter.tokenizer = tokenizer

    # -- checkpoints ---------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        sharded = getattr(self, "_device_mesh", None) is not None
        if self.hparams.save_reference or self.reference is None or sharded:
            return
        if self._reference_digest is None:  # frozen: hashed once
            self._reference_digest = weights_digest(self.reference)
        drop_reference(checkpoint, str(self.hparams.model), self._reference_digest)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if self.policy is not None:  # configured: the reference (if any) was rebuilt
            restore_reference(checkpoint, self.reference)

    def on_train_start(self) -> None:
        # from_pretrained returns eval mode; train mode (dropout is 0) while training
        if self.policy is not None:
            self.policy.train()

    def on_fit_start(self) -> None:
        # before any rollout: a router reading a channel the head lacks fails here, not at step 1
        check_channels(self.reward_head, self.router)
        dm = getattr(self.trainer, "datamodule", None)
        if getattr(dm, "max_staleness", 0) and self.hparams.tis_cap is None:
            raise ValueError(
                f"data.max_staleness={dm.max_staleness} samples rollouts with weights up to "
                f"{dm.max_staleness} updates old: set model.tis_cap (e.g. 2.0), the truncated "
                "importance weight that corrects for the lag"
            )
        if dm is not None and hasattr(dm, "prompts_per_step"):
            rows = dm.prompts_per_step * dm.group_size
            if rows < self.hparams.mini_batches:
                raise ValueError(
                    f"model.mini_batches={self.hparams.mini_batches} exceeds the rows of a rollout "
                    f"batch (data.prompts_per_step={dm.prompts_per_step} × data.group_size="
                    f"{dm.group_size} = {rows}): lower mini_batches or raise prompts_per_step"
                )
            if dm.group_size < 2:
                rank_zero_warn(
                    "data.group_size=1: every group has one row, so every advantage is 0 and "
                    "nothing is learned; use group_size ≥ 2"
                )

    def _warn_constant_channels(self, rewards) -> None:
        """PITFALLS §9: warn once a watched channel has been constant for
        ``constant_reward_warn_steps`` steps (:func:`~slca_lightning.advantages.diagnostics.constant_channels`)."""
        watched = set(getattr(self.router, "channels", set()) or rewards.channels)
        for message in constant_channels(
            rewards.channels, watched, self._constant_streak, self.constant_reward_warn_steps
        ):
            rank_zero_warn(message)

    def _reference_context(self):
        if self.lora is not None and hasattr(self.policy, "disable_adapter"):
            return self.policy.disable_adapter()
        return contextlib.nullcontext()

    def configure_optimizers(self):
        hp = self.hparams
        params = [p for p in self.policy.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=hp.learning_rate, weight_decay=hp.weight_decay)
        total = self.trainer.max_steps if self.trainer and self.trainer.max_steps > 0 else None

        def factor(step: int) -> float:
            warm = min(1.0, (step + 1) / hp.warmup_steps) if hp.warmup_steps > 0 else 1.0
            if hp.lr_schedule == "constant" or not total:
                return warm
            progress = min(
                1.0, max(0.0, (step - hp.warmup_steps) / max(1, total - hp.warmup_steps))
            )
            decay = (
                1.0 - progress
                if hp.lr_schedule == "linear"
                else 0.5 * (1 + math.cos(math.pi * progress))
            )
            return warm * decay

        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # -- log-probs -----------------------------------------------------------------------
    # -- the step ------------------------------------------------------------------------
    def training_step(self, dataloader_iter):
        hp = self.hparams
        step = int(self.global_step)
        batch: RolloutBatch = next(dataloader_iter)
        if isinstance(batch, tuple):  # Lightning may hand (batch, batch_idx, dataloader_idx)
            batch = batch[0]
        batch = to_device(batch, self.device)
        metrics: dict[str, float] = dict(batch.stats)

        t0 = time.perf_counter()
        rewards = self.reward_head(batch.episodes)
        segments = self.segmenter(batch)
        routed = self.router.route(rewards, segments, batch.group_ids.cpu())
        weighted = weight_negatives(routed.token_advantages, hp.negative_weight)
        advantages = weighted.to(self.device)
        metrics["time/reward_and_advantage"] = time.perf_counter() - t0
        metrics.update(rewards.log_dict("reward"))
        self._warn_constant_channels(rewards)
        for name, value in rewards.channels.items():
            metrics[f"reward/{name}_std"] = (
                float(value.float().std(unbiased=False)) if value.numel() else 0.0
            )
        metrics.update(routed.stats)
        t0 = time.perf_counter()
        metrics.update(
            routing_diagnostics(
                self.router,
                rewards,
                segments,
                batch.group_ids.cpu(),
                routed.token_advantages,
                lambda_summary=float(getattr(self.reward_head, "lambda_summary", 1.0)),
                generator=torch.Generator().manual_seed(hp.seed * 7_919 + step),
            )
        )
        metrics["time/diagnostics"] = time.perf_counter() - t0  # contamination + leakage

        loss_mask = batch.assistant_mask.clone()
        if hp.mask_truncated and batch.truncated is not None:
            loss_mask &= ~batch.truncated[:, None]
        signal = signal_rows(advantages, loss_mask)
        metrics["adv/signal_fraction"] = float(signal.float().mean()) if len(signal) else 0.0
        if not bool(signal.any()):
            calls = metrics.get("rollout/tool_calls_per_episode")
            rank_zero_warn(no_signal_message(step, calls))

        t0 = time.perf_counter()
        gen = torch.Generator().manual_seed(hp.seed * 1_000_003 + step)
        ctx = self.update_context()
        plan = self.policy_update.partition(
            batch.batch_size, gen, row_lengths(batch)
        )  # the first epoch's micro-batches
        single_pass = hp.ppo_epochs == 1 and hp.mini_batches == 1
        engine = getattr(getattr(self.trainer, "datamodule", None), "engine", None)
        stale = bool(getattr(getattr(self.trainer, "datamodule", None), "max_staleness", 0))
        untrusted = not getattr(engine, "logprobs_trusted", True) or hp.tis_cap is not None
        untrusted = untrusted or stale  # sampled by older weights: recompute π_old
        if hp.old_logprobs == "rollout":
            old = batch.old_logprobs
        elif hp.old_logprobs == "recompute" or not single_pass or untrusted:
            old = self.policy_update.full_logprobs(self.policy, batch, ctx, plan)
        else:
            old = None  # ratio is exactly 1: use the current log-probs, detached
        metrics["time/old_logprobs"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ref = None
        if hp.kl_coef > 0:
            if self.reference is not None:
                ref = self.policy_update.full_logprobs(self.reference, batch, ctx, plan)
            else:
                with self._reference_context():
                    ref = self.policy_update.full_logprobs(self.policy, batch, ctx, plan)
        metrics["time/ref_logprobs"] = time.perf_counter() - t0
        is_w = None
        if batch.old_logprobs is not None and old is not None and old is not batch.old_logprobs:
            m = batch.assistant_mask
            metrics["rollout/logprob_mismatch"] = logprob_mismatch(old, batch.old_logprobs, m)
            if hp.tis_cap is not None:
                is_w = truncated_is_weight(old, batch.old_logprobs, m, hp.tis_cap)
                metrics["rollout/tis_weight_mean"] = float(is_w[m].mean()) if m.any() else 1.0

        t0 = time.perf_counter()
        keep = signal if hp.skip_no_signal_rows else None
        out = self.policy_update.run(
            self.policy, batch, advantages, loss_mask, old, ref, ctx,
            optimizer=self.optimizers(), scheduler=self.lr_schedulers(),
            backward=self.manual_backward, gen=gen, plan=plan, is_w=is_w, keep=keep,
        )  # fmt: skip
        metrics.update(out)
        metrics["time/update"] = time.perf_counter() - t0
        metrics.update(step_times(metrics))
        self.last_rollout = RolloutRecord(
            batch=batch,
            segments=segments,
            advantages=weighted,
            rewards=rewards,
            step=step,
        )
        # Lightning re-logs the last value of an on-step key at steps that do not log it:
        # forget the previous step's values so that a figure this step did not measure
        # (adv/tool/*, adv/contamination without tool tokens) is absent, not stale.
        results = getattr(self._trainer, "_results", None)
        if results is not None:
            results.reset(metrics=False, fx="training_step")
        self.log_dict(metrics, on_step=True, prog_bar=False, batch_size=batch.batch_size)
        self.log(
            "reward",
            metrics.get("reward/total", 0.0),
            prog_bar=True,
            on_step=True,
            batch_size=batch.batch_size,
        )
        return None
