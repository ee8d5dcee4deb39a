"""NoisyJudge: seeded, request-keyed noise on top of a base judge, clipped to [0, 1]."""

import statistics

import pytest

from slca_lightning.rewards import JudgeRequest, JudgeVerdict, NoisyJudge, RuleJudge, SummaryJudge
from slca_lightning.rewards.noisy_judge import request_noise


class Fixed(SummaryJudge):
    """Scores every reply ``value``; fails on replies containing "FAIL" (test boundary)."""

    def __init__(self, value):
        self.value = value

    def score(self, requests):
        return [
            JudgeVerdict(0.0, True, None) if "FAIL" in r.reply else JudgeVerdict(self.value)
            for r in requests
        ]


def req(reply, question="What is 2 + 3?", results=("5",)):
    return JudgeRequest(question=question, tool_results=list(results), reply=reply)


def test_zero_noise_returns_the_base_verdicts():
    base = RuleJudge(grounding_weight=0.0)
    requests = [req("The answer to 2 + 3 is 5, as the tool says."), req("no")]
    assert [v.score for v in NoisyJudge(base, 0.0).score(requests)] == [
        v.score for v in base.score(requests)
    ]


def test_noise_is_keyed_by_seed_and_request_and_clipped():
    requests = [req(f"reply number {i}") for i in range(400)]
    a = NoisyJudge(Fixed(0.5), noise_std=0.1, seed=1).score(requests)
    b = NoisyJudge(Fixed(0.5), noise_std=0.1, seed=1).score(list(reversed(requests)))
    c = NoisyJudge(Fixed(0.5), noise_std=0.1, seed=2).score(requests)
    assert [v.score for v in a] == [v.score for v in reversed(b)]  # order does not matter
    assert [v.score for v in a] != [v.score for v in c]
    scores = [v.score for v in a]
    assert abs(statistics.mean(scores) - 0.5) < 0.02
    assert 0.08 < statistics.pstdev(scores) < 0.12
    wide = NoisyJudge(Fixed(0.9), noise_std=2.0).score(requests)
    assert all(0.0 <= v.score <= 1.0 for v in wide)
    assert any(v.score == 1.0 for v in wide) and any(v.score == 0.0 for v in wide)


def test_the_draw_depends_on_every_part_of_the_request():
    base = request_noise(req("same reply"), 0)
    assert request_noise(req("same reply"), 0) == base
    assert request_noise(req("same reply", question="other?"), 0) != base
    assert request_noise(req("same reply", results=("6",)), 0) != base
    assert request_noise(req("same reply!"), 0) != base


def test_failed_base_verdicts_stay_failed_and_are_counted():
    judge = NoisyJudge(Fixed(0.5), noise_std=0.3)
    out = judge.score([req("ok reply"), req("FAIL here")])
    assert out[1].failed and out[1].score == 0.0 and not out[0].failed
    assert judge.num_calls == 2 and judge.num_failures == 1


def test_default_base_reads_only_the_reply():
    """Grounding weight 0: the score does not change with the tool results."""
    judge = NoisyJudge()
    r1 = judge.judge.score([req("The sum of 2 and 3 is 5.", results=("5",))])[0]
    r2 = judge.judge.score([req("The sum of 2 and 3 is 5.", results=("99",))])[0]
    assert r1.score == r2.score > 0


def test_bad_noise_level_is_refused():
    with pytest.raises(ValueError, match="noise_std"):
        NoisyJudge(noise_std=-0.1)
