"""Summary judges: the LLM judge's prompt and rating parsing, and the rule judge's heuristic.

The backends here are :class:`CallableBackend` objects over plain Python functions: they
stand in for an LLM server (real OpenAI-compatible servers come in a later issue).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slca_lightning.chat_backends import CallableBackend, ChatBackend
from slca_lightning.chat_backends.base import chat_batch_tolerant
from slca_lightning.rewards import (
    JudgeRequest,
    JudgeVerdict,
    LLMJudge,
    RuleJudge,
    extract_facts,
    parse_rating,
)

QUESTION = "What is the weather in Paris and how windy is it?"
RESULT = '{"city": "Paris", "temperature_c": 18, "wind_kmh": 12, "sky": "sunny"}'


def request(reply: str = "It is 18 °C and sunny in Paris, with wind at 12 km/h.") -> JudgeRequest:
    return JudgeRequest(question=QUESTION, tool_results=[RESULT], reply=reply)


def judge_returning(text: str, **kw) -> LLMJudge:
    return LLMJudge(CallableBackend(lambda messages: text), **kw)


# ------------------------------------------------------------------------- backends


def test_callable_backend_passes_only_the_keywords_the_function_takes():
    seen = {}

    def with_kw(messages, **kw):
        seen.update(kw)
        return "a"

    def with_temperature(messages, temperature):
        seen["t_only"] = temperature
        return "b"

    assert CallableBackend(with_kw).chat([], temperature=0.3, max_tokens=7, seed=1) == "a"
    assert seen == {"temperature": 0.3, "max_tokens": 7, "seed": 1}
    assert CallableBackend(with_temperature).chat([], temperature=0.5) == "b"
    assert seen["t_only"] == 0.5
    assert CallableBackend(lambda m: "c").chat_batch([[], []], temperature=1.0) == ["c", "c"]


def test_chat_backend_is_abstract():
    with pytest.raises(TypeError):
        ChatBackend()  # type: ignore[abstract]


# ------------------------------------------------------------------------- LLMJudge


@pytest.mark.parametrize(
    ("output", "score", "failed"),
    [
        ("Good.\n<rating>4</rating>", 0.75, False),
        ("<rating>1</rating>", 0.0, False),
        ("<rating>5</rating>", 1.0, False),
        ("<rating>3</rating>", 0.5, False),
        ("First <rating>2</rating>, on reflection <RATING> 5 </RATING>", 1.0, False),
        ("<rating>5</rating> no wait <rating>2</rating>", 0.25, False),
        ("<rating>6</rating>", 0.0, True),
        ("<rating>0</rating>", 0.0, True),
        ("<rating>4.5</rating>", 0.0, True),
        ("<rating>four</rating>", 0.0, True),
        ("<rating>4</rating> then <rating>nine</rating>", 0.0, True),
        ("I would rate this a 4 out of 5.", 0.0, True),
        ("", 0.0, True),
    ],
)
def test_llm_judge_parses_the_last_rating_tag(output, score, failed):
    judge = judge_returning(output)
    (verdict,) = judge.score([request()])
    assert verdict.score == score
    assert verdict.failed is failed
    assert verdict.raw == output
    assert judge.num_failures == int(failed)
    assert judge.num_calls == 1


def test_parse_rating_edge_cases():
    assert parse_rating("<rating>\n3\n</rating>") == 3
    assert parse_rating("<rating></rating>") is None
    assert parse_rating("<rating>-1</rating>") is None


class _ShortBatch(CallableBackend):
    """A server whose batch endpoint drops a reply (seen with overloaded proxies)."""

    def chat_batch(self, requests, **kw):
        return [self.chat(m, **kw) for m in requests][:-1]


def test_chat_batch_tolerant_falls_back_to_one_request_at_a_time():
    def echo(messages):
        if messages[-1]["content"] == "bad":
            raise RuntimeError("oops")
        return messages[-1]["content"].upper()

    reqs = [[{"role": "user", "content": c}] for c in ("a", "bad", "c")]
    # the default chat_batch raises on "bad": the others are asked again one by one
    assert chat_batch_tolerant(CallableBackend(echo), reqs) == ["A", None, "C"]
    # a batch with a reply missing is not trusted: every request is asked again
    ok = [[{"role": "user", "content": c}] for c in ("a", "b")]
    assert chat_batch_tolerant(_ShortBatch(echo), ok) == ["A", "B"]
    assert chat_batch_tolerant(CallableBackend(echo), []) == []


def test_backend_raising_gives_failed_zero_verdicts_and_is_counted():
    def boom(messages):
        raise ConnectionError("server down")

    judge = LLMJudge(CallableBackend(boom))
    verdicts = judge.score([request(), request()])
    assert verdicts == [JudgeVerdict(0.0, True, None), JudgeVerdict(0.0, True, None)]
    assert judge.num_failures == 2
    judge.score([request()])
    assert judge.num_failures == 3 and judge.num_calls == 3


def test_one_bad_request_does_not_fail_its_batch_mates():
    def flaky(messages):
        if "BAD" in messages[-1]["content"]:
            raise RuntimeError("oops")
        return "<rating>5</rating>"

    judge = LLMJudge(CallableBackend(flaky))
    verdicts = judge.score([request(), request("BAD reply here"), request()])
    assert [v.score for v in verdicts] == [1.0, 0.0, 1.0]
    assert [v.failed for v in verdicts] == [False, True, False]
    assert judge.num_failures == 1


def test_non_string_reply_is_a_failure():
    judge = LLMJudge(CallableBackend(lambda messages: None))  # type: ignore[arg-type,return-value]
    assert judge.score([request()])[0].failed


class BatchCountingBackend(ChatBackend):
    def __init__(self):
        self.batch_calls = 0
        self.kwargs = None
        self.prompts: list[str] = []

    def chat(self, messages, *, temperature=0.0, max_tokens=None, seed=None):
        raise AssertionError("the judge must use chat_batch")

    def chat_batch(self, requests, **kw):
        self.batch_calls += 1
        self.kwargs = kw
        self.prompts = [r[-1]["content"] for r in requests]
        return ["<rating>3</rating>"] * len(requests)


def test_llm_judge_sends_the_whole_batch_in_one_chat_batch_call():
    backend = BatchCountingBackend()
    judge = LLMJudge(backend, max_tokens=64)
    assert [v.score for v in judge.score([request()] * 5)] == [0.5] * 5
    assert backend.batch_calls == 1
    assert backend.kwargs == {"temperature": 0.0, "max_tokens": 64, "seed": None}
    assert judge.score([]) == [] and backend.batch_calls == 1


def test_llm_judge_prompt_holds_question_results_and_reply():
    backend = BatchCountingBackend()
    LLMJudge(backend).score([request("The reply {with braces}.")])
    prompt = backend.prompts[0]
    assert QUESTION in prompt
    assert RESULT in prompt
    assert "The reply {with braces}." in prompt
    assert "<rating>" in prompt
    for criterion in ("interpretation of the tool results", "every part", "clarity"):
        assert criterion in prompt
    LLMJudge(backend).score([JudgeRequest("q?", [], "a reply that abstains")])
    assert "(no tool results)" in backend.prompts[0]


def test_llm_judge_custom_template_and_result_cut():
    backend = BatchCountingBackend()
    judge = LLMJudge(
        backend, prompt_template="Q={question}|R={tool_results}|A={reply}", max_result_chars=10
    )
    judge.score([JudgeRequest("q", ["x" * 100], "a")])
    prompt = backend.prompts[0]
    assert prompt.startswith("Q=q|R=(1) xxxxx")
    assert "characters cut" in prompt and prompt.endswith("|A=a")


# ------------------------------------------------------------------------- RuleJudge


def test_grounded_reply_scores_higher_than_an_ungrounded_one():
    judge = RuleJudge()
    grounded, ungrounded = judge.score(
        [
            request("In Paris it is 18 °C and sunny; the wind blows at 12 km/h."),
            request("In London it is 25 °C and raining; the wind is calm today."),
        ]
    )
    assert grounded.score > ungrounded.score
    assert not grounded.failed and not ungrounded.failed
    assert "grounding=1.0000" in grounded.raw


def test_rule_judge_terms_on_a_literal_case():
    judge = RuleJudge()
    # Facts: "paris", 18, 12, "sunny" (4 < saturation 5); the reply cites paris, 18, sunny.
    terms = judge.terms(request("Paris is sunny at 18 degrees today, quite pleasant out."))
    assert terms["grounding"] == pytest.approx(3 / 4)
    # Content words of the question: weather, paris, windy → paris only.
    assert terms["coverage"] == pytest.approx(1 / 3)
    assert terms["length"] == 1.0
    score = judge.score_one(request("Paris is sunny at 18 degrees today, quite pleasant out."))
    assert score.score == pytest.approx(0.5 * 0.75 + 0.3 / 3 + 0.2)


def test_rule_judge_length_term():
    judge = RuleJudge(min_words=8, max_words=20)
    assert judge.terms(request("Paris 18 sunny 12"))["length"] == 0.5
    assert judge.terms(request(" ".join(["word"] * 40)))["length"] == 0.5
    assert judge.score([request("")])[0].score == 0.0


def test_rule_judge_renormalises_when_a_term_has_no_material():
    judge = RuleJudge(grounding_weight=0.5, coverage_weight=0.3, length_weight=0.2)
    req = JudgeRequest(question="the of and", tool_results=["ok done"], reply="a b c d e f g h")
    terms = judge.terms(req)
    assert terms["grounding"] is None and terms["coverage"] is None
    assert judge.score_one(req).score == 1.0


def test_extract_facts_from_json_and_text():
    strings, numbers = extract_facts(
        [
            '{"flights": [{"id": "AF 1234", "price": "1,200.50", "ok": true, "stops": 0}]}',
            'Booked seat "12A" for Marie Curie on 2024-05-01.',
        ]
    )
    assert {"af 1234", "12a", "marie", "curie"} <= strings
    assert {1200.5, 0.0, 2024.0} <= numbers
    assert "true" not in strings


def test_rule_judge_rejects_bad_weights():
    with pytest.raises(ValueError):
        RuleJudge(grounding_weight=-1.0)
    with pytest.raises(ValueError):
        RuleJudge(grounding_weight=0.0, coverage_weight=0.0, length_weight=0.0)


@settings(max_examples=200, deadline=None)
@given(
    question=st.text(max_size=200),
    results=st.lists(st.text(max_size=300), max_size=4),
    reply=st.text(max_size=400),
)
def test_rule_judge_is_deterministic_and_in_unit_range(question, results, reply):
    req = JudgeRequest(question=question, tool_results=results, reply=reply)
    a = RuleJudge().score([req])[0]
    b = RuleJudge().score([req])[0]
    assert a == b
    assert 0.0 <= a.score <= 1.0
    assert not a.failed


def test_rule_judge_survives_huge_and_deeply_nested_results():
    deep = "[" * 100_000 + "]" * 100_000
    nested = json.dumps(json.loads("[" * 500 + '"Paris"' + "]" * 500))
    verdicts = RuleJudge().score([JudgeRequest("Paris?", [deep, nested], "Paris it is, friend.")])
    assert 0.0 < verdicts[0].score <= 1.0
