"""Evaluators read calls in the model's tool-call format (``data.tool_format``).

For every shipped format (HermesFormat, JSONFormat, ResponseTemplateFormat with the
``hermes``, ``llama3_json`` and ``mistral`` templates) BFCL's oracle replies (its possible
answers, and for contrast other entries' answers and no-call replies) are rewritten in that
format's syntax and scored through the evaluators' own scoring paths: BFCL single-turn
(``BFCLEvaluator.score``), BFCL multi-turn (``run_multi_turn`` against BFCL's executable
backends, then ``multi_turn_checker``) and τ² (``Tau2Evaluator`` with the in-process tools
and the scripted user). Every format must score exactly what the hermes replies score, entry
by entry. No format offers a writer of calls, so each format's syntax is written here by
hand (:data:`WRITERS`).

Real parts: bfcl-eval's data, ground truth, checkers and backends, the τ² wheels' domains,
the formats themselves, a real ``lightning.Trainer`` for the callbacks, the tiny model and a
real config for ``slca eval``. Boundaries: the model's replies are the scripted oracle texts
(no model here writes correct calls), put in place of ``BFCLEvaluator.generate`` /
``Tau2Evaluator.policy_agent`` in the callback tests.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable

import lightning as L
import pytest
import torch

from callbacks import BFCLEval, Tau2Eval
from slca_lightning.calls.formats import HermesFormat, JSONFormat, ToolCallFormat
from slca_lightning.calls.parsing import parse_tool_calls
from slca_lightning.calls.template_format import ResponseTemplateFormat
from slca_lightning.eval.bfcl.answers import NO_CALL, oracle_outputs, shuffled_outputs
from slca_lightning.eval.bfcl.evaluator import BFCLEvaluator
from slca_lightning.eval.bfcl.multi_turn import load_multi_turn, run_multi_turn, score_multi_turn
from slca_lightning.eval.tau2.evaluator import Tau2Evaluator
from slca_lightning.eval.tau2.loop import OracleAgent, Tau2Agent
from slca_lightning.eval.tool_format import format_name, resolve_tool_format

Calls = list[tuple[str, dict]]


# -- each format's syntax, written by hand ---------------------------------------------------
def _hermes(calls: Calls, k: int) -> str:
    return "\n".join(
        f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>" for n, a in calls
    )


def _json(calls: Calls, k: int) -> str:
    """Bare JSON as Llama-style models write it, varied by ``k``: one object or a list (a
    parallel step), after ``<|python_tag|>``, inside a code fence, or after a sentence."""
    objs = [{"name": n, "parameters": a} for n, a in calls]
    body = json.dumps(objs[0] if len(objs) == 1 else objs)
    return [
        body,
        f"<|python_tag|>{body}",
        f"```json\n{body}\n```",
        f"I will call the tool now.\n{body}",
    ][k % 4]


def _template_hermes(calls: Calls, k: int) -> str:
    blocks = [
        f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>" for n, a in calls
    ]
    return "\n".join(blocks) + "<|im_end|>"


def _llama3_json(calls: Calls, k: int) -> str:
    body = "; ".join(json.dumps({"name": n, "parameters": a}) for n, a in calls)
    return ("<|python_tag|>" if k % 2 else "") + body + "<|eot_id|>"


def _mistral(calls: Calls, k: int) -> str:
    return "[TOOL_CALLS]" + json.dumps([{"name": n, "arguments": a} for n, a in calls]) + "</s>"


#: name → (the format, how it writes a turn's calls)
WRITERS: dict[str, tuple[Callable[[], ToolCallFormat], Callable[[Calls, int], str]]] = {
    "HermesFormat": (HermesFormat, _hermes),
    "JSONFormat": (JSONFormat, _json),
    "template:hermes": (lambda: ResponseTemplateFormat("hermes"), _template_hermes),
    "template:llama3_json": (lambda: ResponseTemplateFormat("llama3_json"), _llama3_json),
    "template:mistral": (lambda: ResponseTemplateFormat("mistral"), _mistral),
}
FORMATS = list(WRITERS)


def _calls(hermes_text: str) -> Calls:
    return [(c.name, dict(c.arguments)) for c in parse_tool_calls(hermes_text).calls]


def rewrite(hermes_text: str, write: Callable[[Calls, int], str], k: int = 0) -> str:
    """A hermes reply in another format: its calls through ``write``; a reply without a
    call (prose) stays as it is, in every format."""
    calls = _calls(hermes_text)
    return write(calls, k) if calls else hermes_text


# -- BFCL single-turn --------------------------------------------------------------------------
CATEGORIES = "simple_python,multiple,parallel,irrelevance"


@pytest.fixture(scope="module")
def bfcl_replies():
    """Oracle answers for even entries, another entry's answer for odd ones (wrong), so the
    accuracy to match is neither 0 nor 1; plus the hermes scores to match."""
    entries = BFCLEvaluator(CATEGORIES, limit=6, progress=False).entries()
    right, wrong = oracle_outputs(entries), shuffled_outputs(entries)
    replies = [r if i % 2 == 0 else w for i, (r, w) in enumerate(zip(right, wrong, strict=True))]
    hermes = BFCLEvaluator(CATEGORIES, limit=6, progress=False).score(entries, replies)
    return entries, replies, hermes


def test_hermes_oracle_mix_is_a_real_test(bfcl_replies):
    _, replies, hermes = bfcl_replies
    for cat in ("simple_python", "multiple", "parallel"):
        assert 0.3 <= hermes.accuracy[cat] <= 0.7, hermes.accuracy  # right and wrong ones
    assert any(len(_calls(r)) > 1 for r in replies)  # parallel steps are in it
    assert NO_CALL in replies  # and no-call replies


@pytest.mark.parametrize("name", FORMATS)
def test_bfcl_single_turn_scores_every_format_as_hermes(bfcl_replies, name):
    entries, replies, hermes = bfcl_replies
    make, write = WRITERS[name]
    written = [rewrite(r, write, k) for k, r in enumerate(replies)]
    if "hermes" not in name.lower():
        assert all("<tool_call>" not in w for w in written)
    report = BFCLEvaluator(CATEGORIES, limit=6, tool_format=make(), progress=False).score(
        entries, written
    )
    assert report.accuracy == hermes.accuracy
    assert report.summary == hermes.summary
    assert [s.valid for s in report.scores] == [s.valid for s in hermes.scores]
    assert [s.decoded for s in report.scores] == [s.decoded for s in hermes.scores]


def test_bfcl_default_stays_hermes_and_misses_json_calls(bfcl_replies):
    """The user's report: hermes decoding reads no bare-JSON call (every AST entry fails)."""
    entries, replies, hermes = bfcl_replies
    written = [rewrite(r, _json, k) for k, r in enumerate(replies)]
    ev = BFCLEvaluator(CATEGORIES, limit=6, progress=False)
    assert isinstance(ev.tool_format, HermesFormat)
    report = ev.score(entries, written)
    assert report.accuracy["simple_python"] == 0.0 and report.accuracy["parallel"] == 0.0
    assert ev.score(entries, replies).accuracy == hermes.accuracy  # hermes text: unchanged


# -- BFCL multi-turn ---------------------------------------------------------------------------
def _call_of(call: str, docs: dict) -> tuple[str, dict]:
    node = ast.parse(call, mode="eval").body
    name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
    params = list(docs[name]["parameters"]["properties"])
    args = {params[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords})
    return name, args


def scripted(entry, write, drop_last: bool = False):
    """Answers each user turn with its ground-truth calls written by ``write`` (all in one
    step), then ends the turn in prose; ``drop_last`` forgets the first turn's last call."""
    docs = {f["name"]: f for f in entry.functions}
    for extra in entry.missed.values():
        docs.update({f["name"]: f for f in extra})
    replies = 0

    def reply(messages, tools):
        nonlocal replies
        if messages[-1]["role"] != "user":
            return "Done."
        t = sum(m["role"] == "user" for m in messages) - 1
        turn = list(entry.ground_truth[t])
        if drop_last and t == 0:
            turn = turn[:-1]
        replies += 1
        calls = [_call_of(c, docs) for c in turn]
        return write(calls, replies) if calls else "I can't."

    return reply


@pytest.fixture(scope="module")
def mt_entries():
    return load_multi_turn("multi_turn_base", limit=3, seed=1)


@pytest.fixture(scope="module")
def mt_hermes(mt_entries):
    return [
        score_multi_turn(e, run_multi_turn(e, scripted(e, _hermes, drop_last=i == 1))).valid
        for i, e in enumerate(mt_entries)
    ]


@pytest.mark.parametrize("name", FORMATS)
def test_bfcl_multi_turn_scores_every_format_as_hermes(mt_entries, mt_hermes, name):
    assert mt_hermes == [True, False, True]  # the second entry misses a call
    make, write = WRITERS[name]
    got = []
    for i, e in enumerate(mt_entries):
        steps = run_multi_turn(e, scripted(e, write, drop_last=i == 1), tool_format=make())
        got.append(score_multi_turn(e, steps).valid)
    assert got == mt_hermes


def test_bfcl_multi_turn_history_keeps_the_reply_as_written(mt_entries):
    e = mt_entries[0]
    seen = []
    base = scripted(e, _json)

    def reply(messages, tools):
        seen.append([dict(m) for m in messages])
        return base(messages, tools)

    run_multi_turn(e, reply, tool_format=JSONFormat())
    assistant = [m["content"] for m in seen[-1] if m["role"] == "assistant"]
    assert assistant and "<tool_call>" not in assistant[0]  # the model sees its own text
    assert any(m["role"] == "tool" for m in seen[-1])  # and its JSON calls ran


# -- τ² ----------------------------------------------------------------------------------------
class FormatAgent(Tau2Agent):
    """The oracle agent with its hermes calls rewritten in another format."""

    def __init__(self, inner: Tau2Agent, write: Callable[[Calls, int], str]):
        self.inner, self.write, self.turns = inner, write, 0

    def act(self, convs):
        out = []
        for text in self.inner.act(convs):
            self.turns += 1
            out.append(None if text is None else rewrite(text, self.write, self.turns))
        return out


def _drop_last_write(task):
    """The gold actions; for odd task ids without the last write (that task then fails)."""
    from slca_lightning.eval.tau2.env import load_domain

    actions = list(task.actions)
    writes = [i for i, a in enumerate(actions) if a["name"] in load_domain("airline").write_tools]
    if int(task.id) % 2 and writes:
        del actions[writes[-1]]
    return actions


@pytest.fixture(scope="module")
def tau2_hermes():
    ev = Tau2Evaluator("airline", split="base", limit=6, progress=False)
    return ev.evaluate(FormatAgent(OracleAgent(_drop_last_write), _hermes))


@pytest.mark.parametrize("name", FORMATS)
def test_tau2_scores_every_format_as_hermes(tau2_hermes, name):
    successes = [s.success for s in tau2_hermes.scores]
    assert True in successes and False in successes  # a pass and a fail to match
    make, write = WRITERS[name]
    ev = Tau2Evaluator("airline", split="base", limit=6, tool_format=make(), progress=False)
    report = ev.evaluate(FormatAgent(OracleAgent(_drop_last_write), write))
    assert [s.success for s in report.scores] == successes
    assert [s.parts for s in report.scores] == [s.parts for s in tau2_hermes.scores]
    assert report.summary() == tau2_hermes.summary()


def test_tau2_json_calls_run_and_never_reach_the_user():
    """A bare JSON call is a call: it runs, the user never sees it, the scorer reads its
    canonical text and the agent's history keeps it as written. Read as hermes, the same
    turn is a message to the user and nothing runs."""
    from slca_lightning.eval.tau2.env import Tau2Environment, load_domain
    from slca_lightning.eval.tau2.loop import Conversation, run_conversations
    from slca_lightning.eval.tau2.users import ScriptedUser

    dom = load_domain("airline")
    task = next(t for t in dom.tasks if any(a["name"] in dom.write_tools for a in t.actions))
    convs = {}
    for fmt in (JSONFormat(), None):
        conv = Conversation(task, 0, Tau2Environment(dom))
        run_conversations(
            FormatAgent(OracleAgent(), _json), ScriptedUser(), [conv], tool_format=fmt
        )
        convs[type(fmt).__name__] = conv
    read, unread = convs["JSONFormat"], convs["NoneType"]
    assert read.counts["tool_calls"] == len(task.actions) and unread.counts["tool_calls"] == 0
    assert not any('"name"' in m["content"] for m in read.user_view)
    assert any('"name"' in m["content"] for m in unread.user_view)
    first = next(t for t in read.assistant_texts if "<tool_call>" in t)
    said = [m["content"] for m in read.messages if m["role"] == "assistant"]
    assert not any("<tool_call>" in t for t in said) and first not in said


# -- where the format comes from ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "kind", "label"),
    [
        (None, HermesFormat, "HermesFormat"),
        ("hermes", HermesFormat, "HermesFormat"),
        ("json", JSONFormat, "JSONFormat"),
        ("JSONFormat", JSONFormat, "JSONFormat"),
        ("slca_lightning.calls.formats.JSONFormat", JSONFormat, "JSONFormat"),
        ("llama3_json", ResponseTemplateFormat, "ResponseTemplateFormat(llama3_json)"),
        ("template:hermes", ResponseTemplateFormat, "ResponseTemplateFormat(hermes)"),
        (
            {
                "class_path": "slca_lightning.calls.formats.JSONFormat",
                "init_args": {"markers": ["<call>"]},
            },
            JSONFormat,
            "JSONFormat",
        ),
    ],
)
def test_resolve_tool_format(spec, kind, label):
    fmt = resolve_tool_format(spec)
    assert type(fmt) is kind and format_name(fmt) == label
    if isinstance(spec, dict):
        assert fmt.markers == ["<call>"]
    same = JSONFormat()
    assert resolve_tool_format(same) is same


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("yaml", "unknown tool-call format 'yaml'"),
        ("template:nope", "unknown template 'nope'"),
        ("collections.Counter", "not a ToolCallFormat subclass"),
        ("no.such.Module", "cannot be imported"),
        ({"init_args": {}}, "needs a class_path"),
        (3, "must be a name"),
    ],
)
def test_bad_tool_format_is_named(spec, message):
    with pytest.raises(ValueError, match=message):
        resolve_tool_format(spec)


class Harness(L.LightningModule):
    """Holds a stand-in policy and tokenizer (the evaluators' replies are scripted)."""

    def __init__(self):
        super().__init__()
        self.policy, self.tokenizer = torch.nn.Linear(1, 1), "unused"

    def validation_step(self, batch, batch_idx):
        return None

    def val_dataloader(self):
        return torch.utils.data.DataLoader(torch.zeros(1, 1), batch_size=1)


class Data(L.LightningDataModule):
    """A data module with a tool-call format, as ``RolloutDataModule`` has."""

    def __init__(self, tool_format: ToolCallFormat):
        super().__init__()
        self.tool_format = tool_format

    def val_dataloader(self):
        return torch.utils.data.DataLoader(torch.zeros(1, 1), batch_size=1)


def _validate(tmp_path, cb, datamodule):
    trainer = L.Trainer(
        accelerator="cpu",
        logger=False,
        callbacks=[cb],
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )
    trainer.validate(Harness(), datamodule=datamodule)
    return cb.last


@pytest.mark.parametrize(("fmt", "expected"), [(JSONFormat(), 1.0), (HermesFormat(), 0.0)])
def test_bfcl_callback_reads_the_datamodules_tool_format(tmp_path, monkeypatch, fmt, expected):
    cb = BFCLEval(categories="simple_python,parallel", samples_per_category=3)

    def json_oracle(entries, model, tokenizer, update=None):
        return [rewrite(o, _json, k) for k, o in enumerate(oracle_outputs(entries))]

    monkeypatch.setattr(cb.evaluator, "generate", json_oracle)
    last = _validate(tmp_path, cb, Data(fmt))
    assert cb.evaluator.tool_format is fmt
    assert last["simple_python"] == expected and last["parallel"] == expected


def test_bfcl_callback_own_tool_format_wins(tmp_path, monkeypatch):
    cb = BFCLEval(categories="simple_python", samples_per_category=2, tool_format="json")
    monkeypatch.setattr(
        cb.evaluator,
        "generate",
        lambda entries, *a, **k: [rewrite(o, _json) for o in oracle_outputs(entries)],
    )
    last = _validate(tmp_path, cb, Data(HermesFormat()))
    assert isinstance(cb.evaluator.tool_format, JSONFormat) and last["simple_python"] == 1.0


@pytest.mark.parametrize("fmt", [JSONFormat(), HermesFormat()])
def test_tau2_callback_reads_the_datamodules_tool_format(tmp_path, monkeypatch, fmt):
    cb = Tau2Eval(domains=["airline"], split="base", tasks_per_domain=3)
    evaluator = cb.evaluators["airline"]
    agent = FormatAgent(OracleAgent(), _json)
    monkeypatch.setattr(evaluator, "policy_agent", lambda model, tok: agent)
    last = _validate(tmp_path, cb, Data(fmt))
    assert evaluator.tool_format is fmt
    if isinstance(fmt, JSONFormat):
        assert last["eval/tau2_airline/pass1"] == 1.0
        assert last["eval/tau2_airline/tool_calls_per_episode"] > 0
    else:  # hermes reads no bare JSON call: nothing runs
        assert last["eval/tau2_airline/tool_calls_per_episode"] == 0.0


def test_in_domain_loop_reads_the_datamodules_tool_format():
    from slca_lightning.eval.in_domain import greedy_loop
    from slca_lightning.models.policy import load_policy
    from slca_lightning.rollout.datamodule import RolloutDataModule

    policy, tok = load_policy("tiny")
    fmt = JSONFormat()
    dm = RolloutDataModule(tool_format=fmt)
    assert greedy_loop(dm, policy, tok).tool_format is fmt


# -- slca eval ----------------------------------------------------------------------------------
seen: dict = {}


def _capture(ctx):
    from slca_lightning.eval.registry import EvalResult, context_tool_format

    seen["format"] = context_tool_format(ctx)
    seen["loop"] = ctx.datamodule.loop.tool_format
    return EvalResult({"ok": 1.0}, "| ok |")


def test_slca_eval_takes_the_format_from_the_config_or_the_flag(tmp_path):
    from slca_lightning.cli import evaluate as standalone
    from slca_lightning.eval.registry import register_evaluator

    register_evaluator("tool_format_capture_test", _capture, overwrite=True)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "data:\n  max_turns: 1\n  tool_format:\n"
        "    class_path: slca_lightning.calls.formats.JSONFormat\n"
    )
    common = ["--model=tiny", "--evaluators=tool_format_capture_test", f"--out={tmp_path}/o"]
    summary = standalone.main([*common, f"--config={cfg}"])
    assert isinstance(seen["format"], JSONFormat) and seen["loop"] is seen["format"]
    assert summary["tool_format"] == "JSONFormat"
    summary = standalone.main([*common, f"--config={cfg}", "--tool-format", "llama3_json"])
    assert format_name(seen["format"]) == "ResponseTemplateFormat(llama3_json)"
    assert seen["loop"] is seen["format"]
    assert summary["tool_format"] == "ResponseTemplateFormat(llama3_json)"
    summary = standalone.main(common)
    assert isinstance(seen["format"], HermesFormat) and summary["tool_format"] == "HermesFormat"
    with pytest.raises(ValueError, match="unknown tool-call format"):
        standalone.main([*common, "--tool-format", "yaml"])
    tool_call_end = tmp_path / "paper.yaml"
    tool_call_end.write_text("data:\n  turn_end: tool_call\n")
    with pytest.raises(ValueError, match=r"data.turn_end='tool_call'.*JSONFormat"):
        standalone.main([*common, f"--config={tool_call_end}", "--tool-format", "json"])


@pytest.mark.parametrize("evaluator", ["bfcl", "tau2"])
def test_registry_evaluators_get_the_runs_format(monkeypatch, evaluator):
    """``slca eval --evaluators bfcl|tau2``: the data module's format, unless the
    evaluator's own ``tool_format`` option names one."""
    from types import SimpleNamespace

    from slca_lightning.eval.bfcl.evaluator import BFCLReport
    from slca_lightning.eval.registry import get_evaluator
    from slca_lightning.eval.tau2.evaluator import Tau2Report

    used = []
    if evaluator == "bfcl":
        monkeypatch.setattr(
            BFCLEvaluator, "run", lambda self, m, t: used.append(self.tool_format) or BFCLReport([])
        )
        options = {"categories": "simple_python", "limit": 1}
    else:
        monkeypatch.setattr(
            Tau2Evaluator,
            "evaluate",
            lambda self, m: used.append(self.tool_format) or Tau2Report("airline", []),
        )
        options = {"domains": "airline", "limit": 1}
    fmt = JSONFormat()
    module = SimpleNamespace(policy=None, tokenizer=None)
    ctx = SimpleNamespace(
        module=module, datamodule=SimpleNamespace(tool_format=fmt), options=options
    )
    get_evaluator(evaluator)(ctx)
    assert used[-1] is fmt
    ctx.options = {**options, "tool_format": "llama3_json"}
    get_evaluator(evaluator)(ctx)
    assert format_name(used[-1]) == "ResponseTemplateFormat(llama3_json)"
