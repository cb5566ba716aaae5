"""The search-tree picture: drawn from a beam search's records and left on the problem's MLflow run."""

from pathlib import Path

from matplotlib.image import imread

from kforge.loop import IterationRecord, ProblemResult
from kforge.report.plots import plot_tree
from kforge.problems import resolve_problem
from kforge.tracking.schema import Files
from kforge.tracking.tracker import Tracker


def record(it, parent, depth, state, speedup=None, direction="root", best=False):
    return IterationRecord(iteration=it, phase="optimise" if depth else "single_shot", state=state,
                           correct=state == "correct", message="", speedup_eager=speedup, parent=parent,
                           depth=depth, direction=direction, is_best=best)


TREE = [record(0, None, 0, "correct", 1.0), record(1, 0, 1, "correct", 1.8, "memory_traffic"),
        record(2, 0, 1, "numerical_mismatch", direction="occupancy"), record(3, 0, 1, "correct", 1.2, "fusion"),
        record(4, 2, 1, "correct", 2.4, "occupancy", best=True), record(5, 4, 2, "compilation_failure", None, "tiling")]


def test_plot_tree_draws_every_node(tmp_path: Path):
    nodes = [{"id": r.iteration, "parent": r.parent, "depth": r.depth, "state": r.state,
              "speedup": r.speedup_eager, "direction": r.direction, "best": r.is_best} for r in TREE]
    path = plot_tree(nodes, tmp_path / "tree.png", "level1/1_ReLU")
    image = imread(path)
    assert image.shape[0] > 300 and image.shape[1] > 500
    # Not a blank canvas: the green of correct nodes and the red of the failed build are on it.
    pixels = image[..., :3].reshape(-1, 3)
    assert ((pixels[:, 1] > 0.45) & (pixels[:, 0] < 0.3) & (pixels[:, 2] < 0.3)).any()
    assert ((pixels[:, 0] > 0.75) & (pixels[:, 1] < 0.25) & (pixels[:, 2] < 0.25)).any()


def test_a_beam_problem_run_gets_its_tree_and_a_chain_run_does_not(tmp_path: Path):
    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow.db", artifact_root=str(tmp_path / "artifacts"))
    parent = tracker.start_parent("job", {}, "", {})
    problem = resolve_problem("level1/1_ReLU")
    beam = ProblemResult(problem, records=list(TREE), best_iteration=4)
    chain = ProblemResult(problem, records=[record(0, None, None, "correct", 1.0)])
    chain.records[0].direction = None
    names = {}
    for label, result in (("beam", beam), ("chain", chain)):
        rid = tracker.start_problem(parent, problem.key, {})
        tracker.end_problem(rid, result)
        names[label] = {a.path for a in tracker.client.list_artifacts(rid)}
    assert Files.TREE_PLOT in names["beam"] and Files.TREE_PLOT not in names["chain"]


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
