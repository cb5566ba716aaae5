"""The search-tree picture: drawn from a beam search's records and left on the problem's MLflow run."""

from pathlib import Path

from matplotlib.image import imread

from kforge.loop import IterationRecord, ProblemResult
from kforge.problems import resolve_problem
from kforge.tracking.schema import Files
from kforge.tracking.tracker import Tracker
from kforge.tracking.tree_plot import plot_tree


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
