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
from slca_lightning.rollout.hf_decode import batch_layout, draw, next_tokens, positions_from_mask
from slca_lightning.rollout.hf_engine import HFEngine
from slca_lightning.rollout.kv_cache import GrowingKVLayer, growing_cache
from slca_lightning.rollout.shared_prefix_attention import (
    NAME,
    SharedPrefixState,
    mask_bias,
    merge_parts,
    part_attention,
)


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


def test_two_attention_parts_merge_into_attention_over_both():
    """Pure math on literal tensors: attention over keys [0, 3) and [3, 5) apart, merged by
    their log-sum-exps, is softmax attention over all five; a part with no allowed key (a
    row without a shared prefix) takes no weight."""
    q = torch.tensor([[[0.5, -1.0], [2.0, 0.25]]])  # [1, L=2, d=2]
    k = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 2.0], [0.5, -0.5]]])
    v = torch.tensor([[[1.0, 2.0], [3.0, -1.0], [0.0, 0.0], [4.0, 1.0], [-2.0, 5.0]]])
    scale = 0.7
    ref = torch.softmax(q @ k.transpose(-1, -2) * scale, dim=-1) @ v
    out_a, lse_a = part_attention(q, k[:, :3], v[:, :3], None, scale)
    out_b, lse_b = part_attention(q, k[:, 3:], v[:, 3:], None, scale)
    torch.testing.assert_close(merge_parts(out_a, lse_a, out_b, lse_b), ref)
    none = mask_bias(torch.zeros((), dtype=torch.bool))
    out_0, lse_0 = part_attention(q, k[:, :3], v[:, :3], none, scale)
    assert torch.equal(out_0, torch.zeros_like(out_0)) and torch.isinf(lse_0).all()
    torch.testing.assert_close(merge_parts(out_0, lse_0, out_b, lse_b), out_b)
    # causal mask within the part: query 0 sees key 0 only
    causal = mask_bias(torch.tensor([[True, False], [True, True]]))
    assert causal.tolist() == [[0.0, float("-inf")], [0.0, 0.0]]
    out_c, _ = part_attention(q, k[:, :2], v[:, :2], causal, scale)
    torch.testing.assert_close(out_c[0, 0], v[0, 0])


@pytest.mark.parametrize("prune_fraction", [0.01, 1.0])
def test_shared_prefix_attention_decodes_as_generate(policy, prefix_prompts, prune_fraction):
    """Each group's prefix kept once and read once per group (cascade attention): two
    groups, repeated prompts, a row with no shared prefix, rows ending at different steps
    (pruned mid-way): greedy tokens as ``generate``'s, log-probs to 1e-4; the model's own
    attention implementation is back afterwards."""
    model, tok = policy
    prompts = [*prefix_prompts, *[prefix_prompts[0]] * 3]
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=12, stop_strings=[])
    runs = []
    for decoder, cascade in (("generate", False), ("loop", True)):
        engine = HFEngine(
            model,
            tok,
            decoder=decoder,
            share_prefix=True,
            shared_prefix_attention=cascade,
            prune_fraction=prune_fraction,
        )
        engine._stop_at = lambda ids, t, *rest: "eos" if t + 1 >= ids[0] % 7 + 2 else None
        runs.append(engine.generate(prompts, sampling))
    ref, got = runs
    assert len({len(g.token_ids) for g in ref}) >= 3
    assert [g.token_ids for g in got] == [g.token_ids for g in ref]
    for a, b in zip(ref, got, strict=True):
        torch.testing.assert_close(
            torch.tensor(b.logprobs), torch.tensor(a.logprobs), atol=1e-4, rtol=0
        )
    assert model.config._attn_implementation != NAME


def test_tasks_sharing_a_system_prompt_read_it_once_and_decode_as_generate(policy, monkeypatch):
    """Two tasks whose prompts share their first 90 tokens (a system prompt and tool
    schemas), four rollouts each, and a loose prompt: the 90 tokens are one segment read by
    all eight rows, each task's rest a segment of its own below it; greedy tokens as
    ``generate``'s, log-probs to 1e-4."""
    model, tok = policy
    gen = torch.Generator().manual_seed(5)
    system = torch.randint(3, 500, (90,), generator=gen).tolist()
    tasks = [system + torch.randint(3, 500, (n,), generator=gen).tolist() for n in (70, 40)]
    loose = torch.randint(3, 500, (30,), generator=gen).tolist()
    prompts = [*[tasks[0]] * 4, *[tasks[1]] * 4, loose]
    states: list[SharedPrefixState] = []
    real = SharedPrefixState.add_segment

    def spy(self, rows, keys, values):
        states.append(self)
        return real(self, rows, keys, values)

    monkeypatch.setattr(SharedPrefixState, "add_segment", spy)
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=8, stop_strings=[])
    got = HFEngine(model, tok, share_prefix=True, shared_prefix_attention=True).generate(
        prompts, sampling
    )
    ref = HFEngine(model, tok, decoder="generate").generate(prompts, sampling)
    assert [g.token_ids for g in got] == [g.token_ids for g in ref]
    for a, b in zip(ref, got, strict=True):
        torch.testing.assert_close(
            torch.tensor(b.logprobs), torch.tensor(a.logprobs), atol=1e-4, rtol=0
        )
    state = states[0]
    spans = sorted(
        (rows.sum().item(), k.shape[-2])
        for rows, (k, _) in zip(state.membership, state.segments[0])
    )
    # the engine sorts rows by prompt; segments: the loose row's own 29 tokens, each task's
    # rest (40 − 1 and 70 − 1: every row keeps a suffix token) and the shared 90, once
    assert spans == [(1, 29), (4, 39), (4, 69), (8, 90)]


def test_draw_follows_the_row_distribution_and_never_draws_a_zero():
    """Pure sampling on literal rows: 40 000 draws a row, frequencies within 4 standard
    errors of each probability; entries of probability 0 (inside and at the ends of a row)
    are never drawn; unnormalised rows are normalised."""
    torch.manual_seed(0)
    probs = torch.tensor([[0.0, 0.1, 0.0, 0.6, 0.3, 0.0], [2.0, 0.0, 0.0, 0.0, 0.0, 2.0]])
    n = 40_000
    counts = torch.zeros_like(probs)
    drawn = draw(probs.repeat_interleave(n, dim=0)).view(2, n)
    for r in range(2):
        counts[r] = torch.bincount(drawn[r], minlength=6).float()
    target = probs / probs.sum(-1, keepdim=True)
    freq = counts / n
    se = (target * (1 - target) / n).sqrt()
    assert ((freq - target).abs() <= 4 * se + 1e-9).all(), freq
    assert counts[probs == 0].sum() == 0


def test_shared_prefix_attention_outside_a_sampling_loop_says_why():
    from slca_lightning.rollout.shared_prefix_attention import shared_prefix_attention

    q = torch.zeros(1, 2, 1, 4)
    with pytest.raises(RuntimeError, match="outside a sampling loop on this thread"):
        shared_prefix_attention(SimpleNamespace(layer_idx=0), q, q, q, None)
