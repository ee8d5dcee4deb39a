"""Bar charts of evaluation scalars for ``slca eval`` (matplotlib's Agg canvas, no display)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

__all__ = ["plot_bars"]


def plot_bars(
    values: Mapping[str, float],
    path: str | os.PathLike,
    title: str,
    ylabel: str = "value",
    unit_range: bool = True,
) -> str:
    """One bar per ``values`` entry, in order, with its value written above it; saved as a
    PNG at ``path`` (parent folders created). A non-finite value is drawn as an empty slot
    labelled ``n/a``.

    Args:
        values: label → value.
        path: the PNG to write.
        title, ylabel: figure title and y-axis label.
        unit_range: fix the y axis to [0, 1.05] (rates and accuracies).

    Returns:
        ``path`` as a string.

    Raises:
        ValueError: ``values`` is empty.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not values:
        raise ValueError(f"plot_bars({title!r}): nothing to plot")
    labels = list(values)
    heights = [float(values[k]) for k in labels]
    drawn = [h if math.isfinite(h) else 0.0 for h in heights]
    fig = Figure(figsize=(max(4.0, 0.7 * len(labels) + 1.5), 4.0), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    bars = ax.bar(range(len(labels)), drawn, color="tab:blue")
    for bar, h in zip(bars, heights):
        text = f"{h:.2f}" if math.isfinite(h) else "n/a"
        ax.annotate(
            text,
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
            xytext=(0, 2),
            textcoords="offset points",
        )
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    if unit_range:
        ax.set_ylim(0.0, 1.05)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(title)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, format="png")
    return str(path)
