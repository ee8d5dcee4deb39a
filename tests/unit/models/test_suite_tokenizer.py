"""The suite tokenizer writes a number the same way in a question and in a call.

Copying an argument value from the question into a call is what the warm start has to
learn (experiments/warm_start/README.md); with the whole-number and year tokens every
integer and date argument is the same token ids on both sides, so the copy is one lookup
per token. Real tokenizer, real synthetic tasks, real reference calls.
"""

from __future__ import annotations

import re

import pytest

from slca_lightning.data import SyntheticTaskGenerator, builtin_suite
from slca_lightning.data.synthetic import tool_call_block
from slca_lightning.models import suite
from slca_lightning.models.suite import build_suite_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_suite_tokenizer()


def _pieces(tok, text: str) -> list[str]:
    return [tok.decode([i]) for i in tok.encode(text, add_special_tokens=False)]


def test_numbers_and_dates_are_whole_tokens(tok):
    assert suite.WHOLE_NUMBERS
    assert _pieces(tok, "2028-06-10") == ["2028", "-", "06", "-", "10"]
    assert _pieces(tok, " 361 days") == [" ", "361", " days"]
    assert _pieces(tok, "1999-12-31") == ["1999", "-", "12", "-", "31"]
    # beyond the whole tokens, digits stay one per token (never a merged digit string)
    assert _pieces(tok, "30000") == ["300", "00"]
    assert all(len(tok.encode(n, add_special_tokens=False)) == 1 for n in suite.NUMBER_TOKENS)
    assert _pieces(build_suite_tokenizer(whole_numbers=False), "2028") == list("2028")


def _subsequence(needle: list[int], hay: list[int]) -> bool:
    return any(hay[i : i + len(needle)] == needle for i in range(len(hay) - len(needle) + 1))


def test_every_number_and_date_argument_is_copied_as_the_same_ids(tok):
    suite_ = builtin_suite()
    checked = 0
    for task in SyntheticTaskGenerator(0, suite=suite_).generate(300):
        question = next(m["content"] for m in task.messages if m["role"] == "user")
        q_ids = tok.encode(question, add_special_tokens=False)
        for step in task.gold_calls[:1]:  # first step: its values come from the question
            c_ids = tok.encode(tool_call_block(list(step)), add_special_tokens=False)
            for call in step:
                for key, value in call.arguments.items():
                    text = str(abs(value)) if isinstance(value, int) else str(value)
                    if not re.fullmatch(r"\d+(-\d\d-\d\d)?", text) or text not in question:
                        continue
                    ids = tok.encode(text, add_special_tokens=False)
                    assert _subsequence(ids, q_ids), (task.task_id, key, text)
                    assert _subsequence(ids, c_ids), (task.task_id, key, text)
                    checked += 1
    assert checked > 200  # dates, day counts, operands, unit values


def test_the_model_size_is_read_when_the_model_is_built(monkeypatch, tok):
    """A sweep sets ``suite.SUITE_HIDDEN_SIZE`` / ``SUITE_NUM_LAYERS`` and gets that size (the
    defaults were once bound at import, so every size variant trained the default model)."""
    from slca_lightning.models import suite
    from slca_lightning.models.loading import load_model

    monkeypatch.setattr(suite, "SUITE_HIDDEN_SIZE", 128)
    monkeypatch.setattr(suite, "SUITE_NUM_LAYERS", 2)
    model, _ = load_model("suite")
    assert (model.config.hidden_size, model.config.num_hidden_layers) == (128, 2)
    model = suite.build_suite_model(tok, hidden_size=64, num_layers=1)
    assert (model.config.hidden_size, model.config.num_hidden_layers) == (64, 1)
