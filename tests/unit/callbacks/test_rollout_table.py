"""RolloutTable on a hand-built RolloutRecord with the tiny tokenizer.

The trainer is a ``types.SimpleNamespace`` standing in for ``lightning.Trainer``: the callback
only reads ``global_step``, ``log_dir`` / ``default_root_dir`` and ``is_global_zero``.
"""

import html
import io
import re
import warnings
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console

from callbacks import RolloutTable
from callbacks.rollout_table import rollout_html
from slca_lightning.models.tiny import build_tiny_tokenizer
from slca_lightning.rollout.collate import collate_episodes
from slca_lightning.rollout.record import RolloutRecord
from slca_lightning.segmenters import mask_run_segments
from slca_lightning.types import Episode, RewardOutput, Task

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
ENV = '\n<|im_start|>user\n<tool_response>\n{"temperature": 18}\n</tool_response><|im_end|>\n'
SUMMARY = "The weather in Paris is 18 & sunny <b>."


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def episode(tok, task_id, group):
    prompt = tok.encode("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n")
    turn1 = tok.encode("Let me check. " + CALL + "<|im_end|>")
    env = tok.encode(ENV + "<|im_start|>assistant\n")
    turn2 = tok.encode(SUMMARY + "<|im_end|>")
    response = turn1 + env + turn2
    mask = [True] * len(turn1) + [False] * len(env) + [True] * len(turn2)
    return Episode(
        task=Task(task_id=task_id, messages=[], question="Weather in Paris?"),
        group_id=group,
        prompt_ids=prompt,
        response_ids=response,
        assistant_mask=mask,
        logprobs=[0.0] * len(response),
        assistant_texts=["Let me check. " + CALL, SUMMARY],
        finish_reason="stop",
    )


def make_record(tok, groups=(0, 0, 1, 1)):
    eps = [episode(tok, f"task-{g}-{i}", g) for i, g in enumerate(groups)]
    batch = collate_episodes(eps, pad_token_id=tok.pad_token_id)
    seg = mask_run_segments(batch.assistant_mask)
    adv = 0.75 * seg.masks["tool"].float() - 0.25 * seg.masks["summary"].float()
    b = batch.batch_size
    rewards = RewardOutput(
        channels={
            "tool": torch.full((b,), 0.9),
            "summary": torch.full((b,), 0.4),
            "total": torch.full((b,), 1.3),
        }
    )
    return RolloutRecord(batch=batch, segments=seg, advantages=adv, rewards=rewards, step=1)


def trainer(tmp_path, step):
    return SimpleNamespace(global_step=step, log_dir=str(tmp_path), is_global_zero=True)


def spans(page, cls):
    pattern = rf'<span class="tok seg-{cls}[^"]*" title="([^"]*)">(.*?)</span>'
    return [(html.unescape(t), html.unescape(x)) for t, x in re.findall(pattern, page, re.S)]


def test_html_marks_segments_and_advantages(tok, tmp_path):
    cb = RolloutTable(num_episodes=2, console=False)
    module = SimpleNamespace(last_rollout=make_record(tok), tokenizer=tok)
    cb.on_train_batch_end(trainer(tmp_path, 1), module, None, None, 0)
    path = tmp_path / "rollouts" / "step_000001.html"
    assert cb.last_html_path == str(path) and path.exists()
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and "<style>" in page and "legend" in page
    # escaped text sits inside the span of its segment
    assert re.search(r'<span class="tok seg-tool[^"]*"[^>]*>&lt;tool_call&gt;</span>', page)
    tool_text = "".join(x for _, x in spans(page, "tool"))
    summary_text = "".join(x for _, x in spans(page, "summary"))
    env_text = "".join(x for _, x in spans(page, "env"))
    assert tool_text == ("Let me check. " + CALL + "<|im_end|>") * 2
    assert summary_text == (SUMMARY + "<|im_end|>") * 2
    assert "<tool_response>" in env_text and "<tool_call>" not in env_text
    raw = re.findall(r'<span class="tok [^"]*" title="[^"]*">(.*?)</span>', page, re.S)
    assert not any(re.search(r"[<>]|&(?!lt;|gt;|amp;|quot;|#x27;)", r) for r in raw)
    assert "&amp;" in page and "<b>" not in page
    # advantages: per-token tooltips and the per-segment figure in the header
    assert all(t.startswith("A=+0.750 · tool") for t, _ in spans(page, "tool"))
    assert all(t.startswith("A=-0.250 · summary") for t, _ in spans(page, "summary"))
    assert "<td>+0.750</td>" in page and "<td>-0.250</td>" in page
    assert "<th>reward/tool</th>" in page and "<td>0.900</td>" in page
    # one row per group: rows 0 and 2
    assert "#0 · task <code>task-0-0</code>" in page and "#2 · task <code>task-1-2</code>" in page


def test_rich_console_output(tok, tmp_path):
    cb = RolloutTable(num_episodes=3, html=False)
    buf = io.StringIO()
    cb.rich_console = Console(file=buf, width=200, force_terminal=True, color_system="truecolor")
    module = SimpleNamespace(last_rollout=make_record(tok), tokenizer=tok)
    cb.on_train_batch_end(trainer(tmp_path, 1), module, None, None, 0)
    out = buf.getvalue()
    assert "\x1b[" in out  # styled
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    for needle in ("task-0-0", "task-1-2", "stop", "0.900", "+0.750", "-0.250", "get_weather"):
        assert needle in plain
    assert not (tmp_path / "rollouts").exists()


def test_schedule_first_batch_then_every_n(tok, tmp_path):
    cb = RolloutTable(every_n_steps=10, console=False)
    module = SimpleNamespace(last_rollout=make_record(tok), tokenizer=tok)
    for step in (1, 2, 9, 10, 10, 11, 23, 25, 30):
        cb.on_train_batch_end(trainer(tmp_path, step), module, None, None, 0)
    names = sorted(p.name for p in (tmp_path / "rollouts").iterdir())
    assert names == ["step_000001.html", "step_000010.html", "step_000023.html", "step_000030.html"]


def test_long_response_keeps_head_and_tail(tok):
    page = rollout_html(make_record(tok, groups=(0,)), tok, max_tokens=10)
    assert "tokens not shown" in page
    assert len(re.findall(r'<span class="tok ', page)) == 11
    assert spans(page, "summary")[-1][1] == "<|im_end|>"


def test_odd_inputs_do_not_raise(tok, tmp_path):
    cb = RolloutTable(console=False)
    # no record, no tokenizer attribute at all
    cb.on_train_batch_end(trainer(tmp_path, 1), SimpleNamespace(), None, None, 0)
    # empty batch
    empty = collate_episodes([], pad_token_id=0)
    seg = mask_run_segments(empty.assistant_mask)
    record = RolloutRecord(empty, seg, torch.zeros(0, 0), RewardOutput(channels={}), step=10)
    cb.on_train_batch_end(
        trainer(tmp_path, 10), SimpleNamespace(last_rollout=record), None, None, 0
    )
    assert not (tmp_path / "rollouts").exists()
    # no tokenizer: ids are shown instead of text
    record = make_record(tok)
    cb.on_train_batch_end(
        trainer(tmp_path, 20), SimpleNamespace(last_rollout=record), None, None, 0
    )
    assert "⟨" in (tmp_path / "rollouts" / "step_000020.html").read_text(encoding="utf-8")
    # a malformed record warns once, then stays quiet
    bad = make_record(tok)
    bad.advantages = torch.zeros(3)
    module = SimpleNamespace(last_rollout=bad, tokenizer=tok)
    with pytest.warns(RuntimeWarning, match="RolloutTable"):
        cb.on_train_batch_end(trainer(tmp_path, 30), module, None, None, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cb.on_train_batch_end(trainer(tmp_path, 40), module, None, None, 0)
        cb.on_train_batch_end(
            trainer(tmp_path, 50), SimpleNamespace(last_rollout=object()), None, None, 0
        )


def test_falls_back_to_default_root_dir(tok, tmp_path):
    cb = RolloutTable(console=False)
    t = SimpleNamespace(global_step=1, log_dir=None, default_root_dir=str(tmp_path))
    cb.on_train_batch_end(
        t, SimpleNamespace(last_rollout=make_record(tok), tokenizer=tok), None, None, 0
    )
    assert (tmp_path / "rollouts" / "step_000001.html").exists()
