"""Which prompts of a batch share a prefix, and how to group them so prefill is cheapest.

The G rollouts of a task share their whole prompt, and keep it as a prefix in later turns.
:func:`prefix_clusters` finds runs of prompts with a long common prefix (``generate``'s
shared-prefix batches); :func:`plan_groups` chooses the groups of the engine's own loop,
where every group's prefix is prefilled once, as one row, and all rows then run as one
batch whose suffix block is as wide as the longest suffix.
"""

from __future__ import annotations

import itertools


def prefix_clusters(prompts: list[list[int]], min_shared: int) -> list[tuple[list[int], int]]:
    """Group prompt indices whose prompts share a long prefix: ``[(rows, shared_len), ...]``.

    Prompts are sorted as token sequences, so prompts with long common prefixes become
    neighbours; a run of neighbours forms a cluster while its common prefix stays at least
    ``min_shared`` tokens and at least half of each member's length. Everything else is one
    last cluster with ``shared_len = 0`` (plain left-padded batch). Every index appears once.
    """
    order = sorted(range(len(prompts)), key=lambda i: prompts[i])
    clusters: list[tuple[list[int], int]] = []
    loose: list[int] = []
    run: list[int] = []
    shared = 0

    def close() -> None:
        if len(run) > 1:
            clusters.append((list(run), shared))
        else:
            loose.extend(run)

    for i in order:
        if run:
            lcp = _common_prefix(prompts[run[0]], prompts[i], shared)
            if lcp >= min_shared and 2 * lcp >= max(len(prompts[i]), len(prompts[run[0]])):
                run.append(i)
                shared = lcp
                continue
            close()
        run, shared = [i], len(prompts[i])
    close()
    if loose:
        clusters.append((sorted(loose), 0))
    return clusters


def _common_prefix(a: list[int], b: list[int], limit: int) -> int:
    n = min(len(a), len(b), limit)
    for t in range(n):
        if a[t] != b[t]:
            return t
    return n


def layout_cost(prompts: list[list[int]], groups: list[tuple[list[int], int]]) -> int:
    """Tokens the loop prefills for ``groups``: each group's prefix once, plus every row's
    suffix padded to the longest suffix of the batch (padding is computed too)."""
    if not prompts:
        return 0
    suffix = max(len(prompts[r]) - n for rows, n in groups for r in rows)
    return sum(n for _, n in groups) + len(prompts) * suffix


def plan_groups(prompts: list[list[int]], min_shared: int) -> list[tuple[list[int], int]]:
    """Groups ``[(rows, shared), ...]`` for the loop, each row once, that keep
    :func:`layout_cost` low.

    Starts from :func:`prefix_clusters` with every loose row its own group (its prefix is
    all but its last token: prefilled alone, it pads nobody); then splits a group into the
    runs of its rows that share more than the group does (identical prompts, a task's
    rollouts in a later turn) whenever that lowers the cost, until no split does. A group's
    ``shared`` is the common prefix of its rows, at most each row's length − 1.
    """
    groups: list[tuple[list[int], int]] = []
    for rows, shared in prefix_clusters(prompts, min_shared):
        if shared:
            groups.append((rows, _cap(prompts, rows, shared)))
        else:
            groups += [([r], _cap(prompts, [r], len(prompts[r]))) for r in rows]
    improved = True
    while improved:
        improved = False
        for i, (rows, shared) in enumerate(groups):
            parts = _split(prompts, rows, shared)
            if not parts:
                continue
            trial = groups[:i] + parts + groups[i + 1 :]
            if layout_cost(prompts, trial) < layout_cost(prompts, groups):
                groups, improved = trial, True
                break
    return groups


def _cap(prompts: list[list[int]], rows: list[int], shared: int) -> int:
    return max(0, min(shared, *(len(prompts[r]) - 1 for r in rows)))


def _split(prompts: list[list[int]], rows: list[int], shared: int) -> list[tuple[list[int], int]]:
    """The runs of ``rows`` (in token order) whose neighbours share more than ``shared``
    (``[]``: nothing to split)."""
    if len(rows) < 2:
        return []
    order = sorted(rows, key=lambda r: prompts[r])
    lcps = [
        _common_prefix(prompts[a], prompts[b], len(prompts[b]))
        for a, b in itertools.pairwise(order)
    ]
    out, start = [], 0
    for k in range(len(order)):  # a run ends where its neighbours share no more than the group
        if k == len(order) - 1 or lcps[k] <= shared:
            run = order[start : k + 1]
            n = min(lcps[start:k]) if len(run) > 1 else len(prompts[run[0]])
            out.append((run, _cap(prompts, run, n)))
            start = k + 1
    return out
