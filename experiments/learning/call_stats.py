"""How a policy's held-out calls fail: malformed, or well-formed with a wrong name or value.

Reads the greedy episodes ``InDomainEval(save_episodes=True)`` writes
(``in_domain_episodes/step_<k>.jsonl``) and counts every call block entry of every assistant
turn, parsed strictly as the agent loop parses it (METHOD §4.1)::

    python -m experiments.learning.call_stats runs/quickstart/logs/version_0/in_domain_episodes/step_0.jsonl ...

For each file: calls, invalid calls (e.g. ``arguments`` written as a JSON string), and of
the well-formed calls the share that equals one of the task's gold calls exactly (name and
every argument value): the copy rate that strict tool accuracy is bounded by. And, on the
multi-step tasks, how often the policy stopped calling tools too soon (``stop_stats``: the
decision ``configs/overlays/stop_decision.yaml`` credits to the tool channel). With
``--paired BEFORE AFTER``: per task kind, the tasks on which the policy made fewer (or more)
call turns after than before, and whether the tool reward rose or fell on them
(``turn_changes``)::

    python -m experiments.learning.call_stats --paired .../step_0.jsonl .../step_8.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script

from experiments.common import call_turns, read_jsonl, stop_stats
from slca_lightning.calls.parsing import parse_tool_calls


def _key(name: str, arguments: dict) -> str:
    return json.dumps([name, arguments], sort_keys=True)


def call_stats(rows: list[dict]) -> dict[str, float]:
    """Counts over episodes ``{"gold": [[[name, args], ...], ...], "turns": [text, ...],
    "exact": bool}``: ``calls``, ``invalid``, ``well_formed``, ``gold_exact`` (well-formed
    calls equal to a gold call), their ratios and ``exact_episodes``."""
    calls = invalid = exact = 0
    for row in rows:
        gold = {_key(name, args) for step in row["gold"] for name, args in step}
        for turn in row["turns"]:
            for block in parse_tool_calls(turn).blocks:
                for entry in block.entries:
                    calls += 1
                    if entry.call is None:
                        invalid += 1
                    else:
                        exact += _key(entry.call.name, entry.call.arguments) in gold
    well_formed = calls - invalid
    return {
        "episodes": len(rows),
        "exact_episodes": sum(bool(r["exact"]) for r in rows),
        "calls": calls,
        "invalid": invalid,
        "invalid_share": invalid / calls if calls else float("nan"),
        "well_formed": well_formed,
        "gold_exact": exact,
        "gold_exact_share": exact / well_formed if well_formed else float("nan"),
    }


def turn_changes(before: list[dict], after: list[dict]) -> dict[str, dict[str, int]]:
    """Paired by ``task_id``, per task ``kind``: ``tasks``, ``fewer`` (fewer call turns after
    than before) with ``fewer_tool_up`` / ``fewer_tool_down`` (its tool reward rose / fell),
    ``more`` likewise, and ``exact_before`` / ``exact_after``. A task missing from either
    side is an error (the two files must score the same held-out tasks)."""
    by_id = {row["task_id"]: row for row in after}
    if set(by_id) != {row["task_id"] for row in before}:
        raise ValueError("the two episode files do not hold the same task ids")
    keys = ("tasks", "fewer", "fewer_tool_up", "fewer_tool_down", "more", "more_tool_up",
            "more_tool_down", "exact_before", "exact_after")  # fmt: skip
    out: dict[str, dict[str, int]] = {}
    for x in before:
        y = by_id[x["task_id"]]
        counts = out.setdefault(x.get("kind", "?"), dict.fromkeys(keys, 0))
        counts["tasks"] += 1
        counts["exact_before"] += bool(x["exact"])
        counts["exact_after"] += bool(y["exact"])
        change = call_turns(y) - call_turns(x)
        if change:
            side = "fewer" if change < 0 else "more"
            counts[side] += 1
            tool = y["rewards"]["tool"] - x["rewards"]["tool"]
            counts[f"{side}_tool_up"] += tool > 0
            counts[f"{side}_tool_down"] += tool < 0
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("episodes", nargs="*", help="in_domain_episodes/step_<k>.jsonl files")
    p.add_argument(
        "--paired", nargs=2, metavar=("BEFORE", "AFTER"), help="call turns per task kind"
    )
    args = p.parse_args(argv)
    if args.paired:
        before, after = args.paired
        print(f"call turns per task, {after} against {before}:")
        for kind, c in turn_changes(read_jsonl(before), read_jsonl(after)).items():
            print(
                f"  {kind:<10} {c['tasks']:>3} tasks: {c['fewer']} fewer call turns (tool reward "
                f"up {c['fewer_tool_up']}, down {c['fewer_tool_down']}), {c['more']} more (up "
                f"{c['more_tool_up']}, down {c['more_tool_down']}); exact {c['exact_before']} -> "
                f"{c['exact_after']}"
            )
    for path in args.episodes:
        rows = read_jsonl(path)
        s = call_stats(rows)
        print(
            f"{path}: {s['exact_episodes']}/{s['episodes']} episodes exact; {s['calls']} calls, "
            f"{s['invalid']} invalid ({s['invalid_share']:.2f}); of {s['well_formed']} "
            f"well-formed, {s['gold_exact']} exactly a gold call ({s['gold_exact_share']:.3f})"
        )
        m = stop_stats(rows)
        if m["multistep"]:
            print(
                f"  multi-step tasks {m['multistep']}: {m['complete']} all steps called, "
                f"{m['early']} answered early, {m['none']} no call, {m['unanswered']} unanswered"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
