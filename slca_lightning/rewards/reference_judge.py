"""A reference-based summary judge: token F1 of the reply against the task's gold reply.

Independent of :class:`~slca_lightning.rewards.rule_judge.RuleJudge` by construction: it never
reads the tool results the episode received or the question's words, only a reply written
from the *gold* calls' real results (for the synthetic suite, the demonstration's final
reply, ``task.metadata["reference_reply"]``). A policy that learned to game the rule judge
(echoing observed values and the question's words at a pleasing length) gains nothing
here unless its reply carries the right facts; it is the held-out "second judge" that
training never sees.
"""

from __future__ import annotations

import re
from collections import Counter

from slca_lightning.rewards.judges import JudgeRequest, JudgeVerdict, SummaryJudge

__all__ = ["ReferenceJudge", "token_f1"]

_TOKEN = re.compile(r"[0-9]+(?:\.[0-9]+)?|[^\W\d_]+", re.UNICODE)


def _tokens(text: str) -> list[str]:
    out = []
    for tok in _TOKEN.findall(text.lower()):
        if tok[0].isdigit() and "." in tok:  # 94000.0 and 94000 are the same number
            tok = tok.rstrip("0").rstrip(".")
        out.append(tok)
    return out


def token_f1(reply: str, reference: str) -> float:
    """Multiset F1 of lower-cased word and number tokens (1.0 when both are empty)."""
    a, b = Counter(_tokens(reply)), Counter(_tokens(reference))
    if not a and not b:
        return 1.0
    common = sum((a & b).values())
    if common == 0:
        return 0.0
    precision, recall = common / sum(a.values()), common / sum(b.values())
    return 2 * precision * recall / (precision + recall)


class ReferenceJudge(SummaryJudge):
    """Scores a reply by :func:`token_f1` against ``request.reference`` (the gold reply).

    A request without a reference gets a failed verdict (score 0, counted): this judge is
    for task sources that carry a gold reply, such as the built-in synthetic suite.
    """

    def __init__(self) -> None:
        self.num_calls = 0
        self.num_failures = 0

    def score(self, requests: list[JudgeRequest]) -> list[JudgeVerdict]:
        """One verdict per request, in order; never raises."""
        out = []
        for request in requests:
            self.num_calls += 1
            reference = getattr(request, "reference", None)
            if not reference:
                self.num_failures += 1
                out.append(JudgeVerdict(0.0, True, "no reference reply"))
                continue
            out.append(JudgeVerdict(token_f1(request.reply, reference), False, None))
        return out
