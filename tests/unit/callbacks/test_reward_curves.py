"""RewardCurves and plot_curves.

The trainer is a ``types.SimpleNamespace`` standing in for ``lightning.Trainer``: the callback
only reads ``global_step``, ``callback_metrics``, ``log_dir`` / ``default_root_dir`` and
``is_global_zero``.
"""

import csv
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from matplotlib.image import imread

from callbacks import RewardCurves
from callbacks.reward_curves import plot_curves

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EVAL = "eval/in_domain/success@0.9"


def trainer(tmp_path, step, metrics, callbacks=()):
    return SimpleNamespace(
        global_step=step,
        log_dir=str(tmp_path),
        callback_metrics=metrics,
        is_global_zero=True,
        callbacks=list(callbacks),
    )


def run(cb, tmp_path, per_step, callbacks=()):
    for step, metrics in per_step:
        cb.on_train_batch_end(trainer(tmp_path, step, metrics), None, None, None, 0)
    cb.on_fit_end(trainer(tmp_path, per_step[-1][0], {}, [cb, *callbacks]), None)


def rewards(step):
    return {
        "reward/tool": torch.tensor(0.1 * step),
        "reward/summary": torch.tensor(0.5),
        "reward/total": torch.tensor(0.5 + 0.1 * step),
    }


def assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert np.ptp(image[..., :3]) > 0.5  # not a blank canvas


def test_png_and_csv_with_sparse_eval_metric(tmp_path):
    cb = RewardCurves()
    steps = []
    for s in range(1, 6):
        m = {**rewards(s), "rollout/tool_calls_per_episode": 1.0 + s, "other/ignored": 3.0}
        if s >= 3:  # logged at step 3, stays in callback_metrics, changes at step 5
            m[EVAL] = torch.tensor(0.25 if s < 5 else 0.75)
        steps.append((s, m))
    run(cb, tmp_path, steps)
    assert cb.png_path == str(tmp_path / "reward_curves.png")
    assert_png(tmp_path / "reward_curves.png")
    assert cb.history[EVAL] == [(3, 0.25), (5, 0.75)]
    assert cb.history["reward/summary"] == [(s, 0.5) for s in range(1, 6)]
    assert "other/ignored" not in cb.history
    with open(tmp_path / "metrics_history.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5]
    for r in rows:
        s = int(r["step"])
        assert float(r["reward/tool"]) == pytest.approx(0.1 * s)
        assert float(r["reward/total"]) == pytest.approx(0.5 + 0.1 * s)
        assert float(r["rollout/tool_calls_per_episode"]) == 1.0 + s
    assert [r[EVAL] for r in rows] == ["", "", "0.25", "", "0.75"]


class Evaluator:
    """Stands in for InDomainEval: RewardCurves only calls its ``curves()``."""

    def curves(self):
        return {EVAL: [(0, 0.0), (4, 0.5)], "eval/in_domain/other": [(4, 1.0)]}


def test_evaluator_curves_fill_the_success_panel(tmp_path):
    cb = RewardCurves()
    steps = [
        (s, {**rewards(s), EVAL: torch.tensor(0.25)} if s == 2 else rewards(s))
        for s in (1, 2, 3, 4)
    ]
    run(cb, tmp_path, steps, callbacks=[Evaluator(), object()])
    # union by step with what callback_metrics showed; panel metrics only
    assert cb.history[EVAL] == [(0, 0.0), (2, 0.25), (4, 0.5)]
    assert "eval/in_domain/other" not in cb.history
    assert [EVAL] in cb.drawn
    assert_png(tmp_path / "reward_curves.png")
    with open(tmp_path / "metrics_history.csv", newline="") as f:
        rows = {int(r["step"]): r[EVAL] for r in csv.DictReader(f)}
    assert rows == {0: "0.0", 1: "", 2: "0.25", 3: "", 4: "0.5"}


def test_panels_only_for_seen_metrics(tmp_path):
    history = {"reward/tool": [(1, 0.1), (2, 0.3)], "reward/total": [(1, 0.2), (2, 0.6)]}
    cb = RewardCurves()
    one = plot_curves(history, tmp_path / "one.png", panels=cb.panels)
    assert one == [["reward/tool", "reward/total"]]
    history[EVAL] = [(2, 0.5)]
    two = plot_curves(history, tmp_path / "sub" / "two.png", panels=cb.panels)
    assert two == [["reward/tool", "reward/total"], [EVAL]]
    h1, h2 = imread(tmp_path / "one.png").shape[0], imread(tmp_path / "sub" / "two.png").shape[0]
    assert h2 > h1
    # default panels: one per prefix
    assert plot_curves(history, tmp_path / "d.png") == [
        ["reward/tool", "reward/total"],
        [EVAL],
    ]
    assert plot_curves({}, tmp_path / "empty.png") == []
    assert_png(tmp_path / "empty.png")


def test_state_dict_round_trip():
    cb = RewardCurves()
    cb.history = {"reward/tool": [(1, 0.5)]}
    other = RewardCurves()
    other.load_state_dict(cb.state_dict())
    assert other.history == cb.history


def test_odd_inputs_do_not_raise(tmp_path):
    cb = RewardCurves()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cb.on_train_batch_end(SimpleNamespace(), None, None, None, 0)  # no metrics, no step
        cb.on_train_batch_end(
            trainer(tmp_path, 1, {"reward/tool": torch.ones(3)}), None, None, None, 0
        )
        cb.on_train_batch_end(
            trainer(tmp_path, 1, {"reward/tool": "x", "reward/total": None}), None, None, None, 0
        )
        cb.on_fit_end(trainer(tmp_path, 1, {}), None)  # nothing recorded: nothing written
    assert cb.history == {} and not (tmp_path / "reward_curves.png").exists()
    cb.on_train_batch_end(trainer(tmp_path, 1, rewards(1)), None, None, None, 0)
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.warns(RuntimeWarning, match="RewardCurves"):
        cb.on_fit_end(trainer(blocker, 1, {}), None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cb.on_fit_end(trainer(blocker, 1, {}), None)  # warned once only
