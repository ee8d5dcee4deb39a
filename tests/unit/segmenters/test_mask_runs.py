"""The paper's mask-run segmenter: literal cases and the partition property."""

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
