"""The verifier: isolated worker processes, a `Verdict` with exactly one state, honest timing."""

from ..sandbox.dispatch import register
from ..sandbox.pool import WorkerPool
from .config import DEFAULT_TOLERANCES, TimingConfig, VerifyConfig
from .static import Finding, StaticConfig
from .verdict import STATES, Evidence, State, TimingStats, Verdict
from .verifier import BackendUnavailable, ProblemFails, Verifier

# What serves the verifier's requests in a worker's child: registered on import, so before any pool
# that serves them starts its workers (see kforge.sandbox.dispatch).
for _kind in ("build", "run", "audit", "variants"):
    register(_kind, f"kforge.verify.worker:{_kind}")

__all__ = ["DEFAULT_TOLERANCES", "TimingConfig", "VerifyConfig", "WorkerPool", "Finding", "StaticConfig", "STATES",
           "Evidence", "State", "TimingStats", "Verdict", "BackendUnavailable", "ProblemFails", "Verifier"]
