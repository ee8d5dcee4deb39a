"""τ² gold replay on every task of both domains (the evaluator's self-check).

Real parts: the wheels' data and tool functions (in-process), the hermes parser, the
conversation loop, the scripted user and the τ² scorer. No mocks. About 5-10 s a domain
(one fresh 3-7 MB database per replay, two per task).
"""

from __future__ import annotations

import pytest

from slca_lightning.eval.tau2.evaluator import Tau2Evaluator
from slca_lightning.eval.tau2.loop import OracleAgent


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_gold_replay_passes_on_every_task(domain):
    """Replaying the gold actions as the agent passes every task: the final DB equals the
    gold replay's (so the replay is deterministic) and the required info is said. Gold
    actions that fail (retail: lookups with a wrong email/name/id, two refused writes) fail
    identically for the oracle, which sees exactly those errors."""
    report = Tau2Evaluator(domain, split="base").evaluate(OracleAgent())
    failed = [s.task_id for s in report.scores if not s.success]
    assert not failed, failed
    summary = report.summary()
    assert summary["pass1"] == 1.0 and summary["db_match"] == 1.0
    assert summary["communicate"] == 1.0
    assert summary["tasks"] == {"airline": 50, "retail": 114}[domain]
    for score, ep in zip(report.scores, report.episodes, strict=True):
        assert ep["termination"] == "user_stop", score.task_id
        assert ep.get("tool_errors", 0) == len(score.gold_errors), score.task_id
    if domain == "airline":
        assert not any(s.gold_errors for s in report.scores)
