"""The run plot and the seed-comparison plot: the band is one standard error, the files are PNGs."""

import math

import pytest

from toolgym.training.outputs.plot import env_names, mean_band, plot_curves, plot_run

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


def test_a_mixture_run_draws_each_environment(tmp_path, monkeypatch):
    """Per-environment keys (reward_mean/NAME, NAME may hold a slash) become one dashed line each, also for an
    environment missing from some steps (no prompt drawn)."""
    import matplotlib.axes

    metrics = [{"kind": "train", "step": 1, "reward_mean": 0.5, "reward_mean/toolgym/Arith-v0": 1.0,
                "reward_mean/mine": 0.0},
               {"kind": "train", "step": 2, "reward_mean": 0.25, "reward_mean/mine": 0.25},
               {"kind": "eval", "step": 2, "reward_mean": 0.5, "tool_rate": 0.0, "reward_mean/mine": 0.5}]
    assert env_names(metrics) == ["toolgym/Arith-v0", "mine"]
    drawn = []
    plot = matplotlib.axes.Axes.plot

    def spy(ax, xs, ys, *args, **kwargs):
        drawn.append((kwargs.get("label"), list(xs), list(ys), kwargs.get("linestyle")))
        return plot(ax, xs, ys, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    assert plot_run(metrics, tmp_path / "run.png").read_bytes()[:8] == PNG_MAGIC
    dashed = [d for d in drawn if d[3] == "--"]
    assert dashed == [("reward: toolgym/Arith-v0", [1], [1.0], "--"), ("reward: mine", [1, 2], [0.0, 0.25], "--"),
                      ("reward: mine", [2], [0.5], "--")]
