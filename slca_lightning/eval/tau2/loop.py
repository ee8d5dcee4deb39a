"""The τ² conversation loop: agent ↔ simulated user, tools run on the episode's database.

A conversation opens with τ²'s fixed agent greeting; then the user writes, and the agent
answers with either a message to the user or tool calls, written in the model's tool-call
format (a :class:`~slca_lightning.calls.formats.ToolCallFormat`, the run's
``data.tool_format``; default hermes ``<tool_call>`` blocks): each turn is rewritten as its
canonical hermes text, which :func:`~slca_lightning.calls.parsing.parse_tool_calls` reads
and the scorer sees, while the agent's own history keeps the turn as written. Calls run on
the episode's :class:`~slca_lightning.eval.tau2.env.Tau2Environment`; every unparseable
block, unknown tool or bad argument becomes an error observation, and the agent goes on. A
message without a call goes to the user, whose reply may end the conversation with a stop
token. Caps:
``max_agent_turns`` agent turns, ``max_calls_per_turn`` calls per turn. All running
conversations step together, so the policy generates one batch per turn.

Agents: :class:`PolicyAgent` (a causal LM through :class:`~slca_lightning.rollout.hf_engine.
HFEngine`, greedy by default) and :class:`OracleAgent` (replays the task's gold actions, one
call per turn, then says the required information: the evaluator's self-check).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from slca_lightning.calls.formats import ToolCallFormat
from slca_lightning.calls.parsing import parse_tool_calls
from slca_lightning.data.prompt import render_hermes_system_prompt
from slca_lightning.eval.tau2.env import Tau2Environment, Tau2Task
from slca_lightning.eval.tau2.scoring import user_facing_text
from slca_lightning.eval.tau2.users import GREETING, OUT_OF_SCOPE, STOP_TOKENS, TRANSFER
from slca_lightning.types import ToolCall, ToolResult

__all__ = ["Conversation", "OracleAgent", "PolicyAgent", "Tau2Agent", "run_conversations"]

_AGENT_GUIDE = (
    "You are a customer-service agent. Help the user within the policy below. Each turn, do "
    "exactly one of two things: write a message to the user, or call tools; never both. "
    "Follow the policy at all times, and write tool arguments as valid JSON."
)


@dataclass
class Conversation:
    """One τ² episode in progress (and, once finished, its record).

    Attributes:
        task, trial: what is being attempted.
        env: the episode's database and tools.
        messages: the agent's view (``user`` / ``assistant`` / ``tool``), greeting first.
        user_view: the user's view (agent messages as ``assistant``, tool calls hidden).
        assistant_texts: every agent turn's text in canonical hermes form (what the scorer
            reads; the turn as written when the format is hermes).
        termination: ``running``, ``user_stop``, ``transfer``, ``out_of_scope``,
            ``max_turns`` or ``context`` (the prompt outgrew the agent's context).
        counts: ``agent_turns``, ``tool_calls`` (executed), ``invalid_calls`` (never
            executed: bad blocks, over-cap), ``tool_errors`` (error observations).
    """

    task: Tau2Task
    trial: int
    env: Tau2Environment
    messages: list[dict[str, str]] = field(default_factory=list)
    user_view: list[dict[str, str]] = field(default_factory=list)
    assistant_texts: list[str] = field(default_factory=list)
    termination: str = "running"
    counts: Counter = field(default_factory=Counter)
    waiting_user: bool = True

    def transcript(self) -> str:
        """The conversation as plain text (for a judge)."""
        return "\n".join(f"{m['role']}: {m['content']}" for m in self.messages)


class Tau2Agent(ABC):
    """Writes the agent's next turn for each running conversation."""

    @abstractmethod
    def act(self, convs: Sequence[Conversation]) -> list[str | None]:
        """One reply text per conversation; None when it cannot answer (context full)."""


def _call_text(name: str, arguments: dict[str, Any]) -> str:
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{payload}\n</tool_call>"


class OracleAgent(Tau2Agent):
    """Replays a task's gold actions (one call per turn), then tells the user the task's
    ``communicate_info`` and asks whether anything else is needed.

    Args:
        actions_for: the actions to replay for a task (default: its gold actions); tests
            pass a corrupted list to check that the scorer fails it.
        say_info: include the required information in the final message.
    """

    def __init__(
        self,
        actions_for: Callable[[Tau2Task], list[dict[str, Any]]] | None = None,
        say_info: bool = True,
    ) -> None:
        self.actions_for = actions_for or (lambda task: task.actions)
        self.say_info = say_info

    def act(self, convs: Sequence[Conversation]) -> list[str | None]:
        out: list[str | None] = []
        for conv in convs:
            actions = self.actions_for(conv.task)
            done = conv.counts["oracle_steps"]
            if done < len(actions):
                conv.counts["oracle_steps"] += 1
                out.append(_call_text(actions[done]["name"], actions[done]["arguments"]))
                continue
            info = conv.task.communicate_info if self.say_info else []
            said = f"Here is what you asked about: {', '.join(info)}. " if info else "Done. "
            out.append(said + "Is there anything else I can help you with?")
        return out


class PolicyAgent(Tau2Agent):
    """A causal LM playing the agent: system prompt (guide + domain policy) and the
    domain's tools through the chat template, one greedy reply per turn.

    Args:
        model, tokenizer: the policy.
        tools: OpenAI tool schemas shown to the model.
        policy: the domain policy text (``""``: the guide alone, for tiny models).
        max_new_tokens: cap of one turn.
        tool_prompt: ``"template"`` (``apply_chat_template(tools=...)``, hermes system prompt
            when the template ignores tools) or ``"system"`` (always the hermes prompt).
        max_context_tokens: a longer prompt ends the conversation (``context``); None: no cap.
        max_tool_response_tokens: tool observations are middle-cut to this length.
        temperature: 0 = greedy.
        batch_size: prompts per ``generate`` call.
        seed: sampling seed (with temperature > 0).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        tools: list[dict[str, Any]],
        policy: str = "",
        max_new_tokens: int = 512,
        tool_prompt: Literal["template", "system"] = "template",
        max_context_tokens: int | None = None,
        max_tool_response_tokens: int = 2048,
        temperature: float = 0.0,
        batch_size: int = 8,
        seed: int = 0,
    ) -> None:
        from slca_lightning.rollout.engine import SamplingConfig
        from slca_lightning.rollout.hf_engine import HFEngine

        if tool_prompt not in ("template", "system"):
            raise ValueError(f"tool_prompt must be 'template' or 'system', got {tool_prompt!r}")
        self.tokenizer, self.tools, self.tool_prompt = tokenizer, tools, tool_prompt
        self.system = f"{_AGENT_GUIDE}\n\n<policy>\n{policy}\n</policy>" if policy else _AGENT_GUIDE
        self.max_context_tokens = max_context_tokens
        self.max_tool_response_tokens = max_tool_response_tokens
        self.engine = HFEngine(model, tokenizer, max_batch_size=batch_size)
        self.sampling = SamplingConfig(max_new_tokens, temperature, seed=seed)
        self.stats: Counter = Counter()

    def render(self, conv: Conversation) -> str:
        """The prompt of the agent's next turn, ending with the assistant header."""
        from slca_lightning.rollout.agent_loop import middle_cut

        msgs = []
        for m in conv.messages:
            if m["role"] == "tool":
                text, _ = middle_cut(self.tokenizer, m["content"], self.max_tool_response_tokens)
                m = {"role": "tool", "content": text}
            msgs.append(m)
        kw = dict(tokenize=False, add_generation_prompt=True)
        first = self.tools[0]["function"]["name"] if self.tools else ""
        if self.tool_prompt == "template":
            sys_msg = {"role": "system", "content": self.system}
            text = self.tokenizer.apply_chat_template([sys_msg, *msgs], tools=self.tools, **kw)
            if first in text:
                return text
            self.stats["tool_prompt_fallback"] += 1
        content = render_hermes_system_prompt(self.tools, self.system)
        return self.tokenizer.apply_chat_template(
            [{"role": "system", "content": content}, *msgs], **kw
        )

    def act(self, convs: Sequence[Conversation]) -> list[str | None]:
        ids = [self.tokenizer.encode(self.render(c), add_special_tokens=False) for c in convs]
        cap = self.max_context_tokens
        keep = [i for i, p in enumerate(ids) if cap is None or len(p) <= cap]
        self.stats["context_full"] += len(ids) - len(keep)
        gens = self.engine.generate([ids[i] for i in keep], self.sampling)
        out: list[str | None] = [None] * len(convs)
        eos = self.tokenizer.eos_token or ""
        for i, gen in zip(keep, gens, strict=True):
            text = self.tokenizer.decode(gen.token_ids, skip_special_tokens=False)
            out[i] = text[: -len(eos)] if eos and text.endswith(eos) else text
        return out


def _turn_items(text: str, max_calls: int) -> tuple[list[ToolCall | ToolResult], bool]:
    """Calls to run, or ready error observations, for one agent turn; False: no call tag."""
    parsed = parse_tool_calls(text)
    if parsed.n_open == 0 and parsed.n_close == 0:
        return [], False
    items: list[ToolCall | ToolResult] = []
    for block in parsed.blocks:
        if not block.entries:
            reason = block.error or "invalid"
            content = f"Error: invalid tool call ({reason}): {block.text.strip()[:200]}"
            items.append(ToolResult(ToolCall("", {}), content, True, reason))
        for entry in block.entries:
            if entry.call is not None:
                items.append(entry.call)
            else:
                content = f"Error: invalid tool call ({entry.error}): {str(entry.raw)[:200]}"
                items.append(ToolResult(ToolCall("", {}), content, True, entry.error))
    unmatched = parsed.denominator - len(parsed.blocks)
    for _ in range(unmatched):
        content = "Error: invalid tool call (unbalanced <tool_call> tags)."
        items.append(ToolResult(ToolCall("", {}), content, True, "unbalanced_tags"))
    calls = [i for i, it in enumerate(items) if isinstance(it, ToolCall)]
    for i in calls[max_calls:]:
        content = f"Error: at most {max_calls} calls per turn."
        items[i] = ToolResult(items[i], content, True, "too_many_calls")
    return items, True


def _agent_step(
    conv: Conversation, text: str | None, max_calls: int, tool_format: ToolCallFormat | None
) -> None:
    conv.counts["agent_turns"] += 1
    if text is None:
        conv.termination = "context"
        return
    canonical = text if tool_format is None else tool_format.canonical(text).text
    conv.assistant_texts.append(canonical)
    conv.messages.append({"role": "assistant", "content": text})
    items, is_tool_turn = _turn_items(canonical, max_calls)
    if not is_tool_turn:
        conv.user_view.append({"role": "assistant", "content": user_facing_text(canonical)})
        conv.waiting_user = True
        return
    for item in items:
        if isinstance(item, ToolCall):
            result = conv.env.execute(item)
            conv.counts["tool_calls"] += 1
        else:
            result = item
            conv.counts["invalid_calls"] += 1
        conv.counts["tool_errors"] += int(result.is_error)
        conv.messages.append({"role": "tool", "content": result.content})


def run_conversations(
    agent: Tau2Agent,
    user: Any,
    convs: list[Conversation],
    max_agent_turns: int = 30,
    max_calls_per_turn: int = 20,
    tool_format: ToolCallFormat | None = None,
    on_end: Callable[[Conversation], None] | None = None,
) -> list[Conversation]:
    """Drive every conversation to its end (see the module docstring); returns them.

    ``tool_format``: how the agent writes its calls (None: hermes tags). ``on_end`` is
    called with each conversation once it has ended (e.g. to report progress)."""
    ended: set[int] = set()

    def report() -> None:
        for conv in convs:
            if conv.termination != "running" and id(conv) not in ended:
                ended.add(id(conv))
                if on_end is not None:
                    on_end(conv)

    for conv in convs:
        conv.messages = [{"role": "assistant", "content": GREETING}]
        conv.user_view = [{"role": "assistant", "content": GREETING}]
        conv.waiting_user = True
    while True:
        asking = [c for c in convs if c.termination == "running" and c.waiting_user]
        replies = user.respond_batch([(c.task, c.user_view) for c in asking]) if asking else []
        for conv, reply in zip(asking, replies, strict=True):
            stop = next((t for t in STOP_TOKENS if t in reply), None)
            if stop is not None:
                conv.termination = {TRANSFER: "transfer", OUT_OF_SCOPE: "out_of_scope"}.get(
                    stop, "user_stop"
                )
                continue
            conv.user_view.append({"role": "user", "content": reply})
            conv.messages.append({"role": "user", "content": reply})
            conv.waiting_user = False
        report()
        running = [c for c in convs if c.termination == "running"]
        if not running:
            return convs
        for conv, text in zip(running, agent.act(running), strict=True):
            _agent_step(conv, text, max_calls_per_turn, tool_format)
            if conv.termination == "running" and conv.counts["agent_turns"] >= max_agent_turns:
                conv.termination = "max_turns"
        report()
