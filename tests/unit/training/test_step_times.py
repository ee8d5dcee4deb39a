"""``time/step``: the sum of a step's phases on the trainer's critical path (literal values)."""

from __future__ import annotations

import pytest

from slca_lightning.training.update import step_times


def test_a_synchronous_step_is_the_sum_of_its_phases():
    metrics = {"time/rollout": 3.0, "time/reward_and_advantage": 0.5, "time/update": 2.0}
    out = step_times(metrics)
    assert out["time/step"] == pytest.approx(5.5)
    assert out["time/framework_fraction"] == pytest.approx(0.5 / 5.5)


def test_an_asynchronous_step_counts_the_wait_not_the_overlapped_rollout():
    metrics = {"time/rollout": 3.0, "time/rollout_wait": 0.25, "time/update": 2.0}
    assert step_times(metrics)["time/step"] == pytest.approx(2.25)
    assert metrics["time/rollout"] == 3.0  # the worker's own figure is left as logged
