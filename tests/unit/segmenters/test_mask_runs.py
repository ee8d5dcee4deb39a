"""The paper's mask-run segmenter: literal cases and the partition property."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from slca_lightning.segmenters import MaskRunSegmenter, check_partition, mask_run_segments
from slca_lightning.types import RolloutBatch


def m(rows):
    return torch.tensor(rows, dtype=torch.bool)


def test_last_run_is_summary_earlier_runs_are_tool():
    mask = m([[0, 1, 1, 0, 0, 1, 0, 1, 1]])
    seg = mask_run_segments(mask)
    assert seg.masks["tool"].tolist() == [[0, 1, 1, 0, 0, 1, 0, 0, 0]]
    assert seg.masks["summary"].tolist() == [[0, 0, 0, 0, 0, 0, 0, 1, 1]]
    assert seg.present["tool"].tolist() == [True]
    assert seg.present["summary"].tolist() == [True]


def test_single_run_is_summary_only_and_empty_row_is_in_neither():
    seg = mask_run_segments(m([[0, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 1]]))
    assert seg.present["tool"].tolist() == [False, False, True]
    assert seg.present["summary"].tolist() == [True, False, True]
    assert seg.masks["summary"].tolist()[0] == [0, 1, 1, 1]
    assert not bool(seg.masks["tool"][1].any() or seg.masks["summary"][1].any())


def test_run_touching_both_ends():
    seg = mask_run_segments(m([[1, 1, 0, 1, 1]]))
    assert seg.masks["tool"].tolist() == [[1, 1, 0, 0, 0]]
    assert seg.masks["summary"].tolist() == [[0, 0, 0, 1, 1]]


def test_zero_length_rows():
    seg = mask_run_segments(torch.zeros(3, 0, dtype=torch.bool))
    assert seg.masks["tool"].shape == (3, 0)
    assert seg.present["summary"].tolist() == [False] * 3


def test_segmenter_reads_the_batch_mask():
    mask = m([[0, 1, 0, 1]])
    batch = RolloutBatch(
        input_ids=torch.zeros(1, 4, dtype=torch.long),
        attention_mask=torch.ones(1, 4, dtype=torch.bool),
        assistant_mask=mask,
        group_ids=torch.zeros(1, dtype=torch.long),
    )
    assert MaskRunSegmenter()(batch).masks["summary"].tolist() == [[0, 0, 0, 1]]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda b: st.integers(0, 40).flatmap(
            lambda t: st.lists(
                st.lists(st.booleans(), min_size=t, max_size=t), min_size=b, max_size=b
            )
        )
    )
)
def test_masks_partition_the_assistant_mask(rows):
    mask = torch.tensor(rows, dtype=torch.bool).reshape(len(rows), -1)
    seg = mask_run_segments(mask)
    check_partition(seg, mask)
    for n in (1, 3):
        check_partition(mask_run_segments(mask, stop_decision_tokens=n), mask)
    for b, row in enumerate(rows):
        runs = sum(1 for t, v in enumerate(row) if v and (t == 0 or not row[t - 1]))
        assert bool(seg.present["tool"][b]) == (runs >= 2)
        assert bool(seg.present["summary"][b]) == (runs >= 1)
        # the summary segment is one contiguous run, after every tool token
        s = [t for t, v in enumerate(seg.masks["summary"][b].tolist()) if v]
        assert s == list(range(s[0], s[-1] + 1)) if s else True
        tool = [t for t, v in enumerate(seg.masks["tool"][b].tolist()) if v]
        if tool and s:
            assert max(tool) < s[0]


def test_stop_decision_tokens_move_the_answers_first_tokens_to_the_tool_segment():
    mask = m([[0, 1, 1, 0, 1, 1, 1], [0, 1, 1, 1, 0, 0, 0], [1, 0, 1, 0, 1, 1, 0]])
    one = mask_run_segments(mask, stop_decision_tokens=1)
    assert one.masks["tool"].tolist() == [
        [0, 1, 1, 0, 1, 0, 0],
        [0, 0, 0, 0, 0, 0, 0],  # one run (no call): the paper's rule, all summary
        [1, 0, 1, 0, 1, 0, 0],
    ]
    assert one.masks["summary"].tolist() == [
        [0, 0, 0, 0, 0, 1, 1],
        [0, 1, 1, 1, 0, 0, 0],
        [0, 0, 0, 0, 0, 1, 0],
    ]
    two = mask_run_segments(mask, stop_decision_tokens=2)
    assert two.masks["summary"].tolist()[0] == [0, 0, 0, 0, 0, 0, 1]
    assert two.masks["summary"].tolist()[2] == [0, 0, 0, 0, 0, 0, 0]  # the whole run moved
    # presence is the paper's: K >= 2 for tool, K >= 1 for summary, whatever moved
    for seg in (one, two):
        for name, present in mask_run_segments(mask).present.items():
            assert seg.present[name].tolist() == present.tolist()
    check_partition(two, mask)


def test_stop_decision_tokens_must_not_be_negative():
    with pytest.raises(ValueError, match="stop_decision_tokens must be >= 0, got -1"):
        MaskRunSegmenter(stop_decision_tokens=-1)
    with pytest.raises(ValueError, match="stop_decision_tokens"):
        mask_run_segments(m([[1]]), stop_decision_tokens=-1)


def test_slca_credits_an_early_stop_by_its_summary_unless_the_stop_is_a_tool_token():
    """A two-step task (the SmolLM2 seed-0 run's failure: answering after step 1). Rows 0-1
    make both calls (process 1.0) and answer; rows 2-3 answer after the first call (process
    0.742 under HierR) with a summary the judge likes a little more. The first token of the
    answer turn is the stop decision: under the paper's segmentation it gets the summary
    advantage (positive for the early stop), with ``stop_decision_tokens=1`` the tool one."""
    from slca_lightning.advantages import SLCARouter
    from slca_lightning.types import RewardOutput

    # row: prompt, call 1, env, call 2 (rows 0-1) or answer (rows 2-3), env, answer
    mask = m(
        [
            [0, 1, 1, 0, 1, 1, 0, 1, 1],
            [0, 1, 1, 0, 1, 1, 0, 1, 1],
            [0, 1, 1, 0, 1, 1, 1, 0, 0],
            [0, 1, 1, 0, 1, 1, 1, 0, 0],
        ]
    )
    tool = torch.tensor([1.0, 1.0, 0.742, 0.742])
    summary = torch.tensor([0.6, 0.65, 0.7, 0.7])
    rewards = RewardOutput(channels={"tool": tool, "summary": summary, "total": tool + summary})
    groups = torch.zeros(4, dtype=torch.long)
    stop = [(2, 4), (3, 4)]  # first answer token of the early-stopping rows
    paper = SLCARouter()(rewards, mask_run_segments(mask), groups)
    moved = SLCARouter()(rewards, mask_run_segments(mask, stop_decision_tokens=1), groups)
    assert all(float(paper[r, t]) > 0 for r, t in stop)
    assert all(float(moved[r, t]) < 0 for r, t in stop)
    # everything else is credited as before
    keep = torch.ones_like(mask)
    for r, t in stop:
        keep[r, t] = False
    keep[0, 7] = keep[1, 7] = False  # the full rows' answer openers moved too
    torch.testing.assert_close(paper[keep], moved[keep])
    assert float(moved[0, 7]) > 0 and float(moved[1, 7]) > 0
