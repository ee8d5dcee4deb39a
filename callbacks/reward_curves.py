"""Record reward and eval metrics while training; plot them to a PNG (and a CSV) at the end.

``plot_curves`` (its figure: ``curves_figure``) and ``write_history_csv`` are pure functions
over a history ``{metric: [(step, value), ...]}`` so that experiments can reuse them without
a trainer.
"""

from __future__ import annotations

import csv
import math
import numbers
import os
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

__all__ = ["RewardCurves", "curves_figure", "plot_curves", "write_history_csv"]

History = dict[str, list[tuple[int, float]]]


def _scalar(value: Any) -> float | None:
    """A float for a one-element tensor or a real number, else None."""
    if isinstance(value, torch.Tensor):
        return float(value.detach().float().cpu().reshape(-1)[0]) if value.numel() == 1 else None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def _default_panels(keys: Sequence[str]) -> list[list[str]]:
    """One panel per prefix before the first ``/`` (``reward/*`` together, ...)."""
    panels: dict[str, list[str]] = {}
    for key in keys:
        panels.setdefault(key.split("/", 1)[0], []).append(key)
    return list(panels.values())


def curves_figure(
    history: History,
    panels: Sequence[Sequence[str]] | None = None,
    title: str | None = None,
) -> tuple[Any, list[list[str]]]:
    """The figure :func:`plot_curves` saves (a matplotlib ``Figure`` on the Agg canvas) and
    the panels drawn in it. Step axes carry whole steps only (``MaxNLocator(integer=True)``:
    no tick at step 1.2)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    if panels is None:
        panels = _default_panels(list(history))
    drawn = [[k for k in panel if history.get(k)] for panel in panels]
    drawn = [panel for panel in drawn if panel]
    fig = Figure(figsize=(8, 2.8 * max(1, len(drawn)) + 0.4), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(max(1, len(drawn)), 1, squeeze=False)[:, 0]
    if not drawn:
        axes[0].text(0.5, 0.5, "no data", ha="center", va="center")
        axes[0].set_axis_off()
    for ax, keys in zip(axes, drawn):
        for key in keys:
            points = sorted(history[key])
            marker = "o" if len(points) <= 60 else None
            ax.plot([s for s, _ in points], [v for _, v in points], label=key, marker=marker, ms=3)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    if title:
        fig.suptitle(title)
    return fig, drawn


def plot_curves(
    history: History,
    path: str | os.PathLike,
    panels: Sequence[Sequence[str]] | None = None,
    title: str | None = None,
) -> list[list[str]]:
    """Plot each series of ``history`` against its step and save a PNG at ``path``.

    Args:
        history: metric name → ``[(step, value), ...]`` (any order; sorted by step here).
        path: the PNG to write (parent folders are created).
        panels: metric names per panel, top to bottom; names without data are left out and
            empty panels dropped. Default: one panel per name prefix (``reward/...``).
        title: an optional figure title.

    Returns:
        The panels drawn (metric names per panel); ``[]`` when there was nothing to plot, in
        which case the PNG says "no data". Steps are whole numbers on the axis
        (:func:`curves_figure`).
    """
    fig, drawn = curves_figure(history, panels, title)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, format="png")
    return drawn


def write_history_csv(history: History, path: str | os.PathLike) -> None:
    """Write ``history`` as a wide CSV: a ``step`` column then one column per metric (blank
    where a metric has no value at that step)."""
    keys = list(history)
    table: dict[int, dict[str, float]] = {}
    for key in keys:
        for step, value in history[key]:
            table.setdefault(int(step), {})[key] = value
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["step", *keys])
        for step in sorted(table):
            row = table[step]
            writer.writerow([step, *(repr(row[k]) if k in row else "" for k in keys)])


def _log_dir(trainer: Any) -> str:
    for name in ("log_dir", "default_root_dir"):
        value = getattr(trainer, name, None)
        if value:
            return str(value)
    return os.getcwd()


class RewardCurves(Callback):
    """Keep a history of reward (and eval) metrics and plot it at the end of fit.

    At every train batch end (and validation end) it reads ``trainer.callback_metrics`` at
    ``trainer.global_step``. ``metrics`` (the per-step channel rewards) are recorded every
    step; a metric of ``extra_panels`` is recorded when first seen and whenever its value
    changes, because a sparse metric stays in ``callback_metrics`` between evaluations.

    Evaluators that log straight to the loggers (``InDomainEval`` logs
    ``eval/in_domain/success@0.9`` with ``logger.log_metrics``, so it never reaches
    ``callback_metrics``) are read directly: any other callback of the trainer with a
    ``curves()`` method returning ``{metric: [(step, value), ...]}`` contributes the series
    of the metrics named in the panels (its values win at a step both recorded).

    At ``on_fit_end``, i.e. after every callback's ``on_train_end`` (so an end-of-fit
    evaluation is included whatever the callback order), rank zero writes ``filename``
    (panel 1: ``metrics``; one panel per ``extra_panels`` entry that has data) and
    ``metrics_history.csv`` beside it, under ``trainer.log_dir`` (or
    ``trainer.default_root_dir``).

    Attributes:
        history: metric name → ``[(step, value), ...]`` recorded so far (saved in checkpoints).
        png_path, csv_path: the files written by the last ``on_fit_end``, or None.
        drawn: the panels drawn in the last PNG (metric names per panel).

    Never raises from a hook: a failure is warned about once and skipped.
    """

    def __init__(
        self,
        metrics: Sequence[str] = ("reward/tool", "reward/summary", "reward/total"),
        filename: str = "reward_curves.png",
        extra_panels: Sequence[Sequence[str]] = (
            ("eval/in_domain/success@0.9",),
            ("rollout/tool_calls_per_episode",),
        ),
    ) -> None:
        self.metrics = tuple(metrics)
        self.filename = filename
        self.extra_panels = tuple(tuple(panel) for panel in extra_panels)
        self.history: History = {}
        self.png_path: str | None = None
        self.csv_path: str | None = None
        self.drawn: list[list[str]] = []
        self._warned = False

    @property
    def panels(self) -> list[list[str]]:
        """Metric names per panel: ``metrics`` first, then each of ``extra_panels``."""
        return [list(self.metrics), *(list(p) for p in self.extra_panels)]

    def _warn(self, what: str, err: Exception) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"RewardCurves: {what} failed ({type(err).__name__}: {err}); skipping "
                "(warned once).",
                RuntimeWarning,
                stacklevel=3,
            )

    def record(self, trainer: Any, every_step: bool = True) -> None:
        """Read ``trainer.callback_metrics`` at ``trainer.global_step`` into ``history``."""
        found = getattr(trainer, "callback_metrics", None) or {}
        step = int(getattr(trainer, "global_step", 0))
        for panel_index, keys in enumerate(self.panels):
            for key in keys:
                value = _scalar(found.get(key))
                if value is None:
                    continue
                series = self.history.setdefault(key, [])
                if series and series[-1][0] == step:
                    series[-1] = (step, value)
                    continue
                fresh = not series or not _same(series[-1][1], value)
                if (panel_index == 0 and every_step) or fresh:
                    series.append((step, value))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        try:
            self.record(trainer)
        except Exception as err:
            self._warn("recording metrics", err)

    def on_validation_end(self, trainer, pl_module) -> None:
        try:
            self.record(trainer, every_step=False)
        except Exception as err:
            self._warn("recording metrics", err)

    def merge_sources(self, trainer: Any) -> None:
        """Merge into ``history`` the panel metrics of the trainer's callbacks that have a
        ``curves()`` method (union by step; the source's value wins at a shared step)."""
        wanted = {key for panel in self.panels for key in panel}
        for cb in getattr(trainer, "callbacks", None) or []:
            curves = getattr(cb, "curves", None)
            if cb is self or not callable(curves):
                continue
            for key, points in curves().items():
                if key in wanted and points:
                    merged = dict(self.history.get(key, []))
                    merged.update((int(s), float(v)) for s, v in points)
                    self.history[key] = sorted(merged.items())

    def on_fit_end(self, trainer, pl_module) -> None:
        try:
            self.merge_sources(trainer)
        except Exception as err:
            self._warn("reading the evaluators' curves", err)
        if not self.history or not getattr(trainer, "is_global_zero", True):
            return
        try:
            png = os.path.join(_log_dir(trainer), self.filename)
            csv_path = os.path.join(os.path.dirname(png), "metrics_history.csv")
            self.drawn = plot_curves(self.history, png, panels=self.panels, title="Training curves")
            write_history_csv(self.history, csv_path)
            self.png_path, self.csv_path = png, csv_path
        except Exception as err:
            self._warn("writing the curves", err)

    def state_dict(self) -> dict[str, Any]:
        return {"history": {k: list(v) for k, v in self.history.items()}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        history = state_dict.get("history", {})
        self.history = {k: [(int(s), float(v)) for s, v in pts] for k, pts in history.items()}


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))
