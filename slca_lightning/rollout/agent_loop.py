"""Multi-turn episodes, token-in / token-out (METHOD §2).

Each episode is built from ids only: the prompt is rendered once with the chat template;
then, turn by turn, the engine's *sampled* ids are appended with ``assistant_mask = 1`` and
the ids of the environment's reply (the end-of-turn glue, the tool responses and the next
assistant header) with ``assistant_mask = 0``. Decoded text is used to parse calls and to
render the glue, never to re-tokenise what the model sampled.

All active episodes of a batch are generated together at every turn; all their calls go to
the simulator in one ``simulate_batch``. A turn that opens a ``<tool_call>`` is a tool turn:
valid calls are executed, and every invalid block or object becomes an error observation
(never an exception), so the model sees what was wrong. A turn without one ends the
episode. Caps: ``max_turns`` assistant turns, ``max_calls_per_turn`` calls per turn (the
rest get an error observation), ``max_response_tokens`` response tokens (sampled and
injected), and tool responses longer than ``max_tool_response_tokens`` are cut in the
middle. A turn that hits its token cap ends the episode with ``finish_reason="length"``
and no observation; if it had opened a ``<tool_call>``, that call is not executed and is
counted in ``stats["cut_tool_calls"]``. An empty turn (no tokens, or nothing but
whitespace once its end-of-turn token is removed) has no call, so it ends the episode with
an empty reply; it is counted in ``stats["empty_generations"]``.

``render_check`` re-renders the whole conversation at the end of each episode and checks
that the decoded episode ids are a prefix of it; a chat template that rewrites earlier turns
(e.g. strips past reasoning) is caught here: ``"strict"`` raises, ``"warn"`` logs and counts,
``"off"`` skips the check.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import replace
from typing import Any, Literal

from slca_lightning.calls.env_errors import env_error_json, report_env_error
from slca_lightning.calls.formats import HermesFormat, ToolCallFormat
from slca_lightning.calls.sanitize import clean_text
from slca_lightning.config.checks import check_args
from slca_lightning.rollout.engine import RolloutEngine, SamplingConfig
from slca_lightning.rollout.observations import (  # noqa: F401  (names importable from here)
    MAX_CHARS_PER_TOKEN,
    TOO_MANY_CALLS,
    middle_cut,
    not_executed,
    turn_calls,
)
from slca_lightning.types import Episode, Task, ToolCall, ToolResult

log = logging.getLogger(__name__)


class RenderMismatchError(RuntimeError):
    """The chat template renders the conversation differently from the episode's ids."""


class AgentLoop:
    """Runs groups of multi-turn tool-calling episodes against a tool simulator.

    Args:
        engine: the sampler (shares or syncs the policy's weights).
        tokenizer: the policy's tokenizer with its chat template.
        simulator: a :class:`~slca_lightning.tools.simulator.ToolSimulator` (never raises).
        sampling: per-turn sampling settings (``</tool_call>`` must be a stop string).
        max_turns: assistant turns per episode (paper: 10).
        max_calls_per_turn: parallel calls executed per turn (paper: 20).
        max_response_tokens: response budget, sampled plus injected tokens (paper: 8192).
        max_tool_response_tokens: middle-cut length of one tool response (paper: 2048).
        render_check: ``"strict"``, ``"warn"`` or ``"off"`` (see module docstring).
        tool_format: reads each turn's calls (:mod:`~slca_lightning.calls.formats`; default
            hermes). The episode's ``assistant_texts`` hold its canonical (hermes) text, what
            rewards and metrics read; the chat history and the token ids keep the raw text.
    """

    def __init__(
        self,
        engine: RolloutEngine,
        tokenizer: Any,
        simulator: Any,
        sampling: SamplingConfig | None = None,
        max_turns: int = 10,
        max_calls_per_turn: int = 20,
        max_response_tokens: int = 8192,
        max_tool_response_tokens: int = 2048,
        render_check: Literal["strict", "warn", "off"] = "warn",
        tool_format: ToolCallFormat | None = None,
    ) -> None:
        check_args(AgentLoop, locals(), "data")
        if render_check not in ("strict", "warn", "off"):
            raise ValueError(
                f"render_check must be 'strict', 'warn' or 'off', got {render_check!r}"
            )
        self.engine = engine
        self.tokenizer = tokenizer
        self.simulator = simulator
        self.sampling = sampling or SamplingConfig()
        self.max_turns = max_turns
        self.max_calls_per_turn = max_calls_per_turn
        self.max_response_tokens = max_response_tokens
        self.max_tool_response_tokens = max_tool_response_tokens
        self.render_check = render_check
        self.tool_format = tool_format if tool_format is not None else HermesFormat()
        self.stats: Counter = Counter()

    # -- rendering ---------------------------------------------------------------------
    def _render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt
        )

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def prompt_ids(self, task: Task) -> list[int]:
        """The rendered prompt of ``task`` with the assistant header."""
        return self._encode(self._render(task.messages, True))

    def _glue(
        self, history: list[dict], content: str, tool_msgs: list[dict], ended_eos: bool
    ) -> str:
        """Text the environment appends after a tool turn: end of turn + tool turn + header."""
        asst = {"role": "assistant", "content": content}
        before = self._render(history, True)
        with_asst = self._render([*history, asst], False)
        full = self._render([*history, asst, *tool_msgs], True)
        if with_asst.startswith(before + content) and full.startswith(with_asst):
            closing = with_asst[len(before) + len(content) :]
            glue = closing + full[len(with_asst) :]
        else:  # the template rewrites history: take the glue from a neutral conversation
            self.stats["render_mismatch"] += 1
            base = [{"role": "user", "content": "x"}]
            b_before = self._render(base, True)
            b_with = self._render([*base, asst], False)
            b_full = self._render([*base, asst, *tool_msgs], True)
            glue = b_with[len(b_before) + len(content) :] + b_full[len(b_with) :]
        eos = self.tokenizer.eos_token or ""
        if ended_eos and eos and glue.startswith(eos):
            glue = glue[len(eos) :]  # the model already sampled the end-of-turn token
        return glue

    # -- tools -------------------------------------------------------------------------
    # -- the loop ----------------------------------------------------------------------
    def run(self, tasks: list[Task], group_size: int = 1, group_offset: int = 0) -> list[Episode]:
        """Sample ``group_size`` episodes of every task; rows of one task share a group id."""
        self.stats = Counter()
        episodes: list[Episode] = []
        histories: list[list[dict]] = []
        last_raw: dict[int, str] = {}  # each episode's last turn as sampled (render check)
        for gi, task in enumerate(tasks):
            ids = self.prompt_ids(task)
            for _ in range(group_size):
                episodes.append(
                    Episode(
                        task=task,
                        group_id=group_offset + gi,
                        prompt_ids=list(ids),
                        policy_version=self.engine.policy_version,
                    )
                )
                histories.append([dict(m) for m in task.messages])
        active = list(range(len(episodes)))
        eos = self.tokenizer.eos_token or ""
        for turn in range(self.max_turns):
            if not active:
                break
            budgets = [self.max_response_tokens - len(episodes[i].response_ids) for i in active]
            cap = min(self.sampling.max_new_tokens, max(budgets))
            if cap <= 0:
                for i in active:
                    episodes[i].finish_reason = "length"
                break
            t0 = time.perf_counter()
            gens = self.engine.generate(
                [episodes[i].prompt_ids + episodes[i].response_ids for i in active],
                replace(
                    self.sampling,
                    max_new_tokens=cap,
                    seed=None
                    if self.sampling.seed is None
                    else self.sampling.seed + 100_003 * turn,
                ),
            )
            self.stats["time/generate"] += time.perf_counter() - t0
            pending: list[tuple[int, list[ToolCall | ToolResult], str, bool]] = []
            for i, gen, budget in zip(active, gens, budgets, strict=False):
                ep = episodes[i]
                ids, logps = gen.token_ids[:budget], gen.logprobs[:budget]
                hit_cap = gen.finish_reason == "length" or len(ids) < len(gen.token_ids)
                ep.response_ids += ids
                ep.assistant_mask += [True] * len(ids)
                ep.logprobs += [float(x) for x in logps]
                self.stats["sampled_tokens"] += len(ids)
                text = self.tokenizer.decode(ids, skip_special_tokens=False)
                ended_eos = gen.stop_reason == "eos" and not hit_cap
                if ended_eos and eos and text.endswith(eos):
                    text = text[: -len(eos)]
                canonical = self.tool_format.canonical(text)
                self.stats["tool_format/accepted"] += canonical.accepted
                self.stats["tool_format/rejected"] += canonical.rejected
                ep.assistant_texts.append(canonical.text)
                last_raw[i] = text
                if not text.strip():  # no tokens, or only the end-of-turn token / spaces
                    self.stats["empty_generations"] += 1
                items, is_tool_turn = turn_calls(canonical.text, self.max_calls_per_turn)
                if hit_cap:
                    ep.tool_results.append([])
                    ep.finish_reason = "length"
                    self.stats["finish/length"] += 1
                    self.stats["cut_tool_calls"] += int(is_tool_turn)
                elif not is_tool_turn:
                    ep.tool_results.append([])
                    ep.finish_reason = "stop"
                else:
                    pending.append((i, items, text, ended_eos))
            self._execute(episodes, histories, pending, last_turn=turn == self.max_turns - 1)
            active = [i for i, _, _, _ in pending if episodes[i].finish_reason == "running"]
        for ep in episodes:
            if ep.finish_reason == "running":
                ep.finish_reason = "max_turns"
        if self.render_check != "off":
            for i, (ep, history) in enumerate(zip(episodes, histories, strict=False)):
                self._check_render(ep, history, last_raw.get(i))
        self.stats["episodes"] += len(episodes)
        return episodes

    def _execute(self, episodes, histories, pending, last_turn: bool) -> None:
        """Run the turn's calls through the simulator and append the observations.

        The environment side never raises out of here: an exception from the simulator
        (``simulate_batch``), from rendering or tokenising an observation or the glue
        around it becomes an ``env_error`` observation in place of what failed, counted in
        :attr:`stats` as ``env_errors`` and ``env_errors/<ExceptionType>`` (the first
        traceback of each type is logged, see :mod:`slca_lightning.calls.env_errors`). If
        even the error observations cannot be rendered, the episode ends there
        (``finish_reason="max_turns"``: cut by the environment, counted as
        ``env_cut_episodes``). Observation contents are cleaned
        (:func:`~slca_lightning.calls.sanitize.clean_text`) before anything reads them.
        """

        def env_error(exc: BaseException, where: str, n: int = 1) -> str:
            name = report_env_error(exc, where)
            self.stats["env_errors"] += n
            self.stats[f"env_errors/{name}"] += n
            return env_error_json(exc, where)

        def failed(call: ToolCall, content: str) -> ToolResult:
            return ToolResult(call, content, is_error=True, error_kind="env_error")

        batch = [
            (item, episodes[i].task)
            for i, items, _, _ in pending
            for item in items
            if isinstance(item, ToolCall)
        ]
        t0 = time.perf_counter()
        try:
            answers = list(self.simulator.simulate_batch(batch)) if batch else []
            if len(answers) != len(batch):
                raise RuntimeError(
                    f"{type(self.simulator).__name__}.simulate_batch returned {len(answers)} "
                    f"results for {len(batch)} calls"
                )
        except Exception as exc:
            content = env_error(exc, "the simulator", n=len(batch))
            answers = [failed(call, content) for call, _ in batch]
        for k, answer in enumerate(answers):
            if not isinstance(answer, ToolResult):
                bad = TypeError(f"the simulator answered with a {type(answer).__name__}")
                answers[k] = answer = failed(batch[k][0], env_error(bad, "the simulator"))
            answer.content = clean_text(answer.content)
        self.stats["time/tools"] += time.perf_counter() - t0
        self.stats["tool_calls"] += len(batch)
        results = iter(answers)
        for i, items, text, ended_eos in pending:
            ep = episodes[i]
            turn_results = [next(results) if isinstance(it, ToolCall) else it for it in items]
            made_here = [it for it in items if isinstance(it, ToolResult)]
            self.stats["invalid_calls"] += len(made_here)
            self.stats["overflow_calls"] += sum(not_executed(r) for r in made_here)
            self.stats["observations"] += len(turn_results)
            ep.tool_results.append(turn_results)
            if last_turn:
                self.stats["tool_errors"] += sum(r.is_error for r in turn_results)
                ep.finish_reason = "max_turns"
                continue
            tool_msgs = []
            for k, r in enumerate(turn_results):
                try:
                    content, cut = middle_cut(
                        self.tokenizer, r.content, self.max_tool_response_tokens
                    )
                except Exception as exc:
                    r = turn_results[k] = failed(r.call, env_error(exc, "observation rendering"))
                    content, cut = r.content, False
                self.stats["tool_responses_cut"] += int(cut)
                tool_msgs.append({"role": "tool", "content": content})
            try:
                glue_ids = self._encode(self._glue(histories[i], text, tool_msgs, ended_eos))
            except Exception as exc:  # the turn's observations cannot be rendered together
                content = env_error(exc, "observation rendering", n=len(turn_results))
                turn_results[:] = [failed(r.call, content) for r in turn_results]
                tool_msgs = [{"role": "tool", "content": content} for _ in turn_results]
                try:
                    glue_ids = self._encode(self._glue(histories[i], text, tool_msgs, ended_eos))
                except Exception as again:
                    env_error(again, "observation rendering")
                    self.stats["tool_errors"] += len(turn_results)
                    self.stats["env_cut_episodes"] += 1
                    ep.finish_reason = "max_turns"
                    continue
            self.stats["tool_errors"] += sum(r.is_error for r in turn_results)
            if len(ep.response_ids) + len(glue_ids) >= self.max_response_tokens:
                ep.finish_reason = "length"
                self.stats["finish/length"] += 1
                continue
            histories[i] += [{"role": "assistant", "content": text}, *tool_msgs]
            ep.response_ids += glue_ids
            ep.assistant_mask += [False] * len(glue_ids)
            ep.logprobs += [0.0] * len(glue_ids)
            ep.finish_reason = "running"

    def _check_render(self, ep: Episode, history: list[dict], last: str | None) -> None:
        # `history` holds every turn whose glue was appended; the last turn never has glue
        messages = list(history)
        if last is not None:
            messages.append({"role": "assistant", "content": last})
        rendered = self._render(messages, False)
        got = self.tokenizer.decode(ep.prompt_ids + ep.response_ids, skip_special_tokens=False)
        if rendered.startswith(got):
            return
        self.stats["render_check_failed"] += 1
        at = next(
            (k for k, (a, b) in enumerate(zip(got, rendered, strict=False)) if a != b),
            min(len(got), len(rendered)),
        )
        msg = (
            f"episode of task {ep.task.task_id!r}: the chat template re-renders the conversation "
            f"differently from the sampled ids (first difference at char {at}: "
            f"ids {got[at : at + 40]!r} vs template {rendered[at : at + 40]!r})"
        )
        if self.render_check == "strict":
            raise RenderMismatchError(msg)
        log.warning(msg)
