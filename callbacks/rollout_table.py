"""Show a few rollouts token by token, coloured by credit segment, in the console and as HTML.

Reads ``pl_module.last_rollout`` (a :class:`~slca_lightning.rollout.record.RolloutRecord`) and
``pl_module.tokenizer``; writes ``rollouts/step_{k:06d}.html`` under the trainer's log dir.
"""

from __future__ import annotations

import html
import math
import os
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

from slca_lightning.config.checks import check_args
from slca_lightning.training.console import printable

__all__ = ["RolloutTable", "rollout_html"]

_PRIMARY = ("tool", "summary", "total")
_RICH_STYLES = {
    "tool": "bold cyan",
    "summary": "bold green",
    "env": "dim",
    "elided": "italic red",
}
_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:70em}
h2{font-size:1.05em;margin:1.4em 0 .3em}
.legend{font-size:13px;margin-bottom:1em}
.swatch{padding:1px 6px;border-radius:3px;margin-right:.6em}
.response{font-family:ui-monospace,Menlo,monospace;font-size:13px;white-space:pre-wrap;
  word-break:break-word;border:1px solid #ddd;border-radius:4px;padding:.6em;line-height:1.7}
.seg-tool{background:#cfe3ff}
.seg-summary{background:#d4f5d0}
.seg-other{background:#f3dcf7}
.seg-env{color:#999;background:#f5f5f5}
.seg-elided{color:#b00;font-style:italic}
.tok.pos{box-shadow:inset 0 -2px 0 #2a9d3a}
.tok.neg{box-shadow:inset 0 -2px 0 #d22}
.question{color:#555;font-size:13px;margin:.2em 0}
table.meta{border-collapse:collapse;font-size:13px;margin:.3em 0}
table.meta th,table.meta td{border:1px solid #ddd;padding:2px 8px;text-align:right}
"""


@dataclass
class _Token:
    text: str
    seg: str  # "tool" | "summary" | another segment name | "env" | "elided"
    adv: float
    token_id: int


@dataclass
class _Row:
    index: int
    task_id: str
    group: int
    finish: str
    question: str
    rewards: dict[str, float]
    seg_adv: dict[str, tuple[float, float, float]]  # segment -> (mean, min, max)
    tokens: list[_Token]


def _select_rows(group_ids: torch.Tensor, k: int) -> list[int]:
    """Up to ``k`` row indices: the first row of each group, then the remaining rows."""
    groups = [int(g) for g in group_ids.reshape(-1).tolist()]
    picked, seen = [], set()
    for r, g in enumerate(groups):
        if g not in seen and len(picked) < k:
            seen.add(g)
            picked.append(r)
    rest = [r for r in range(len(groups)) if r not in picked]
    return sorted(picked + rest[: max(0, k - len(picked))])


def _decoder(tokenizer: Any):
    cache: dict[int, str] = {}

    def decode(token_id: int) -> str:
        if token_id not in cache:
            try:
                text = tokenizer.decode([token_id], skip_special_tokens=False)
                cache[token_id] = text if isinstance(text, str) else str(text)
            except Exception:
                cache[token_id] = f"⟨{token_id}⟩"
        return cache[token_id]

    return decode


def _build_rows(record: Any, tokenizer: Any, num_episodes: int, max_tokens: int) -> list[_Row]:
    batch = record.batch
    ids = batch.input_ids.detach().cpu()
    b, t = ids.shape
    assistant = batch.assistant_mask.detach().cpu().bool()
    attention = getattr(batch, "attention_mask", None)
    attention = torch.ones_like(assistant) if attention is None else attention.detach().cpu().bool()
    adv = record.advantages.detach().float().cpu()
    masks = {n: m.detach().cpu().bool() for n, m in record.segments.masks.items()}
    for name, value in [("advantages", adv), ("assistant_mask", assistant), *masks.items()]:
        if tuple(value.shape) != (b, t):
            raise ValueError(f"{name} has shape {tuple(value.shape)}, input_ids has {(b, t)}")
    seg_names = [n for n in ("tool", "summary") if n in masks] + [
        n for n in masks if n not in ("tool", "summary")
    ]
    channels = {n: v.detach().float().cpu().reshape(-1) for n, v in record.rewards.channels.items()}
    channel_names = [n for n in _PRIMARY if n in channels] + [
        n for n in channels if n not in _PRIMARY
    ]
    episodes = list(batch.episodes) if len(batch.episodes) == b else [None] * b
    decode = _decoder(tokenizer) if tokenizer is not None else (lambda i: f"⟨{i}⟩")
    rows = []
    for r in _select_rows(batch.group_ids.detach().cpu(), num_episodes):
        ep = episodes[r]
        real = attention[r].nonzero().reshape(-1)
        end = int(real[-1]) + 1 if len(real) else 0
        sampled = assistant[r, :end].nonzero().reshape(-1)
        if ep is not None and 0 < len(ep.prompt_ids) <= end:
            start = len(ep.prompt_ids)
        else:
            start = int(sampled[0]) if len(sampled) else 0
        positions: list[int | None] = list(range(start, end))
        hidden = len(positions) - max_tokens
        if hidden > 0:  # keep the head and the tail: the summary sits at the end
            head = max_tokens // 2
            positions = [
                *positions[:head],
                None,
                *positions[len(positions) - (max_tokens - head) :],
            ]
        tokens = []
        for pos in positions:
            if pos is None:
                tokens.append(_Token(f" … {hidden} tokens not shown … ", "elided", math.nan, -1))
                continue
            seg = "env"
            if assistant[r, pos]:
                seg = next((n for n in seg_names if masks[n][r, pos]), "other")
            tok_id = int(ids[r, pos])
            tokens.append(_Token(printable(decode(tok_id)), seg, float(adv[r, pos]), tok_id))
        seg_adv = {}
        for name in seg_names:
            values = adv[r][masks[name][r]]
            if values.numel():
                seg_adv[name] = (float(values.mean()), float(values.min()), float(values.max()))
        rows.append(
            _Row(
                index=r,
                task_id=str(ep.task.task_id) if ep is not None else f"row {r}",
                group=int(batch.group_ids.reshape(-1)[r]),
                finish=str(ep.finish_reason) if ep is not None else "?",
                question=str(getattr(ep.task, "question", "") or "") if ep is not None else "",
                rewards={
                    n: float(channels[n][r]) for n in channel_names if channels[n].numel() > r
                },
                seg_adv=seg_adv,
                tokens=tokens,
            )
        )
    return rows


def _fmt_adv(stats: tuple[float, float, float] | None) -> str:
    if stats is None:
        return "—"
    mean, lo, hi = stats
    return f"{mean:+.3f}" if hi - lo < 1e-6 else f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def _span(tok: _Token) -> str:
    cls = f"seg-{tok.seg}" if tok.seg in ("tool", "summary", "env", "elided") else "seg-other"
    if tok.seg in ("env", "elided"):
        title = "environment (not sampled)" if tok.seg == "env" else "elided"
    else:
        title = f"A={tok.adv:+.3f} · {tok.seg}"
        cls += " pos" if tok.adv > 1e-8 else " neg" if tok.adv < -1e-8 else ""
    if tok.token_id >= 0:
        title += f" · id {tok.token_id}"
    return f'<span class="tok {cls}" title="{html.escape(title)}">{html.escape(tok.text)}</span>'


def _render_html(rows: list[_Row], step: int, rollout_step: int | None = None) -> str:
    esc = html.escape
    heading = f"Rollouts at step {step}"
    if rollout_step is not None and rollout_step != step:
        heading += f" (rollout step {rollout_step})"
    parts = [
        '<!doctype html><html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(heading)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{esc(heading)}</h1>",
        '<div class="legend"><span class="swatch seg-tool">tool segment</span>'
        '<span class="swatch seg-summary">summary segment</span>'
        '<span class="swatch seg-other">other segment</span>'
        '<span class="swatch seg-env">environment (tool responses, chat glue)</span>'
        "underline: sign of the token's advantage (green +, red −); hover a token for its "
        "advantage and id.</div>",
    ]
    for row in rows:
        names = list(row.rewards)
        header = "".join(f"<th>reward/{esc(n)}</th>" for n in names)
        header += "<th>A tool</th><th>A summary</th>"
        cells = "".join(f"<td>{row.rewards[n]:.3f}</td>" for n in names)
        cells += f"<td>{esc(_fmt_adv(row.seg_adv.get('tool')))}</td>"
        cells += f"<td>{esc(_fmt_adv(row.seg_adv.get('summary')))}</td>"
        parts.append(
            f"<section><h2>#{row.index} · task <code>{esc(row.task_id)}</code> · group "
            f"{row.group} · finish: {esc(row.finish)}</h2>"
        )
        if row.question:
            parts.append(f'<p class="question">{esc(row.question)}</p>')
        parts.append(f'<table class="meta"><tr>{header}</tr><tr>{cells}</tr></table>')
        parts.append('<div class="response">' + "".join(map(_span, row.tokens)) + "</div>")
        parts.append("</section>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _print_rich(rows: list[_Row], step: int, console: Any) -> None:
    from rich.rule import Rule
    from rich.table import Table
    from rich.text import Text

    channels = list(dict.fromkeys(n for row in rows for n in row.rewards))
    table = Table(title=f"Rollouts at step {step}")
    for col in ["#", "task", "group", "finish", *(f"r/{n}" for n in channels)]:
        table.add_column(printable(col), overflow="fold")
    table.add_column("A tool", overflow="fold")
    table.add_column("A summary", overflow="fold")
    for row in rows:
        rewards = [f"{row.rewards[n]:.3f}" if n in row.rewards else "—" for n in channels]
        cells = [str(row.index), row.task_id, str(row.group), row.finish, *rewards]
        cells += [_fmt_adv(row.seg_adv.get("tool")), _fmt_adv(row.seg_adv.get("summary"))]
        table.add_row(*(Text(printable(c)) for c in cells))
    console.print(table)
    legend = Text.assemble(
        ("tool", _RICH_STYLES["tool"]),
        " · ",
        ("summary", _RICH_STYLES["summary"]),
        " · ",
        ("other segment", "magenta"),
        " · ",
        ("environment", _RICH_STYLES["env"]),
    )
    console.print(legend)
    for row in rows:
        console.print(Rule(Text(printable(f"#{row.index} · {row.task_id} · {row.finish}"))))
        text = Text()
        for tok in row.tokens:  # already printable (_build_rows)
            text.append(tok.text, style=_RICH_STYLES.get(tok.seg, "magenta"))
        console.print(text)


def rollout_html(record: Any, tokenizer: Any, num_episodes: int = 3, max_tokens: int = 400) -> str:
    """Render a :class:`RolloutRecord` as one self-contained HTML page (no trainer needed)."""
    rows = _build_rows(record, tokenizer, num_episodes, max_tokens)
    return _render_html(rows, int(record.step))


def _log_dir(trainer: Any) -> str:
    for name in ("log_dir", "default_root_dir"):
        value = getattr(trainer, name, None)
        if value:
            return str(value)
    return os.getcwd()


class RolloutTable(Callback):
    """Print and save a few rollouts, token by token, coloured by credit segment.

    Renders after the first training batch and then whenever ``trainer.global_step`` reaches
    (or jumps past) a multiple of ``every_n_steps``. Rows: one per group while groups last.
    Tool-segment and summary-segment tokens get their own colours, environment tokens
    (``assistant_mask`` 0: tool responses, chat glue) are dimmed; each row shows its channel
    rewards and the advantage on each segment, and in HTML every token's tooltip has its
    advantage. Responses longer than ``max_tokens`` keep their head and tail.

    Args:
        every_n_steps: render period in optimiser steps.
        num_episodes: rows per render.
        max_tokens: response tokens shown per row.
        console: print a ``rich`` table and the coloured text.
        html: write ``rollouts/step_{k:06d}.html`` under ``trainer.log_dir`` (or
            ``trainer.default_root_dir``).

    Attributes:
        rich_console: the ``rich.console.Console`` printed to (created on first use; set it
            to redirect output, e.g. ``Console(file=io.StringIO())``).
        last_html_path: the path of the last HTML file written, or None.

    Never raises from a hook: a failure to render is warned about once and skipped.
    """

    def __init__(
        self,
        every_n_steps: int = 10,
        num_episodes: int = 3,
        max_tokens: int = 400,
        console: bool = True,
        html: bool = True,
    ) -> None:
        check_args(RolloutTable, locals())
        if every_n_steps < 1 or num_episodes < 1 or max_tokens < 2:
            raise ValueError("every_n_steps, num_episodes must be ≥ 1 and max_tokens ≥ 2")
        self.every_n_steps = every_n_steps
        self.num_episodes = num_episodes
        self.max_tokens = max_tokens
        self.console = console
        self.html = html
        self.rich_console: Any = None
        self.last_html_path: str | None = None
        self._prev_step: int | None = None
        self._warned = False

    def _due(self, step: int) -> bool:
        prev, self._prev_step = self._prev_step, step
        if prev is None:
            return True
        if step == prev:
            return False
        return step == 1 or step // self.every_n_steps != prev // self.every_n_steps

    def render(self, record: Any, tokenizer: Any, step: int, log_dir: str) -> str | None:
        """Render ``record`` now (console and/or HTML); returns the HTML path or None."""
        rows = _build_rows(record, tokenizer, self.num_episodes, self.max_tokens)
        if not rows:
            return None
        path = None
        if self.html:
            path = os.path.join(log_dir, "rollouts", f"step_{step:06d}.html")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(_render_html(rows, step, int(getattr(record, "step", step))))
            self.last_html_path = path
        if self.console:
            if self.rich_console is None:
                from rich.console import Console

                self.rich_console = Console(record=False)
            _print_rich(rows, step, self.rich_console)
        return path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = int(getattr(trainer, "global_step", 0))
        if not self._due(step) or not getattr(trainer, "is_global_zero", True):
            return
        record = getattr(pl_module, "last_rollout", None)
        if record is None:
            return
        try:
            self.render(record, getattr(pl_module, "tokenizer", None), step, _log_dir(trainer))
        except Exception as err:
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"RolloutTable: could not render the rollout at step {step} "
                    f"({type(err).__name__}: {err}); skipping (warned once).",
                    RuntimeWarning,
                    stacklevel=2,
                )
