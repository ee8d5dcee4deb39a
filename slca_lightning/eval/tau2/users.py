"""User simulators for τ² conversations: a deterministic scripted user and an LLM user.

Both see the conversation from the user's side (``{"role": "assistant"}`` = the agent,
``{"role": "user"}`` = the simulated user) and end it by writing a stop token:
``###STOP###`` (goal reached or impossible), ``###TRANSFER###`` (handed to a human) or
``###OUT-OF-SCOPE###`` (the scenario does not say how to go on), τ²'s convention.

- :class:`ScriptedUser`: no model; opens with the scenario's reason for calling, answers a
  request with the instruction sentences that share its key words (identity, ids, payment,
  address…), says yes to a confirmation question, and stops when the agent signals the end
  (``anything else``, a goodbye, a transfer) or after ``max_turns`` messages. For CPU runs
  and tests: deterministic, cheap, not a negotiator.
- :class:`LLMUser`: any :class:`~slca_lightning.chat_backends.base.ChatBackend` playing the
  customer from the task's scenario, with τ²'s user guidelines in our own words.
"""

from __future__ import annotations

import logging
import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from typing import Any

from slca_lightning.eval.tau2.env import Tau2Task

__all__ = ["OUT_OF_SCOPE", "STOP", "STOP_TOKENS", "TRANSFER", "LLMUser", "ScriptedUser"]

log = logging.getLogger(__name__)

STOP, TRANSFER, OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"
STOP_TOKENS = (STOP, TRANSFER, OUT_OF_SCOPE)
GREETING = "Hi! How can I help you today?"


class UserSimulator(ABC):
    """Writes the simulated user's next message of a τ² conversation."""

    stats: Counter

    @abstractmethod
    def respond(self, task: Tau2Task, history: list[dict[str, str]]) -> str:
        """The user's next message; ``history`` is agent/user text so far (user's view)."""

    def respond_batch(self, items: Sequence[tuple[Tau2Task, list[dict[str, str]]]]) -> list[str]:
        """One reply per conversation (default: one at a time)."""
        return [self.respond(task, history) for task, history in items]


_SWAPS = [
    (r"\byou are\b", "I am"),
    (r"\byou were\b", "I was"),
    (r"\byou're\b", "I'm"),
    (r"\byou've\b", "I've"),
    (r"\byou'd\b", "I'd"),
    (r"\byourself\b", "myself"),
    (r"\byours\b", "mine"),
    (r"\byour\b", "my"),
    (r"(^|[.!?;:]\s+|\b(?:if|when|and|but|that|because|so|then|unless)\s+)you\b", r"\1I"),
    (r"\byou\b", "me"),
]
_STOPWORDS = frozenset(
    re.findall(
        r"\w+",
        "a an the and or but if of to in on for with your you my me i is are be can could "
        "would please provide tell give share know need may what which that this it do does "
        "have has help let us we our so also just like want there here any some",
    )
)
_END = re.compile(
    r"anything else|is there (anything|something)|have a (great|nice|good|wonderful) "
    r"(day|trip|flight)|goodbye|good bye|all set",
    re.I,
)
_TRANSFER = re.compile(r"transfer(red|ring)? (you )?to (a )?human", re.I)
_CONFIRM = re.compile(
    r"confirm|proceed|shall i|should i|would you like me to|do you want me to|yes/no|"
    r"\(yes\)|yes or no|go ahead",
    re.I,
)
_NOT_SURE = "I'm not sure about that."


def first_person(text: str) -> str:
    """Rewrite second-person scenario text (``You are Emma``) as the user speaking."""
    out = text
    for pattern, repl in _SWAPS:
        out = re.sub(pattern, repl, out, flags=re.I)
    out = re.sub(r"(^|[.!?]\s+)([a-z])", lambda m: m.group(1) + m.group(2).upper(), out)
    return out.strip()


def _sentences(text: str) -> list[str]:
    parts = re.split(r"(?<=[.!?])\s+|\n+", text or "")
    return [p.strip() for p in parts if len(p.strip()) > 2]


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9#_]+", text.lower()) if w not in _STOPWORDS}


class ScriptedUser(UserSimulator):
    """A deterministic user built from the task's instructions (see module docstring).

    Args:
        max_turns: user messages before it stops regardless (the opening included).
    """

    def __init__(self, max_turns: int = 10) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.max_turns = max_turns
        self.stats: Counter = Counter()

    def facts(self, task: Tau2Task) -> list[str]:
        """The sentences it may reveal, known info first, in first person."""
        ins = task.instructions
        text = [ins["known_info"], ins["reason_for_call"], ins["task_instructions"]]
        return [first_person(s) for chunk in text for s in _sentences(chunk)]

    def respond(self, task: Tau2Task, history: list[dict[str, str]]) -> str:
        said = [m["content"] for m in history if m["role"] == "user"]
        if not said:
            return first_person(task.instructions["reason_for_call"]) or "Hi, I need help."
        agent = next((m["content"] for m in reversed(history) if m["role"] == "assistant"), "")
        if len(said) >= self.max_turns:
            self.stats["stop/max_turns"] += 1
            return STOP
        if _TRANSFER.search(agent):
            return TRANSFER
        if _END.search(agent):
            return STOP
        asked = _words(agent)
        told = " ".join(said)
        fresh = [f for f in self.facts(task) if f not in told]
        hits = [f for f in fresh if _words(f) & asked]
        if hits:
            return " ".join(hits[:2])
        if _CONFIRM.search(agent):
            return "Yes, please go ahead."
        if said[-1] == _NOT_SURE:  # twice nothing to add: give up
            return STOP
        return _NOT_SURE


_USER_GUIDE = (
    "You are role-playing a customer who has contacted a {domain} customer-service agent. "
    "Write only the customer's next message: short, natural, one step at a time. "
    "Rely only on the scenario below; never invent ids, names, numbers or facts it does not "
    "give. If the agent asks for something the scenario lacks, say you do not know or do not "
    "have it. Share details when the agent asks for them rather than all at once. Follow the "
    "scenario's instructions about how to behave and what to accept or refuse. "
    "When your request is fully handled, or it clearly cannot be, reply with {stop} and "
    "nothing else. If you are transferred to a human agent, reply {transfer}. If the scenario "
    "gives you no way to continue, reply {oos}.\n\n<scenario>\n{scenario}\n</scenario>"
)


class LLMUser(UserSimulator):
    """A user simulated by a chat model following the task's scenario (τ² user prompt,
    paraphrased). Backend errors end the conversation with ``###STOP###`` and are counted
    in ``stats["user_errors"]``.

    Args:
        backend: any ChatBackend (OpenAI-compatible server, in-process engine, a function).
        temperature: sampling temperature of the user (τ² uses 0 by default).
        max_tokens: cap of one user message.
        max_turns: user messages before it is stopped.
    """

    def __init__(
        self, backend: Any, temperature: float = 0.0, max_tokens: int = 256, max_turns: int = 20
    ):
        self.backend, self.temperature, self.max_tokens = backend, temperature, max_tokens
        self.max_turns = max_turns
        self.stats: Counter = Counter()

    def system_prompt(self, task: Tau2Task) -> str:
        ins = task.instructions
        labels = (
            ("Why you are calling", "reason_for_call"),
            ("What you know", "known_info"),
            ("What you do not know", "unknown_info"),
            ("How to behave", "task_instructions"),
        )
        scenario = "\n".join(f"{name}: {ins[k]}" for name, k in labels if ins[k])
        return _USER_GUIDE.format(
            domain=task.domain, stop=STOP, transfer=TRANSFER, oos=OUT_OF_SCOPE, scenario=scenario
        )

    def _messages(self, task: Tau2Task, history: list[dict[str, str]]) -> list[dict[str, str]]:
        flip = {"assistant": "user", "user": "assistant"}  # the model plays the user
        turns = [{"role": flip[m["role"]], "content": m["content"]} for m in history]
        return [{"role": "system", "content": self.system_prompt(task)}, *turns]

    def respond(self, task: Tau2Task, history: list[dict[str, str]]) -> str:
        return self.respond_batch([(task, history)])[0]

    def respond_batch(self, items: Sequence[tuple[Tau2Task, list[dict[str, str]]]]) -> list[str]:
        out: list[str | None] = [None] * len(items)
        ask = []
        for i, (_task, history) in enumerate(items):
            if sum(m["role"] == "user" for m in history) >= self.max_turns:
                self.stats["stop/max_turns"] += 1
                out[i] = STOP
            else:
                ask.append(i)
        if ask:
            requests = [self._messages(*items[i]) for i in ask]
            kw = {"temperature": self.temperature, "max_tokens": self.max_tokens}
            try:
                replies = self.backend.chat_batch(requests, **kw)
            except Exception as exc:  # one failure: retry one by one, count what fails
                log.warning("user simulator batch failed (%s); retrying one by one", exc)
                replies = []
                for req in requests:
                    try:
                        replies.append(self.backend.chat(req, **kw))
                    except Exception:
                        self.stats["user_errors"] += 1
                        replies.append(STOP)
            for i, reply in zip(ask, replies, strict=True):
                out[i] = (reply or "").strip() or STOP
        return [o if o is not None else STOP for o in out]
