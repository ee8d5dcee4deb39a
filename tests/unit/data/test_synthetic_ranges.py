"""SyntheticTasks' train and held-out index ranges (``train_start``, ``heldout_start``)."""

import pytest

from slca_lightning.data import SyntheticTaskGenerator
from slca_lightning.data.task_sources import SyntheticTasks
from slca_lightning.models.warm_start import WARM_STARTS


def _ids(tasks):
    return [t.task_id for t in tasks]


def test_default_layout_is_unchanged():
    """Without the new arguments: the first n_train tasks, then the next n_heldout."""
    src = SyntheticTasks(n_train=12, n_heldout=5, seed=3)
    train, heldout = SyntheticTaskGenerator(seed=3).splits(12, 5)
    assert _ids(src.train()) == _ids(train)
    assert _ids(src.heldout()) == _ids(heldout)
    assert [t.messages for t in src.heldout()] == [t.messages for t in heldout]


def test_fresh_train_range_keeps_the_heldout_tasks_and_skips_the_warm_start_demos():
    """The quickstart's layout: RL trains on tasks the suite-sft warm start never saw, and
    the held-out tasks are exactly the default layout's (256-319)."""
    fresh = SyntheticTasks(n_train=192, n_heldout=64, seed=0, train_start=320, heldout_start=256)
    default = SyntheticTasks(n_train=256, n_heldout=64, seed=0)
    assert _ids(fresh.heldout()) == _ids(default.heldout())
    assert [t.messages for t in fresh.heldout()] == [t.messages for t in default.heldout()]
    assert _ids(fresh.train()) == [f"syn-0-{i}" for i in range(320, 512)]

    spec = WARM_STARTS["suite"]
    lo, hi = spec["skip"]
    drawn = SyntheticTaskGenerator(seed=0).generate(spec["n_tasks"] + hi - lo)
    demos = {t.task_id for t in drawn[:lo] + drawn[hi:]}
    questions = {t.messages[-1]["content"] for t in drawn[:lo] + drawn[hi:]}
    assert len(demos) == spec["n_tasks"]
    for task in fresh.train() + fresh.heldout():
        assert task.task_id not in demos
        assert task.messages[-1]["content"] not in questions


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"n_train": 192, "train_start": 300, "heldout_start": 256},
            r"train tasks \[300, 492\) overlap held-out tasks \[256, 320\)",
        ),
        ({"n_train": 8, "train_start": -1}, r"train_start must be >= 0, got -1"),
        ({"n_train": 8, "heldout_start": -4}, r"heldout_start must be >= 0, got -4"),
    ],
)
def test_bad_ranges_are_refused_with_the_ranges_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SyntheticTasks(n_heldout=64, **kwargs)
