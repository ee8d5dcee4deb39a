"""A built-in model saved as a folder (a warm start's cache, an export) tokenizes exactly as
the tokenizer it was trained with: ``AutoTokenizer`` would load it as the model type's class
(``Qwen2Tokenizer``), whose own pre-tokenizer splits newlines and digits differently."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from slca_lightning.data import SyntheticTaskGenerator, builtin_suite, reference_answer
from slca_lightning.models.loading import load_model


@pytest.mark.parametrize("name", ["tiny", "suite"])
def test_a_saved_built_in_model_reloads_with_the_same_token_ids(name, tmp_path):
    model, tokenizer = load_model(name)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    _, reloaded = load_model(str(tmp_path))
    suite = builtin_suite()
    for task in SyntheticTaskGenerator(0, suite=suite).generate(6):
        text = tokenizer.apply_chat_template(
            task.messages + reference_answer(task, suite), tokenize=False
        )
        assert reloaded.apply_chat_template(task.messages + reference_answer(task, suite),
                                            tokenize=False) == text  # fmt: skip
        ids = tokenizer(text, add_special_tokens=False).input_ids
        assert reloaded(text, add_special_tokens=False).input_ids == ids
    if name == "suite":  # the trap this guards against
        auto = AutoTokenizer.from_pretrained(tmp_path)
        assert auto(text, add_special_tokens=False).input_ids != ids
