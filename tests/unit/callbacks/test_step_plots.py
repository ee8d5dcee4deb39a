"""The training and in-domain plots: whole steps on every step axis (no tick at step 1.2),
and the in-domain plot draws strict tool accuracy, the headline figure (real matplotlib)."""

from __future__ import annotations

from callbacks import InDomainEval
from callbacks.reward_curves import curves_figure, plot_curves


def ticks_in_view(ax) -> list[float]:
    ax.figure.canvas.draw()
    lo, hi = ax.get_xlim()
    return [t for t in ax.get_xticks() if lo <= t <= hi]


def test_step_axes_have_whole_steps_only(tmp_path):
    history = {
        "reward/total": [(1, 0.2), (2, 0.4), (3, 0.3)],  # few steps: the default put 1.25, 1.5
        "eval/in_domain/success@0.9": [(0, 0.1), (2, 0.3)],
    }
    fig, drawn = curves_figure(history, [["reward/total"], ["eval/in_domain/success@0.9"]])
    assert drawn == [["reward/total"], ["eval/in_domain/success@0.9"]]
    for ax in fig.axes:
        ticks = ticks_in_view(ax)
        assert len(ticks) >= 2, ticks
        assert all(float(t).is_integer() for t in ticks), ticks
    assert plot_curves(history, tmp_path / "c.png") == [
        ["reward/total"],
        ["eval/in_domain/success@0.9"],
    ]
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_the_in_domain_plot_draws_tool_accuracy():
    cb = InDomainEval(num_tasks=2)
    metrics = {"tool_accuracy": 0.375, "success@0.9": 0.031, "tool_calls_per_episode": 1.2}
    cb.rows = [
        ("step 0 (start)", 0, metrics),
        ("step 2 (end)", 2, {**metrics, "tool_accuracy": 0.5}),
    ]
    curves = cb.curves()
    assert curves["eval/in_domain/tool_accuracy"] == [(0, 0.375), (2, 0.5)]
    assert cb.panels()[0][0] == "eval/in_domain/tool_accuracy"
    fig, drawn = curves_figure(curves, cb.panels())
    assert "eval/in_domain/tool_accuracy" in drawn[0]
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert "eval/in_domain/tool_accuracy" in labels
