"""HFEngine's own sampling loop and its in-place KV cache.

Real parts: the built-in tiny Qwen2 model, transformers' ``DynamicCache`` and
``model.generate`` as the references; no mocks.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import DynamicCache

from slca_lightning.rollout.engine import SamplingConfig
from slca_lightning.rollout.hf_decode import batch_layout, next_tokens, positions_from_mask
from slca_lightning.rollout.hf_engine import HFEngine
from slca_lightning.rollout.kv_cache import GrowingKVLayer, growing_cache


def test_growing_layer_holds_what_concatenation_holds():
    layer = GrowingKVLayer(reserve=2)  # smaller than the writes: it must grow
    k1, k2, k3 = (
        torch.arange(n * 4.0).reshape(1, 1, n, 4) + 100 * i for i, n in [(1, 2), (2, 1), (3, 3)]
    )
    keys = None
    for k in (k1, k2, k3):
        keys, values = layer.update(k, -k)
    ref = torch.cat([k1, k2, k3], dim=-2)
    assert torch.equal(keys, ref) and torch.equal(values, -ref)
    assert layer.get_seq_length() == 6 and layer._keys.shape[-2] >= 6
    layer.crop(-2)
    assert torch.equal(layer.keys, ref[..., :4, :]) and layer.get_seq_length() == 4
    layer.batch_repeat_interleave(3)
    assert layer.keys.shape == (3, 1, 4, 4) and torch.equal(layer.keys[2], ref[0, :, :4])
    layer._keys[1] += 1000  # rows are independent after the repeat
    layer.batch_select_indices(torch.tensor([1]))
    assert torch.equal(layer.keys[0], ref[0, :, :4] + 1000)
    with pytest.raises(ValueError, match="negative"):
        layer.crop(1)


def test_logits_with_the_growing_cache_equal_the_dynamic_caches(policy):
    model, _ = policy
    model.eval()
    ids = torch.randint(3, 500, (3, 20), generator=torch.Generator().manual_seed(1))
    outs = []
    for cache in (DynamicCache(), growing_cache(model, reserve=21)):
        with torch.no_grad():
            out = model(input_ids=ids[:, :15], cache=cache, use_cache=True)
            steps = [out.logits[:, -1]]
            for t in range(15, 20):
                out = model(input_ids=ids[:, t : t + 1], cache=out.cache, use_cache=True)
                steps.append(out.logits[:, -1])
        outs.append(torch.stack(steps))
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=0)


def test_models_with_sliding_or_linear_layers_keep_transformers_cache():
    config = SimpleNamespace(
        num_hidden_layers=2, layer_types=["full_attention", "sliding_attention"]
    )
    assert growing_cache(SimpleNamespace(config=config), 8) is None
    plain = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=3))
    assert len(growing_cache(plain, 8).layers) == 3


def test_positions_follow_the_mask_and_greedy_scores_at_t_one():
    mask = torch.tensor([[1, 1, 0, 0, 1, 1], [0, 0, 0, 1, 1, 1]])
    assert positions_from_mask(mask).tolist() == [[0, 1, 0, 0, 2, 3], [0, 0, 0, 0, 1, 2]]
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    tok, logp = next_tokens(logits, 0.0)
    assert tok.tolist() == [1]
    torch.testing.assert_close(logp, torch.log_softmax(logits, -1)[:, 1])


@pytest.mark.parametrize("share_prefix", [False, True])
@pytest.mark.parametrize("prune_fraction", [0.01, 1.0])
def test_greedy_loop_equals_generate_when_rows_end_at_different_steps(
    policy, share_prefix, prune_fraction, prefix_prompts
):
    model, tok = policy
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=12, stop_strings=[])
    runs = []
    for decoder in ("generate", "loop"):
        engine = HFEngine(
            model, tok, decoder=decoder, share_prefix=share_prefix, prune_fraction=prune_fraction
        )
        # a row ends after (its first token mod 7) + 2 tokens: rows end at different steps
        engine._stop_at = lambda ids, t, *rest: "eos" if t + 1 >= ids[0] % 7 + 2 else None
        runs.append(engine.generate(prefix_prompts, sampling))
    ref, got = runs
    lengths = {len(g.token_ids) for g in ref}
    assert len(lengths) >= 3, f"rows must end at different steps to test pruning: {lengths}"
    assert [g.token_ids for g in got] == [g.token_ids for g in ref]
    assert [g.finish_reason for g in got] == [g.finish_reason for g in ref]
    for a, b in zip(ref, got, strict=True):
        torch.testing.assert_close(
            torch.tensor(b.logprobs), torch.tensor(a.logprobs), atol=1e-5, rtol=0
        )


def test_seeded_loop_sampling_is_reproducible_and_the_seed_matters(policy, prefix_prompts):
    model, tok = policy
    engine = HFEngine(model, tok, share_prefix=True)
    runs = [
        [
            g.token_ids
            for g in engine.generate(
                prefix_prompts, SamplingConfig(temperature=1.0, max_new_tokens=10, seed=s)
            )
        ]
        for s in (3, 3, 4)
    ]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_bad_decoder_is_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"data\.engine\.init_args\.decoder='fast'"):
        HFEngine(decoder="fast")


def test_batch_layout_places_prefixes_and_suffixes_on_literal_prompts():
    prompts = [[1, 2, 3, 9], [1, 2, 3, 8, 7], [5, 6], [4, 4, 4]]
    ids, mask, groups = batch_layout(prompts, [([0, 1], 3), ([2], 0), ([3], 5)], pad=0)
    # P = 3 (group [3] is cut to 2: a row keeps one suffix token); suffix width 2
    assert groups == [([0, 1], 3), ([2], 0), ([3], 2)]
    assert ids.tolist() == [
        [1, 2, 3, 0, 9],
        [1, 2, 3, 8, 7],
        [0, 0, 0, 5, 6],
        [0, 4, 4, 0, 4],
    ]
    assert mask.tolist() == [[1, 1, 1, 0, 1], [1, 1, 1, 1, 1], [0, 0, 0, 1, 1], [0, 1, 1, 0, 1]]


@pytest.mark.parametrize("max_batch_size", [64, 4])
def test_one_batch_over_several_prefixes_equals_generate(policy, max_batch_size, prefix_prompts):
    """Two clusters, repeated prompts and a loose row, in one batch (or split across
    batches): each prefix prefilled once and placed, greedy output as ``generate``'s."""
    model, tok = policy
    prompts = [*prefix_prompts, *[prefix_prompts[0]] * 3, prefix_prompts[3][:100]]
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=12, stop_strings=[])
    ref = HFEngine(model, tok, decoder="generate").generate(prompts, sampling)
    got = HFEngine(model, tok, share_prefix=True, max_batch_size=max_batch_size).generate(
        prompts, sampling
    )
    assert [g.token_ids for g in got] == [g.token_ids for g in ref]
    for a, b in zip(ref, got, strict=True):
        torch.testing.assert_close(
            torch.tensor(b.logprobs), torch.tensor(a.logprobs), atol=1e-5, rtol=0
        )
