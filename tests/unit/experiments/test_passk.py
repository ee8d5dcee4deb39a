"""experiments.learning.passk: the unbiased pass@k estimator and the per-kind summary."""

import math

import pytest

from experiments.learning.passk import pass_at, summarise, table


def test_pass_at_matches_the_closed_form_and_its_edges():
    assert pass_at(8, 0, 4) == 0.0
    assert pass_at(8, 8, 1) == 1.0
    assert pass_at(8, 5, 4) == 1.0  # fewer than k wrong samples: every k-subset holds a right one
    assert pass_at(8, 2, 1) == pytest.approx(2 / 8)
    assert pass_at(8, 2, 4) == pytest.approx(1 - math.comb(6, 4) / math.comb(8, 4))  # 1 - 15/70
    with pytest.raises(ValueError, match="n=4, c=5"):
        pass_at(4, 5, 1)
    with pytest.raises(ValueError, match="k=5"):
        pass_at(4, 1, 5)


def test_summarise_counts_headroom_and_mixed_tasks():
    rows = [
        {"greedy": 1, "correct": 4},  # solved either way
        {"greedy": 0, "correct": 1},  # reachable: RL's room
        {"greedy": 1, "correct": 2},  # mixed, greedy right
        {"greedy": 0, "correct": 0},  # never sampled right: no gradient towards it
    ]
    out = summarise(rows, k=4)
    assert out["tasks"] == 4
    assert out["greedy_exact"] == 0.5
    assert out["sampled_exact"] == 7 / 16
    assert out["pass@1"] == pytest.approx(7 / 16)
    assert out["pass@4"] == 0.75
    assert out["headroom"] == 0.25
    assert (out["mixed_tasks"], out["never_exact_tasks"], out["reachable_greedy_misses"]) == (
        2,
        1,
        1,
    )
    assert set(k for k in out if k.startswith("pass@")) == {"pass@1", "pass@2", "pass@4"}
    assert "pass@6" in summarise([{"greedy": 0, "correct": 3}], k=6)  # k itself always reported


def test_table_has_a_row_per_kind_and_one_overall():
    rows = [{"greedy": 1, "correct": 2}, {"greedy": 0, "correct": 0}]
    result = {
        "split": "heldout", "k": 2, "temperature": 0.7, "seed": 0, "threads": 1, "seconds": 1.0,
        "overall": summarise(rows, 2),
        "by_kind": {"single": summarise(rows[:1], 2), "parallel": summarise(rows[1:], 2)},
    }  # fmt: skip
    lines = table(result).splitlines()
    assert [ln.split("|")[1].strip() for ln in lines[4:]] == ["single", "parallel", "all"]
    assert "| all | 2 | 0.500 | 0.500 | 0.500 | 0.500 | 0.000 | 0 | 1 |" in lines
