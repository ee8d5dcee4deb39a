"""``slca eval`` on the tiny model with a tiny reply cap: every reply is cut, and the command
says so in one warning line naming the setting to raise; ``--save-episodes`` writes the
episodes as the fit callback ``InDomainEval(save_episodes=True)`` does.

Real parts: the tiny model sampling greedily (HFEngine), the agent loop, the schema-guided
simulator over the synthetic suite's Python tools, HierR, the standalone command's parser.
"""

from __future__ import annotations

import json

import pytest

from slca_lightning.cli import evaluate as standalone


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    out = tmp_path_factory.mktemp("eval")
    args = ["--model", "tiny", "--num-tasks", "4", "--max-new-tokens", "2"]
    return out, [*args, "--save-episodes", "--out", str(out)]


def test_most_replies_at_the_cap_warn_in_one_line(capped, capsys):
    out, argv = capped
    summary = standalone.main(argv)
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1, err[-2000:]
    line = warnings[0]
    assert line.startswith("slca eval: warning: in_domain: 4 of 4 episodes (100 %) hit")
    assert "2-token reply cap" in line
    assert "--max-new-tokens" in line and "data.max_new_tokens" in line
    assert summary["capped"] == {"in_domain": 1.0}
    saved = json.loads((out / "summary.json").read_text())
    assert saved["capped"] == {"in_domain": 1.0}


def test_save_episodes_writes_the_transcripts_as_the_fit_callback_does(capped):
    out, argv = capped
    summary = standalone.main(argv)
    path = out / "in_domain_episodes.jsonl"
    assert summary["episodes"] == {"in_domain": str(path)}
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 4
    keys = {"task_id", "kind", "question", "gold", "turns", "observations", "rewards", "exact"}
    for row in rows:
        assert keys <= set(row)
        assert row["finish_reason"] == "length"
        assert {"tool", "summary", "total"} <= set(row["rewards"])
    assert len({r["task_id"] for r in rows}) == 4  # one line per held-out task


def test_nothing_is_saved_unasked_and_a_cap_below_one_is_refused(tmp_path, capsys):
    summary = standalone.main(
        ["--model", "tiny", "--num-tasks", "2", "--max-new-tokens", "2", "--out", str(tmp_path)]
    )
    assert summary["episodes"] == {} and not list(tmp_path.glob("*.jsonl"))
    capsys.readouterr()
    with pytest.raises(ValueError, match="--max-new-tokens: must be an integer >= 1"):
        standalone.main(["--model", "tiny", "--max-new-tokens", "0", "--out", str(tmp_path)])
