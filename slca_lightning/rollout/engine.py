"""The rollout-engine interface: token ids in, sampled token ids and log-probs out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from torch import nn

#: Stop strings of an assistant turn per ``turn_end`` mode (see ``RolloutDataModule``):
#: ``"tool_call"`` (the paper) ends a turn at its first ``</tool_call>``; ``"eos"`` ends it
#: at the model's end of turn, so a turn may hold several blocks (one per parallel call),
#: and stops at a ``<tool_response>`` the model starts writing itself.
TURN_END_STOPS: dict[str, list[str]] = {"tool_call": ["</tool_call>"], "eos": ["<tool_response>"]}


@dataclass
class SamplingConfig:
    """How one assistant turn is sampled.

    Attributes:
        max_new_tokens: cap on sampled tokens for the turn.
        temperature: 0 = greedy. Log-probs are those of the temperature-scaled
            distribution (what the trainer recomputes), before top-p truncation.
        top_p: nucleus sampling.
        stop_strings: generation of a turn stops after any of these (the stop string is
            kept); ``</tool_call>`` (the paper) or ``<tool_response>`` (see
            :data:`TURN_END_STOPS`), so the model never writes its own tool results.
        seed: seeds the sampler for this call (None = the global RNG stream).
    """

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    stop_strings: list[str] = field(default_factory=lambda: ["</tool_call>"])
    seed: int | None = None


@dataclass
class Generation:
    """One sampled continuation.

    Attributes:
        token_ids: sampled ids, up to and including the EOS or the stop string's tokens.
        logprobs: float32 log-prob of each sampled id (same length).
        finish_reason: ``"stop"`` (EOS or stop string) or ``"length"`` (hit the cap).
        stop_reason: ``"eos"``, the stop string that matched, or None.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    stop_reason: str | None = None


class RolloutEngine(ABC):
    """Batched sampler with per-token log-probs (HF in-process, vLLM, ...)."""

    policy_version: int = 0

    @abstractmethod
    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Generation]:
        """Sample one continuation per prompt (prompts are token-id lists)."""

    def sync_weights(self, model: nn.Module) -> None:  # noqa: B027 - optional hook
        """Load ``model``'s current weights; a no-op for engines that share the policy."""
