"""GradientDiagnostics: the pure norm/cosine math on literal tensors, and the per-segment
loss parts of the real module on the tiny offline model (a hand-made rollout record whose
tool and summary segments split each row's sampled tokens). Nothing is mocked.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from callbacks.gradient_diagnostics import GradientDiagnostics, gradient_stats, norm_spread
from slca_lightning.rollout.record import RolloutRecord
from slca_lightning.training.losses import policy_loss
from slca_lightning.training.module import SLCAGRPOModule
from slca_lightning.types import RewardOutput, RolloutBatch, Segments


def test_gradient_stats_literal():
    a = [torch.tensor([1.0, 2.0]), torch.tensor([2.0])]
    b = [torch.tensor([2.0, 0.0]), None]  # None: a parameter the part does not reach
    st = gradient_stats(a, b)
    assert st["norm_a"] == pytest.approx(3.0)
    assert st["norm_b"] == pytest.approx(2.0)
    assert st["ratio"] == pytest.approx(1.5)
    assert st["cos"] == pytest.approx(2.0 / 6.0)
    opposite = gradient_stats([torch.tensor([1.0, -1.0])], [torch.tensor([-2.0, 2.0])])
    assert opposite["cos"] == pytest.approx(-1.0)
    zero = gradient_stats([torch.zeros(3)], [torch.ones(3)])
    assert zero["norm_a"] == 0.0 and math.isnan(zero["cos"]) and zero["ratio"] == 0.0
    with pytest.raises(ValueError, match="2 vs 1"):
        gradient_stats(a, b[:1])


def record_for(module) -> RolloutRecord:
    torch.manual_seed(0)
    b, t = 3, 14
    vocab = module.policy.config.vocab_size
    ids = torch.randint(5, vocab, (b, t))
    attention = torch.ones(b, t, dtype=torch.bool)
    assistant = torch.zeros(b, t, dtype=torch.bool)
    assistant[:, 4:] = True
    tool = torch.zeros(b, t, dtype=torch.bool)
    tool[:, 4:9] = True
    summary = assistant & ~tool
    adv = torch.where(assistant, torch.randn(b, t), torch.zeros(b, t))
    batch = RolloutBatch(ids, attention, assistant, torch.arange(b))
    segments = Segments({"tool": tool, "summary": summary}, {"tool": tool.any(1)})
    rewards = RewardOutput(
        {"tool": torch.zeros(b), "summary": torch.zeros(b), "total": torch.zeros(b)}
    )
    return RolloutRecord(batch, segments, adv, rewards, step=1)


@pytest.fixture(scope="module")
def module():
    m = SLCAGRPOModule(model="tiny", kl_coef=0.0, micro_batch_size=2)
    m.configure_model()
    return m


def test_loss_parts_sum_to_the_policy_gradient_loss_and_its_gradient(module):
    record = record_for(module)
    rows = torch.arange(2)
    params = [p for p in module.policy.parameters() if p.requires_grad]
    parts = module.loss_parts(record, rows)
    logp = module.policy_update.logprobs(module.policy, record.batch, rows, module.update_context())
    mask = record.batch.assistant_mask[rows]
    full, _ = policy_loss(logp, logp.detach(), record.advantages[rows], mask)
    total = float((parts["tool"] + parts["summary"]).detach())
    assert total == pytest.approx(float(full.detach()), abs=1e-6)
    g_full = torch.autograd.grad(full, params)
    g_tool = torch.autograd.grad(parts["tool"], params, retain_graph=True)
    g_sum = torch.autograd.grad(parts["summary"], params)
    for gf, gt, gs in zip(g_full, g_tool, g_sum, strict=True):
        torch.testing.assert_close(gt + gs, gf, atol=1e-5, rtol=1e-4)


def test_measure_leaves_grads_and_weights_alone(module):
    module.last_rollout = record_for(module)
    before = [p.detach().clone() for p in module.policy.parameters()]
    for p in module.policy.parameters():
        p.grad = None
    out = GradientDiagnostics(every_n_steps=1).measure(module)
    assert set(out) == {
        "grad/tool_norm",
        "grad/summary_norm",
        "grad/norm_ratio",
        "grad/cos_tool_summary",
    }
    assert out["grad/tool_norm"] > 0 and out["grad/summary_norm"] > 0
    assert out["grad/norm_ratio"] == pytest.approx(out["grad/tool_norm"] / out["grad/summary_norm"])
    assert -1.0 <= out["grad/cos_tool_summary"] <= 1.0
    assert all(p.grad is None for p in module.policy.parameters())
    assert all(torch.equal(a, p) for a, p in zip(before, module.policy.parameters(), strict=True))


def test_bad_every_n_steps_is_refused():
    with pytest.raises(ValueError, match="every_n_steps"):
        GradientDiagnostics(every_n_steps=0)


def test_norm_spread_literal():
    st = norm_spread([1.0, 2.0, 3.0])
    assert (st["n"], st["mean"], st["std"], st["cv"]) == (3.0, 2.0, 1.0, 0.5)
    one = norm_spread([4.0])
    assert one["mean"] == 4.0 and math.isnan(one["std"]) and math.isnan(one["cv"])
    assert math.isnan(norm_spread([])["mean"])
    assert norm_spread([0.0, 0.0])["std"] == 0.0 and math.isnan(norm_spread([0.0, 0.0])["cv"])


class Logger:
    """Stands in for a Lightning logger: keeps what ``log_metrics`` got."""

    def __init__(self):
        self.logged = []

    def log_metrics(self, metrics, step):
        self.logged.append((step, dict(metrics)))


def test_running_spread_logged_and_tabled(tmp_path):
    cb = GradientDiagnostics(every_n_steps=1)
    norms = iter([(1.0, 2.0), (3.0, 2.0), (2.0, 5.0)])
    cb.measure = lambda _module: dict(zip(("grad/tool_norm", "grad/summary_norm"), next(norms)))
    logger = Logger()
    trainer = SimpleNamespace(
        global_step=0, loggers=[logger], log_dir=str(tmp_path), is_global_zero=True
    )
    for step in (1, 2, 3):
        trainer.global_step = step
        cb.on_train_batch_end(trainer, None, None, None, 0)
    assert "grad/tool_norm_std" not in logger.logged[0][1]  # one measurement: no spread yet
    step, last = logger.logged[-1]
    assert step == 3
    assert last["grad/tool_norm_std"] == pytest.approx(1.0)  # of 1, 3, 2
    assert last["grad/tool_norm_cv"] == pytest.approx(0.5)
    assert last["grad/summary_norm_std"] == pytest.approx(math.sqrt(3.0))  # of 2, 2, 5
    assert last["grad/summary_norm_cv"] == pytest.approx(math.sqrt(3.0) / 3.0)
    cb.on_train_end(trainer, None)
    table = (tmp_path / "gradient_diagnostics.md").read_text()
    assert cb.table_path == str(tmp_path / "gradient_diagnostics.md")
    assert table.count("\n| 3 | ") == 1 and "| tool | 3 | 2 | 1 | 0.5 |" in table
    other = GradientDiagnostics()
    other.load_state_dict(cb.state_dict())
    assert other.history == cb.history
