"""The engine samples exactly the distribution the trainer scores.

Real parts: the tiny Qwen2 with a ``generation_config`` that, like many instruct models,
asks for a repetition penalty, top-k and an n-gram ban; ``HFEngine`` over
``model.generate``; the trainer's ``sequence_logprobs``. ``check_distribution`` makes the
engine keep the processed scores it sampled from, which are compared at every step with
``softmax(raw logits / T)``.
"""

from __future__ import annotations

import pytest
import torch

from slca_lightning.logprobs.causal_lm import sequence_logprobs
from slca_lightning.models.policy import load_policy
from slca_lightning.rollout.engine import SamplingConfig
from slca_lightning.rollout.hf_engine import HFEngine


@pytest.fixture(scope="module")
def penalised():
    model, tok = load_policy("tiny", seed=0)
    cfg = model.generation_config
    cfg.repetition_penalty, cfg.top_k, cfg.no_repeat_ngram_size = 1.3, 5, 2
    cfg.do_sample = True
    prompts = [tok.encode(t, add_special_tokens=False) for t in ("the weather in", "abc abc abc")]
    return model, tok, prompts


@pytest.mark.parametrize("temperature", [0.7, 1.0, 0.0])
def test_sampled_scores_are_softmax_of_raw_logits_over_t(penalised, temperature):
    model, tok, prompts = penalised
    engine = HFEngine(model, tok, check_distribution=True)
    sampling = SamplingConfig(max_new_tokens=24, temperature=temperature, stop_strings=[], seed=3)
    gens = engine.generate(prompts, sampling)
    assert engine.distribution_gap <= 1e-4
    assert model.generation_config.repetition_penalty == 1.3  # the model's own config is back
    # and the log-probs it reports are the trainer's (fp32)
    for prompt, gen in zip(prompts, gens, strict=True):
        ids = torch.tensor([prompt + gen.token_ids])
        with torch.no_grad():
            logp = sequence_logprobs(
                model, ids, torch.ones_like(ids), temperature=temperature or 1.0
            )[0, len(prompt) :]
        torch.testing.assert_close(torch.tensor(gen.logprobs), logp.float(), atol=1e-4, rtol=0)


def test_the_check_sees_the_models_penalties_when_they_leak(penalised, monkeypatch):
    """Without the neutral config the model's penalties shape what is sampled: the check
    must notice (else the test above proves nothing)."""
    import contextlib

    import slca_lightning.rollout.hf_engine as hf

    monkeypatch.setattr(hf, "neutral_generation_config", lambda m: contextlib.nullcontext())
    model, tok, prompts = penalised
    engine = HFEngine(model, tok, check_distribution=True)
    engine.generate(prompts, SamplingConfig(max_new_tokens=24, temperature=0.0, stop_strings=[]))
    assert engine.distribution_gap > 1e-4


def test_top_p_below_one_is_refused_naming_the_key():
    from slca_lightning.rollout.datamodule import RolloutDataModule

    with pytest.raises(ValueError, match=r"data\.top_p=0\.9"):
        RolloutDataModule(top_p=0.9)


@pytest.mark.parametrize("temperature", [0.7, 0.0])
def test_the_engines_own_loop_reports_the_trainers_logprobs(penalised, temperature):
    """The default decoder ignores the model's generation_config by construction; its
    log-probs are the trainer's, and greedy picks the trainer's argmax at every step."""
    model, tok, prompts = penalised
    engine = HFEngine(model, tok)  # decoder="loop"
    sampling = SamplingConfig(max_new_tokens=24, temperature=temperature, stop_strings=[], seed=3)
    for prompt, gen in zip(prompts, engine.generate(prompts, sampling), strict=True):
        ids = torch.tensor([prompt + gen.token_ids])
        with torch.no_grad():
            logp = sequence_logprobs(
                model, ids, torch.ones_like(ids), temperature=temperature or 1.0
            )[0, len(prompt) :]
            if temperature == 0.0:
                argmax = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].argmax(-1)
                assert argmax.tolist() == gen.token_ids
        torch.testing.assert_close(torch.tensor(gen.logprobs), logp.float(), atol=1e-4, rtol=0)


def test_the_loops_first_tokens_follow_softmax_of_raw_logits(penalised):
    """2,048 one-token samples of one prompt: each of the ten likeliest tokens' frequency is
    within 4.5 standard errors of softmax(logits / T), and so is the mass outside them (the
    model's top_k = 5 would put 0 there if it leaked)."""
    model, tok, prompts = penalised
    n, temperature = 2048, 0.7
    engine = HFEngine(model, tok, max_batch_size=512)
    sampling = SamplingConfig(max_new_tokens=1, temperature=temperature, stop_strings=[], seed=0)
    engine._end_ids = lambda: set()
    drawn = torch.tensor([g.token_ids[0] for g in engine.generate([prompts[0]] * n, sampling)])
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompts[0]])).logits[0, -1].float()
    p = torch.softmax(logits / temperature, -1)
    top = p.topk(10).indices
    freq = torch.bincount(drawn, minlength=p.numel()).float() / n
    cells = [(freq[top], p[top]), (1 - freq[top].sum(), 1 - p[top].sum())]
    for f, q in cells:
        f, q = torch.as_tensor(f), torch.as_tensor(q)
        se = (q * (1 - q) / n).sqrt().clamp(min=1e-3)
        assert ((f - q).abs() <= 4.5 * se).all(), (f, q)
    assert 1 - p[top[:5]].sum() > 0.05  # the check can see a top-5 truncation
