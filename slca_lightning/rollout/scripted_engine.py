"""A scripted rollout engine: returns pre-written assistant turns as real token ids.

Used by tests (and CPU demos) where the *environment* side of the loop is under test and the
policy must behave in a known way. It encodes each scripted turn with the real tokenizer,
applies the same stop rules as a real engine (stop strings, EOS, the token cap), and reports
a constant log-prob per token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slca_lightning.rollout.engine import Generation, RolloutEngine, SamplingConfig

#: ``script(context_text, turn_index) -> next assistant text``.
Script = Callable[[str, int], str]


class ScriptedEngine(RolloutEngine):
    """Replies with ``script(prompt_text, turn_index)`` for every prompt.

    Args:
        tokenizer: the tokenizer whose ids the episode carries.
        script: maps the decoded context and the 0-based assistant-turn index to the next
            assistant text; append the tokenizer's EOS string to end the turn with EOS.
        logprob: the log-prob reported for each scripted token.
    """

    def __init__(self, tokenizer: Any, script: Script, logprob: float = -1.0):
        self.tokenizer = tokenizer
        self.script = script
        self.logprob = logprob
        self.policy_version = 0
        self.calls = 0

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Generation]:
        self.calls += 1
        out = []
        header = "<|im_start|>assistant"
        for ids in prompts:
            context = self.tokenizer.decode(ids, skip_special_tokens=False)
            turn = max(context.count(header) - 1, 0)
            text = self.script(context, turn)
            why = None
            hits = [(text.find(s) + len(s), s) for s in sampling.stop_strings if s in text]
            if hits:  # the earliest completed stop string, as a real engine sees them
                end, why = min(hits)
                text = text[:end]
            eos = self.tokenizer.eos_token
            if why is None and eos and eos in text:
                text, why = text[: text.index(eos) + len(eos)], "eos"
            token_ids = self.tokenizer.encode(text, add_special_tokens=False)
            if len(token_ids) > sampling.max_new_tokens:
                token_ids, why = token_ids[: sampling.max_new_tokens], None
            out.append(
                Generation(
                    token_ids=token_ids,
                    logprobs=[self.logprob] * len(token_ids),
                    finish_reason="stop" if why else "length",
                    stop_reason=why,
                )
            )
        return out
