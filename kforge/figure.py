"""What every figure of kforge's shares: matplotlib without a display, whole-number iteration ticks, and the
names of the baselines speedups are measured against. Figures are drawn by `kforge.report.plots` (the
ablations) and `kforge.tracking.tree_plot` (a beam search's tree, left on its MLflow run)."""

from __future__ import annotations

#: A speedup's baseline as a reader names it.
BASELINE_NAMES = {"eager": "PyTorch eager", "compile": "torch.compile"}


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def integer_ticks(ax) -> None:
    """Whole-number ticks only, even where one or two fit (matplotlib's default then adds 0.5, 0.6, ...)."""
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
