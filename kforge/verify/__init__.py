"""The verifier: isolated worker processes, a `Verdict` with exactly one state, honest timing."""

from .config import DEFAULT_TOLERANCES, TimingConfig, VerifyConfig
from .pool import WorkerPool
from .static import Finding, StaticConfig
from .verdict import STATES, Evidence, State, TimingStats, Verdict
from .verifier import BackendUnavailable, Verifier

__all__ = ["DEFAULT_TOLERANCES", "TimingConfig", "VerifyConfig", "WorkerPool", "Finding", "StaticConfig", "STATES",
           "Evidence", "State", "TimingStats", "Verdict", "BackendUnavailable", "Verifier"]
