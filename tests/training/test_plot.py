"""The run plot and the seed-comparison plot: the band is one standard error, the files are PNGs."""

import math

import pytest

from toolgym.training.plot import mean_band, plot_curves, plot_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_band_is_one_standard_error_of_the_mean_over_seeds():
    mean, lo, hi = mean_band([[0.0, 1.0], [1.0, 3.0], [2.0, 5.0]])
    assert list(mean) == [1.0, 3.0]
    # sample sd (n-1) is 1 and 2; divided by sqrt(3) seeds
    assert list(hi - mean) == pytest.approx([1 / math.sqrt(3), 2 / math.sqrt(3)])
    assert list(mean - lo) == pytest.approx([1 / math.sqrt(3), 2 / math.sqrt(3)])


def test_one_seed_has_no_band():
    mean, lo, hi = mean_band([[0.25, 0.5]])
    assert list(lo) == list(mean) == list(hi) == [0.25, 0.5]


def test_plots_are_written_as_png(tmp_path):
    curves = {"a": [([0, 10], [0.1, 0.5]), ([0, 10], [0.2, 0.7])], "b": [([0, 10], [0.1, 0.3])], "empty": []}
    out = plot_curves(curves, tmp_path / "c.png", "reward", "title")
    assert out.read_bytes()[:8] == PNG_MAGIC
    metrics = [{"kind": "train", "step": s, "reward_mean": 0.1 * s, "tool_rate": 0.5} for s in (1, 2, 3)]
    metrics += [{"kind": "eval", "step": s, "reward_mean": 0.2 * s, "tool_rate": 0.5} for s in (0, 3)]
    run = plot_run(metrics, tmp_path / "run.png", title="t")
    assert run.read_bytes()[:8] == PNG_MAGIC
