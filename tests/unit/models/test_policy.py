"""policy.py: loading, LoRA, sequence log-probabilities, the cached warm start."""

import json
import logging
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from slca_lightning.logprobs.causal_lm import (
    base_model,
    common_prefix_len,
    sequence_logprobs,
    shared_prefix_logprobs,
)
from slca_lightning.models.lora import LoraSettings, apply_lora
from slca_lightning.models.policy import load_policy
from slca_lightning.models.warm_start import warm_start


@pytest.fixture(scope="module")
def tiny():
    return load_policy("tiny")


def direct_logprobs(model, ids, mask, temperature=1.0):
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1] / temperature
    logp = torch.log_softmax(logits.double(), -1)
    chosen = logp.gather(-1, ids[:, 1:, None])[..., 0]
    entropy = -(logp.exp() * logp).sum(-1)
    pad = torch.nn.functional.pad
    return pad(chosen, (1, 0)).float(), pad(entropy, (1, 0)).float()


def test_tiny_model_and_tokenizer(tiny):
    model, tok = tiny
    assert tok.pad_token is not None and tok.padding_side == "right"
    assert model.config.hidden_size == 128 and model.config.num_hidden_layers == 4
    assert model.get_input_embeddings().weight.shape[0] == len(tok)
    assert load_policy("tiny", dtype="bfloat16")[0].dtype == torch.bfloat16
    with pytest.raises(ValueError, match="dtype"):
        load_policy("tiny", dtype="float8")


def test_missing_folder_errors_name_the_path(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        load_policy(str(missing))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"empty.*config\.json"):
        load_policy(str(tmp_path / "empty"))


def test_local_folder_round_trip_and_pad_fallback(tiny, tmp_path):
    model, tok = tiny
    model.save_pretrained(tmp_path)
    tok.pad_token = None  # saved without a pad token: load_policy falls back to eos
    tok.save_pretrained(tmp_path)
    tok.pad_token = "<|endoftext|>"
    loaded, loaded_tok = load_policy(str(tmp_path))
    assert loaded_tok.pad_token == loaded_tok.eos_token == "<|im_end|>"
    assert loaded_tok.chat_template == tok.chat_template
    assert loaded_tok.encode("<tool_call>") == tok.encode("<tool_call>")
    ids = torch.tensor([tok.encode("Let me check the weather.")])
    torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)


def test_sequence_logprobs_match_log_softmax(tiny):
    model, _ = tiny
    torch.manual_seed(0)
    ids = torch.randint(0, 500, (3, 24))
    mask = torch.ones(3, 24, dtype=torch.long)
    mask[1, 15:] = 0  # right padding
    mask[2, :5] = 0  # left padding (the model then gets the mask)
    for temperature in (1.0, 0.7):
        got, ent = sequence_logprobs(model, ids, mask, temperature, 7, return_entropy=True)
        want, want_ent = direct_logprobs(model, ids, mask, temperature)
        keep = mask.bool()
        keep[2, 5] = False  # a left-padded row's first real token has no real context
        assert got.shape == ids.shape and got.dtype == torch.float32
        torch.testing.assert_close(got[keep], want[keep], atol=1e-5, rtol=0)
        torch.testing.assert_close(ent[keep], want_ent[keep], atol=1e-5, rtol=0)
        assert (got[:, 0] == 0).all() and (got[~mask.bool()] == 0).all()


def test_sequence_logprobs_is_differentiable(tiny):
    model, _ = tiny
    ids = torch.randint(0, 500, (2, 10))
    lp = sequence_logprobs(model, ids, torch.ones_like(ids))
    lp.sum().backward()
    grad = model.get_input_embeddings().weight.grad
    assert grad is not None and grad.abs().sum() > 0
    model.zero_grad()


def test_shared_prefix_logprobs_equal_plain(tiny):
    model, _ = tiny
    torch.manual_seed(1)
    prefix = torch.randint(0, 500, (1, 30))
    ids = torch.cat([prefix.expand(3, -1), torch.randint(0, 500, (3, 12))], 1)
    mask = torch.ones_like(ids, dtype=torch.bool)
    mask[2, 36:] = False
    assert common_prefix_len(ids, mask) == 30
    weights = torch.rand(ids.shape)
    grads = []
    for fn in (
        lambda: sequence_logprobs(model, ids, mask),
        lambda: shared_prefix_logprobs(model, ids, mask, 30),
    ):
        lp = fn()
        (lp * weights).sum().backward()
        grads.append((lp.detach(), model.model.layers[0].self_attn.k_proj.weight.grad.clone()))
        model.zero_grad()
    torch.testing.assert_close(grads[1][0], grads[0][0], atol=1e-5, rtol=0)
    torch.testing.assert_close(grads[1][1], grads[0][1], atol=1e-5, rtol=1e-4)


def test_lora_only_adapters_trainable():
    model, _ = load_policy("tiny")
    n_base = sum(p.numel() for p in model.parameters())
    wrapped = apply_lora(model, LoraSettings(r=4, alpha=8))
    trainable = [n for n, p in wrapped.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert any("mlp" in n for n in trainable) and any("self_attn" in n for n in trainable)
    assert sum(p.numel() for p in wrapped.parameters() if p.requires_grad) < n_base / 10
    only_q = apply_lora(load_policy("tiny")[0], LoraSettings(r=2, target_modules=["q_proj"]))
    names = [n for n, p in only_q.named_parameters() if p.requires_grad]
    assert names and all("q_proj.lora_" in n for n in names)
    # base_model: the architecture under the wrapper (its own class and forward), or the
    # model itself when unwrapped
    assert type(base_model(wrapped)).__name__ == type(model).__name__ != type(wrapped).__name__
    assert base_model(wrapped) is wrapped.get_base_model()
    plain = load_policy("tiny")[0]
    assert base_model(plain) is plain


def test_warm_start_caches_and_is_reproducible(tmp_path, caplog):
    settings = {"steps": 2, "n_tasks": 6, "batch_size": 3, "seed": 1}
    with caplog.at_level(logging.INFO, logger="slca_lightning.models.policy"):
        first = warm_start(cache_dir=str(tmp_path / "a"), **settings)
        assert "trained 2 steps" in caplog.text
        caplog.clear()
        assert warm_start(cache_dir=str(tmp_path / "a"), **settings) == first
        assert "reused cached" in caplog.text and "trained" not in caplog.text
    assert os.listdir(tmp_path / "a") == [os.path.basename(first)]  # no temp dir left
    other = warm_start(cache_dir=str(tmp_path / "b"), **settings)
    a, b = (load_file(os.path.join(p, "model.safetensors")) for p in (first, other))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    init = load_policy("tiny", seed=1)[0].state_dict()
    assert not torch.equal(a["model.norm.weight"], init["model.norm.weight"])  # it trained
    info = json.loads(Path(first, "slca_warm_start.json").read_text())
    assert info["steps"] == 2 and info["seed"] == 1 and info["recipe"]["context_weight"] == 1.0
    model, tok = load_policy(first)
    assert tok.pad_token is not None and model.config.hidden_size == 128


def test_warm_start_interrupted_leaves_no_cache(tmp_path, monkeypatch):
    from transformers import PreTrainedTokenizerBase

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(PreTrainedTokenizerBase, "save_pretrained", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        warm_start(cache_dir=str(tmp_path), steps=1, n_tasks=3, batch_size=3)
    assert os.listdir(tmp_path) == []
