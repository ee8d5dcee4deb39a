"""Pooled demonstrations: the ``suite-pooled-sft`` warm start's data and cache key.

Half of its demonstrations write calls' ``arguments`` as a JSON string (OpenAI's log
format); METHOD's parser must reject those calls, the rest must equal the clean demos, and
the clean warm starts must keep their cache folders (their keys are pinned here).
"""

from __future__ import annotations

import hashlib
import json

import pytest

from slca_lightning.calls.parsing import ARGUMENTS_NOT_DICT, parse_tool_calls
from slca_lightning.data import SyntheticTaskGenerator, builtin_suite, reference_answer
from slca_lightning.models import shipped
from slca_lightning.models.names import WARM_START_BASES, warm_start_base
from slca_lightning.models.policy import load_policy
from slca_lightning.models.sft import SFTDataModule
from slca_lightning.models.warm_start import WARM_STARTS, warm_start_key

STRING_MARK = '"arguments": "{'


def _digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def test_string_argument_demos_are_rejected_but_hold_the_gold_calls():
    suite = builtin_suite()
    tasks = [t for t in SyntheticTaskGenerator(0).generate(40) if t.needs_tools]
    kinds = {t.metadata["kind"] for t in tasks}
    assert {"single", "parallel", "multistep"} <= kinds
    for task in tasks:
        clean = reference_answer(task, suite)
        pooled = reference_answer(task, suite, string_arguments=True)
        assert [m["role"] for m in pooled] == [m["role"] for m in clean]
        assert pooled[-1] == clean[-1]  # same tool results, same final reply
        turns = [m["content"] for m in pooled if m["role"] == "assistant"][:-1]
        for step, text in zip(task.gold_calls, turns, strict=True):
            strict = parse_tool_calls(text, task.allowed_tools)
            errors = [e.error for b in strict.blocks for e in b.entries]
            assert errors == [ARGUMENTS_NOT_DICT] * len(step), text
            lenient = parse_tool_calls(text, task.allowed_tools, accept_string_arguments=True)
            assert lenient.calls == list(step)


def _texts(data: SFTDataModule) -> list[str]:
    data.setup()
    return [data.tokenizer.decode(ids) for ids, _ in data.examples]


def test_sft_data_pools_the_given_fraction_per_task_deterministically():
    _, tok = load_policy("tiny")
    make = lambda f: SFTDataModule(tok, n_tasks=60, string_arguments_fraction=f)  # noqa: E731
    clean, pooled, again = _texts(make(0.0)), _texts(make(0.5)), _texts(make(0.5))
    assert not any(STRING_MARK in t for t in clean)
    assert pooled == again
    marked = [STRING_MARK in t for t in pooled]
    needs = [t.needs_tools for t in SyntheticTaskGenerator(0).generate(60)]
    assert 0.3 < sum(marked) / sum(needs) < 0.7
    assert all(clean[i] == pooled[i] for i, m in enumerate(marked) if not m)
    assert all(STRING_MARK not in _texts(make(1.0))[i] for i, n in enumerate(needs) if not n)


def test_clean_warm_starts_keep_their_cache_folders():
    """Pinned digests: a change here moves users' caches and needs a CHANGELOG line."""
    assert _digest(warm_start_key("tiny")) == "603e4d91ae4d0ff0"
    assert _digest(warm_start_key("suite")) == "a20c0889aa809d61"
    assert _digest(warm_start_key("suite-pooled")) == "08ef4e425c608396"
    pooled, clean = warm_start_key("suite-pooled"), warm_start_key("suite")
    assert pooled.pop("string_arguments_fraction") == 0.5
    # the pooled recipe takes the clean one's step; otherwise the same tasks, recipe, model
    assert pooled["selection"].pop("step_of") == "suite-sft"
    assert pooled["selection"].pop("step") == 1000 == shipped.manifest("suite-sft")["step"]
    assert pooled == clean
    assert set(WARM_STARTS) == set(WARM_START_BASES)
    assert [warm_start_base(n) for n in ("suite-sft", "suite-pooled-sft", "tiny-sft")] == [
        "suite",
        "suite-pooled",
        "tiny",
    ]
    assert [warm_start_base(n) for n in ("suite", "big-sft", "models/x-sft", "-sft")] == [None] * 4
    with pytest.raises(ValueError, match="unknown built-in model 'big'"):
        warm_start_key("big")
