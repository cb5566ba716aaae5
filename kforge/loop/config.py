"""How a problem loop runs (``conf/loop/*.yaml``): `LoopConfig`, checked when it is built."""

from __future__ import annotations

from dataclasses import dataclass

from ..metrics import BASELINES
from ..strict import StrictConfig

MODES = ("single_shot", "iterative", "beam")


@dataclass
class LoopConfig(StrictConfig):
    """How the loop runs (``conf/loop/*.yaml``)."""

    mode: str = "iterative"
    """``single_shot`` (one generation per problem), ``iterative`` (fix, then optimise) or ``beam`` (a
    search tree of optimisations, `kforge.loop.beam`)."""
    iterations: int = 5
    """Generation calls per problem at most, the first included (`budget`: single_shot makes one; beam
    takes it as its model-call budget unless ``max_calls`` is set)."""
    target_speedup: float | None = None
    """Stop a problem early once its best speedup reaches this (None: use every iteration)."""
    speedup_vs: str = "eager"
    """Baseline that ranks kernels and meets the target: ``eager`` or ``compile``."""
    concurrency: int = 2
    """Problem loops in flight at once."""
    max_fixes_in_optimisation: int = 1
    """Fix attempts for a failed optimisation before optimising the best kernel again (beam: per child)."""
    width: int = 3
    """Beam: children per kept node per round, one per distinct recommendation class."""
    beam: int = 2
    """Beam: nodes kept per round (the fastest correct children, of distinct classes where possible)."""
    depth: int = 3
    """Beam: optimisation rounds after round 0 (the first kernel and its fixes)."""
    max_calls: int | None = None
    """Beam: model calls per problem at most, analysis-model calls included (None: ``iterations``)."""
    max_cost_usd: float | None = None
    """Beam: no new model call once a problem's calls cost this much (None: no dollar limit)."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"loop.mode must be {', '.join(MODES[:-1])} or {MODES[-1]}, not {self.mode!r}")
        if self.speedup_vs not in BASELINES:
            raise ValueError(f"loop.speedup_vs must be {' or '.join(BASELINES)}, not {self.speedup_vs!r}")
        if self.iterations < 1:
            raise ValueError("loop.iterations must be at least 1")
        for name in ("width", "beam", "depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"loop.{name} must be at least 1")
        if self.max_calls is not None and self.max_calls < 1:
            raise ValueError("loop.max_calls must be at least 1 (or null: loop.iterations)")
        if self.max_cost_usd is not None and self.max_cost_usd <= 0:
            raise ValueError("loop.max_cost_usd must be positive (or null: no dollar limit)")

    @property
    def budget(self) -> int:
        """Iterations a problem gets: single_shot means one, whatever ``iterations`` says; beam, its model
        calls (each node is one generation call)."""
        if self.mode == "beam":
            return self.max_calls or self.iterations
        return 1 if self.mode == "single_shot" else self.iterations


