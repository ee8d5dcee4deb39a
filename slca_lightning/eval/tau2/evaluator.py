"""τ²-style evaluation on the airline and retail domains (τ²-Bench Pass^1 / Pass^k).

:class:`Tau2Evaluator` runs ``trials`` conversations per task of a domain split between an
agent (the policy, greedy; or the gold-replaying oracle) and a simulated user (scripted, or
an LLM through any ChatBackend), executes the agent's tools in-process on a fresh copy of
the domain database (:mod:`~slca_lightning.eval.tau2.env`), and scores each episode like τ²
(:mod:`~slca_lightning.eval.tau2.scoring`): final database against the gold replay, required
communications, NL assertions when a judge is given; reward = product of the task's
``reward_basis`` parts; Pass^k over the trials. The agent's calls are read in its tool-call
format (``tool_format``: the run's ``data.tool_format``; hermes tags by default). While it
runs, conversations done of the total, time elapsed and left go to stderr
(:func:`~slca_lightning.eval.progress.progress`).

Standalone::

    python -m slca_lightning.eval.tau2 --model oracle --domains airline retail --split base
    python -m slca_lightning.eval.tau2 --model tiny --domains airline --limit 3 --no-policy

``--tool-format`` names how the model writes calls (``json``, ``llama3_json`` …; see
:func:`~slca_lightning.eval.tool_format.resolve_tool_format`). ``--model`` takes ``tiny`` /
``tiny-sft`` / a local HF folder (as ``load_policy``), or ``oracle`` (replays the gold
actions: every task should pass; checks the scorer). ``--user llm`` plays the user with
``--user-model`` (an HF folder, or a model name served at ``--user-url``, an
OpenAI-compatible endpoint).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from slca_lightning.calls.formats import ToolCallFormat
from slca_lightning.eval.progress import progress
from slca_lightning.eval.tau2.env import Tau2Environment, load_domain
from slca_lightning.eval.tau2.loop import (
    Conversation,
    OracleAgent,
    PolicyAgent,
    Tau2Agent,
    run_conversations,
)
from slca_lightning.eval.tau2.scoring import Tau2Score, pass_k, score_episode
from slca_lightning.eval.tau2.users import LLMUser, ScriptedUser, UserSimulator
from slca_lightning.eval.tool_format import resolve_tool_format

__all__ = ["Tau2Evaluator", "Tau2Report", "main"]


@dataclass
class Tau2Report:
    """Per-episode verdicts of one domain, with Pass^k and conversation statistics.

    Attributes:
        domain: the domain evaluated.
        scores: one :class:`Tau2Score` per episode.
        episodes: per-episode counts (``termination``, ``agent_turns``, ``tool_calls``, …).
        seconds: wall time of the evaluation.
    """

    domain: str
    scores: list[Tau2Score]
    episodes: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> dict[str, float]:
        """Flat scalars: ``pass1``..``passK``, ``avg_reward``, ``db_match``,
        ``communicate``, per-episode counts and ``nl_unjudged`` (episodes whose NL
        assertions were left out of the reward)."""
        n = len(self.scores)
        if not n:
            return {}
        out = {f"pass{k}": v for k, v in pass_k(self.scores).items()}
        out["avg_reward"] = sum(s.reward for s in self.scores) / n
        out["db_match"] = sum(s.info["db"] for s in self.scores) / n
        out["communicate"] = sum(s.info["communicate"] for s in self.scores) / n
        for key in ("agent_turns", "tool_calls", "invalid_calls", "tool_errors"):
            out[f"{key}_per_episode"] = sum(e.get(key, 0) for e in self.episodes) / n
        out["nl_unjudged"] = float(sum(s.nl_unjudged for s in self.scores))
        out["episodes"] = float(n)
        out["tasks"] = float(len({s.task_id for s in self.scores}))
        return out

    def markdown(self) -> str:
        """A summary table, the ends of the conversations, then one row per task."""
        lines = [f"## τ² {self.domain}", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v:.3f} |" for k, v in self.summary().items()]
        ends = Counter(e["termination"] for e in self.episodes)
        if ends:
            lines += ["", "| termination | episodes |", "|---|---|"]
            lines += [f"| {k} | {v} |" for k, v in ends.most_common()]
        lines += ["", "| task | trials | passed | DB | COMMUNICATE | gold errors |"]
        lines.append("|---|---|---|---|---|---|")
        by_task: dict[str, list[Tau2Score]] = {}
        for s in self.scores:
            by_task.setdefault(s.task_id, []).append(s)
        for tid, ss in by_task.items():
            db = sum(s.info["db"] for s in ss) / len(ss)
            com = sum(s.info["communicate"] for s in ss) / len(ss)
            errs = len(ss[0].gold_errors)
            lines.append(
                f"| {tid} | {len(ss)} | {sum(s.success for s in ss)} | {db:.2f} | {com:.2f} "
                f"| {errs} |"
            )
        return "\n".join(lines)


class Tau2Evaluator:
    """τ² Pass^k of an agent on one domain split, against a simulated user.

    Args:
        domain: ``"airline"`` or ``"retail"``.
        split: ``"test"``, ``"train"`` or ``"base"`` (every task).
        limit: first ``limit`` tasks of the split (None: all).
        trials: conversations per task (Pass^1..Pass^trials).
        user: ``"scripted"``, a :class:`UserSimulator`, or a ChatBackend (→ :class:`LLMUser`).
        judge: a ChatBackend for NL assertions (None: they are not judged, see report).
        max_agent_turns: agent turns per conversation.
        max_user_turns: user messages per conversation.
        max_calls_per_turn: calls executed per agent turn.
        max_new_tokens, batch_size, tool_prompt, max_context_tokens,
        max_tool_response_tokens, temperature: see :class:`PolicyAgent`.
        include_policy: show the domain policy in the system prompt (off for tiny models,
            whose context cannot hold it).
        tool_format: how the agent writes its calls: a
            :class:`~slca_lightning.calls.formats.ToolCallFormat` or what
            :func:`~slca_lightning.eval.tool_format.resolve_tool_format` takes; None: hermes
            tags. The prompt is not changed by it (the chat template shows the tools).
        progress: report conversations done, time elapsed and left on stderr while running.
    """

    def __init__(
        self,
        domain: str = "airline",
        split: str = "test",
        limit: int | None = None,
        trials: int = 1,
        user: str | UserSimulator | Any = "scripted",
        judge: Any = None,
        max_agent_turns: int = 30,
        max_user_turns: int = 10,
        max_calls_per_turn: int = 20,
        max_new_tokens: int = 512,
        batch_size: int = 8,
        tool_prompt: str = "template",
        include_policy: bool = True,
        max_context_tokens: int | None = None,
        max_tool_response_tokens: int = 2048,
        temperature: float = 0.0,
        tool_format: ToolCallFormat | str | dict[str, Any] | None = None,
        progress: bool = True,
    ) -> None:
        if trials < 1:
            raise ValueError(f"trials must be >= 1, got {trials}")
        self.domain = load_domain(domain)
        self.tasks = self.domain.select(split, limit)
        self.trials, self.judge = trials, judge
        if user == "scripted":
            user = ScriptedUser(max_turns=max_user_turns)
        elif isinstance(user, str):
            raise ValueError(f"user must be 'scripted', a UserSimulator or a ChatBackend: {user!r}")
        elif not isinstance(user, UserSimulator):
            user = LLMUser(user, max_turns=max_user_turns)
        self.user = user
        self.max_agent_turns, self.max_calls_per_turn = max_agent_turns, max_calls_per_turn
        self.agent_kwargs = dict(
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            tool_prompt=tool_prompt,
            max_context_tokens=max_context_tokens,
            max_tool_response_tokens=max_tool_response_tokens,
            temperature=temperature,
        )
        self.include_policy = include_policy
        self.tool_format = resolve_tool_format(tool_format)
        self.progress = progress

    def policy_agent(self, model: Any, tokenizer: Any, seed: int = 0) -> PolicyAgent:
        """The :class:`PolicyAgent` this evaluator runs ``model`` as."""
        policy = self.domain.policy if self.include_policy else ""
        return PolicyAgent(
            model, tokenizer, self.domain.tools, policy, seed=seed, **self.agent_kwargs
        )

    def run_agent(self, agent: Tau2Agent) -> Tau2Report:
        """Every task × trial against the user simulator, scored (progress on stderr: one
        update per finished conversation)."""
        t0 = time.perf_counter()
        scores, episodes = [], []
        chunk = max(1, int(self.agent_kwargs["batch_size"]))  # databases alive at once
        total = self.trials * len(self.tasks)
        label = f"tau2 {self.domain.name}"
        with progress(label, total, "conversations", enabled=self.progress) as update:
            for trial in range(self.trials):
                if isinstance(agent, PolicyAgent):
                    agent.sampling.seed = trial
                for start in range(0, len(self.tasks), chunk):
                    tasks = self.tasks[start : start + chunk]
                    convs = [Conversation(t, trial, Tau2Environment(self.domain)) for t in tasks]
                    run_conversations(
                        agent,
                        self.user,
                        convs,
                        self.max_agent_turns,
                        self.max_calls_per_turn,
                        tool_format=self.tool_format,
                        on_end=lambda _conv: update(1),
                    )
                    for c in convs:
                        scores.append(self._score(c))
                        episodes.append({"termination": c.termination, **c.counts})
        return Tau2Report(self.domain.name, scores, episodes, time.perf_counter() - t0)

    def _score(self, c: Conversation) -> Tau2Score:
        return score_episode(
            c.task,
            self.domain,
            c.env.db,
            c.assistant_texts,
            c.env.calls,
            trial=c.trial,
            judge=self.judge,
            transcript=c.transcript(),
        )

    def evaluate(self, module_or_model: Any, tokenizer: Any = None) -> Tau2Report:
        """Evaluate a LightningModule (its ``policy`` / ``tokenizer``), a causal LM with its
        ``tokenizer``, or a :class:`Tau2Agent` (e.g. :class:`OracleAgent`)."""
        if isinstance(module_or_model, Tau2Agent):
            return self.run_agent(module_or_model)
        model = getattr(module_or_model, "policy", module_or_model)
        tokenizer = tokenizer or getattr(module_or_model, "tokenizer", None)
        if tokenizer is None:
            raise ValueError("Tau2Evaluator.evaluate: a bare model needs its tokenizer")
        from slca_lightning.models.fsdp import rollout_weights

        was_training = getattr(model, "training", False)
        model.eval()
        try:
            with rollout_weights(model):
                return self.run_agent(self.policy_agent(model, tokenizer))
        finally:
            model.train(was_training)


def _backend(model: str | None, url: str | None, what: str) -> Any:
    if model is None:
        raise SystemExit(f"--{what} llm needs --{what}-model")
    from slca_lightning.rollout.engine_chat_backend import EngineChatBackend, OpenAIBackend

    return OpenAIBackend(url, model) if url else EngineChatBackend(model)


def main(argv: Sequence[str] | None = None) -> dict[str, Tau2Report]:
    """``python -m slca_lightning.eval.tau2``: evaluate a model, print and write the tables."""
    p = argparse.ArgumentParser(
        prog="python -m slca_lightning.eval.tau2",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, help="tiny | tiny-sft | HF folder | oracle")
    p.add_argument("--domains", nargs="+", default=["airline", "retail"])
    p.add_argument("--split", default="test", help="test | train | base (all tasks)")
    p.add_argument("--limit", type=int, default=None, help="tasks per domain")
    p.add_argument("--trials", type=int, default=1)
    p.add_argument("--user", choices=["scripted", "llm"], default="scripted")
    p.add_argument("--user-model", default=None)
    p.add_argument("--user-url", default=None, help="OpenAI-compatible base URL")
    p.add_argument("--judge-model", default=None, help="judge of NL assertions (optional)")
    p.add_argument("--judge-url", default=None)
    p.add_argument("--max-agent-turns", type=int, default=30)
    p.add_argument("--max-user-turns", type=int, default=10)
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--max-context-tokens", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--tool-prompt", choices=["template", "system"], default="template")
    p.add_argument("--no-policy", action="store_true", help="leave the domain policy out")
    p.add_argument(
        "--tool-format",
        default=None,
        help="how the model writes calls: hermes (default) | json | llama3_json | mistral | "
        "template:<name> | a ToolCallFormat class path",
    )
    p.add_argument("--dtype", default="float32")
    p.add_argument("--out", default=None, help="write the Markdown tables here")
    args = p.parse_args(argv)
    user = _backend(args.user_model, args.user_url, "user") if args.user == "llm" else "scripted"
    judge = _backend(args.judge_model, args.judge_url, "judge") if args.judge_model else None
    model: Any = OracleAgent()
    tokenizer = None
    if args.model != "oracle":
        from slca_lightning.models.policy import load_policy

        model, tokenizer = load_policy(args.model, dtype=args.dtype)
    reports, tables = {}, []
    for name in args.domains:
        ev = Tau2Evaluator(
            name,
            args.split,
            args.limit,
            args.trials,
            user=user,
            judge=judge,
            max_agent_turns=args.max_agent_turns,
            max_user_turns=args.max_user_turns,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
            tool_prompt=args.tool_prompt,
            include_policy=not args.no_policy,
            max_context_tokens=args.max_context_tokens,
            tool_format=args.tool_format,
        )
        report = ev.evaluate(model, tokenizer)
        reports[name] = report
        tables.append(f"{report.markdown()}\n\n({report.seconds:.1f} s)")
    text = "\n\n".join(tables)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(f"# τ² ({args.model}, split {args.split})\n\n{text}\n")
    return reports


def _registered(ctx):
    """``slca eval --evaluators tau2`` (options: :class:`Tau2Evaluator`'s, plus ``domains``,
    a comma-separated list, default ``airline``; ``tool_format`` defaults to the run's)."""
    from slca_lightning.eval.registry import EvalResult, context_tool_format

    options = dict(ctx.options)
    if options.get("tool_format") is None:
        options["tool_format"] = context_tool_format(ctx)
    domains = str(options.pop("domains", options.pop("domain", "airline"))).split(",")
    metrics: dict[str, float] = {}
    tables = []
    for domain in [d.strip() for d in domains if d.strip()]:
        try:
            evaluator = Tau2Evaluator(domain=domain, **options)
        except TypeError as err:
            raise ValueError(f"tau2: bad options {sorted(options)}: {err}") from err
        report = evaluator.evaluate(ctx.module)
        metrics.update({f"{domain}/{k}": v for k, v in report.summary().items()})
        tables.append(report.markdown())
    rates = ("avg_reward", "db_match", "communicate")
    bars = {
        k: v for k, v in metrics.items() if k.split("/")[-1].startswith("pass") or k.endswith(rates)
    }
    return EvalResult(metrics, "\n\n".join(tables), bars)


def _register() -> None:
    from slca_lightning.eval.registry import register_evaluator

    register_evaluator("tau2", _registered, overwrite=True)


_register()


if __name__ == "__main__":
    main()
