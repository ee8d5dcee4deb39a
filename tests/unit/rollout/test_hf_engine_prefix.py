"""HFEngine's shared-prefix generation: clusters, and the same samples as plain batching.

Real parts: the built-in tiny Qwen2 model, ``model.generate`` and its KV cache; no mocks.
"""

from __future__ import annotations

from slca_lightning.rollout.engine import SamplingConfig
from slca_lightning.rollout.hf_engine import HFEngine, prefix_clusters


def test_prefix_clusters_on_literal_prompts():
    p, q = list(range(100, 200)), list(range(300, 400))
    prompts = [[*p, 1], [*q, 2, 3], [7, 8, 9], [*p, 4, 5], q, p]
    clusters = prefix_clusters(prompts, min_shared=64)
    assert sorted(clusters) == sorted([([5, 0, 3], 100), ([4, 1], 100), ([2], 0)])
    assert prefix_clusters(prompts, min_shared=101)[-1] == ([0, 1, 2, 3, 4, 5], 0)
    assert prefix_clusters([], 8) == []


def test_greedy_generation_is_the_same_with_and_without_the_shared_prefix(policy, prefix_prompts):
    model, tok = policy
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=12)
    plain = HFEngine(model, tok, share_prefix=False).generate(prefix_prompts, sampling)
    shared = HFEngine(model, tok, share_prefix=True).generate(prefix_prompts, sampling)
    assert [g.token_ids for g in shared] == [g.token_ids for g in plain]
    for a, b in zip(plain, shared):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4


def test_seeded_sampling_with_the_shared_prefix_is_reproducible(policy, prefix_prompts):
    model, tok = policy
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=10, seed=3)
    first = HFEngine(model, tok, share_prefix=True).generate(prefix_prompts, sampling)
    again = HFEngine(model, tok, share_prefix=True).generate(prefix_prompts, sampling)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    assert all(len(g.token_ids) == len(g.logprobs) for g in first)


def test_plan_groups_dedupes_prompts_and_keeps_a_tasks_rollouts_together():
    from slca_lightning.rollout.prefixes import layout_cost, plan_groups

    tools = list(range(1000, 1300))  # a shared preamble, 300 tokens
    a, b = [*tools, *range(1, 60)], [*tools, *range(100, 190)]  # two tasks' prompts
    # turn 1: four copies of each task's prompt; prefix_clusters puts all 8 in one
    # cluster (300 shared tokens), the plan prefills each distinct prompt once
    turn1 = [a] * 4 + [b] * 4
    assert prefix_clusters(turn1, 64) == [(list(range(8)), 300)]
    plan = plan_groups(turn1, 64)
    assert sorted((sorted(rows), n) for rows, n in plan) == [
        ([0, 1, 2, 3], len(a) - 1),
        ([4, 5, 6, 7], len(b) - 1),
    ]
    assert layout_cost(turn1, plan) == len(a) - 1 + len(b) - 1 + 8 * 1
    # turn 2: each rollout appended its own reply; a task's rollouts share its prompt
    turn2 = [[*a, 7, i] for i in range(3)] + [[*b, 8, i, i] for i in range(3)] + [[5] * 40]
    plan = plan_groups(turn2, 64)
    assert sorted((sorted(rows), n) for rows, n in plan) == [
        ([0, 1, 2], len(a) + 1),
        ([3, 4, 5], len(b) + 1),
        ([6], 39),  # a loose row is prefilled alone
    ]
    assert layout_cost(turn2, plan) < layout_cost(turn2, prefix_clusters(turn2, 64))


def test_prefix_tree_on_literal_prefixes():
    """Segments ``(start, end, groups, parent)``: a root the first three share for 50
    tokens (the fourth ends there), a branch two of them share for 40 more, each group's
    own rest, and a prefix that shares nothing as a root of its own; a common part shorter
    than ``min_shared`` is no segment (each group takes it in its own)."""
    from slca_lightning.rollout.prefixes import prefix_tree

    base = list(range(100))
    prefixes = [
        base + [1] * 50,
        base + [1] * 40 + [7],
        base + [2] * 30,
        [9] * 80,
        base[:50],
    ]
    assert prefix_tree(prefixes, 10) == [
        (0, 50, [0, 1, 2, 4], -1),
        (50, 100, [0, 1, 2], 0),
        (100, 140, [0, 1], 1),
        (140, 150, [0], 2),
        (140, 141, [1], 2),
        (100, 130, [2], 1),
        (0, 80, [3], -1),
    ]
    assert prefix_tree([[1, 2, 3, 4], [1, 2, 5, 6]], 3) == [(0, 4, [0], -1), (0, 4, [1], -1)]
    assert prefix_tree([[1, 2, 3, 4], [1, 2, 5, 6]], 2) == [
        (0, 2, [0, 1], -1),
        (2, 4, [0], 0),
        (2, 4, [1], 0),
    ]
