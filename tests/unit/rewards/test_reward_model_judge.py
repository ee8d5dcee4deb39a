"""RewardModelJudge on a tiny randomly initialised sequence-classification model.

Real parts: a ``Qwen2ForSequenceClassification`` (random weights, built offline) and the
tiny byte-level tokenizer; nothing is mocked. A random model gives meaningless scores, so
the tests check the judge's contract (range, batching, truncation, failure accounting), not
score quality.
"""

from __future__ import annotations

import math

import pytest
import torch

from slca_lightning.models.tiny import build_tiny_tokenizer
from slca_lightning.rewards.judges import JudgeRequest
from slca_lightning.rewards.reward_model_judge import RewardModelJudge, render_judge_text

REQUESTS = [
    JudgeRequest("What is 2 + 3?", ['{"result": 5}'], "2 + 3 is 5."),
    JudgeRequest("Weather in Oslo?", ['{"temp_c": 4}'], "It is 4 °C and snowy in Oslo."),
    JudgeRequest("Say hi", [], "hi"),
]


def tiny_classifier(num_labels: int, seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    tok = build_tiny_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_labels=num_labels,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(seed)
    return Qwen2ForSequenceClassification(config), tok


@pytest.mark.parametrize("num_labels", [1, 2])
def test_scores_lie_in_unit_interval_and_batching_does_not_change_them(num_labels):
    model, tok = tiny_classifier(num_labels)
    one_by_one = RewardModelJudge(model, tok, batch_size=1).score(REQUESTS)
    batched = RewardModelJudge(model, tok, batch_size=8).score(REQUESTS)
    scores = [v.score for v in one_by_one]
    assert all(0.0 <= s <= 1.0 and not v.failed for s, v in zip(scores, one_by_one))
    assert len(set(scores)) == len(scores)  # different replies, different scores
    assert [v.score for v in batched] == pytest.approx(scores, abs=1e-5)  # padding is masked


def test_two_label_score_is_the_softmax_of_the_positive_label():
    model, tok = tiny_classifier(2)
    judge = RewardModelJudge(model, tok, positive_label=0)
    text = render_judge_text(REQUESTS[0])
    with torch.no_grad():
        logits = model(**tok([text], return_tensors="pt")).logits[0]
    expected = torch.softmax(logits, -1)[0].item()
    assert judge.score(REQUESTS[:1])[0].score == pytest.approx(expected, abs=1e-6)


def test_left_truncation_keeps_the_reply():
    model, tok = tiny_classifier(1)
    judge = RewardModelJudge(model, tok, max_length=12)
    a = JudgeRequest("A long question about many things " * 5, [], "the same reply")
    b = JudgeRequest("Another, entirely different question " * 5, [], "the same reply")
    c = JudgeRequest("A long question about many things " * 5, [], "another reply!")
    sa, sb, sc = (v.score for v in judge.score([a, b, c]))
    assert sa == pytest.approx(sb, abs=1e-6) and sa != pytest.approx(sc, abs=1e-6)


def test_a_broken_model_gives_counted_failed_verdicts():
    model, tok = tiny_classifier(1)
    with torch.no_grad():
        model.score.weight.fill_(float("nan"))  # every logit becomes NaN
    judge = RewardModelJudge(model, tok, batch_size=2)
    verdicts = judge.score(REQUESTS)
    assert [v.failed for v in verdicts] == [True, True, True]
    assert all(v.score == 0.0 and math.isnan(float(v.raw)) for v in verdicts)
    assert judge.stats == {"judge_calls": 3, "judge_failed": 3, "judge_cache_hits": 0}


def test_an_object_model_without_tokenizer_is_refused():
    model, _ = tiny_classifier(1)
    with pytest.raises(ValueError, match="needs a tokenizer"):
        RewardModelJudge(model)
