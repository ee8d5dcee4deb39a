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


def prefix_tree(
    prefixes: list[list[int]], min_shared: int
) -> list[tuple[int, int, list[int], int]]:
    """The segments of a tree over the groups' shared prefixes:
    ``[(start, end, groups, parent), ...]``, parents before children.

    Segment ``k`` is tokens ``[start, end)`` of every prefix in ``groups`` (indices into
    ``prefixes``), which agree on them; ``parent`` is the segment holding ``[.., start)``
    (-1 at the root). Groups that agree on at least ``min_shared`` more tokens share a
    segment; a group's own rest is a segment of its own. Each group's prefix is then the
    chain of its segments from a root down, so prefilling each segment once (as one row,
    after its ancestors) and reading it once per step for all its groups' rows is what
    shared-prefix attention does across groups, not only within one: on the quickstart the
    four tasks' 729-, 660-, 585- and 721-token prompts share their first 356 tokens (the
    system prompt and tool schemas) and two of them 707.
    """
    out: list[tuple[int, int, list[int], int]] = []

    def grow(groups: list[int], start: int, parent: int) -> None:
        if len(groups) == 1:
            (g,) = groups
            if len(prefixes[g]) > start:
                out.append((start, len(prefixes[g]), [g], parent))
            return
        first = prefixes[groups[0]]
        end = min(len(prefixes[g]) for g in groups)
        for g in groups[1:]:
            end = start + _common_prefix(first[start:end], prefixes[g][start:end], end - start)
        if end - start >= min_shared:
            out.append((start, end, list(groups), parent))
            parent, start = len(out) - 1, end
        parts: dict[int | None, list[int]] = {}  # by the token after the common part
        for g in groups:
            parts.setdefault(prefixes[g][end] if len(prefixes[g]) > end else None, []).append(g)
        for token, part in parts.items():  # at least two parts: ``end`` is where they differ
            if token is None:  # prefixes that end here: what is left of each is its own
                for g in part:
                    grow([g], start, parent)
            else:
                grow(part, start, parent)

    grow(list(range(len(prefixes))), 0, -1)
    return out
