"""An in-process verifier for the loop's tests (`kforge.loop.LoopVerifier`): it answers each candidate with the
`Verdict` a test's ``judge`` gives its source and starts no worker, so a test of what the loop does with
verdicts (the order of events, resume, the search tree, budgets) does not build and time real kernels.
Tests whose point is the real verification keep `kforge.verify.Verifier` and the worker pool."""

from __future__ import annotations

import threading
from typing import Callable

from kforge.verify import Evidence, State, TimingStats, Verdict


class FakePool:
    """What the loop reads of a worker pool: its slots and how many candidates it ran."""

    def __init__(self, slots: int = 1):
        self.slots = slots
        self.counters = {"build": 0, "run": 0, "lost": 0}

    def slot_count(self, kind: str) -> int:
        return self.slots


class FakeVerifier:
    """Answers ``judge(source)`` for each candidate and counts it as a run, as the pool would; a reply without
    code is a generation failure that runs nothing, as with the real verifier. Thread-safe, as the real one is
    (beam search verifies a wave at once)."""

    def __init__(self, judge: Callable[[str], Verdict], slots: int = 1):
        self.judge, self.pool = judge, FakePool(slots)
        self.verified: list[str] = []
        """Every source verified, in the order asked."""
        self._lock = threading.Lock()

    def device_kinds(self, backend) -> list[str]:
        return [backend.device]

    def verify(self, problem, candidate, backend) -> Verdict:
        if candidate.source is None:
            return Verdict(State.GENERATION_FAILURE, "no code in the reply", problem.key, backend.name)
        verdict = self.judge(candidate.source)
        verdict.problem, verdict.backend = problem.key, backend.name
        with self._lock:
            self.pool.counters["run"] += 1
            self.verified.append(candidate.source)
        return verdict


def timing(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, mean_ms=ms, std_ms=0.0, n=5, min_ms=ms)


def correct(runtime_ms: float, ref_ms: float = 1.0) -> Verdict:
    """A correct kernel, ``ref_ms / runtime_ms`` times faster than eager PyTorch."""
    return Verdict(State.CORRECT, "matches the reference", runtime=timing(runtime_ms), ref=timing(ref_ms), trials=2)


def mismatch(max_abs_err: float = 1.0) -> Verdict:
    """A numerical mismatch, with the evidence a fix prompt shows."""
    return Verdict(State.NUMERICAL_MISMATCH, "outputs differ from the reference", trials=1,
                   evidence=Evidence(mismatch={"trial": 0, "output": 0, "max_abs_err": max_abs_err}))
