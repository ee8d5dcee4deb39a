"""A chat backend over an in-process rollout engine: a local model as simulator or judge."""

from __future__ import annotations

from typing import Any

from slca_lightning.chat_backends.base import ChatBackend
from slca_lightning.rollout.engine import RolloutEngine, SamplingConfig
from slca_lightning.rollout.hf_engine import HFEngine


class EngineChatBackend(ChatBackend):
    """Answers chats by rendering them with the model's chat template and sampling with an
    engine: a frozen local model (HF folder, or ``"tiny"`` in tests) plays the tool server
    (SGLS) or the judge without any server.

    Args:
        model: ``"tiny"``, ``"tiny-sft"`` or a local HF folder, loaded on first use.
        engine: an engine to use instead (its tokenizer must be given too).
        tokenizer: the engine's tokenizer.
        max_tokens: default cap on the reply.
        batch_size: conversations per engine call in :meth:`chat_batch`.
    """

    def __init__(
        self,
        model: str = "tiny",
        engine: RolloutEngine | None = None,
        tokenizer: Any = None,
        max_tokens: int = 256,
        batch_size: int = 16,
    ) -> None:
        self.model_name = model
        self.engine, self.tokenizer = engine, tokenizer
        self.max_tokens, self.batch_size = max_tokens, batch_size

    def _ready(self) -> None:
        if self.engine is None:
            from slca_lightning.models.policy import load_policy

            net, self.tokenizer = load_policy(self.model_name)
            net.eval().requires_grad_(False)
            self.engine = HFEngine(net, self.tokenizer)

    def _prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        return self.tokenizer.encode(text, add_special_tokens=False)

    def chat(self, messages, *, temperature=0.0, max_tokens=None, seed=None) -> str:
        return self.chat_batch(
            [messages], temperature=temperature, max_tokens=max_tokens, seed=seed
        )[0]

    def chat_batch(self, requests, **kw) -> list[str]:
        self._ready()
        sampling = SamplingConfig(
            max_new_tokens=kw.get("max_tokens") or self.max_tokens,
            temperature=kw.get("temperature", 0.0),
            stop_strings=[],
            seed=kw.get("seed"),
        )
        out: list[str] = []
        for start in range(0, len(requests), self.batch_size):
            prompts = [self._prompt(m) for m in requests[start : start + self.batch_size]]
            for gen in self.engine.generate(prompts, sampling):
                out.append(self.tokenizer.decode(gen.token_ids, skip_special_tokens=True))
        return out
