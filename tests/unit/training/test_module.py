"""SLCAGRPOModule pieces that need no fit: Dr.GRPO's constant normaliser and the
constant-channel warning, on the tiny offline model."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import torch

from slca_lightning.rollout.collate import collate_episodes
from slca_lightning.rollout.datamodule import RolloutDataModule
from slca_lightning.rollout.record import RolloutRecord
from slca_lightning.training.module import SLCAGRPOModule
from slca_lightning.types import Episode, RewardOutput, Segments, Task

CAP = 40  # data.max_response_tokens


def episodes(vocab: int) -> list[Episode]:
    """Three rows with prompts of 5 ids and responses of 6, 9 and 3 sampled ids."""
    g = torch.Generator().manual_seed(0)
    out = []
    for n in (6, 9, 3):
        ids = torch.randint(5, vocab, (5 + n,), generator=g).tolist()
        out.append(
            Episode(
                task=Task(task_id=f"t{n}", messages=[]),
                prompt_ids=ids[:5],
                response_ids=ids[5:],
                assistant_mask=[True] * n,
                logprobs=[-1.0] * n,
            )
        )
    return out


def record(eps: list[Episode], pad_to: int) -> RolloutRecord:
    """The rows padded to a multiple of ``pad_to``, with fixed per-row advantages."""
    batch = collate_episodes(eps, pad_token_id=0, pad_to_multiple_of=pad_to)
    mask = batch.assistant_mask
    adv = torch.tensor([1.0, -0.5, 2.0])[:, None] * mask  # [B, T]
    segments = Segments({"tool": torch.zeros_like(mask), "summary": mask}, {})
    rewards = RewardOutput({k: torch.zeros(3) for k in ("tool", "summary", "total")})
    return RolloutRecord(batch, segments, adv, rewards, step=0)


@pytest.fixture(scope="module")
def module():
    m = SLCAGRPOModule(model="tiny", kl_coef=0.0, aggregation="dr_grpo", shared_prefix=False)
    m.configure_model()
    return m


def attach(module, datamodule) -> None:
    """Stand in for the trainer: the module only reads ``datamodule`` and ``world_size``."""
    module._trainer = SimpleNamespace(datamodule=datamodule, world_size=1)


def test_dr_grpo_normaliser_is_the_response_cap_whatever_the_padding(module):
    attach(module, RolloutDataModule(max_response_tokens=CAP))
    eps = episodes(module.policy.config.vocab_size)
    short, long = record(eps, 1), record(eps, 64)
    assert short.batch.input_ids.shape[1] == 14 and long.batch.input_ids.shape[1] == 64
    assert (
        module.policy_update.norm_length(short.batch, module.update_context())
        == module.policy_update.norm_length(long.batch, module.update_context())
        == CAP
    )
    rows = torch.arange(3)
    with torch.no_grad():
        a = module.loss_parts(short, rows)["summary"]
        b = module.loss_parts(long, rows)["summary"]
    torch.testing.assert_close(a, b)
    # at ratio 1 the surrogate is −A per token: Σ −A over sampled tokens / (rows · cap)
    expected = -(short.advantages * short.batch.assistant_mask).sum() / (3 * CAP)
    torch.testing.assert_close(a, expected.float())


def test_without_a_cap_dr_grpo_falls_back_to_the_padded_length_and_warns_once(module):
    attach(module, None)
    module.policy_update._warned_norm_length = False
    eps = episodes(module.policy.config.vocab_size)
    short, long = record(eps, 1), record(eps, 64)
    with pytest.warns(UserWarning, match="no max_response_tokens"):
        assert module.policy_update.norm_length(short.batch, module.update_context()) == 14
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert module.policy_update.norm_length(long.batch, module.update_context()) == 64


def test_other_aggregations_take_no_normaliser():
    m = SLCAGRPOModule(model="tiny", aggregation="token-mean")
    batch = record(episodes(100), 1).batch
    assert m.policy_update.norm_length(batch, m.update_context()) is None


def test_constant_channel_warning_watches_only_the_channels_the_router_reads():
    m = SLCAGRPOModule(model="tiny")  # SLCA reads tool and summary
    m.constant_reward_warn_steps = 2
    varied = torch.tensor([0.0, 1.0])
    out = RewardOutput({"tool": varied, "summary": torch.ones(2), "rltr": torch.zeros(2)})
    with pytest.warns(UserWarning) as seen:
        m._warn_constant_channels(out)
        m._warn_constant_channels(out)
    messages = [str(w.message) for w in seen]
    assert any("'summary' has been constant" in msg for msg in messages)
    assert not any("'rltr'" in msg or "'tool'" in msg for msg in messages)


@pytest.mark.parametrize("bad", [-0.1, float("nan")])
def test_negative_weight_is_checked_at_construction(bad):
    with pytest.raises(ValueError, match=r"model\.negative_weight: must be a number >= 0"):
        SLCAGRPOModule(model="tiny", negative_weight=bad)
