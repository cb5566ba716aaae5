"""What a whole-model job ends with: `WorkloadRecord`, told to the job's observers
(`kforge.loop.LoopObserver.workload_done`) before its parent run ends.

MLflow writes it on the parent run under `kforge.tracking.schema`'s names (``WorkloadTags``, ``WorkloadMetrics``,
``WorkloadFiles``), the console prints it, and the ``whole_workload`` table (`kforge.report.workload`) reads the
run back. Nothing here knows MLflow: the workload layer sits below tracking.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .assemble import WorkloadResult

#: Where a job writes the whole model's result, in the extraction folder beside ``assembled.py``.
SUMMARY_TXT = "summary.txt"


@dataclass
class Unsolved:
    """A region no candidate solved: the assembled model keeps the model's own module there."""

    name: str
    path: str
    """The module's path in the model (``attn``)."""
    share: float
    """Its share of the model's time."""
    why: str
    """``no correct kernel in 2 iteration(s), last numerical_mismatch``, ``not finished``..."""

    def line(self) -> str:
        return f"region {self.name} (`{self.path}`, {self.share * 100:.1f}% of the model): {self.why}"


@dataclass
class WorkloadRecord:
    """A whole-model job's outcome: the model, its extraction, and the assembled model's verdict and speedups."""

    name: str
    """The model file's name (``transformer_block.py``)."""
    folder: Path
    """The extraction's folder (workload.json, region files, profile.*; after assembly kernels/, assembled.py,
    result.json, summary.txt): the parent run's ``workload/`` files."""
    state: str
    """The assembled model's verdict state, ``unchanged`` (no region solved), ``interrupted`` (cut off before or
    during assembly) or ``assembly_failed``."""
    message: str
    coverage: float
    """The regions' share of the model's operator time."""
    regions: int
    model_ms: float
    """The model's operator time per forward in the profile."""
    solved: int = 0
    """Regions with a correct kernel (put into the assembled model)."""
    unsolved: list[Unsolved] = field(default_factory=list)
    result: WorkloadResult | None = None
    """The assembled model's verification and timing; None when nothing was assembled."""

    def summary(self) -> str:
        """The whole model's outcome in lines, as the console prints it and ``summary.txt`` keeps it."""
        return self.result.summary() if self.result is not None else f"whole model: {self.state} ({self.message})"
