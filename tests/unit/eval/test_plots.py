"""plot_bars: the bar chart ``slca eval`` writes per evaluator (real matplotlib, Agg)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from matplotlib.image import imread

from slca_lightning.eval.plots import plot_bars


def test_bars_make_a_drawn_png(tmp_path):
    path = tmp_path / "sub" / "bfcl.png"
    got = plot_bars({"simple_python": 0.5, "irrelevance": 1.0, "live": math.nan}, path, "bfcl")
    assert got == str(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = imread(path)
    assert image.ndim == 3 and min(image.shape[:2]) > 100
    assert np.ptp(image[..., :3]) > 0.5  # not a blank canvas


def test_more_bars_make_a_wider_png(tmp_path):
    plot_bars({"a": 0.1}, tmp_path / "one.png", "one")
    plot_bars({f"c{i}": i / 12 for i in range(12)}, tmp_path / "many.png", "many")
    assert imread(tmp_path / "many.png").shape[1] > imread(tmp_path / "one.png").shape[1]


def test_nothing_to_plot_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="nothing to plot"):
        plot_bars({}, tmp_path / "empty.png", "empty")
