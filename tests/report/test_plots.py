"""The ablation plots: whole-number iteration axes, readers' words in legends, timing ranges drawn."""


def drawn(monkeypatch) -> list:
    """Each figure as it is saved: per axes, its x ticks inside the view, legend texts and title."""
    import matplotlib.figure
    seen = []
    real = matplotlib.figure.Figure.savefig

    def savefig(fig, *args, **kwargs):
        fig.canvas.draw()
        seen.append([{"ticks": [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]],
                      "legend": [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else [],
                      "title": ax.get_title()} for ax in fig.axes])
        return real(fig, *args, **kwargs)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return seen


def test_iteration_axes_tick_whole_numbers_and_legends_use_readers_words(tmp_path, monkeypatch):
    import pandas as pd

    from kforge.report.plots import plot_iterations
    seen = drawn(monkeypatch)
    for last in (1, 2, 3):  # one or two iterations are where fractional ticks crept in
        hist = pd.DataFrame([{"model": "oracle", "backend": "cpu", "loop_mode": "single_shot", "iteration": 1, "n": 4,
                              "correct_rate": 0.5, "geomean_speedup": 0.9}] +
                            [{"model": "oracle", "backend": "cpu", "loop_mode": "iterative", "iteration": i, "n": 4,
                              "correct_rate": 0.5 + 0.1 * i, "geomean_speedup": 1.0 + i / 10}
                             for i in range(1, last + 1)])
        plot_iterations(hist, "loop_mode", tmp_path / f"it{last}.png", "single_vs_iterative")
    for figure in seen:
        for ax in figure:
            assert ax["ticks"] and all(float(t).is_integer() for t in ax["ticks"]), ax["ticks"]
            assert ax["legend"] == ["Iterative · oracle · cpu (n=4)", "Single shot · oracle · cpu (n=4)"]
            assert ax["title"].startswith("Single vs iterative: ")


def test_the_speedup_plot_draws_each_arms_timing_range(tmp_path, monkeypatch):
    import pandas as pd
    from matplotlib.image import imread

    from kforge.report.plots import plot_speedups
    seen = drawn(monkeypatch)
    points = pd.DataFrame([
        {"model": "oracle", "backend": "cpu", "level": "1", "loop_mode": "single_shot", "n": 3, "geomean": 0.54,
         "ci_lo": 0.4, "ci_hi": 0.7, "range_lo": 0.44, "range_hi": 0.6},
        {"model": "oracle", "backend": "cpu", "level": "1", "loop_mode": "iterative", "n": 3, "geomean": 0.46,
         "ci_lo": 0.35, "ci_hi": 0.6, "range_lo": 0.44, "range_hi": 0.6},
        {"model": "oracle", "backend": "cpu", "level": "all", "loop_mode": "iterative", "n": 3, "geomean": None,
         "ci_lo": None, "ci_hi": None, "range_lo": None, "range_hi": None}])
    path = plot_speedups(points, "loop_mode", tmp_path / "speedup.png", "single_vs_iterative")
    (ax,) = seen[0]
    assert ax["legend"] == ["Iterative · oracle · cpu (n≤3)", "Single shot · oracle · cpu (n≤3)"]
    assert "timing range" in ax["title"]
    # The bands are drawn: a light tint of both arms' colours (C0 blue, C1 orange) lies on the canvas.
    pixels = imread(path)[..., :3].reshape(-1, 3)
    blueish = (pixels[:, 2] > 0.8) & (pixels[:, 0] > 0.6) & (pixels[:, 0] < 0.9)
    orangeish = (pixels[:, 0] > 0.95) & (pixels[:, 1] > 0.75) & (pixels[:, 1] < 0.9) & (pixels[:, 2] < 0.8)
    assert blueish.sum() > 100 and orangeish.sum() > 100
