"""The built-in suite model: a tokenizer trained on the synthetic suite's own text, and a
small Qwen2 sized so that SFT gives partial competence and RL has room to climb.

The tokenizer is a byte-level BPE (every byte stays reachable) trained in about a second
on the rendered conversations of :data:`CORPUS_TASKS` synthetic tasks drawn with
:data:`CORPUS_SEED` (a seed no split uses): system prompts with the tool schemas, questions,
reference transcripts and tool results. Tool names, argument keys, cities and schema
phrases become single tokens, so a call is a few dozen tokens instead of a hundred bytes.
Digits are split one per token (``Digits(individual_digits=True)``) and the common numbers
(:data:`NUMBER_TOKENS`: 0–999, 00–09, the years 1990–2049) are whole added tokens, so a number
is written the same way in a question, a call and a tool result and copying it is one lookup. The chat
template, special and added tokens are the tiny model's (:mod:`slca_lightning.models.tiny`):
ChatML, ``<tool_call>`` / ``</tool_call>`` as added non-special tokens.

Built offline and deterministically: equal settings give equal vocabularies and, for a
seed, equal initial weights.
"""

from __future__ import annotations

import functools
from typing import Any

from slca_lightning.models.tiny import (
    ADDED_TOKENS,
    SPECIAL_TOKENS,
    build_tiny_model,
    chatml_tokenizer,
)

__all__ = [
    "CORPUS_SEED",
    "CORPUS_TASKS",
    "NUMBER_TOKENS",
    "SUITE_HIDDEN_SIZE",
    "SUITE_NUM_LAYERS",
    "SUITE_VOCAB_SIZE",
    "build_suite_model",
    "build_suite_tokenizer",
    "suite_corpus",
]

#: Seed and size of the task draw the tokenizer is trained on (no split uses this seed).
CORPUS_SEED = 987_654_321
CORPUS_TASKS = 600
#: BPE vocabulary size asked for (the corpus saturates near 1.3k merges).
SUITE_VOCAB_SIZE = 1024
#: Integers 0–999, 00–09 and the years 1990–2049 as whole (added) tokens, matched
#: longest-first, so a number is one token and a date five (``2028``, ``-``, ``06``, ``-``,
#: ``10``) in a question, a call and a tool result alike: copying a value is one attention
#: lookup per token. Measured: with them the warm start copies values after fewer steps
#: (experiments/warm_start/README.md).
WHOLE_NUMBERS = True
#: The numbers made whole tokens when :data:`WHOLE_NUMBERS` is set.
NUMBER_TOKENS = (
    [str(i) for i in range(1000)]
    + [f"0{i}" for i in range(10)]
    + [str(y) for y in range(1990, 2050)]
)
#: Model shape: Qwen2, hidden 256, 4 layers, 4 heads (2 KV heads), MLP 512, tied embeddings.
SUITE_HIDDEN_SIZE = 256
SUITE_NUM_LAYERS = 4


def _chatml(role: str, content: str) -> str:
    return f"<|im_start|>{role}\n{content}<|im_end|>\n"


def suite_corpus(n_tasks: int = CORPUS_TASKS, seed: int = CORPUS_SEED) -> list[str]:
    """ChatML-rendered conversations of ``n_tasks`` synthetic tasks with their demos."""
    from slca_lightning.data.suite import builtin_suite
    from slca_lightning.data.synthetic import SyntheticTaskGenerator, reference_answer

    suite = builtin_suite()
    out: list[str] = []
    for task in SyntheticTaskGenerator(seed, suite=suite).generate(n_tasks):
        for message in [*task.messages, *reference_answer(task, suite)]:
            if message["role"] == "tool":
                content = f"<tool_response>\n{message['content']}\n</tool_response>"
                out.append(_chatml("user", content))
            else:
                out.append(_chatml(message["role"], message["content"]))
    return out


@functools.lru_cache(maxsize=4)
def _tokenizer_json(vocab_size: int, n_tasks: int, seed: int) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[*SPECIAL_TOKENS, *ADDED_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(suite_corpus(n_tasks, seed), trainer=trainer)
    return tok.to_str()


def build_suite_tokenizer(
    vocab_size: int = SUITE_VOCAB_SIZE,
    n_tasks: int = CORPUS_TASKS,
    seed: int = CORPUS_SEED,
    whole_numbers: bool | None = None,
) -> Any:
    """A ``PreTrainedTokenizerFast`` trained on the suite's text, with the ChatML template
    (and whole-number tokens when ``whole_numbers``, default :data:`WHOLE_NUMBERS`)."""
    numbers: list[str] = []
    if WHOLE_NUMBERS if whole_numbers is None else whole_numbers:
        numbers = list(NUMBER_TOKENS)
    # the trainer made the tags whole tokens; chatml_tokenizer marks them non-special
    return chatml_tokenizer(_tokenizer_json(vocab_size, n_tasks, seed), numbers)


def build_suite_model(
    tokenizer: Any,
    hidden_size: int | None = None,
    num_layers: int | None = None,
    seed: int = 0,
) -> Any:
    """A randomly initialised Qwen2 causal LM for ``tokenizer`` (no dropout anywhere):
    :func:`~slca_lightning.models.tiny.build_tiny_model` at this size. The size defaults to
    :data:`SUITE_HIDDEN_SIZE` and :data:`SUITE_NUM_LAYERS` as they are *when called* (the
    warm start's cache key reads them too, so a sweep that sets them trains what it says)."""
    hidden = SUITE_HIDDEN_SIZE if hidden_size is None else hidden_size
    layers = SUITE_NUM_LAYERS if num_layers is None else num_layers
    return build_tiny_model(tokenizer, hidden, layers, seed)
