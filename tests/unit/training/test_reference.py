"""The digest that lets a checkpoint leave out its frozen reference, and the drop/restore
round trip on a literal state dict."""

import pytest
import torch

from slca_lightning.training.reference import drop_reference, restore_reference, weights_digest


def net(value: float, dtype=torch.float32) -> torch.nn.Module:
    m = torch.nn.Linear(2, 2).to(dtype)
    with torch.no_grad():
        m.weight.fill_(value)
        m.bias.fill_(0.5)
    return m


def test_digest_sees_values_dtypes_and_names():
    assert weights_digest(net(1.0)) == weights_digest(net(1.0))
    assert weights_digest(net(1.0)) != weights_digest(net(1.0 + 2**-20))
    assert weights_digest(net(1.0)) != weights_digest(net(1.0, torch.bfloat16))
    assert weights_digest(net(1.0)) != weights_digest(torch.nn.Sequential(net(1.0)))


def test_drop_then_restore_gives_back_the_same_state():
    ref = net(0.25)
    state = {
        "policy.weight": torch.ones(2, 2),
        **{f"reference.{k}": v.clone() for k, v in ref.state_dict().items()},
    }
    ckpt = {"state_dict": dict(state)}
    assert drop_reference(ckpt, "tiny", weights_digest(ref)) == 2
    assert set(ckpt["state_dict"]) == {"policy.weight"}
    assert restore_reference(ckpt, ref)
    assert set(ckpt["state_dict"]) == set(state)
    assert all(torch.equal(ckpt["state_dict"][k], v) for k, v in state.items())
    assert not restore_reference(ckpt, ref)  # holds its reference: nothing to do
    drop_reference(ckpt, "tiny", weights_digest(ref))
    with pytest.raises(ValueError, match="no reference model"):
        restore_reference(dict(ckpt, state_dict=dict(ckpt["state_dict"])), None)
    with pytest.raises(ValueError, match="model source changed"):
        restore_reference(ckpt, net(0.5))
