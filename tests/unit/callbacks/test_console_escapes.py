"""Nothing a model samples (or a task file holds) reaches the terminal as a raw control
character: :func:`printable` escapes them, keeping newlines and tabs, and RolloutTable's
console output goes through it (rich itself passes ESC and C1 codes on)."""

from __future__ import annotations

import io
import re
import unicodedata
from types import SimpleNamespace

from rich.console import Console
from test_rollout_table import make_record  # the hand-built record (this folder)

from callbacks import RolloutTable
from slca_lightning.models.tiny import build_tiny_tokenizer
from slca_lightning.training.console import printable

HOSTILE = "a\x1b[2J\x1b]0;title\x07b\rc\x9b31md\x00e\x7ff\u202eg\u2028h"


def raw_controls(text: str) -> list[str]:
    """The characters a terminal would act on: controls other than newline and tab, line
    separators and bidirectional overrides."""
    bad = {"\u2028", "\u2029", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))}
    return [c for c in text if (unicodedata.category(c) == "Cc" and c not in "\n\t") or c in bad]


def test_printable_escapes_controls_and_keeps_newlines_and_tabs():
    out = printable(HOSTILE + "\n\tnext line é ✓")
    assert raw_controls(out) == []
    assert out.endswith("\n\tnext line é ✓")
    for escape in ("\\x1b[2J", "\\x07", "\\x0d", "\\x9b", "\\x00", "\\x7f", "\\u202e", "\\u2028"):
        assert escape in out
    assert printable("plain text, 0.375") == "plain text, 0.375"


def test_rollout_table_console_output_has_no_raw_control_character(tmp_path):
    tok = build_tiny_tokenizer()
    record = make_record(tok)
    for ep in record.batch.episodes:  # a task file's id and a finish reason with escapes
        ep.task.task_id = "task\x1b[31m-" + HOSTILE
        ep.finish_reason = "stop\x9b2J"
    cb = RolloutTable(num_episodes=2, html=False)
    buf = io.StringIO()
    cb.rich_console = Console(file=buf, width=200, force_terminal=False, color_system=None)
    module = SimpleNamespace(last_rollout=record, tokenizer=tok)
    trainer = SimpleNamespace(global_step=1, log_dir=str(tmp_path), is_global_zero=True)
    cb.on_train_batch_end(trainer, module, None, None, 0)
    out = buf.getvalue()
    assert "get_weather" in out and "task\\x1b[31m-" in out  # printed, escaped
    assert raw_controls(out) == [], sorted(set(raw_controls(out)))
    assert not re.search(r"\x1b\[", out)
