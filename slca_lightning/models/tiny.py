"""Tiny offline assets: a byte-level BPE tokenizer with a ChatML template and a tiny Qwen2.

Nothing here downloads anything. The tokenizer is trained in a second on a built-in corpus;
``<tool_call>``/``</tool_call>``, ``<tool_response>``/``</tool_response>`` and the think tags
are *added, non-special* tokens (so ``skip_special_tokens`` keeps them), while
``<|im_start|>``, ``<|im_end|>`` and ``<|endoftext|>`` are special.
"""

from __future__ import annotations

import functools
from typing import Any

from slca_lightning.models.chat import HERMES_CHATML_TEMPLATE

#: The built-in tokenizers' template: ChatML with hermes tool rendering.
CHAT_TEMPLATE = HERMES_CHATML_TEMPLATE

ADDED_TOKENS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

_CORPUS = [
    'Let me check the weather. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "The weather in Paris is 18 degrees and sunny, with light wind from the west.",
    '<tool_response>\n{"temperature": 18, "condition": "sunny"}\n</tool_response>',
    "<think>The user wants two numbers added.</think> The sum of 12 and 30 is 42.",
    "You are a helpful assistant that can call tools to answer questions accurately.",
    "Convert 100 USD to EUR, then tell me the exchange rate and the converted amount.",
    "Ünïcödé: café, naïve, 東京, emoji 🙂 — dashes, quotes “like this”.",
    "0123456789 {}[]():,;.\"'!?+-*/=<>_@#$%^&|~` \n\t",
]


@functools.lru_cache(maxsize=4)
def _tokenizer_json(vocab_size: int) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 20, trainer=trainer)
    return tok.to_str()


def chatml_tokenizer(tokenizer_json: str, extra_tokens: list[str] = ()) -> Any:
    """A ``PreTrainedTokenizerFast`` of a serialised ``tokenizers`` BPE with the ChatML
    template: ``<|im_end|>`` ends a turn, the tags of :data:`ADDED_TOKENS` (and
    ``extra_tokens``) are added non-special tokens, so decoding keeps them."""
    from tokenizers import AddedToken, Tokenizer
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(tokenizer_json),
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    for tokens in (ADDED_TOKENS, list(extra_tokens)):
        if tokens:
            tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in tokens])
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_tiny_tokenizer(vocab_size: int = 512) -> Any:
    """A ``PreTrainedTokenizerFast`` with a ChatML chat template, built offline."""
    return chatml_tokenizer(_tokenizer_json(vocab_size))


def build_tiny_model(tokenizer: Any, hidden_size: int = 64, num_layers: int = 2, seed: int = 0):
    """A randomly initialised small Qwen2 causal LM sized to ``tokenizer`` (4 heads, 2 KV
    heads, MLP 2 × hidden, tied embeddings, no dropout); the suite model uses it too."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)
