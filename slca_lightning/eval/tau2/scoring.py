"""τ² scoring: database state, required communications, actions, NL assertions; Pass^k.

An episode's reward is the product of the parts its task's ``reward_basis`` names, each 0
or 1, as τ² computes it:

- ``DB``: the episode's final database hashes (canonical JSON) to the same value as a fresh
  database after replaying the task's gold actions.
- ``COMMUNICATE``: every ``communicate_info`` string occurs, case-insensitively, in some
  assistant message to the user, after removing commas from the message (τ²'s rule: an
  agent that writes ``1,000`` says ``1000``). Tool-call blocks and reasoning do not count.
- ``ACTION``: every gold action has a matching call (same name; equal values on the gold's
  ``compare_args``, all its arguments when None).
- ``NL_ASSERTION``: a judge (any ChatBackend) decides each assertion on the transcript; a
  task without assertions scores 1. Without a judge the part is left out of the product and
  the episode is flagged ``nl_unjudged`` (the report counts them).

Pass^k over n trials per task is τ²'s unbiased estimator: the mean over tasks of
``C(c, k) / C(n, k)`` with c successful trials (success = reward 1).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slca_lightning.calls.parsing import strip_think
from slca_lightning.eval.tau2.env import Tau2Domain, Tau2Task
from slca_lightning.types import ToolResult

__all__ = [
    "Tau2Score",
    "actions_matched",
    "communicated",
    "pass_hat_k",
    "pass_k",
    "score_episode",
    "user_facing_text",
]

_TOOL_BLOCK = re.compile(r"<tool_call>.*?(</tool_call>|$)", re.DOTALL)


@dataclass
class Tau2Score:
    """The verdict on one episode.

    Attributes:
        task_id, trial: which episode.
        reward: product of the scored parts (0 or 1).
        parts: reward-basis part → 0/1 (only the parts that were scored).
        info: informational checks outside the basis (``db``, ``communicate``, ``action``).
        nl_unjudged: the basis asks for NL assertions but no judge was given.
        gold_errors: errors the gold replay itself raised (should be empty).
    """

    task_id: str
    trial: int
    reward: float
    parts: dict[str, float] = field(default_factory=dict)
    info: dict[str, float] = field(default_factory=dict)
    nl_unjudged: bool = False
    gold_errors: tuple[str, ...] = ()

    @property
    def success(self) -> bool:
        return self.reward >= 1.0 - 1e-9


def user_facing_text(text: str) -> str:
    """An assistant message without reasoning and tool-call blocks (what the user reads)."""
    return _TOOL_BLOCK.sub("", strip_think(text or "")).strip()


def communicated(info: str, assistant_texts: Sequence[str]) -> bool:
    """τ²'s rule: ``info`` (lower-cased) occurs in a lower-cased, comma-less message."""
    needle = info.lower()
    return any(needle in user_facing_text(t).lower().replace(",", "") for t in assistant_texts)


def actions_matched(actions: Sequence[Mapping[str, Any]], calls: Sequence[ToolResult]) -> bool:
    """Every gold action has a call with its name and equal values on its compare_args."""
    for act in actions:
        keys = act.get("compare_args")
        keys = list(act["arguments"]) if keys is None else list(keys)
        want = {k: act["arguments"].get(k) for k in keys}
        if not any(
            r.call.name == act["name"]
            and {k: r.call.arguments.get(k) for k in keys if k in r.call.arguments} == want
            for r in calls
            if isinstance(r.call.arguments, dict)
        ):
            return False
    return True


_JUDGE_SYSTEM = (
    "You grade a customer-service conversation. For each numbered expectation, decide "
    "whether the agent's behaviour in the transcript satisfies it. Reply with JSON only: "
    '{"results": [{"index": 1, "met": true}, ...]}, one entry per expectation.'
)


def _judge_nl(judge: Any, assertions: Sequence[str], transcript: str) -> float:
    """1.0 when the judge says every assertion holds; any failure to answer is 0.0."""
    listing = "\n".join(f"{i + 1}. {a}" for i, a in enumerate(assertions))
    messages = [
        {"role": "system", "content": _JUDGE_SYSTEM},
        {"role": "user", "content": f"Transcript:\n{transcript}\n\nExpectations:\n{listing}"},
    ]
    try:
        reply = judge.chat(messages, temperature=0.0)
        start, end = reply.find("{"), reply.rfind("}")
        results = json.loads(reply[start : end + 1])["results"]
        met = {int(r["index"]): r["met"] is True for r in results}
    except Exception:  # transport error, no JSON, wrong shape: the assertion is not shown met
        return 0.0
    return float(all(met.get(i + 1, False) for i in range(len(assertions))))


def score_episode(
    task: Tau2Task,
    domain: Tau2Domain,
    final_db: dict[str, Any],
    assistant_texts: Sequence[str],
    calls: Sequence[ToolResult],
    trial: int = 0,
    judge: Any = None,
    transcript: str = "",
) -> Tau2Score:
    """Score one finished episode of ``task`` (see the module docstring)."""
    gold_hash, gold_errors = domain.gold_db_hash(task.id)
    info = {
        "db": float(domain.db_hash(final_db) == gold_hash),
        "communicate": float(all(communicated(s, assistant_texts) for s in task.communicate_info)),
        "action": float(actions_matched(task.actions, calls)),
    }
    parts: dict[str, float] = {}
    unjudged = False
    for basis in task.reward_basis:
        if basis == "DB":
            parts["DB"] = info["db"]
        elif basis == "COMMUNICATE":
            parts["COMMUNICATE"] = info["communicate"]
        elif basis == "ACTION":
            parts["ACTION"] = info["action"]
        elif basis == "NL_ASSERTION":
            if not task.nl_assertions:
                parts["NL_ASSERTION"] = 1.0
            elif judge is not None:
                parts["NL_ASSERTION"] = _judge_nl(judge, task.nl_assertions, transcript)
            else:
                unjudged = True
    reward = math.prod(parts.values()) if parts else 1.0
    return Tau2Score(task.id, trial, float(reward), parts, info, unjudged, gold_errors)


def pass_hat_k(successes: int, trials: int, k: int) -> float:
    """``C(c, k) / C(n, k)``: the chance that k trials drawn from n all succeed.

    Raises:
        ValueError: ``k`` outside ``1..trials`` or ``successes`` outside ``0..trials``.
    """
    if not 1 <= k <= trials:
        raise ValueError(f"pass^k needs 1 <= k <= trials, got k={k}, trials={trials}")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be in 0..{trials}, got {successes}")
    return math.comb(successes, k) / math.comb(trials, k)


def pass_k(scores: Sequence[Tau2Score], ks: Sequence[int] | None = None) -> dict[int, float]:
    """Pass^k for each k (default 1..min trials): mean over tasks of :func:`pass_hat_k`."""
    per_task: dict[str, list[bool]] = {}
    for s in scores:
        per_task.setdefault(s.task_id, []).append(s.success)
    if not per_task:
        return {}
    n_min = min(len(v) for v in per_task.values())
    ks = list(range(1, n_min + 1)) if ks is None else list(ks)
    return {
        k: sum(pass_hat_k(sum(v), len(v), k) for v in per_task.values()) / len(per_task)
        for k in ks
        if k <= n_min
    }
