"""Progress of long evaluations: entries done of the total, elapsed time, time left.

Real parts: :func:`progress` itself (a fake clock where the schedule is checked, the real
clock for the heartbeat), tqdm, and the three evaluators run for real (BFCL and the
in-domain evaluator on the tiny model, τ² with the oracle agent and the scripted user),
their stderr captured.
"""

from __future__ import annotations

import io
import re
import time

import pytest

from slca_lightning.eval.progress import format_seconds, progress

LINE = re.compile(r"^(?P<label>[\w ]+): (?P<done>\d+)/(?P<total>\d+) (?P<unit>\w+)")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def _progress(total, clock, out):
    return progress("bfcl", total, stream=out, clock=clock, heartbeat=False)


def _lines(text: str) -> list[tuple[int, int]]:
    got = []
    for line in text.splitlines():
        m = LINE.match(line)
        assert m, line
        got.append((int(m["done"]), int(m["total"])))
    return got


def test_format_seconds():
    assert [format_seconds(s) for s in (0, 9.4, 65, 3599, 3725)] == [
        "0s",
        "9s",
        "1m05s",
        "59m59s",
        "1h02m",
    ]


def test_one_line_per_tenth_with_done_total_elapsed_and_eta():
    clock, out = Clock(), io.StringIO()
    with _progress(20, clock, out) as update:
        for _ in range(20):
            clock.t += 1.0
            update(1)
    lines = out.getvalue().splitlines()
    assert lines[0] == "bfcl: 0/20 entries, started"
    assert _lines(out.getvalue()) == [(0, 20)] + [(k, 20) for k in range(2, 20, 2)] + [(20, 20)]
    assert lines[4] == "bfcl: 8/20 entries (40%), 8s elapsed, ~12s left"
    assert lines[-1] == "bfcl: 20/20 entries (100%), 20s elapsed, done"


def test_slow_entries_get_a_line_per_30_s_and_fast_ones_stay_quiet():
    clock, out = Clock(), io.StringIO()
    with _progress(1000, clock, out) as update:
        for _ in range(3):  # 31 s per entry: each gets its line though far below 10 %
            clock.t += 31.0
            update(1)
        assert _lines(out.getvalue())[1:] == [(1, 1000), (2, 1000), (3, 1000)]
        assert "~8h35m left" in out.getvalue().splitlines()[-1]  # 31 s × 997
        before = len(out.getvalue().splitlines())
        for _ in range(50):  # fast entries: below 10 % and 30 s, no line
            clock.t += 0.1
            update(1)
        assert len(out.getvalue().splitlines()) == before
    assert out.getvalue().splitlines()[-1].startswith("bfcl: 53/1000 entries (5%)")


def test_at_most_one_line_per_tenth_or_30_s():
    clock, out = Clock(), io.StringIO()
    with _progress(500, clock, out) as update:
        for _ in range(500):
            clock.t += 0.5  # 250 s in all: ≤ 10 tenths + 250/30 intervals
            update(1)
    lines = out.getvalue().splitlines()
    assert len(lines) <= 1 + 10 + 250 // 30 + 1
    done = [d for d, _ in _lines(out.getvalue())]
    assert done == sorted(done) and done[-1] == 500


def test_heartbeat_writes_while_a_long_batch_runs():
    out = io.StringIO()
    with progress("tau2 airline", 4, "conversations", stream=out, every_s=0.05) as update:
        time.sleep(0.4)  # one batch, no entry done yet
        update(4)
    lines = out.getvalue().splitlines()
    beats = [line for line in lines if line.startswith("tau2 airline: 0/4 conversations (0%)")]
    assert beats and "time left unknown" in beats[0]
    assert lines[-1].startswith("tau2 airline: 4/4 conversations (100%)")


def test_terminal_gets_a_tqdm_bar_and_disabled_writes_nothing():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    with progress("bfcl", 3, stream=tty) as update:
        update(3)
    assert "bfcl" in tty.getvalue() and "3/3" in tty.getvalue()
    assert "started" not in tty.getvalue()  # a bar, not the plain lines
    quiet = io.StringIO()
    with progress("bfcl", 3, stream=quiet, enabled=False) as update:
        update(3)
    assert quiet.getvalue() == ""


# -- the evaluators report ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny():
    from slca_lightning.models.policy import load_policy

    return load_policy("tiny")


def _stderr_lines(capsys, label: str) -> list[tuple[int, int]]:
    err = capsys.readouterr().err
    return _lines("\n".join(line for line in err.splitlines() if line.startswith(f"{label}:")))


def test_bfcl_evaluator_reports_progress(tiny, capsys):
    from slca_lightning.eval.bfcl.evaluator import BFCLEvaluator

    ev = BFCLEvaluator("simple_python,irrelevance", limit=2, max_new_tokens=4, batch_size=1)
    report = ev.run(*tiny)
    assert sum(report.counts.values()) == 4
    lines = _stderr_lines(capsys, "bfcl")
    assert lines[0] == (0, 4) and lines[-1] == (4, 4) and len(lines) >= 4
    quiet = BFCLEvaluator("simple_python", limit=1, max_new_tokens=2, progress=False)
    quiet.run(*tiny)
    assert _stderr_lines(capsys, "bfcl") == []


def test_tau2_evaluator_reports_progress(capsys):
    from slca_lightning.eval.tau2.evaluator import Tau2Evaluator
    from slca_lightning.eval.tau2.loop import OracleAgent

    Tau2Evaluator("airline", split="base", limit=3, trials=2).evaluate(OracleAgent())
    lines = _stderr_lines(capsys, "tau2 airline")
    assert lines[0] == (0, 6) and lines[-1] == (6, 6)
    assert [d for d, _ in lines] == sorted(d for d, _ in lines)


def test_in_domain_evaluator_reports_progress(tiny, capsys):
    from slca_lightning.data.task_sources import SyntheticTasks
    from slca_lightning.eval.in_domain import evaluate_in_domain
    from slca_lightning.rollout.datamodule import RolloutDataModule
    from slca_lightning.testing.rewards import TokenParityReward

    model, tok = tiny
    dm = RolloutDataModule(
        SyntheticTasks(n_train=2, n_heldout=3, families=["math"]),
        max_turns=1,
        max_new_tokens=4,
    )
    result = evaluate_in_domain(
        model, tok, TokenParityReward(), dm, num_tasks=3, batch_size=1, sync_on_compute=False
    )
    assert len(result.episodes) == 3
    lines = _stderr_lines(capsys, "in_domain")
    assert lines == [(0, 3), (1, 3), (2, 3), (3, 3)]
