"""Log-probs from hidden states (no ``[B, T, V]`` logits) equal the full-logits path, in
values and gradients, for plain and shared-prefix scoring, on the built-in Qwen2 model."""

from __future__ import annotations

import pytest
import torch

import slca_lightning.logprobs.causal_lm as model_logprobs
from slca_lightning.logprobs.causal_lm import (
    plain_head,
    sequence_logprobs,
    shared_prefix_logprobs,
)
from slca_lightning.models.policy import load_policy


@pytest.fixture(scope="module")
def tiny():
    model, _ = load_policy("tiny", seed=3)
    return model


def _batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 400, (3, 14), generator=g)
    ids[:, :6] = ids[0, :6]  # a shared prefix of 6
    mask = torch.ones_like(ids)
    mask[1, 11:] = 0
    mask[2, 9:] = 0
    return ids, mask


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_hidden_state_path_matches_full_logits(tiny, monkeypatch, shared, temperature):
    assert plain_head(tiny) is not None  # Qwen2ForCausalLM with an nn.Linear head
    ids, mask = _batch()

    def run():
        tiny.zero_grad(set_to_none=True)
        kw = {"temperature": temperature, "chunk_size": 5, "return_entropy": True}
        if shared:
            lp, ent = shared_prefix_logprobs(tiny, ids, mask, 6, **kw)
        else:
            lp, ent = sequence_logprobs(tiny, ids, mask, **kw)
        (lp.sum() + 0.1 * ent.sum()).backward()
        grads = {n: p.grad.clone() for n, p in tiny.named_parameters() if p.grad is not None}
        return lp.detach(), ent.detach(), grads

    fast = run()
    monkeypatch.setattr(model_logprobs, "plain_head", lambda model: None)
    full = run()
    torch.testing.assert_close(fast[0], full[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast[1], full[1], rtol=1e-5, atol=1e-5)
    assert set(fast[2]) == set(full[2])
    for name in full[2]:
        a, b = fast[2][name], full[2][name]
        gap, scale = float((a - b).abs().max()), float(b.abs().max())
        assert gap <= 1e-5 * scale, (name, gap, scale)  # float rounding, relative to the tensor


def test_other_heads_fall_back(tiny):
    from peft import LoraConfig, get_peft_model

    class Other(torch.nn.Module):
        pass

    assert plain_head(Other()) is None
    wrapped = get_peft_model(load_policy("tiny")[0], LoraConfig(r=2, target_modules=["lm_head"]))
    assert plain_head(wrapped) is None  # adapters on the head: the full path
