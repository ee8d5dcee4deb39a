"""Training-step throughput: the slca update vs TRL 1.16.0 ``GRPOTrainer`` on one batch.

What is timed is the part both systems do: given fixed prompt + completion token batches
and per-row advantages, one policy-gradient update = forward (with per-token log-probs and
entropy), loss, backward, gradient clipping (max norm 1) and one AdamW step.

- **slca**: ``PolicyUpdate.run`` of an ``SLCAGRPOModule`` (the module's own update code, unchanged) on a
  :class:`~slca_lightning.types.RolloutBatch`. Lightning's loop is not run around it:
  ``optimizers()`` / ``lr_schedulers()`` return an AdamW + constant LambdaLR built like
  ``configure_optimizers``, and ``manual_backward`` is ``loss.backward()`` (what Lightning
  does for 32-bit CPU training). Run with ``shared_prefix=True`` (each group's prompt once
  per micro-batch, the default) and ``shared_prefix=False``.
- **TRL**: a real ``GRPOTrainer`` around a second copy of the same model;
  ``trainer.training_step(model, inputs)`` (``Trainer.training_step`` → ``compute_loss`` →
  ``_compute_loss``: TRL's fused LM head log-probs + entropy, loss, ``accelerator.backward``)
  followed by what ``Trainer``'s inner loop does after it: ``accelerator.clip_grad_norm_``,
  ``optimizer.step()``, ``lr_scheduler.step()``, ``zero_grad``. ``_prepare_inputs`` (which
  would generate and score completions) is replaced by the identity on the instance, so
  the prepared batch dictionary of ``_generate_and_score_completions``' shape goes straight in.

Both: the ``"tiny"`` policy (same seed, same initial weights), float32, loss
``grpo`` (sequence mean of token means), no KL (``beta = kl_coef = 0``: TRL computes
reference log-probs during generation, outside ``training_step``), ratio 1 (old log-probs
= current, detached), one micro-batch holding the whole batch. The batch looks like a
rollout batch: ``groups`` prompts of ``prompt_len`` tokens, each repeated G times, and
right-padded completions of 75–100 % of ``completion_len`` tokens. The first round's
gradient norms (same weights, same batch) are compared as a check that both sides compute
the same loss.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass

import torch
from _timing import alternate, paired_ratio, spread


@dataclass
class UpdateShape:
    """Batch shape of the update benchmark."""

    groups: int = 2
    group_size: int = 4
    prompt_len: int = 1000
    completion_len: int = 200
    rounds: int = 5
    warmup: int = 1


def make_batch(shape: UpdateShape, pad_id: int, vocab: int, seed: int = 0) -> dict:
    """Prompt/completion ids and masks (TRL's layout) plus row advantages ``[B]``."""
    g = torch.Generator().manual_seed(seed)
    b = shape.groups * shape.group_size
    prompts = torch.randint(3, vocab, (shape.groups, shape.prompt_len), generator=g)
    prompt_ids = prompts.repeat_interleave(shape.group_size, dim=0)  # [B, P]
    lo = max(1, (3 * shape.completion_len) // 4)
    lengths = torch.randint(lo, shape.completion_len + 1, (b,), generator=g)
    lengths[0] = shape.completion_len  # the widest row sets the padded width
    cols = torch.arange(shape.completion_len)
    completion_mask = (cols[None] < lengths[:, None]).long()  # [B, C], right-padded
    completion_ids = torch.randint(3, vocab, (b, shape.completion_len), generator=g)
    completion_ids[completion_mask == 0] = pad_id
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.randn(b, generator=g),
        "group_ids": torch.arange(shape.groups).repeat_interleave(shape.group_size),
    }


class SlcaUpdate:
    """One ``PolicyUpdate.run`` of an ``SLCAGRPOModule`` per call on a fixed rollout batch."""

    def __init__(self, data: dict, shared_prefix: bool, lr: float = 1e-5):
        from slca_lightning.training.module import SLCAGRPOModule
        from slca_lightning.types import RolloutBatch

        b = data["prompt_ids"].shape[0]
        self.module = SLCAGRPOModule(
            model="tiny", kl_coef=0.0, micro_batch_size=b, aggregation="grpo",
            learning_rate=lr, max_grad_norm=1.0, shared_prefix=shared_prefix, seed=0,
        )  # fmt: skip
        self.module.configure_model()
        self.module.policy.train()
        params = [p for p in self.module.policy.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
        self.opt, self.sched = opt, sched  # no Lightning loop around the update: plain backward
        ids = torch.cat([data["prompt_ids"], data["completion_ids"]], 1)  # [B, P+C]
        attn = torch.cat([data["prompt_mask"], data["completion_mask"]], 1).bool()
        assistant = torch.zeros_like(attn)
        assistant[:, data["prompt_ids"].shape[1] :] = data["completion_mask"].bool()
        self.batch = RolloutBatch(
            input_ids=ids, attention_mask=attn, assistant_mask=assistant,
            group_ids=data["group_ids"],
        )  # fmt: skip
        self.advantages = data["advantages"][:, None] * assistant.float()  # [B, T]
        self.tokens = int(attn.sum())
        self.grad_norms: list[float] = []

    def __call__(self) -> float:
        t0 = time.perf_counter()
        m = self.module
        out = m.policy_update.run(
            m.policy, self.batch, self.advantages, self.batch.assistant_mask, None, None,
            m.update_context(), optimizer=self.opt, scheduler=self.sched,
            backward=lambda loss: loss.backward(), gen=torch.Generator().manual_seed(0),
        )  # fmt: skip
        seconds = time.perf_counter() - t0
        self.grad_norms.append(out["train/grad_norm"])
        return seconds


class TrlUpdate:
    """One ``GRPOTrainer.training_step`` + clip + optimiser step per call."""

    def __init__(self, data: dict, group_size: int, lr: float = 1e-5):
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer

        from slca_lightning.models.policy import load_policy

        model, tokenizer = load_policy("tiny", seed=0)
        b = data["prompt_ids"].shape[0]
        self._tmp = tempfile.TemporaryDirectory(prefix="slca_bench_trl_")
        args = GRPOConfig(
            output_dir=self._tmp.name, per_device_train_batch_size=b, num_generations=group_size,
            max_completion_length=data["completion_ids"].shape[1], gradient_accumulation_steps=1,
            beta=0.0, loss_type="grpo", learning_rate=lr, weight_decay=0.0, max_grad_norm=1.0,
            lr_scheduler_type="constant", warmup_steps=0, report_to=[], use_cpu=True,
            bf16=False, logging_strategy="no", save_strategy="no",
        )  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.trainer = GRPOTrainer(
                model=model,
                reward_funcs=lambda completions, **kwargs: [0.0] * len(completions),
                args=args,
                train_dataset=Dataset.from_dict({"prompt": ["unused"] * b}),
                processing_class=tokenizer,
            )
        t = self.trainer
        t.create_optimizer_and_scheduler(num_training_steps=10_000)
        t.current_gradient_accumulation_steps = 1  # set by Trainer's training loop only
        t._prepare_inputs = lambda inputs: inputs  # boundary: no generation is timed
        self.inputs = {k: v for k, v in data.items() if k != "group_ids"}
        self.grad_norms: list[float] = []

    def __call__(self) -> float:
        t = self.trainer
        t0 = time.perf_counter()
        t.training_step(t.model, self.inputs, None)
        norm = t.accelerator.clip_grad_norm_(t.model.parameters(), t.args.max_grad_norm)
        t.optimizer.step()
        t.lr_scheduler.step()
        t.model.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - t0
        self.grad_norms.append(float(norm))
        return seconds


def run(shape: UpdateShape) -> dict:
    """Alternate TRL, slca (shared prefix) and slca (no shared prefix); return figures."""
    from slca_lightning.models.policy import load_policy

    _, tokenizer = load_policy("tiny")
    data = make_batch(shape, tokenizer.pad_token_id, len(tokenizer))
    systems = {
        "trl": TrlUpdate(data, shape.group_size),
        "slca": SlcaUpdate(data, shared_prefix=True),
        "slca_no_prefix": SlcaUpdate(data, shared_prefix=False),
    }
    secs = alternate(systems, rounds=shape.rounds, warmup=shape.warmup)
    # the first call of every system ran on identical weights and the same batch
    g0 = {name: s.grad_norms[0] for name, s in systems.items()}
    mismatch = max(abs(g0[n] - g0["trl"]) / max(abs(g0["trl"]), 1e-12) for n in g0)
    tokens = systems["slca"].tokens
    return {
        "shape": shape,
        "tokens": tokens,
        "seconds": secs,
        "tokens_per_s": {n: tokens / statistics.median(v) for n, v in secs.items()},
        "speedup": paired_ratio(secs["trl"], secs["slca"]),  # slca tokens/s ÷ TRL tokens/s
        "speedup_no_prefix": paired_ratio(secs["trl"], secs["slca_no_prefix"]),
        "speedup_spread": spread([a / b for a, b in zip(secs["trl"], secs["slca"])]),
        "grad_norm_rel_diff": mismatch,
    }
