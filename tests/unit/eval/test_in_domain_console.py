"""What the in-domain evaluation puts on a terminal: the key columns of its table within 100
characters (the full table stays in the Markdown), and one warning line when most episodes
were cut by a token cap, naming the setting to raise."""

from __future__ import annotations

from slca_lightning.eval.in_domain import (
    COLUMNS,
    cap_warning,
    capped_episodes,
    console_table,
    markdown_rows,
)
from slca_lightning.types import Episode, Task

# The metrics of one quickstart evaluation (EpisodeMetrics and a second judge, `reference`):
# 16 metrics, 17 columns with the label.
QUICKSTART = {
    "tool_accuracy": 0.375,
    "success@0.9": 0.031,
    "success@0.7": 0.25,
    "success@0.8": 0.125,
    "success@1": 0.0,
    "name_f1": 0.891,
    "arg_match": 0.694,
    "process": 0.795,
    "tool_call_validity": 0.953,
    "tool_calls_per_episode": 1.203,
    "abstention_accuracy": 1.0,
    "assistant_turns_per_episode": 2.156,
    "redundancy": 0.016,
    "tokens_per_episode": 141.734,
    "reference/summary": 0.712,
    "reference/success@0.9": 0.047,
}
ROWS = [
    ("step 0 (start)", QUICKSTART),
    ("step 20", {**QUICKSTART, "tool_accuracy": 0.406}),
    ("step 40 (end)", {**QUICKSTART, "tool_accuracy": 0.422, "tokens_per_episode": 1234.5}),
]


def test_the_console_table_fits_100_columns_and_keeps_the_key_ones():
    assert len(QUICKSTART) + 1 == 17 and set(COLUMNS) <= set(QUICKSTART)
    full = markdown_rows(ROWS)
    assert max(map(len, full.splitlines())) > 100  # what wrapped in a terminal
    table = console_table(ROWS)
    lines = table.splitlines()
    assert len(lines) == 1 + len(ROWS)
    assert max(map(len, lines)) <= 100, table
    header = lines[0].split()
    assert header[:6] == [
        "evaluation",
        "tool_accuracy",
        "success@0.9",
        "name_f1",
        "arg_match",
        "process",
    ]
    assert "reference/summary" in header  # the judge training never sees
    assert lines[3].startswith("step 40 (end)") and "0.422" in lines[3]
    # columns line up: every value ends where its header ends
    end = lines[0].index("tool_accuracy") + len("tool_accuracy")
    assert all(line[:end].endswith(("0.375", "0.406", "0.422")) for line in lines[1:])


def test_a_narrow_console_gets_fewer_columns_never_a_wider_line():
    for width in (40, 60, 80):
        lines = console_table(ROWS, width=width).splitlines()
        assert max(map(len, lines)) <= width
        assert "tool_accuracy" in lines[0]


def episode(finish: str, last_turn_tokens: int) -> Episode:
    mask = [True] * 3 + [False] * 4 + [True] * last_turn_tokens
    return Episode(
        task=Task(task_id="t", messages=[]),
        response_ids=[1] * len(mask),
        assistant_mask=mask,
        logprobs=[0.0] * len(mask),
        finish_reason=finish,
    )


def test_most_episodes_at_the_reply_cap_is_one_line_naming_the_setting():
    eps = [episode("length", 8)] * 3 + [episode("stop", 2)]
    assert capped_episodes(eps, 8) == {"capped": 3, "episodes": 4, "reply_cap": 3}
    line = cap_warning(eps, 8, 64)
    assert line is not None and "\n" not in line
    assert "3 of 4 episodes (75 %)" in line and "8-token reply cap" in line
    assert line.endswith("raise data.max_new_tokens")
    own = cap_warning(eps, 8, 64, raise_reply="--max-new-tokens")
    assert own.endswith("raise --max-new-tokens")


def test_the_episode_budget_is_named_when_it_cut_the_replies():
    eps = [episode("length", 5)] * 4  # cut before any reply reached 8 tokens
    line = cap_warning(eps, 8, 64)
    assert "64-token episode budget" in line and line.endswith("raise data.max_response_tokens")


def test_half_or_fewer_capped_says_nothing():
    assert cap_warning([episode("length", 8), episode("stop", 2)], 8, 64) is None
    assert cap_warning([], 8, 64) is None
    assert cap_warning([episode("max_turns", 2)] * 3, 8, 64) is None  # the turn cap: no token cap
