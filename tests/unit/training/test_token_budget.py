"""Micro-batches by token budget (``model.micro_batch_tokens``): the packing, and the same
update as the row-count split for every aggregation mode (gradients to fp32 tolerance)."""

from __future__ import annotations

import pytest
import torch

from slca_lightning.models.policy import load_policy
from slca_lightning.training.losses import AGGREGATION_ALIASES, AGGREGATION_MODES
from slca_lightning.training.update import (
    PolicyUpdate,
    UpdateContext,
    UpdateSettings,
    pack_by_tokens,
)
from slca_lightning.types import RolloutBatch


def test_packing_sorts_by_length_and_keeps_rows_times_longest_within_the_budget():
    lengths = torch.tensor([9, 3, 3, 8, 20, 2])
    micros = pack_by_tokens(torch.arange(6), lengths, budget=16, max_rows=8)
    assert [m.tolist() for m in micros] == [[4], [0], [3, 1], [2, 5]]
    for m in micros[1:]:  # the 20-token row exceeds the budget alone: its own micro-batch
        assert len(m) * int(lengths[m].max()) <= 16
    assert sorted(torch.cat(micros).tolist()) == list(range(6))  # every row once
    capped = pack_by_tokens(torch.tensor([1, 2, 5]), lengths, budget=100, max_rows=2)
    assert [m.tolist() for m in capped] == [[1, 2], [5]]  # micro_batch_size still caps rows


def settings(aggregation: str, micro_batch_size: int, tokens: int | None) -> UpdateSettings:
    return UpdateSettings(
        temperature=1.0, logprob_chunk_size=64, shared_prefix=True, mini_batches=1,
        micro_batch_size=micro_batch_size, ppo_epochs=1, kl_coef=0.0, entropy_coef=0.0,
        eps_low=0.2, eps_high=0.2, dual_clip=None, aggregation=aggregation,
        max_grad_norm=None, mask_truncated=False, seed=0, micro_batch_tokens=tokens,
    )  # fmt: skip


def mixed_batch(vocab: int) -> RolloutBatch:
    """Six rows, two groups sharing a 6-token prompt, responses of 3 to 30 tokens."""
    g = torch.Generator().manual_seed(0)
    lengths = [9, 36, 14, 30, 20, 11]
    t = max(lengths)
    ids = torch.zeros((6, t), dtype=torch.long)
    attention = torch.zeros((6, t), dtype=torch.bool)
    assistant = torch.zeros((6, t), dtype=torch.bool)
    prompts = [torch.randint(3, vocab, (6,), generator=g) for _ in range(2)]
    for r, n in enumerate(lengths):
        ids[r, :6] = prompts[r // 3]
        ids[r, 6:n] = torch.randint(3, vocab, (n - 6,), generator=g)
        attention[r, :n] = True
        assistant[r, 6:n] = True
    return RolloutBatch(
        input_ids=ids, attention_mask=attention, assistant_mask=assistant,
        group_ids=torch.tensor([0, 0, 0, 1, 1, 1]),
    )  # fmt: skip


def gradients(policy, batch, advantages, st: UpdateSettings) -> tuple[dict, list]:
    policy.zero_grad(set_to_none=True)
    opt = torch.optim.SGD(policy.parameters(), lr=0.0)  # keeps the weights: compare grads
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    update = PolicyUpdate(st)
    plan = update.partition(batch.batch_size, torch.Generator(), batch.attention_mask.sum(1))
    out = update.run(
        policy, batch, advantages, batch.assistant_mask, None, None,
        UpdateContext(torch.device("cpu")), optimizer=opt, scheduler=sched,
        backward=lambda loss: loss.backward(), gen=torch.Generator(), plan=plan,
    )  # fmt: skip
    grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}
    return grads, out, plan


@pytest.mark.parametrize("aggregation", [*AGGREGATION_MODES, *AGGREGATION_ALIASES])
def test_a_token_budget_gives_the_row_splits_gradients_for_every_aggregation(aggregation):
    policy, _ = load_policy("tiny")
    policy.train()
    batch = mixed_batch(policy.config.vocab_size)
    advantages = torch.randn(batch.input_ids.shape, generator=torch.Generator().manual_seed(1))
    rows, out_rows, _ = gradients(policy, batch, advantages, settings(aggregation, 2, None))
    tokens, out_tokens, plan = gradients(policy, batch, advantages, settings(aggregation, 6, 72))
    assert [len(m) for m in plan[0]] != [2, 2, 2]  # the budget packed differently
    for micro in plan[0]:  # within the budget (a row over it alone)
        longest = int(batch.attention_mask[micro].sum(1).max())
        assert len(micro) == 1 or len(micro) * longest <= 72
    assert rows.keys() == tokens.keys()
    for name in rows:
        torch.testing.assert_close(tokens[name], rows[name], rtol=1e-4, atol=1e-6)
    assert out_tokens["train/pg_loss"] == pytest.approx(out_rows["train/pg_loss"], rel=1e-5)
