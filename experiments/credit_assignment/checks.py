"""Checks of the study's design on the runs themselves (not of the methods' results): which
reward channels a router reads and whether they varied, whether a method that never reads
the judge is unchanged by its noise, and which warm-start weights each run began from.
"""

from __future__ import annotations

import math
from collections import defaultdict

from experiments.credit_assignment.summary import LABEL, ORDER, series

#: The router each method of the study uses (``run.py`` builds its overlays from this).
ROUTERS = {
    "grpo": "slca_lightning.advantages.GRPORouter",
    "slca": "slca_lightning.advantages.SLCARouter",
    "toolpo": "slca_lightning.advantages.ToolPORouter",
    "rltr": "slca_lightning.advantages.RLTRRouter",
    "mtgrpo": "slca_lightning.advantages.MTGRPORouter",
}


def router_channels(method: str) -> set[str]:
    """The reward channels the router of ``method`` reads."""
    import importlib

    module, _, name = ROUTERS[method].rpartition(".")
    return set(getattr(importlib.import_module(module), name)().channels)


def constant_channels(runs: list[dict], rare: float = 0.1) -> list[str]:
    """Statements about reward channels a method reads that (almost) never varied within a
    batch (``reward/<channel>_std`` = 0 at all but a fraction ``< rare`` of its steps): at
    such a step the channel's z-scores are 0 and the router's terms on it add nothing."""
    out = []
    for method in ORDER:
        mine = [r for r in runs if r["method"] == method and not r.get("error") and r["train"]]
        if not mine:
            continue
        channels = sorted(router_channels(method))
        for ch in channels:
            key = f"reward/{ch}_std"
            stds = [m[key] for r in mine for m in r["train"].values() if key in m]
            varied = sum(x > 0 for x in stds)
            if not stds or varied >= rare * len(stds):
                continue
            when = "at no step" if varied == 0 else f"at {varied} of {len(stds)} steps"
            out.append(
                f"- {LABEL[method]} reads the `{ch}` channel, which varied inside a batch "
                f"{when} of its {len(mine)} runs: at every other step its terms on `{ch}` "
                "added nothing."
            )
    return out


def noise_invariance(runs: list[dict]) -> list[str]:
    """A check of the design: a method whose router reads neither ``summary`` nor ``total``
    never sees the judge, so its runs of one seed must be identical at every noise level
    (same held-out evaluations, same per-step tool rewards)."""
    out = []
    for method in ORDER:
        reads = router_channels(method)
        if reads & {"summary", "total"}:
            continue
        by_seed: dict[tuple, list[dict]] = defaultdict(list)
        for r in runs:
            if r["method"] == method and not r.get("error") and r["eval"]:
                by_seed[(r["seed"], r.get("warm_start"))].append(r)
        pairs = [rs for rs in by_seed.values() if len(rs) > 1]
        if not pairs:
            out.append(
                f"- {LABEL[method]} reads {sorted(reads)}, never the judge, but no seed has runs "
                "at two noise levels from the same warm start: invariance not checked."
            )
            continue
        same = all(
            rs[0]["eval"] == other["eval"]
            and series(rs[0], "reward/tool") == series(other, "reward/tool")
            for rs in pairs
            for other in rs[1:]
        )
        verdict = "identical" if same else "NOT identical (the noise reached it: a bug)"
        out.append(
            f"- {LABEL[method]} reads {sorted(reads)}, never the judge: its runs of each seed "
            f"are {verdict} across noise levels ({len(pairs)} seeds with one warm start compared)."
        )
    return out


def warm_start_table(runs: list[dict]) -> list[str]:
    """Which warm-start weights (SHA-256 prefix) each cell's runs began from, and their
    held-out tool accuracy at step 0: runs from different weights are not paired."""
    cells: dict[str, dict] = defaultdict(lambda: {"where": defaultdict(list), "start": set()})
    for r in runs:
        if r.get("error") or not r["eval"]:
            continue
        entry = cells[r.get("warm_start") or "unknown"]
        entry["where"][(r["noise"], r["method"])].append(r["seed"])
        first = sorted(r["eval"].items())[0][1]
        entry["start"].add(round(first.get("tool_accuracy", math.nan), 3))
    lines = [
        "| warm start (SHA-256) | runs | step-0 tool acc. | cells (σ, method: seeds) |",
        "|---|---:|---|---|",
    ]
    for sha, entry in sorted(cells.items(), key=lambda kv: -sum(map(len, kv[1]["where"].values()))):
        where = "; ".join(
            f"{n:g} {LABEL[m]}: {','.join(map(str, sorted(seeds)))}"
            for (n, m), seeds in sorted(
                entry["where"].items(), key=lambda kv: (kv[0][0], ORDER.index(kv[0][1]))
            )
        )
        count = sum(map(len, entry["where"].values()))
        start = ", ".join(f"{a:.3f}" for a in sorted(entry["start"]))
        lines.append(f"| `{sha}` | {count} | {start} | {where} |")
    return lines
